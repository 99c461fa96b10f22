// Per-job isolation with Linux control groups, v2 where the unified hierarchy has the
// controllers and v1 otherwise. One cgroup per job on the node (all its local ranks), created
// below the agent's own cgroup in each hierarchy (the delegation pattern), so the agent never
// moves work out of limits that apply to itself. Drivers work through SystemFiles, so the very
// same code runs on a fake tree in unit tests and on /sys/fs/cgroup for real.
//   auto driver = DetectCgroupDriver(fs, {});
//   auto out = (*driver)->Create({.name = "job-7", .cpus = {0, 1}, .mems = {0},
//                                 .memory_bytes = 1 << 30});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/agent/system_files.h"
#include "tianshu/base/status.h"

namespace tianshu::agent {

// A character device a job may open ("c 195:0 rwm"); minor -1 means every minor.
struct DeviceRule {
  int major = 0;
  int minor = -1;
  std::string what;  // "/dev/nvidia0", for messages
};

struct CgroupSpec {
  std::string name;               // "job-j-000012-a1": one path component, [A-Za-z0-9._-]
  std::vector<int> cpus;          // cpuset.cpus; empty: inherit the parent's
  std::vector<int> mems;          // cpuset.mems; empty: inherit
  int64_t cpu_milli = 0;          // CFS quota over all ranks; 0: none
  int64_t memory_bytes = 0;       // hard limit (OOM inside the job only); 0: none
  int io_weight = 0;              // 1..10000 (v2 scale); 0: leave
  std::string io_device;          // "254:0": the disk that holds checkpoints
  int64_t io_write_bps = 0;       // 0: none
  int64_t io_read_bps = 0;        // 0: none
  bool restrict_devices = false;  // allow only the basics plus `devices`
  std::vector<DeviceRule> devices;
};

// What Create did: each setting applied, or why not (the host cannot do it); and the
// cgroup.procs files a process writes "0" to in order to join.
struct CgroupOutcome {
  std::vector<std::string> applied;
  std::vector<std::string> unsupported;
  std::vector<std::string> procs_files;
};

struct CgroupUsage {
  int64_t memory_bytes = 0;   // current usage
  int64_t oom_kills = 0;      // processes killed by the job's memory limit
  std::vector<int64_t> pids;  // processes in the job's cgroup
};

// Thread-compatible. Every method is idempotent.
class CgroupDriver {
 public:
  virtual ~CgroupDriver() = default;
  virtual std::string_view Mode() const = 0;  // "v2", "v1", "none"
  // Creates (or updates) the job's cgroup. Fails only when the cgroup itself cannot be made;
  // a setting the host refuses is listed in `unsupported` and the rest still applies.
  [[nodiscard]] virtual Result<CgroupOutcome> Create(const CgroupSpec& spec) = 0;
  // Files to write "0" to (from the child, before exec) to join the job's cgroup.
  virtual std::vector<std::string> ProcsFiles(const std::string& name) const = 0;
  [[nodiscard]] virtual Result<CgroupUsage> Usage(const std::string& name) = 0;
  // Removes the job's cgroup; fails (EBUSY) while processes remain in it. Missing = success.
  [[nodiscard]] virtual Status Remove(const std::string& name) = 0;
  // Where the job's cgroup lives, for messages and tests ("/sys/fs/cgroup/memory/.../job-7").
  virtual std::string PathOf(const std::string& controller, const std::string& name) const = 0;
};

struct CgroupOptions {
  std::string parent = "tianshu";  // directory below the agent's own cgroup
  std::string force_mode;          // "", "v1", "v2", "none"
};

// Picks the driver from /proc/mounts, /proc/self/cgroup and the controllers available:
// v2 when the cgroup2 mount offers cpuset and memory, v1 when the v1 memory hierarchy is
// mounted, otherwise "none" (which reports every setting as unsupported).
[[nodiscard]] Result<std::unique_ptr<CgroupDriver>> DetectCgroupDriver(SystemFiles& fs,
                                                                       const CgroupOptions& opt);

// A cgroup name from a job id and attempt, with anything outside [A-Za-z0-9._-] replaced.
std::string CgroupNameFor(std::string_view job_id, int attempt);

}  // namespace tianshu::agent
