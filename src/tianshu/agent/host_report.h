// What the agent tells the server about this host: its hardware as the wire describes it (at
// registration) and its CPU and memory use (in every heartbeat). HardwareReport is pure; the
// meter reads /proc through SystemFiles and keeps the previous CPU counters.
//   wire::Hardware h = HardwareReport(host);
//   HostUsageMeter meter; auto [cpu, mem] = meter.Sample(fs);
#pragma once

#include <cstdint>
#include <utility>

#include "tianshu/agent/host.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

// The host's devices, CPUs, memory, NICs (not lo) and disks, for registration.
wire::Hardware HardwareReport(const HostInfo& host);

// Host CPU busy fraction and memory in use, from /proc/stat and /proc/meminfo. Not
// thread-safe: one meter per caller.
class HostUsageMeter {
 public:
  // The CPU busy fraction (0..1) since the previous call and the bytes of memory in use; the
  // first call reports the average since boot. A file that cannot be read counts as 0.
  std::pair<double, int64_t> Sample(SystemFiles& fs);

 private:
  int64_t cpu_busy_ = 0, cpu_total_ = 0;  // /proc/stat at the previous Sample()
};

}  // namespace tianshu::agent
