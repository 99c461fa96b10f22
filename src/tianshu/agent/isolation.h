// Turns the server's isolation request for a job on this node (wire::CgroupPlan and the ranks'
// devices) into what this host can enforce: a CgroupSpec, the partition commands it would run
// (MIG / vendor partitions for fractional ranks, an NVMe namespace for checkpoint I/O), the
// network class of service, and a list of what the host cannot do. Pure: reads HostInfo and
// the file system only to find the disk of the checkpoint directory.
//   IsolationPlan p = PlanIsolation(host, launch, "job-7-a1", fs, {});
//   auto outcome = driver.Create(p.cgroup);
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/host.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

struct IsolationOptions {
  bool apply_partitions = false;  // run MIG / NVMe namespace commands (off: planned, shown)
};

struct IsolationPlan {
  CgroupSpec cgroup;
  std::vector<std::string> partition_commands;  // shell command lines, in order
  bool apply_partitions = false;                // run them (enabled and the hardware is real)
  std::map<std::string, std::string> env;       // added to every rank (traffic class, ...)
  std::vector<std::string> unsupported;         // what this host cannot do for the job
  std::vector<std::string> notes;               // decisions worth showing
};

IsolationPlan PlanIsolation(const HostInfo& host, const wire::LaunchOrder& launch,
                            const std::string& cgroup_name, const std::string& checkpoint_dir,
                            SystemFiles& fs, const IsolationOptions& options);

// MIG profile for a share of a device ("1g.10gb" for 1/7 of an A100-80GB), "" when none fits.
std::string MigProfile(int64_t memory_bytes, int gpu_milli);

// The whole disk under a block device number ("259:3" partition -> "259:0"), via sysfs.
std::string WholeDisk(SystemFiles& fs, const std::string& dev);

// One line per item, for reports: "applied: ...; not applied: ...; planned: ...".
std::string DescribeIsolation(const IsolationPlan& plan, const CgroupOutcome& outcome);

}  // namespace tianshu::agent
