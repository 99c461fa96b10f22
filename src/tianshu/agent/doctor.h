// `tianshu doctor`: the node health checks of the troubleshooting list, as pure functions of
// what the node shows (sysfs and cgroupfs through SystemFiles, the discovered HostInfo) and of
// probes behind interfaces (NVML health, vendor command-line tools, free disk space, the
// control plane), each returning Findings. Real probes live in doctor_probes.cc; tests use the
// fakes below. What the node lacks is `absent`, unless the options declare it (--devices,
// --expect-rdma), in which case its absence is a failure.
//   DoctorProbes p{.fs = &fs, .gpus = &nvml, .commands = &runner, .disk = &statvfs};
//   std::vector<Finding> f = RunDoctor(host, p, {.workdir = "/var/lib/tianshu/agent"});
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/agent/host.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/base/status.h"

namespace tianshu::agent {

// The verdict of one check on one subject, worst last.
enum class CheckStatus {
  kOk,      // healthy
  kAbsent,  // the node has no such thing and does not declare it: nothing to check
  kWarn,    // works, but against the recommendation (the fix says what to change)
  kFail,    // broken, or declared and missing: jobs on this node will fail or run badly
};
std::string_view CheckStatusName(CheckStatus s);  // "ok", "absent", "warn", "fail"

struct Finding {
  std::string check;    // "rdma", "nic", "nvidia", "nvlink", "ascend", "rocm", "musa", ...
  std::string subject;  // "mlx5_0 port 1", "eth0", "GPU 3 (0000:3b:00.0)"
  CheckStatus status = CheckStatus::kOk;
  std::string detail;  // one line: what was read
  std::string fix;     // one line for warn/fail: what to do; "" otherwise
};

// ---- probes ----------------------------------------------------------------------------

// One NVIDIA GPU's health as NVML reports it.
struct GpuHealth {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string pci_address;
  std::optional<bool> ecc_enabled;         // current ECC mode; nullopt: not supported
  std::optional<bool> ecc_pending;         // mode after the next reboot
  std::optional<int64_t> ecc_uncorrected;  // volatile (since boot) uncorrected errors
  std::vector<int> nvlinks_up;             // link numbers reported active
  std::vector<int> nvlinks_down;           // links that exist but are inactive
  std::string error;  // NVML could not open the device (fallen off the bus); "" when it could
};

// NVML's health queries. Probe() reads state only; it never changes a GPU setting. An error
// means "library absent or failed"; a library that sees no GPU answers an empty list.
class GpuHealthLibrary {
 public:
  virtual ~GpuHealthLibrary() = default;
  [[nodiscard]] virtual Result<std::vector<GpuHealth>> Probe() = 0;
};

// libnvidia-ml.so.1 through dlopen (nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors and
// nvmlDeviceGetNvLinkState over links 0..17). Absent library: "NVML not available: ...".
class NvmlHealthLibrary final : public GpuHealthLibrary {
 public:
  Result<std::vector<GpuHealth>> Probe() override;
};

class FakeGpuHealthLibrary final : public GpuHealthLibrary {
 public:
  explicit FakeGpuHealthLibrary(Result<std::vector<GpuHealth>> answer)
      : answer_(std::move(answer)) {}
  Result<std::vector<GpuHealth>> Probe() override { return answer_; }

 private:
  Result<std::vector<GpuHealth>> answer_;
};

struct CommandOutput {
  int exit_status = 0;  // 128 + signal when killed, 124 on timeout (as timeout(1) says)
  std::string output;   // stdout and stderr together, at most 64 KiB
};

// Runs vendor tools (npu-smi, rocm-smi, mthreads-gmi). Not thread-safe.
class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Full path of `name` found on `path` (a PATH value), or "" when not there.
  virtual std::string Which(const std::string& name, const std::string& path) = 0;
  // Runs argv[0] (a full path) and waits at most timeout_ms. Errors: could not start it.
  [[nodiscard]] virtual Result<CommandOutput> Run(const std::vector<std::string>& argv,
                                                  int timeout_ms) = 0;
};

