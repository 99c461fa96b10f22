#include "tianshu/agent/host_report.h"

#include <algorithm>
#include <string>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

std::string WireVendor(model::Vendor v) {
  switch (v) {
    case model::Vendor::kNvidia:
      return "nvidia";
    case model::Vendor::kHuawei:
      return "huawei";
    case model::Vendor::kHygon:
      return "hygon";
    case model::Vendor::kMooreThreads:
      return "moorethreads";
    case model::Vendor::kOther:
      break;
  }
  return "other";
}

// The value in kB of meminfo's line `key` ("MemTotal:"), or -1. Read in place: the meter runs
// at every heartbeat of every agent.
int64_t MeminfoKb(std::string_view text, std::string_view key) {
  for (size_t at = 0; at < text.size();) {
    const std::string_view line = NextLine(text, &at);
    if (!line.starts_with(key)) continue;
    size_t pos = key.size();
    int64_t v = 0;
    return ParseInt64(NextField(line, &pos), &v) ? v : -1;
  }
  return -1;
}

}  // namespace

std::pair<double, int64_t> HostUsageMeter::Sample(SystemFiles& fs) {
  double cpu = 0;
  int64_t used = 0;
  if (auto stat = fs.Read("/proc/stat")) {
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice": the first line.
    const std::string_view line = std::string_view(*stat).substr(0, stat->find('\n'));
    size_t at = 0;
    int64_t total = 0, idle = 0, v = 0;
    if (NextField(line, &at) == "cpu") {
      for (int field = 0;; ++field) {
        const std::string_view f = NextField(line, &at);
        if (f.empty()) break;
        if (!ParseInt64(f, &v)) continue;
        total += v;
        if (field == 3 || field == 4) idle += v;  // idle, iowait
      }
    }
    int64_t busy = total - idle;
    if (total > cpu_total_) {
      cpu = static_cast<double>(busy - cpu_busy_) / static_cast<double>(total - cpu_total_);
    }
    cpu_busy_ = busy;
    cpu_total_ = total;
  }
  if (auto mi = fs.Read("/proc/meminfo")) {
    const int64_t total = MeminfoKb(*mi, "MemTotal:"), avail = MeminfoKb(*mi, "MemAvailable:");
    if (total > 0) used = std::max<int64_t>(0, total - std::max<int64_t>(avail, 0)) * 1024;
  }
  return {std::clamp(cpu, 0.0, 1.0), used};
}

wire::Hardware HardwareReport(const HostInfo& host) {
  wire::Hardware h;
  for (const Accelerator& a : host.accelerators) {
    h.devices.push_back({.index = a.index,
                         .model = a.model,
                         .vendor = WireVendor(a.vendor),
                         .memory_bytes = a.memory_bytes,
                         .uuid = a.declared ? "" : a.uuid,
                         .numa = a.numa,
                         .pci_bus_id = a.pci_address,
                         .mig_enabled = a.mig_enabled.value_or(false),
                         .declared = a.declared});
  }
  h.cpu_milli = int64_t{host.cpus} * 1000;
  h.memory_bytes = host.memory_bytes;
  h.numa_nodes = std::max<int>(1, static_cast<int>(host.numa_nodes.size()));
  for (const NetInterface& n : host.nics) {
    if (n.name == "lo") continue;
    bool rdma = std::any_of(host.rdma.begin(), host.rdma.end(), [&](const RdmaDevice& d) {
      return std::find(d.netdevs.begin(), d.netdevs.end(), n.name) != d.netdevs.end();
    });
    h.nics.push_back(
        {.name = n.name, .bandwidth_bps = n.speed_mbps * 1'000'000, .rdma = rdma, .numa = n.numa});
  }
  for (const BlockDevice& b : host.block_devices) {
    h.disks.push_back({.name = b.name, .capacity_bytes = b.size_bytes, .nvme = b.nvme});
  }
  if (!host.accelerators.empty()) {
    h.backend = std::string(model::BackendName(model::DefaultBackend(host.accelerators[0].vendor)));
  }
  return h;
}

}  // namespace tianshu::agent
