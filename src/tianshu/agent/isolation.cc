#include "tianshu/agent/isolation.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"

namespace tianshu::agent {

namespace {
// Where the node's MPS control daemon and its clients meet (NVIDIA's defaults).
constexpr const char* kMpsPipeDirectory = "/tmp/nvidia-mps";
constexpr const char* kMpsLogDirectory = "/var/log/nvidia-mps";
}  // namespace

std::string MigProfile(int64_t memory_bytes, int gpu_milli) {
  // NVIDIA A100/H100/H200 MIG: 7 compute slices and 8 memory slices; the profiles
  // 1g/2g/3g/4g/7g take 1/2/4/4/8 memory slices (NVIDIA MIG user guide, "Supported profiles").
  if (memory_bytes <= 0 || gpu_milli <= 0 || gpu_milli >= 1000) return "";
  int slices = std::max(1, (gpu_milli * 7 + 500) / 1000);  // nearest slice count
  int g = slices <= 1 ? 1 : slices == 2 ? 2 : slices == 3 ? 3 : slices == 4 ? 4 : 7;
  int mem_slices = g == 1 ? 1 : g == 2 ? 2 : g <= 4 ? 4 : 8;
  double gb = static_cast<double>(memory_bytes) / static_cast<double>(int64_t{1} << 30);
  int mem_gb = static_cast<int>(std::lround(gb * mem_slices / 8));
  return std::to_string(g) + "g." + std::to_string(mem_gb) + "gb";
}

std::string WholeDisk(SystemFiles& fs, const std::string& dev) {
  std::string base = "/sys/dev/block/" + dev;
  if (!fs.Exists(base + "/partition")) return dev;
  auto link = fs.ReadLink(base);  // ../../devices/.../nvme0n1/nvme0n1p2
  if (!link) return dev;
  std::string parent = Dirname(*link);
  std::string parent_abs = parent.rfind('/', 0) == 0 ? parent : "/sys/dev/block/" + parent;
  auto d = fs.Read(parent_abs + "/dev");
  return d ? std::string(Trim(*d)) : dev;
}

IsolationPlan PlanIsolation(const HostInfo& host, const wire::LaunchOrder& launch,
                            const std::string& cgroup_name, const std::string& checkpoint_dir,
                            SystemFiles& fs, const IsolationOptions& options) {
  IsolationPlan p;
  const wire::CgroupPlan& req = launch.cgroup;
  p.cgroup.name = cgroup_name;

  // The host's accelerator with index `d` (nullptr: not on this node).
  auto device = [&](int d) -> const Accelerator* {
    auto it = std::find_if(host.accelerators.begin(), host.accelerators.end(),
                           [&](const Accelerator& a) { return a.index == d; });
    return it == host.accelerators.end() ? nullptr : &*it;
  };
  // Devices of the job on this node: the plan's list, else the union of the ranks'.
  std::set<int> devices(req.devices.begin(), req.devices.end());
  if (devices.empty()) {
    for (const auto& r : launch.ranks) devices.insert(r.devices.begin(), r.devices.end());
  }

  // cpuset: the NUMA nodes asked for, else those of the job's devices where known.
  std::set<int> numa(req.numa_nodes.begin(), req.numa_nodes.end());
  if (numa.empty()) {
    for (int d : devices) {
      int n = host.NumaOfAccelerator(d);
      if (n >= 0) numa.insert(n);
    }
    if (!devices.empty() && numa.empty()) {
      p.notes.push_back(
          "cpuset: NUMA node of the devices unknown (" +
          std::string(host.declared_accelerators ? "declared devices" : "not reported") +
          "); the job may use every CPU");
    }
  }
  for (int n : numa) {
    auto it = std::find_if(host.numa_nodes.begin(), host.numa_nodes.end(),
                           [&](const NumaNode& x) { return x.id == n; });
    if (it == host.numa_nodes.end()) {
      p.unsupported.push_back("cpuset: NUMA node " + std::to_string(n) + " does not exist here");
      continue;
    }
    p.cgroup.mems.push_back(n);
    p.cgroup.cpus.insert(p.cgroup.cpus.end(), it->cpus.begin(), it->cpus.end());
  }
  p.cgroup.cpu_milli = req.cpu_milli;
  p.cgroup.memory_bytes = req.memory_bytes;
  if (req.io_weight > 0 && req.io_weight != 100) p.cgroup.io_weight = req.io_weight;
  p.cgroup.io_write_bps = req.io_write_bps;
  if (p.cgroup.io_weight > 0 || p.cgroup.io_write_bps > 0) {
    std::string probe = checkpoint_dir;
    while (!probe.empty() && probe != "/" && !fs.Exists(probe)) probe = Dirname(probe);
    if (auto dev = fs.DeviceOf(probe.empty() ? "/" : probe)) {
      p.cgroup.io_device = WholeDisk(fs, *dev);
      // Overlay and tmpfs have anonymous devices (major 0): no disk to limit.
      if (StartsWith(p.cgroup.io_device, "0:")) {
        p.unsupported.push_back(
            "io limits: the checkpoint directory is on a virtual file "
            "system (" +
            p.cgroup.io_device + ")");
        p.cgroup.io_device.clear();
        p.cgroup.io_weight = 0;
        p.cgroup.io_write_bps = 0;
      }
    }
  }

  // Device access: the job's accelerators plus the basics.
  if (!devices.empty()) {
    p.cgroup.restrict_devices = true;
    bool any_nvidia = false;
    for (int d : devices) {
      const Accelerator* it = device(d);
      if (it == nullptr) {
        p.unsupported.push_back("device " + std::to_string(d) + ": not on this node");
        continue;
      }
      if (it->declared) continue;
      if (it->vendor == model::Vendor::kNvidia && StartsWith(it->device_node, "/dev/nvidia")) {
        int64_t minor = 0;
        if (ParseInt64(it->device_node.substr(11), &minor)) {
          p.cgroup.devices.push_back({195, static_cast<int>(minor), it->device_node});
          any_nvidia = true;
        }
      } else {
        p.unsupported.push_back("device access for " + std::string(model::VendorName(it->vendor)) +
                                " devices is not restricted (device numbers unknown)");
      }
    }
    if (any_nvidia) {
      p.cgroup.devices.push_back({195, 255, "/dev/nvidiactl"});
      p.cgroup.devices.push_back({195, 254, "/dev/nvidia-modeset"});
      // nvidia-uvm has a dynamic major: look it up.
      if (auto pd = fs.Read("/proc/devices")) {
        for (const auto& line : SplitString(*pd, '\n')) {
          auto f = SplitString(std::string(Trim(line)), ' ');
          int64_t major = 0;
          if (f.size() == 2 && StartsWith(f[1], "nvidia-uvm") && ParseInt64(f[0], &major)) {
            p.cgroup.devices.push_back({static_cast<int>(major), -1, "/dev/" + f[1]});
          }
        }
      }
    }
    if (host.declared_accelerators) {
      p.notes.push_back("declared devices have no device nodes: access limited to the basics");
    }
  }

  // Partitions for fractional ranks.
  bool real_partitionable = false;
  for (const auto& r : launch.ranks) {
    if (r.gpu_milli >= 1000) continue;
    for (int d : r.devices) {
      const Accelerator* it = device(d);
      if (it == nullptr) continue;
      const model::AcceleratorSpec* spec = model::FindAccelerator(it->model);
      bool capable = spec ? spec->mig_capable : it->mig_enabled.has_value();
      if (!capable) {
        p.unsupported.push_back("rank " + std::to_string(r.rank) + ": device " + std::to_string(d) +
                                " (" + it->model +
                                ") has no hardware partitions; it is time-shared");
        continue;
      }
      if (it->vendor == model::Vendor::kNvidia) {
        std::string profile = MigProfile(it->memory_bytes, r.gpu_milli);
        if (!it->mig_enabled.value_or(false)) {
          p.partition_commands.push_back("nvidia-smi -i " + std::to_string(d) + " -mig 1");
        }
        p.partition_commands.push_back("nvidia-smi mig -i " + std::to_string(d) + " -cgi " +
                                       profile + " -C");
      } else if (it->vendor == model::Vendor::kHuawei) {
        int cores = std::max(1, r.gpu_milli * 20 / 1000);  // 910B: 20 AI cores per chip
        p.partition_commands.push_back("npu-smi set -t create-vnpu -i " + std::to_string(d) +
                                       " -c 0 -f vir" + (cores < 10 ? "0" : "") +
                                       std::to_string(cores));
      }
      real_partitionable = real_partitionable || !it->declared;
    }
  }

  // Co-location (scheduler.colocation): the server marks every GPU rank that shares its device.
  // Inference-first sharing on CUDA makes each of them a client of the node's MPS control
  // daemon (started here when it is not running), at the client priority the server set
  // (CUDA_MPS_CLIENT_PRIORITY: 0 for the service, 1 for training). Anything else is the
  // driver's time slicing, which needs nothing here.
  std::string sharing;
  for (const auto& r : launch.ranks) {
    if (auto it = r.env.find("TIANSHU_COLOCATION"); it != r.env.end()) sharing = it->second;
  }
  if (sharing == "priority" && launch.backend == "cuda") {
    p.env["CUDA_MPS_PIPE_DIRECTORY"] = kMpsPipeDirectory;
    p.env["CUDA_MPS_LOG_DIRECTORY"] = kMpsLogDirectory;
    p.partition_commands.push_back(std::string("pgrep -x nvidia-cuda-mps-control >/dev/null || "
                                               "CUDA_MPS_PIPE_DIRECTORY=") +
                                   kMpsPipeDirectory + " CUDA_MPS_LOG_DIRECTORY=" +
                                   kMpsLogDirectory + " nvidia-cuda-mps-control -d");
    for (int d : devices) {
      const Accelerator* a = device(d);
      real_partitionable = real_partitionable || (a != nullptr && !a->declared);
    }
  } else if (!sharing.empty()) {
    p.notes.push_back("co-location: the devices are time-shared by the driver (" + sharing + ")");
  }

  // NVMe namespace per job for checkpoint I/O, where the drive manages namespaces.
  if (req.io_write_bps > 0) {
    auto nvme = std::find_if(host.block_devices.begin(), host.block_devices.end(),
                             [](const BlockDevice& b) { return b.nvme; });
    if (nvme == host.block_devices.end()) {
      p.notes.push_back("NVMe namespace: no NVMe drive on this host");
    } else {
      std::string ctrl = "/dev/" + nvme->name.substr(0, nvme->name.find('n', 4));
      p.partition_commands.push_back("nvme create-ns " + ctrl +
                                     " --nsze=<blocks> --ncap=<blocks> --flbas=0 && nvme "
                                     "attach-ns " +
                                     ctrl + " --namespace-id=<nsid> --controllers=0");
      if (!nvme->namespace_management) {
        p.unsupported.push_back("NVMe namespace: namespace management not confirmed on " +
                                nvme->name + "; command shown only");
      }
    }
  }
  p.apply_partitions = options.apply_partitions && real_partitionable;
  if (!p.partition_commands.empty() && !p.apply_partitions) {
    p.notes.push_back(options.apply_partitions
                          ? "partition commands shown, not run: the devices are declared"
                          : "partition commands shown, not run (--apply-partitions is off)");
  }

  // Network class of service: RDMA traffic takes it from the collective library's
  // environment; host-side marking of TCP traffic would need net_prio/net_cls.
  if (req.traffic_class >= 0) {
    std::string tc = std::to_string(req.traffic_class);
    if (launch.backend == "ascend") {
      p.env["HCCL_RDMA_TC"] = tc;
    } else {
      p.env["NCCL_IB_TC"] = tc;
    }
    p.notes.push_back("traffic class " + tc + " set for RDMA through the collective library");
    if (host.rdma.empty()) {
      p.unsupported.push_back(
          "network class of service: no RDMA device, and host-side "
          "marking of TCP traffic (net_prio/net_cls) is not available");
    }
  }
  return p;
}

std::string DescribeIsolation(const IsolationPlan& plan, const CgroupOutcome& outcome) {
  std::vector<std::string> parts;
  if (!outcome.applied.empty()) parts.push_back("applied: " + Join(outcome.applied, ", "));
  std::vector<std::string> no = plan.unsupported;
  no.insert(no.end(), outcome.unsupported.begin(), outcome.unsupported.end());
  if (!no.empty()) parts.push_back("not applied: " + Join(no, "; "));
  if (!plan.partition_commands.empty()) {
    parts.push_back(std::string(plan.apply_partitions ? "ran: " : "planned: ") +
                    Join(plan.partition_commands, "; "));
  }
  if (!plan.notes.empty()) parts.push_back("notes: " + Join(plan.notes, "; "));
  return Join(parts, " | ");
}

}  // namespace tianshu::agent