// fork/exec with a pipe; kills the child on timeout.
class PosixCommandRunner final : public CommandRunner {
 public:
  std::string Which(const std::string& name, const std::string& path) override;
  Result<CommandOutput> Run(const std::vector<std::string>& argv, int timeout_ms) override;
};

// A table: tools that "exist" and what running them answers.
class FakeCommandRunner final : public CommandRunner {
 public:
  void Add(const std::string& name, CommandOutput answer) { tools_[name] = std::move(answer); }
  std::string Which(const std::string& name, const std::string&) override {
    return tools_.count(name) ? "/usr/local/bin/" + name : "";
  }
  Result<CommandOutput> Run(const std::vector<std::string>& argv, int) override {
    ran_.push_back(argv);
    std::string name = argv.empty() ? "" : argv[0].substr(argv[0].rfind('/') + 1);
    auto it = tools_.find(name);
    if (it == tools_.end()) return Fail("exec ", name, ": No such file or directory");
    return it->second;
  }
  const std::vector<std::vector<std::string>>& ran() const { return ran_; }

 private:
  std::map<std::string, CommandOutput> tools_;
  std::vector<std::vector<std::string>> ran_;
};

struct DiskSpace {
  int64_t free_bytes = 0;   // available to an unprivileged user (f_bavail)
  int64_t total_bytes = 0;  // size of the file system
};

// statvfs(3) of the file system that holds a path.
class DiskSpaceProbe {
 public:
  virtual ~DiskSpaceProbe() = default;
  [[nodiscard]] virtual Result<DiskSpace> Stat(const std::string& path) = 0;
};

class StatvfsProbe final : public DiskSpaceProbe {
 public:
  Result<DiskSpace> Stat(const std::string& path) override;
};

class FakeDiskSpaceProbe final : public DiskSpaceProbe {
 public:
  explicit FakeDiskSpaceProbe(Result<DiskSpace> answer) : answer_(std::move(answer)) {}
  Result<DiskSpace> Stat(const std::string&) override { return answer_; }

 private:
  Result<DiskSpace> answer_;
};

// One answered HTTP request with the local clock around it.
struct ServerAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;  // names as sent
  std::string body;
  int64_t sent_ms = 0;      // local Unix time when the request went out
  int64_t received_ms = 0;  // local Unix time when the answer was in
};

// GET on the control plane with the bearer token. A transport failure is an error; any HTTP
// status (401 included) is an answer.
class ServerProbe {
 public:
  virtual ~ServerProbe() = default;
  virtual std::string Address() const = 0;
  [[nodiscard]] virtual Result<ServerAnswer> Get(const std::string& path) = 0;
};

// cpp-httplib, one connection per request, 5 s timeouts.
class HttpServerProbe final : public ServerProbe {
 public:
  // `server`: host:port, http:// or https:// (verified against `ca_file`, else the system's).
  HttpServerProbe(std::string server, std::string token, std::string ca_file = "")
      : server_(std::move(server)), token_(std::move(token)), ca_file_(std::move(ca_file)) {}
  std::string Address() const override { return server_; }
  Result<ServerAnswer> Get(const std::string& path) override;

 private:
  std::string server_, token_, ca_file_;
};

class FakeServerProbe final : public ServerProbe {
 public:
  explicit FakeServerProbe(Result<ServerAnswer> answer) : answer_(std::move(answer)) {}
  std::string Address() const override { return "http://server:7070"; }
  Result<ServerAnswer> Get(const std::string&) override { return answer_; }

 private:
  Result<ServerAnswer> answer_;
};

// ---- the checks --------------------------------------------------------------------------

