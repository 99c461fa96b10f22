// What one node has, as the agent found it (or, for accelerators, as the operator declared it):
// CPUs and NUMA nodes, memory, the PCIe tree, NICs, RDMA devices, block devices and
// accelerators. Plain data with a JSON form that the agent prints and registers with.
//   HostInfo h = *Discover(fs, probes, {});
//   std::cout << HostToJson(h).dump(2);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/model/accelerator.h"

namespace tianshu::agent {

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;     // logical CPU ids
  int64_t memory_bytes = 0;  // MemTotal of the node
};

struct PciDevice {
  std::string address;        // "0000:3b:00.0"
  std::string vendor_id;      // "0x10de"
  std::string device_id;      // "0x2330"
  std::string class_id;       // "0x030200"
  int numa = -1;              // -1: the kernel does not know
  std::string parent_bridge;  // address of the upstream bridge or switch port, "" at the root
  std::string kind;           // "gpu", "nic", "nvme", "accelerator", "bridge", "other"
};

struct NetInterface {
  std::string name;         // "eth0"
  std::string pci_address;  // "" for virtual interfaces
  int64_t speed_mbps = 0;   // 0 when unknown (link down, virtual)
  int numa = -1;
  std::string mac;
  bool is_virtual = false;
};

struct RdmaDevice {
  std::string name;  // "mlx5_0"
  std::string pci_address;
  std::vector<std::string> netdevs;  // associated Ethernet interfaces (RoCE)
  int ports = 0;
  std::string link_layer;  // "InfiniBand" or "Ethernet"
  int64_t rate_gbps = 0;   // first port's rate
  int numa = -1;
};

struct BlockDevice {
  std::string name;  // "nvme0n1", "vda"
  std::string dev;   // "259:0" major:minor
  int64_t size_bytes = 0;
  bool rotational = false;
  bool nvme = false;
  std::string model;
  std::string pci_address;
  int numa = -1;
  bool namespace_management = false;  // NVMe OACS bit 3: namespaces can be created per job
};

struct MigInstance {
  std::string uuid;
  int64_t memory_bytes = 0;
};

struct Accelerator {
  int index = 0;      // local device index (what *_VISIBLE_DEVICES takes)
  std::string model;  // catalogue name where known ("A100-80GB"), else the vendor's name
  std::string name;   // raw name from the vendor library or PCI ids
  model::Vendor vendor = model::Vendor::kNvidia;
  int64_t memory_bytes = 0;
  std::string uuid;
  std::string pci_address;
  int numa = -1;
  std::string device_node;  // "/dev/nvidia0", "/dev/davinci0" ("" when declared)
  // MIG (or vendor partition) state; nullopt when the device has no such mode.
  std::optional<bool> mig_enabled;
  std::vector<MigInstance> mig_instances;
  std::string source;  // "nvml", "pci", "declared"
  bool declared = false;
};

struct HostInfo {
  std::string hostname;
  std::string kernel;
  std::string cpu_model;
  int sockets = 0;
  int cores = 0;  // physical cores
  int cpus = 0;   // logical CPUs (PUs)
  int64_t memory_bytes = 0;
  std::vector<NumaNode> numa_nodes;
  std::vector<PciDevice> pci;
  std::vector<NetInterface> nics;
  std::vector<RdmaDevice> rdma;
  std::vector<BlockDevice> block_devices;
  std::vector<Accelerator> accelerators;
  std::string cgroup_mode;             // "v2", "v1", "none"
  std::vector<std::string> sources;    // what contributed: "hwloc", "sysfs", "nvml", ...
  std::vector<std::string> notes;      // what could not be probed and why
  bool declared_accelerators = false;  // accelerators come from --devices, not hardware

  int NumaOfAccelerator(int index) const;
};

nlohmann::json HostToJson(const HostInfo& h);
// Human-readable summary, one block per section.
std::string HostToText(const HostInfo& h);

}  // namespace tianshu::agent
