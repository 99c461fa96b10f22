// `tianshu serve` (the control plane) and `tianshu up` (a server with its SQLite store and a
// local agent, started together and stopped together with Ctrl-C).
#include <fcntl.h>
#include <linux/close_range.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "client_flags.h"
#include "commands.h"
#include "tianshu/base/log.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/model/load.h"
#include "tianshu/server/follower.h"
#include "tianshu/server/http_server.h"
#include "tianshu/server/leader.h"

namespace tianshu::cli {
namespace {

struct ServeArgs {
  std::string listen = "127.0.0.1:7070";
  std::string data;
  std::string config;
  std::string cluster;
  std::string token_file;
  std::string checkpoint_root;
  std::string lost_after = "10s";
  std::string restart_grace = "45s";
  std::string node_lease = "90s";
  std::string tls_cert, tls_key;
  bool insecure_plain_http = false;
  std::string heartbeat = "1s";
  std::string placement;
  int commit_batch = 512;
  std::string store;
  std::string replica_id, advertise;  // on etcd: this replica's name and address
  std::string lease = "5s";           // on etcd: the leader's lease
  int http_threads = 1024;
  LogFlags log;  // --log-format, --log-level
};

void AddServeFlags(CLI::App* cmd, ServeArgs* a) {
  cmd->add_option("--listen", a->listen, "host:port to serve on (loopback by default)")
      ->capture_default_str();
  cmd->add_option("--data", a->data, "Data directory: store, token, checkpoints (~/.tianshu)");
  cmd->add_option(
      "--store", a->store,
      "Where the state lives: DATA/tianshu.db (SQLite) by default; "
      "etcd://HOST:PORT,HOST:PORT[/PREFIX] or etcd+tls://...?ca=FILE&cert=FILE&key=FILE "
      "keeps it in etcd (docs/operations.md)");
  cmd->add_option("--replica-id", a->replica_id,
                  "With an etcd store: this replica's name in the election (default: "
                  "HOSTNAME:PORT)");
  cmd->add_option("--advertise", a->advertise,
                  "With an etcd store: the URL clients reach this replica at, told to them by the "
                  "others while it leads (default: http(s)://HOST:PORT of --listen)");
  cmd->add_option("--leader-lease", a->lease,
                  "With an etcd store: the leader's lease; a leader that cannot renew it for this "
                  "long stops, and another replica takes over")
      ->capture_default_str();
  cmd->add_option("--config", a->config, "Engine configuration (engine.yaml)");
  cmd->add_option("--cluster", a->cluster,
                  "With cluster.node_discovery: static, the cluster file whose nodes may register "
                  "(others are refused; missing ones are listed as waiting)");
  cmd->add_option("--token-file", a->token_file,
                  "API token file (default: DATA/token, created when missing)");
  cmd->add_option("--checkpoint-root", a->checkpoint_root,
                  "Each job's checkpoints go to DIR/JOB_ID on the nodes that run it; a file system "
                  "every node mounts at this path (default: DATA/checkpoints)");
  cmd->add_option("--lost-after", a->lost_after, "Declare a silent node lost after this long")
      ->capture_default_str();
  cmd->add_option("--tls-cert", a->tls_cert,
                  "PEM certificate (chain) to serve HTTPS with; clients then use https:// and "
                  "verify it (--ca-file)");
  cmd->add_option("--tls-key", a->tls_key, "The certificate's private key (PEM, mode 0600/0640)");
  cmd->add_flag("--insecure-plain-http", a->insecure_plain_http,
                "Serve plain HTTP on a non-loopback address (tokens in the clear: a trusted "
                "network only)");
  cmd->add_option("--restart-grace", a->restart_grace,
                  "After a start, declare no node known before it lost for this long (longer "
                  "than an agent's 30 s reconnect backoff)")
      ->capture_default_str();
  cmd->add_option("--node-lease", a->node_lease,
                  "Fencing: an agent without an answered heartbeat for this long kills its ranks; "
                  "a job that had ranks on a lost node restarts only after it ran out (0: no "
                  "fencing; at least --lost-after)")
      ->capture_default_str();
  cmd->add_option("--heartbeat-interval", a->heartbeat, "Heartbeat period asked of agents")
      ->capture_default_str();
  cmd->add_option("--placement", a->placement,
                  "Placement strategy (default: the config's scheduler.algorithm)");
  cmd->add_option("--commit-batch", a->commit_batch,
                  "Most state changes per store transaction (1 = one each)")
      ->capture_default_str();
  cmd->add_option("--http-threads", a->http_threads,
                  "Most connections served at once (one thread each, started on demand)")
      ->capture_default_str()
      ->check(CLI::Range(8, 65536));
  AddLogFlags(cmd, &a->log);
}

// Builds the server options from the flags (and the environment for the engine's knobs).
Result<server::ServerOptions> BuildOptions(const ServeArgs& a) {
  server::ServerOptions o;
  std::string listen = a.listen;
  size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "127.0.0.1" : listen.substr(0, colon);
  std::string port_text = colon == std::string::npos ? listen : listen.substr(colon + 1);
  int64_t port = 0;
  if (!ParseInt64(port_text, &port) || port < 0 || port > 65535) {
    return Fail("--listen: expected host:port, got '", listen, "'");
  }
  o.host = host.empty() ? "127.0.0.1" : host;
  o.port = static_cast<int>(port);
  o.data_dir = a.data.empty() ? DefaultDataDir() : a.data;
  o.store = a.store;
  if (!a.checkpoint_root.empty()) {
    if (!std::filesystem::path(a.checkpoint_root).is_absolute()) {
      return Fail("--checkpoint-root: '", a.checkpoint_root,
                  "' must be an absolute path (it is used on every node)");
    }
    o.control.checkpoint_root = a.checkpoint_root;
  }
  if (!a.config.empty()) {
    auto c = model::LoadEngineConfigFile(a.config);
    if (!c) return std::unexpected(c.error());
    o.control.config = *c;
  }
  auto env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  if (auto s = model::ApplyEnvironment(env, &o.control.config); !s) {
    return std::unexpected(s.error());
  }
  if (o.control.config.node_discovery == model::NodeDiscovery::kStatic) {
    if (a.cluster.empty()) {
      return Fail("cluster.node_discovery is static: give the cluster file with --cluster");
    }
    auto topo = model::LoadCluster(a.cluster);
    if (!topo) return Fail("--cluster: ", topo.error().message);
    for (const auto& n : topo->nodes) o.control.static_nodes.push_back(n.name);
    o.control.static_source = a.cluster;
  } else if (!a.cluster.empty()) {
    return Fail(
        "--cluster is for cluster.node_discovery: static; the config says dynamic "
        "(nodes join by registering)");
  }
  auto lost = ParseDurationNs(a.lost_after);
  if (!lost) return Fail("--lost-after: ", lost.error().message);
  auto hb = ParseDurationNs(a.heartbeat);
  if (!hb) return Fail("--heartbeat-interval: ", hb.error().message);
  o.control.lost_after_ms = std::max<int64_t>(1, *lost / 1'000'000);
  auto grace = ParseDurationNs(a.restart_grace);
  if (!grace) return Fail("--restart-grace: ", grace.error().message);
  o.control.restart_grace_ms = *grace / 1'000'000;
  auto lease = ParseDurationNs(a.node_lease);
  if (!lease) return Fail("--node-lease: ", lease.error().message);
  o.control.node_lease_ms = *lease / 1'000'000;
  if (o.control.node_lease_ms > int64_t{7} * 24 * 3600 * 1000) {
    return Fail("--node-lease ", a.node_lease, " is longer than a week");
  }
  if (o.control.node_lease_ms != 0 && o.control.node_lease_ms < o.control.lost_after_ms) {
    return Fail("--node-lease ", a.node_lease, " is shorter than --lost-after ", a.lost_after,
                ": agents would kill their ranks before the server counts them lost (0 turns "
                "fencing off)");
  }
  o.control.heartbeat_interval_ms = std::max<int64_t>(1, *hb / 1'000'000);
  o.control.placement = a.placement;
  // For tests: every cycle replays the records into a fresh engine and compares the ledger.
  if (const char* v = std::getenv("TIANSHU_VERIFY_LEDGER"); v && std::string(v) == "1") {
    o.control.verify_ledger = true;
  }
  o.control.commit_batch = static_cast<size_t>(std::max(1, a.commit_batch));
  o.http_threads = a.http_threads;
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  o.allow_plain_http = a.insecure_plain_http;
  std::string token_file =
      a.token_file.empty() ? (std::filesystem::path(o.data_dir) / "token").string() : a.token_file;
  auto token = a.token_file.empty() ? server::EnsureTokenFile(token_file)
                                    : server::ReadTokenFile(token_file);
  if (!token) return std::unexpected(token.error());
  o.token = *token;
  // The server's own lines ("tianshu serve: store: ..."), through the log.
  o.log = [](const std::string& line) {
    const std::string_view prefix = "tianshu serve: ";
    std::string_view text = line;
    if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
    Log(text.starts_with("store: ") ? LogLevel::kWarning : LogLevel::kInfo, "serve", text);
  };
  return o;
}

sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// A replica's stand-in for itself after it lost the leadership: the process image starts again
// (a follower, campaigning anew) with nothing of the deposed leader's memory. Every descriptor
// is closed on exec, so the port is free for the new image.
[[noreturn]] void StartAgainAsFollower() {
  // Every descriptor, also one another thread opens meanwhile, closes at the exec below.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      int fd = -1;
      try {
        fd = std::stoi(e.path().filename().string());
      } catch (...) {
        continue;
      }
      if (fd > 2) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  std::vector<char*> argv;
  for (const std::string& arg : ProcessArgs()) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  ::execv("/proc/self/exe", argv.data());
  LogLine(LogLevel::kError, "serve")
      << "cannot start again as a follower: " << std::strerror(errno);
  std::_Exit(kExitFailure);
}

// Waits for a stop signal; sets `stop` and wakes Wait() when one comes. Lives as long as the
// process (its thread waits for signals to the end).
struct StopSignals {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};
  std::atomic<bool> lost{false};
  explicit StopSignals(sigset_t set) {
    std::thread([this, set] {
      for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig != SIGCHLD) break;
      }
      Set(stop);
    }).detach();
  }
  void Set(std::atomic<bool>& flag) {
    {
      std::lock_guard l(mu);
      flag = true;
    }
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock l(mu);
    cv.wait(l, [this] { return stop.load() || lost.load(); });
  }
};

