// `tianshu doctor`: the node health checks (RDMA ports, NICs, accelerators, GPU-NIC affinity, a
// job's cgroup, NCCL/HCCL environment, free space, the server). Prints one line per finding
// (or JSON with --output json); exits 3 when any check fails, 1 on bad flags, 0 otherwise.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "client_flags.h"
#include "commands.h"
#include "tianshu/agent/discovery.h"
#include "tianshu/agent/doctor.h"
#include "tianshu/base/secret_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"

extern char** environ;

namespace tianshu::cli {
namespace {

struct DoctorArgs {
  OutputFlag out;
  std::string devices;
  bool expect_rdma = false;
  std::string job;
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string workdir;  // "": the package's /var/lib/tianshu-agent, else the agent's default
  std::string min_free = "2TB";
  std::string server;
  std::string token_file;
  std::string ca_file;
  bool no_nvml = false;
};

// The directory to measure, absolute (a relative one is taken from the working directory).
std::string Workdir(const std::string& flag) {
  std::error_code ec;
  if (flag.empty()) {
    return std::filesystem::is_directory("/var/lib/tianshu-agent", ec) ? "/var/lib/tianshu-agent"
                                                                       : "/var/lib/tianshu/agent";
  }
  auto abs = std::filesystem::absolute(flag, ec);
  return ec ? flag : abs.lexically_normal().string();
}

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

// Like the client commands: --token-file, else TIANSHU_TOKEN, else ~/.tianshu/token if any.
Result<std::string> Token(const DoctorArgs& a, const std::map<std::string, std::string>& env) {
  auto it = env.find("TIANSHU_TOKEN");
  if (a.token_file.empty() && it != env.end() && !it->second.empty()) return it->second;
  std::string file = a.token_file.empty() ? DefaultDataDir() + "/token" : a.token_file;
  if (a.token_file.empty() && !std::filesystem::exists(file)) return std::string();
  return ReadSecretFile(file);
}

int Run(const DoctorArgs& a) {
  auto min_free = ParseSize(a.min_free);
  if (!min_free) {
    std::cerr << "tianshu doctor: --min-free: " << min_free.error().message << "\n";
    return kExitInvalid;
  }
  const std::map<std::string, std::string> env = Environment();
  std::string server = a.server;
  if (server.empty()) {
    auto it = env.find("TIANSHU_SERVER");
    if (it != env.end()) server = it->second;
  }
  std::unique_ptr<agent::HttpServerProbe> http;
  if (!server.empty()) {
    auto token = Token(a, env);
    if (!token) {
      std::cerr << "tianshu doctor: " << token.error().message << "\n";
      return kExitInvalid;
    }
    std::string ca = a.ca_file;
    if (auto it = env.find("TIANSHU_CA_FILE"); ca.empty() && it != env.end()) ca = it->second;
    http = std::make_unique<agent::HttpServerProbe>(server, *token, ca);
  }

  agent::RealSystemFiles fs;
  agent::HwlocProbe hwloc;
  // Accelerators from PCI ids only: the NVIDIA check asks NVML itself and compares.
  auto host = agent::Discover(fs, {.cpu = &hwloc, .nvml = nullptr}, {});
  if (!host) {
    std::cerr << "tianshu doctor: " << host.error().message << "\n";
    return kExitFailure;
  }
  agent::NvmlHealthLibrary nvml;
  agent::PosixCommandRunner commands;
  agent::StatvfsProbe disk;
  agent::DoctorProbes probes{.fs = &fs,
                             .gpus = a.no_nvml ? nullptr : &nvml,
                             .commands = &commands,
                             .disk = &disk,
                             .server = http.get()};
  auto findings = agent::RunDoctor(*host, probes,
                                   {.declared_devices = a.devices,
                                    .expect_rdma = a.expect_rdma,
                                    .job_id = a.job,
                                    .cgroup_root = a.cgroup_root,
                                    .workdir = Workdir(a.workdir),
                                    .min_free_bytes = *min_free,
                                    .env = env});
  if (!findings) {
    std::cerr << "tianshu doctor: " << findings.error().message << "\n";
    return kExitInvalid;
  }
  if (a.out.Json()) {
    // Vendor tools and sysfs may print bytes that are not UTF-8: replaced, never a throw.
    std::cout << agent::FindingsToJson(*findings).dump(2, ' ', false,
                                                       nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << agent::FindingsToText(*findings);
  }
  return agent::DoctorExitStatus(*findings) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

Runner RegisterDoctor(CLI::App& app) {
  auto a = std::make_shared<DoctorArgs>();
  auto* cmd = app.add_subcommand(
      "doctor",
      "Check this node's health: RDMA ports, NICs, accelerators, affinity, a job's cgroup, "
      "NCCL/HCCL settings, free space, the server (exit 3 when a check fails)");
  AddOutputFlag(cmd, &a->out);
  cmd->add_option("--devices", a->devices,
                  "Accelerators this node must have, as the agent's --devices (e.g. "
                  "8xH100-80GB): missing ones fail instead of being absent");
  cmd->add_flag("--expect-rdma", a->expect_rdma, "RDMA adapters must be present");
  cmd->add_option("--job", a->job, "Job id: show and check its cgroup on this node");
  cmd->add_option("--cgroup-root", a->cgroup_root, "Where cgroup hierarchies are mounted")
      ->capture_default_str();
  cmd->add_option("--workdir", a->workdir,
                  "The agent's work directory or the checkpoint root to measure (default: "
                  "/var/lib/tianshu-agent where the package made it, else /var/lib/tianshu/agent)");
  cmd->add_option("--min-free", a->min_free,
                  "Warn below this free space on --workdir (2TB, 500GiB)")
      ->capture_default_str();
  cmd->add_option("--server", a->server,
                  "Control plane to check (default: $TIANSHU_SERVER; none: skipped)");
  cmd->add_option("--token-file", a->token_file,
                  "File holding the API token (default: $TIANSHU_TOKEN, else ~/.tianshu/token)");
  cmd->add_option("--ca-file", a->ca_file,
                  "With an https:// server: the CA that signed its certificate (default: "
                  "$TIANSHU_CA_FILE, else the system's CAs)");
  cmd->add_flag("--no-nvml", a->no_nvml, "Do not load NVML");
  return [a] { return Run(*a); };
}

}  // namespace tianshu::cli