struct DoctorProbes {
  SystemFiles* fs = nullptr;          // required
  GpuHealthLibrary* gpus = nullptr;   // nullptr: NVML not consulted (as if absent)
  CommandRunner* commands = nullptr;  // nullptr: vendor tools not run (as if absent)
  DiskSpaceProbe* disk = nullptr;     // nullptr: free space not checked
  ServerProbe* server = nullptr;      // nullptr: no server given -> `absent`
};

struct DoctorOptions {
  std::string declared_devices;  // "8xH100-80GB": these accelerators must be there
  bool expect_rdma = false;      // RDMA ports must be there
  std::string job_id;            // "" : the cgroup check is skipped (`absent`)
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string workdir = "/var/lib/tianshu/agent";  // checkpoints and logs (the agent's default)
  int64_t min_free_bytes = 2'000'000'000'000;      // 2 TB
  std::map<std::string, std::string> env;          // the environment jobs will see
  int command_timeout_ms = 20000;                  // per vendor tool
};

// Every check below, in order. Fails only when --devices does not parse.
[[nodiscard]] Result<std::vector<Finding>> RunDoctor(const HostInfo& host, const DoctorProbes& p,
                                                     const DoctorOptions& o);

// 1. /sys/class/infiniband/*/ports/*: state, phys_state, rate, link_layer, as ibstat shows them.
std::vector<Finding> CheckRdmaPorts(SystemFiles& fs, bool expect_rdma);
// 2. /sys/class/net/*: operstate, mtu, speed of NICs with a `device` link (physical).
std::vector<Finding> CheckNics(SystemFiles& fs);
// 3a. NVIDIA: NVML count against PCI and --devices, ECC, NVLink.
std::vector<Finding> CheckNvidia(const HostInfo& host, GpuHealthLibrary* nvml,
                                 const std::vector<Accelerator>& declared);
// 3b. Ascend, ROCm, MUSA: their tool's exit status.
std::vector<Finding> CheckVendorTools(const HostInfo& host, CommandRunner* commands,
                                      const std::vector<Accelerator>& declared,
                                      const std::map<std::string, std::string>& env,
                                      int timeout_ms);
// 4. Each accelerator against the RDMA devices / NICs of its NUMA node.
std::vector<Finding> CheckAffinity(const HostInfo& host);
// 5. The job's cgroup(s) below `cgroup_root`: cpuset and memory limits.
std::vector<Finding> CheckJobCgroup(SystemFiles& fs, const std::string& cgroup_root,
                                    const std::string& job_id);
// 6. NCCL / HCCL variables for the vendors present.
std::vector<Finding> CheckCollectiveEnv(bool nvidia, bool ascend,
                                        const std::map<std::string, std::string>& env);
// 7. Free space on the work directory's file system.
std::vector<Finding> CheckFreeSpace(SystemFiles& fs, const HostInfo& host, DiskSpaceProbe& disk,
                                    const std::string& workdir, int64_t min_free_bytes);
// 8. The server: reachable, token accepted, clock offset from its answer's time.
std::vector<Finding> CheckServer(ServerProbe* server);

// ---- output ----------------------------------------------------------------------------

// 0 when nothing failed (warnings allowed), kDoctorExitFailed otherwise.
inline constexpr int kDoctorExitFailed = 3;  // the CLI's kExitFailure
int DoctorExitStatus(const std::vector<Finding>& findings);

// One line per finding ("fail  rdma    mlx5_0 port 1  State: Down, ..."), its fix on the next,
// and a summary line.
std::string FindingsToText(const std::vector<Finding>& findings);
// [{"check", "subject", "status", "detail", "fix"}, ...]
nlohmann::json FindingsToJson(const std::vector<Finding>& findings);

// Offset of the server's clock from ours (server minus local, ms) with Cristian's estimate: the
// server's time is taken to belong to the midpoint of the request. Parses an HTTP Date
// ("Sun, 06 Nov 1994 08:49:37 GMT"); nullopt when unparsable.
std::optional<int64_t> ParseHttpDateMs(const std::string& text);

}  // namespace tianshu::agent