int Serve(const ServeArgs& a) {
  sigset_t set = BlockStopSignals();  // before any thread starts, so they all inherit it
  ApplyLogFlags(a.log);
  auto options = BuildOptions(a);
  if (!options) {
    LogLine(LogLevel::kError, "serve") << options.error().message;
    return kExitInvalid;
  }
  StopSignals& signals = *new StopSignals(set);  // outlives the threads that use it
  // On etcd, replicas elect the one that serves; the others answer who does.
  std::unique_ptr<server::LeaderElection> election;
  if (auto url = server::ParseStoreUrl(options->store);
      !options->store.empty() && url && url->etcd) {
    const bool tls = !options->tls_cert.empty();
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string port = std::to_string(options->port);
    const std::string shown_host =
        options->host == "0.0.0.0" || options->host == "::" ? std::string(host) : options->host;
    auto ttl = ParseDurationNs(a.lease);
    if (!ttl || *ttl < 1'000'000'000) {
      LogLine(LogLevel::kError, "serve") << "--leader-lease " << a.lease << ": 1s or more";
      return kExitInvalid;
    }
    auto e = server::LeaderElection::Open(
        {.etcd = url->etcd->etcd,
         .prefix = url->etcd->prefix,
         .id = a.replica_id.empty() ? std::string(host) + ":" + port : a.replica_id,
         .url = a.advertise.empty() ? (tls ? "https://" : "http://") + shown_host + ":" + port
                                    : a.advertise,
         .lease_ttl_ms = *ttl / 1'000'000});
    if (!e) {
      LogLine(LogLevel::kError, "serve") << e.error().message;
      return kExitFailure;
    }
    election = std::move(*e);
    // What the server would refuse (plain HTTP off loopback), the follower refuses too.
    if (auto ok = server::CheckListenOptions(*options); !ok) {
      LogLine(LogLevel::kError, "serve") << ok.error().message;
      return kExitInvalid;
    }
    // Reads come from the store, with the control plane's options and the admin token.
    server::ControlPlaneOptions reads = options->control;
    reads.admin_token = options->token;
    auto follower = server::FollowerServer::Start({.host = options->host,
                                                   .port = options->port,
                                                   .tls_cert = options->tls_cert,
                                                   .tls_key = options->tls_key,
                                                   .id = election->options().id,
                                                   .store = *url,
                                                   .control = std::move(reads)});
    if (!follower) {
      LogLine(LogLevel::kError, "serve") << follower.error().message;
      return kExitFailure;
    }
    LogLine(LogLevel::kInfo, "serve") << "replica " << election->options().id
                                      << " campaigning for the leadership of " << options->store;
    const bool won = election->Campaign(signals.stop, [&](const server::LeaderInfo& l) {
      (*follower)->SetLeader(l);
      if (!l.problem.empty()) {
        LogLine(LogLevel::kWarning, "serve") << "no leader can be elected now: " << l.problem;
      } else {
        LogLine(LogLevel::kInfo, "serve")
            << "following " << l.id << (l.url.empty() ? "" : " at " + l.url);
      }
    });
    if (won) {
      // Renewed from now on, also while the follower stops and the state loads.
      election->WatchLease([&signals] { signals.Set(signals.lost); });
    }
    (*follower)->Stop();
    if (!won) return kExitOk;
    // The specs the follower parsed need not be parsed again (ControlPlaneOptions::earlier).
    options->control.earlier = (*follower)->LastView();
    options->guard = election->Guard();
    options->replica_id = election->options().id;
    options->replica_url = election->options().url;
    // A write that waits for etcd longer than half the lease is answered 503; by then the
    // lease may be gone too, and this replica with it.
    options->store_wait_ms = election->options().lease_ttl_ms / 2;
    LogLine(LogLevel::kInfo, "serve")
        << "replica " << options->replica_id << " leads (lease " << a.lease << ")";
  }
  auto s = server::Server::Start(*options);
  options->control.earlier.reset();
  ::malloc_trim(0);  // the follower's views are gone: give their pages back (glibc keeps them)
  if (!s) {
    LogLine(LogLevel::kError, "serve") << s.error().message;
    if (signals.lost) StartAgainAsFollower();  // deposed while it loaded
    if (election) election->Resign();
    return kExitFailure;
  }
  LogLine(LogLevel::kInfo, "serve")
      << "token in " << (a.token_file.empty() ? options->data_dir + "/token" : a.token_file)
      << "; Ctrl-C stops";
  std::thread store_watch;
  if (election) {
    const auto loaded = (*s)->control_plane().Loaded();
    LogLine(LogLevel::kInfo, "serve")
        << "loaded " << loaded.jobs << " jobs (" << loaded.specs_reused
        << " of their specs as the follower had parsed them)";
    // A replica whose store failed a write (etcd unavailable too long, or its leadership gone)
    // accepts no more changes: it starts again as a follower, from what the store holds.
    store_watch = std::thread([&signals, cp = &(*s)->control_plane()] {
      while (!signals.stop && !signals.lost) {
        if (cp->StoreFailed()) {
          signals.Set(signals.lost);
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  signals.Wait();
  if (store_watch.joinable()) store_watch.join();
  if (signals.lost && !signals.stop) {
    // Deposed (the lease ran out: etcd unreachable, or this process was paused): its writes
    // already fail on etcd; it stops at once and campaigns again from a clean start.
    LogLine(LogLevel::kWarning, "serve")
        << "lost the leadership (the lease was not renewed in time, or the "
           "store refused a write); starting again as a follower";
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // answers in flight go out
    StartAgainAsFollower();
  }
  LogLine(LogLevel::kInfo, "serve") << "stopping";
  (*s)->Stop();
  if (election) election->Resign();  // the next replica need not wait for the lease to run out
  return kExitOk;
}

struct UpArgs : ServeArgs {
  std::string devices;
  std::string node;
};

int Up(const UpArgs& a) {
  sigset_t set = BlockStopSignals();
  ApplyLogFlags(a.log);
  auto options = BuildOptions(a);
  if (!options) {
    LogLine(LogLevel::kError, "up") << options.error().message;
    return kExitInvalid;
  }
  if (!options->store.empty()) {
    LogLine(LogLevel::kError, "up")
        << "--store is for `tianshu serve` (replicas on etcd elect a leader); "
           "`tianshu up` runs one server on its own SQLite store in --data";
    return kExitInvalid;
  }
  auto s = server::Server::Start(*options);
  if (!s) {
    LogLine(LogLevel::kError, "up") << s.error().message;
    return kExitFailure;
  }
  std::string token_file = a.token_file.empty() ? options->data_dir + "/token" : a.token_file;
  std::string devices = a.devices;
  if (devices.empty() && !std::filesystem::exists("/dev/nvidia0")) {
    devices = "8xA100-80GB";
    LogLine(LogLevel::kWarning, "up") << "no accelerators found; the local agent declares "
                                      << devices << " to try things out (--devices changes it)";
  }
  std::string node = a.node;
  if (node.empty()) {
    char host[256] = {0};
    node = gethostname(host, sizeof host - 1) == 0 && host[0] ? host : "local";
  }
  // With TLS the local agent speaks it too (the certificate must name this host; the
  // certificate file itself serves as the CA of a self-signed one).
  std::string server = (options->tls_cert.empty() ? "" : "https://") + options->host + ":" +
                       std::to_string((*s)->port());
  std::vector<std::string> argv = {
      "/proc/self/exe", "agent",      "--server",    server,      "--token-file",
      token_file,       "--node",     node,          "--workdir", options->data_dir + "/agent",
      "--log-format",   a.log.format, "--log-level", a.log.level};
  if (!options->tls_cert.empty()) {
    argv.push_back("--ca-file");
    argv.push_back(options->tls_cert);
  }
  if (!devices.empty() && devices != "none") {
    argv.push_back("--devices");
    argv.push_back(devices);
  }
  pid_t agent = fork();
  if (agent == 0) {
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (auto& s2 : argv) args.push_back(s2.data());
    args.push_back(nullptr);
    execv("/proc/self/exe", args.data());
    _exit(127);
  }
  if (agent < 0) {
    LogLine(LogLevel::kError, "up") << "cannot start the agent";
    (*s)->Stop();
    return kExitFailure;
  }
  LogLine(LogLevel::kInfo, "up") << "server on http://" << server << " (token in " << token_file
                                 << "), agent pid " << agent << " as node " << node
                                 << ". Submit a job: tianshu submit JOB.yaml; Ctrl-C stops both.";
  int code = kExitOk;
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGCHLD) {
      int status = 0;
      if (waitpid(agent, &status, WNOHANG) == agent) {
        LogLine(LogLevel::kError, "up")
            << "the agent stopped ("
            << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                  : "signal " + std::to_string(WTERMSIG(status)))
            << "); stopping the server";
        agent = -1;
        code = kExitFailure;
        break;
      }
      continue;
    }
    break;
  }
  LogLine(LogLevel::kInfo, "up") << "stopping";
  if (agent > 0) {
    kill(agent, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(agent, nullptr, WNOHANG) == agent) {
        agent = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (agent > 0) {
      kill(agent, SIGKILL);
      waitpid(agent, nullptr, 0);
    }
  }
  (*s)->Stop();
  return code;
}

}  // namespace

Runner RegisterServe(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Run the control plane (REST API, store, scheduler)");
  AddServeFlags(cmd, a.get());
  return [a] { return Serve(*a); };
}

Runner RegisterUp(CLI::App& app) {
  auto a = std::make_shared<UpArgs>();
  auto* cmd = app.add_subcommand(
      "up", "Run a server and a local agent together on this machine (Ctrl-C stops both)");
  AddServeFlags(cmd, a.get());
  cmd->add_option("--devices", a->devices,
                  "Accelerators the local agent declares, e.g. 8xA100-80GB ('none': discover)");
  cmd->add_option("--node", a->node, "Node name of the local agent (default: the hostname)");
  return [a] { return Up(*a); };
}

}  // namespace tianshu::cli
