// `tianshu agent`: the node agent. `--discover` prints this machine's topology and exits;
// otherwise it registers with the server, heartbeats, carries out work orders and reports,
// until SIGTERM/SIGINT (its ranks keep running; the next agent adopts them from its journal).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "commands.h"
#include "tianshu/agent/agent.h"
#include "tianshu/agent/agent_metrics.h"
#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/device_monitor.h"
#include "tianshu/agent/discovery.h"
#include "tianshu/agent/journal.h"
#include "tianshu/agent/log_server.h"
#include "tianshu/agent/net_counters.h"
#include "tianshu/agent/process.h"
#include "tianshu/agent/session.h"
#include "tianshu/agent/work_watcher.h"
#include "tianshu/base/data_files.h"
#include "tianshu/base/log.h"
#include "tianshu/base/secret_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/net/tokens.h"

namespace tianshu::cli {
namespace {

struct AgentArgs {
  bool discover = false;
  OutputFlag out;
  std::string server;
  std::string token_file;
  std::string ca_file;
  std::string node;
  std::string address = "127.0.0.1";
  std::string workdir = "/var/lib/tianshu/agent";
  std::string checkpoint_root;
  std::string devices;
  std::vector<std::string> labels;
  std::string cgroup_parent = "tianshu";
  std::string cgroup_mode = "auto";
  std::string checkpoint_grace = "120s";
  bool apply_partitions = false;
  bool no_nvml = false;
  std::string data_address;
  std::string data_interface;
  std::string probe_script;
  LogFlags log;  // --log-format, --log-level
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomId() {
  std::random_device rd;
  std::ostringstream o;
  o << std::hex << rd() << rd();
  return o.str();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// probes/gloo_bandwidth.py, found as the data folder is (data_sets.h): --probe-script (used or
// refused, never replaced), share/tianshu/probes beside the installed binary, probes/ in a
// source tree above the binary, then the source tree it was built from. "" when none holds it.
Result<std::string> ProbeScript(const std::string& flag) {
  constexpr const char* kScript = "gloo_bandwidth.py";
  namespace fs = std::filesystem;
  if (!flag.empty()) {
    if (!fs::is_regular_file(flag)) return Fail("--probe-script: no file ", flag);
    return fs::absolute(flag).lexically_normal().string();
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
    candidates.push_back(bin.parent_path() / "share" / "tianshu" / "probes" / kScript);
    for (fs::path p = bin; !p.empty() && p != p.root_path(); p = p.parent_path()) {
      if (fs::exists(p / "probes" / kScript) && fs::exists(p / "CMakeLists.txt")) {
        candidates.push_back(p / "probes" / kScript);
        break;
      }
    }
    // The source tree an out-of-tree build names beside the binary.
    if (std::string src = RecordedSourceDir(exe.string()); !src.empty()) {
      candidates.push_back(fs::path(src) / "probes" / kScript);
    }
  }
  for (const fs::path& c : candidates) {
    if (fs::is_regular_file(c, ec)) return c.lexically_normal().string();
  }
  return std::string();
}

int Run(const AgentArgs& a) {
  ApplyLogFlags(a.log);
  agent::RealSystemFiles fs;
  agent::HwlocProbe hwloc;
  agent::NvmlLibrary nvml;
  agent::DiscoveryProbes probes{.cpu = &hwloc, .nvml = a.no_nvml ? nullptr : &nvml};
  auto host = agent::Discover(fs, probes, {.declared_devices = a.devices, .hostname = a.node});
  if (!host) {
    LogLine(LogLevel::kError, "agent") << host.error().message;
    return kExitInvalid;
  }
  // One directory per node name: several agents on one machine (tests, scale runs) must never
  // share a job cgroup, or one would take the other's ranks for its own stragglers.
  auto cgroups =
      agent::DetectCgroupDriver(fs, {.parent = a.cgroup_parent + "/" + host->hostname,
                                     .force_mode = a.cgroup_mode == "auto" ? "" : a.cgroup_mode});
  if (cgroups) host->cgroup_mode = std::string((*cgroups)->Mode());
  if (a.discover) {
    if (a.out.Json()) {
      std::cout << agent::HostToJson(*host).dump(2) << "\n";
    } else {
      std::cout << agent::HostToText(*host);
    }
    return kExitOk;
  }
  if (!cgroups) {
    LogLine(LogLevel::kError, "agent") << cgroups.error().message;
    return kExitFailure;
  }
  std::string server = a.server.empty() ? Env("TIANSHU_SERVER") : a.server;
  if (server.empty()) server = "127.0.0.1:7070";
  std::string token = Env("TIANSHU_TOKEN");
  if (!a.token_file.empty()) {
    auto read = ReadSecretFile(a.token_file);
    if (!read) {
      LogLine(LogLevel::kError, "agent") << "--token-file: " << read.error().message;
      return kExitInvalid;
    }
    token = *read;
  }
  auto duration = ParseDurationNs(a.checkpoint_grace);
  if (!duration) {
    LogLine(LogLevel::kError, "agent") << "--checkpoint-grace: " << duration.error().message;
    return kExitInvalid;
  }
  std::map<std::string, std::string> labels;
  for (const auto& l : a.labels) {
    auto eq = l.find('=');
    if (eq == std::string::npos) {
      LogLine(LogLevel::kError, "agent") << "--label wants KEY=VALUE, got '" << l << "'";
      return kExitInvalid;
    }
    labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  // A separate data network: its interface should exist here (in this network namespace); a
  // missing one is worth a warning, not a refusal (it may come up after the agent).
  if (!a.data_interface.empty()) {
    if (!agent::IsInterfaceName(a.data_interface)) {
      LogLine(LogLevel::kError, "agent")
          << "--data-interface: '" << a.data_interface
          << "' is not an interface name (1-15 letters, digits, '-', '_', '.')";
      return kExitInvalid;
    }
    if (!fs.Exists("/sys/class/net/" + a.data_interface)) {
      LogLine(LogLevel::kWarning, "agent")
          << "--data-interface " << a.data_interface << ": no such interface here (yet)";
    }
  }
  const bool plain_host =
      a.data_address.size() <= 253 &&
      std::all_of(a.data_address.begin(), a.data_address.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_.:[]%", c) != nullptr;
      });
  if (!plain_host || (!a.data_address.empty() && a.data_address.front() == '-')) {
    LogLine(LogLevel::kError, "agent")
        << "--data-address: expected a host name or an IP address, got '" << a.data_address << "'";
    return kExitInvalid;
  }
  auto probe_script = ProbeScript(a.probe_script);
  if (!probe_script) {
    LogLine(LogLevel::kError, "agent") << probe_script.error().message;
    return kExitInvalid;
  }
  if (probe_script->empty()) {
    LogLine(LogLevel::kWarning, "agent")
        << "no probes/gloo_bandwidth.py found (pass --probe-script): gloo probes will fail";
  }
  if (Status s = fs.MakeDirs(a.workdir); !s) {
    LogLine(LogLevel::kError, "agent") << "--workdir: " << s.error().message;
    return kExitFailure;
  }
  agent::AgentOptions options{
      .node = host->hostname,
      .workdir = a.workdir,
      .checkpoint_root = a.checkpoint_root.empty() ? a.workdir + "/checkpoints" : a.checkpoint_root,
      .checkpoint_grace_ns = *duration,
      .apply_partitions = a.apply_partitions,
      .data_interface = a.data_interface,
      .probe_script = *probe_script,
  };
  // The ranks' starting environment: what a login shell would give them, nothing else.
  for (const char* k : {"PATH", "HOME", "LANG", "LC_ALL", "USER", "TMPDIR", "PYTHONPATH",
                        "OMP_NUM_THREADS", "LD_LIBRARY_PATH"}) {
    if (const char* v = std::getenv(k)) options.base_env[k] = v;
  }
  if (!options.base_env.count("PATH")) options.base_env["PATH"] = "/usr/local/bin:/usr/bin:/bin";

  // Signals are taken synchronously (sigtimedwait is the agent's only sleep).
  sigset_t set;
  sigemptyset(&set);
  // SIGUSR1: the work watcher's wake-up (orders came).
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);

  agent::PosixProcessRunner runner;
  agent::Agent core(options, *host, fs, **cgroups, runner);
  if (Status s = core.Recover(NowNs()); !s) {
    LogLine(LogLevel::kError, "agent") << "journal: " << s.error().message;
    return kExitFailure;
  }
  for (const auto& w : core.RecoveryWarnings()) {
    const bool corrupt = w.ends_with(agent::Journal::kCorruptRecord);
    LogLine(LogLevel::kWarning, "agent")
        << w << (corrupt ? " (skipped; kept in the .rejected file)" : "");
  }
  // The devices' usage (NVML) for heartbeats and /metrics; none where it cannot be measured.
  std::unique_ptr<agent::DeviceMonitor> monitor;
  if (!a.no_nvml) {
    if (auto m = agent::NvmlDeviceMonitor::Open(host->accelerators)) {
      monitor = std::move(*m);
    } else if (!host->declared_accelerators && !host->accelerators.empty()) {
      LogLine(LogLevel::kInfo, "agent") << "device usage not measured: " << m.error().message;
    }
  }
  std::vector<wire::DeviceUsage> last_usage;  // the monitor's last reading (for /metrics)
  agent::AgentMetrics metrics;                // outlives the log server that serves it
  const std::vector<wire::Device> devices = core.Hardware().devices;
  const std::string cgroup_mode((*cgroups)->Mode());
  // What /metrics shows until the loop publishes: who it is, nothing done yet.
  metrics.Publish({.node = host->hostname,
                   .cgroup_mode = cgroup_mode,
                   .devices = devices,
                   .measuring = monitor != nullptr,
                   .held = core.Held()});
  // The rank logs, for `tianshu logs` through the server: on the address's port, or any free
  // one; the node registers as host:port.
  std::string log_host = a.address;
  int64_t log_port = 0;
  if (auto colon = a.address.rfind(':'); colon != std::string::npos) {
    log_host = a.address.substr(0, colon);
    if (!ParseInt64(a.address.substr(colon + 1), &log_port) || log_port < 0 || log_port > 65535) {
      LogLine(LogLevel::kError, "agent")
          << "--address: expected host or host:port, got '" << a.address << "'";
      return kExitInvalid;
    }
  }
  // The log server accepts only the key the server hands over at registration.
  auto log_server = agent::LogServer::Start({.host = log_host,
                                             .port = static_cast<int>(log_port),
                                             .token = "",
                                             .workdir = a.workdir,
                                             .metrics = [&metrics] { return metrics.Render(); }});
  if (!log_server) {
    LogLine(LogLevel::kError, "agent") << log_server.error().message;
    return kExitFailure;
  }
  const std::string address = log_host + ":" + std::to_string((*log_server)->port());
  // The node's own credential: made here before the first registration and kept private in
  // the work directory; the server binds the node's name to its hash. The join token
  // (--token-file) is needed only until then. A lost registration answer costs nothing: the
  // retry authenticates with the credential the server already knows.
  std::string ca_file = a.ca_file.empty() ? Env("TIANSHU_CA_FILE") : a.ca_file;
  auto opened = agent::HttpControlPlane::Open(server, token, ca_file);
  if (!opened) {
    LogLine(LogLevel::kError, "agent") << "--server: " << opened.error().message;
    return kExitInvalid;
  }
  agent::HttpControlPlane& http = **opened;
  // The work watcher's own connection (it holds a request open while the session talks).
  auto watch_opened = agent::HttpControlPlane::Open(server, token, ca_file);
  if (!watch_opened) {
    LogLine(LogLevel::kError, "agent") << "--server: " << watch_opened.error().message;
    return kExitInvalid;
  }
  agent::HttpControlPlane& watch_http = **watch_opened;
  watch_http.KeepAlive();
  const std::string credential_file = a.workdir + "/credential";
  if (!std::filesystem::exists(credential_file)) {
    if (Status s = WritePrivateFile(credential_file, net::NewToken() + "\n"); !s) {
      LogLine(LogLevel::kError, "agent") << "cannot keep a node credential: " << s.error().message;
      return kExitInvalid;
    }
  }
  auto credential = ReadSecretFile(credential_file);
  if (!credential) {
    LogLine(LogLevel::kError, "agent") << credential.error().message;
    return kExitInvalid;
  }
  // Both connections (the session's and the work watcher's) speak with the same credential.
  auto set_credential = [&http, &watch_http](const std::string& c) {
    http.SetCredential(c);
    watch_http.SetCredential(c);
  };
  set_credential(*credential);
  std::string agent_id = RandomId();
  agent::LogServer* logs = log_server->get();
  auto on_register = [set_credential, logs, credential_file,
                      own = *credential](const wire::RegisterResponse& r) {
    logs->SetKey(r.log_key);
    if (r.credential.empty()) {  // bound to the credential made here
      set_credential(own);
      return;
    }
    // A server that minted one (the node was registered without a hash): keep that one.
    if (Status s = ReplacePrivateFile(credential_file, r.credential + "\n"); !s) {
      LogLine(LogLevel::kError, "agent")
          << "cannot keep the node credential: " << s.error().message
          << " (the next start will need the node forgotten by an admin)";
    }
    set_credential(r.credential);
  };
  const agent::WorkWatcher* watching = nullptr;  // set once the watcher below runs
  agent::Session session({.node = host->hostname,
                          .agent_id = agent_id,
                          .address = address,
                          .data_address = a.data_address,
                          .data_interface = a.data_interface,
                          .labels = labels,
                          .on_register = on_register,
                          .credential_sha256 = net::TokenHash(*credential),
                          .device_usage =
                              [&monitor, &last_usage] {
                                if (monitor) last_usage = monitor->Sample();
                                return last_usage;
                              },
                          .watched = [&watching] { return watching && watching->serving(); },
                          .seed = std::hash<std::string>{}(agent_id)},
                         http, core);
  LogLine(LogLevel::kInfo, "agent")
      << "node " << host->hostname << ", " << host->accelerators.size()
      << (host->declared_accelerators ? " declared" : "") << " device(s), cgroups "
      << (*cgroups)->Mode() << ", server " << server << ", logs on " << address;
  const pthread_t main_thread = pthread_self();
  agent::WorkWatcher watcher({.node = host->hostname, .agent_id = agent_id}, watch_http,
                             [main_thread] { pthread_kill(main_thread, SIGUSR1); });
  watching = &watcher;
  bool was_registered = false;
  std::string last_error;
  while (true) {
    int64_t now = NowNs();
    core.Tick(now);
    session.Deliver(watcher.Take(), now);
    int64_t next = session.Step(now);
    const int64_t lease = core.LeaseDeadline();
    metrics.Publish(
        {.node = host->hostname,
         .cgroup_mode = cgroup_mode,
         .devices = devices,
         .measuring = monitor != nullptr,
         .usage = last_usage,
         .held = core.Held(),
         .session = session.stats(),
         .registrations = session.registrations(),
         .registered = session.registered(),
         .reports_pending = static_cast<int64_t>(core.PendingReports().size()),
         .lease_remaining_ns = lease > 0 ? std::max<int64_t>(0, lease - agent::BootTimeNs()) : -1});
    watcher.SetActive(session.registered());
    if (session.registered() != was_registered || session.last_error() != last_error) {
      if (session.registered() && !was_registered) {
        LogLine(LogLevel::kInfo, "agent") << "registered (" << session.registrations() << ")";
      } else if (!session.last_error().empty() && session.last_error() != last_error) {
        LogLine(LogLevel::kWarning, "agent") << session.last_error();
      }
      was_registered = session.registered();
      last_error = session.last_error();
    }
    now = NowNs();
    core.Tick(now);
    int64_t wake = next;
    if (core.Busy()) wake = std::min(wake, now + 250'000'000);
    if (int64_t d = core.NextDeadline(); d > 0) wake = std::min(wake, d);
    if (!core.PendingReports().empty() && session.registered())  // after a failed send's backoff
      wake = std::min(wake, std::max(now + 50'000'000, session.reports_retry_ns()));
    int64_t wait = std::max<int64_t>(wake - now, 1'000'000);
    timespec ts{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      LogLine(LogLevel::kInfo, "agent")
          << "stopping on signal " << sig << " (ranks keep running; a restarted agent adopts them)";
      return kExitOk;
    }
  }
}

struct LogsArgs {
  std::string job;
  int rank = 0;
  bool follow = false;
  std::string workdir = "/var/lib/tianshu/agent";
};

// `tianshu agent logs JOB`: a rank's log from this node's agent work directory; -f follows it
// until the rank has ended (its exit file appears).
int Logs(const LogsArgs& a) {
  agent::RealSystemFiles fs;
  std::string path = agent::RankLogPath(fs, a.workdir, a.job, a.rank);
  if (path.empty()) {
    std::cerr << "tianshu agent logs: no rank " << a.rank << " of job " << a.job << " under "
              << a.workdir << "/jobs\n";
    return kExitInvalid;
  }
  std::string exit_path = path.substr(0, path.size() - 4) + ".exit";
  size_t shown = 0;
  while (true) {
    bool ended = fs.Exists(exit_path);
    auto text = fs.Read(path);
    if (text && text->size() > shown) {
      std::cout << text->substr(shown) << std::flush;
      shown = text->size();
    }
    if (!a.follow || ended) return kExitOk;
    timespec ts{0, 200'000'000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace

Runner RegisterAgent(CLI::App& app) {
  auto a = std::make_shared<AgentArgs>();
  auto* cmd = app.add_subcommand("agent", "Run the node agent (or --discover this machine)");
  cmd->add_flag("--discover", a->discover, "Print this machine's topology and exit");
  AddOutputFlag(cmd, &a->out);
  cmd->add_option("--server", a->server,
                  "Control plane: host:port or http://host:port (plain), https://host:port (TLS, "
                  "verified; env TIANSHU_SERVER)");
  cmd->add_option("--ca-file", a->ca_file,
                  "With an https:// server: the CA that signed its certificate (env "
                  "TIANSHU_CA_FILE; default: the system's CAs)");
  cmd->add_option("--token-file", a->token_file, "File with the bearer token (env TIANSHU_TOKEN)");
  cmd->add_option("--node", a->node, "Node name (default: the hostname)");
  cmd->add_option("--address", a->address,
                  "Address other ranks reach this node at: host, or host:port where the port "
                  "serves rank logs to the server (any free port when omitted)")
      ->capture_default_str();
  cmd->add_option("--workdir", a->workdir, "Journal, logs and markers")->capture_default_str();
  cmd->add_option("--checkpoint-root", a->checkpoint_root,
                  "Checkpoint directories when an order names none (default WORKDIR/checkpoints)");
  cmd->add_option("--devices", a->devices,
                  "Declare accelerators instead of discovering them, e.g. 8xA100-80GB");
  cmd->add_option("--label", a->labels, "Node label KEY=VALUE (repeatable), e.g. leaf=leaf-0");
  cmd->add_option("--cgroup-parent", a->cgroup_parent,
                  "Directory for job cgroups below the agent's own cgroup")
      ->capture_default_str();
  cmd->add_option("--cgroup-mode", a->cgroup_mode, "auto, v1, v2 or none")
      ->check(CLI::IsMember({"auto", "v1", "v2", "none"}))
      ->capture_default_str();
  cmd->add_option("--checkpoint-grace", a->checkpoint_grace,
                  "Wait for checkpoint markers this long after SIGUSR1")
      ->capture_default_str();
  cmd->add_flag("--apply-partitions", a->apply_partitions,
                "Run MIG / NVMe namespace commands (otherwise planned and shown only)");
  cmd->add_flag("--no-nvml", a->no_nvml, "Do not load NVML");
  cmd->add_option("--data-address", a->data_address,
                  "Host other ranks reach this node at on a separate data network (default: the "
                  "--address host)");
  cmd->add_option("--data-interface", a->data_interface,
                  "Interface of the data network: the ranks get GLOO_/NCCL_/TP_SOCKET_IFNAME");
  cmd->add_option("--probe-script", a->probe_script,
                  "The gloo bandwidth probe (default: share/tianshu/probes/gloo_bandwidth.py "
                  "beside the binary, or probes/ of the source tree)");
  AddLogFlags(cmd, &a->log);
  auto l = std::make_shared<LogsArgs>();
  auto* logs = cmd->add_subcommand("logs", "Print a rank's log kept by this node's agent");
  logs->add_option("job", l->job, "Job id")->required();
  logs->add_option("--rank", l->rank, "Rank")->capture_default_str();
  logs->add_flag("--follow,-f", l->follow, "Keep printing until the rank ends");
  logs->add_option("--workdir", l->workdir, "The agent's work directory")->capture_default_str();
  return [a, l, logs] { return logs->parsed() ? Logs(*l) : Run(*a); };
}

}  // namespace tianshu::cli
