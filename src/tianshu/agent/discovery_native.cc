// The native probes: hwloc (linked) and NVML (dlopen'ed at run time).
#include <hwloc.h>

#include <cstdio>
#include <memory>

#include "tianshu/agent/discovery.h"
#include "tianshu/agent/internal/nvml.h"

namespace tianshu::agent {

Status HwlocProbe::Fill(HostInfo* host) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return Fail("hwloc_topology_init failed");
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> guard(topo, hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(topo) != 0) return Fail("hwloc_topology_load failed");

  host->sockets = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  host->cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  host->cpus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  if (hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0)) {
    if (const char* m = hwloc_obj_get_info_by_name(pkg, "CPUModel")) host->cpu_model = m;
  }
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  // /proc/meminfo stays the host's memory: hwloc sums NUMA-local memory, which on
  // memory-hotplug VMs can be less than what the kernel manages.
  if (host->memory_bytes == 0 && root->total_memory > 0) {
    host->memory_bytes = static_cast<int64_t>(root->total_memory);
  }
  int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  if (numa > 0) {
    host->numa_nodes.clear();
    for (int i = 0; i < numa; ++i) {
      hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      NumaNode node;
      node.id = static_cast<int>(n->os_index);
      node.memory_bytes = static_cast<int64_t>(n->attr->numanode.local_memory);
      unsigned id;
      hwloc_bitmap_foreach_begin(id, n->cpuset) {
        hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, id);
        node.cpus.push_back(pu ? static_cast<int>(pu->os_index) : static_cast<int>(id));
      }
      hwloc_bitmap_foreach_end();
      host->numa_nodes.push_back(std::move(node));
    }
  }
  // NUMA locality of PCI devices where sysfs did not know it (-1).
  for (PciDevice& d : host->pci) {
    if (d.numa >= 0) continue;
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (std::sscanf(d.address.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) continue;
    hwloc_obj_t p = hwloc_get_pcidev_by_busid(topo, dom, bus, dev, fn);
    if (!p) continue;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, p);
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) {
      d.numa = hwloc_bitmap_first(anc->nodeset);
    }
  }
  return Ok();
}

Result<std::vector<Accelerator>> NvmlLibrary::Probe() {
  using namespace internal;  // NOLINT(google-build-using-namespace): nvml.h's names
  auto nvml = NvmlSession::Open();
  if (!nvml) return std::unexpected(nvml.error());
  const NvmlSession& n = **nvml;
  auto uuid_fn = n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetUUID");
  auto mem_fn = n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
  auto minor_fn = n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetMinorNumber");
  auto mig_fn =
      n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
  auto mig_max_fn =
      n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount");
  auto mig_handle_fn = n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlDevice_t*)>(
      "nvmlDeviceGetMigDeviceHandleByIndex");
  if (!mem_fn) return Fail("NVML: libnvidia-ml.so.1 lacks nvmlDeviceGetMemoryInfo");
  std::vector<Accelerator> out;
  for (unsigned i = 0; i < n.Count(); ++i) {
    auto handle = n.Device(i);
    if (!handle) continue;
    nvmlDevice_t dev = *handle;
    Accelerator a;
    a.index = static_cast<int>(i);
    a.vendor = model::Vendor::kNvidia;
    a.source = "nvml";
    a.name = n.Name(dev);
    char buf[128] = {0};
    if (uuid_fn && uuid_fn(dev, buf, sizeof buf) == kNvmlSuccess) a.uuid = buf;
    NvmlMemory mem{};
    if (mem_fn(dev, &mem) == kNvmlSuccess) a.memory_bytes = static_cast<int64_t>(mem.total);
    a.pci_address = n.PciAddress(dev);
    unsigned minor = i;
    if (minor_fn) minor_fn(dev, &minor);
    a.device_node = "/dev/nvidia" + std::to_string(minor);
    unsigned current = 0, pending = 0;
    if (mig_fn && mig_fn(dev, &current, &pending) == kNvmlSuccess) {
      a.mig_enabled = current == 1;
      unsigned max_mig = 0;
      if (current == 1 && mig_max_fn && mig_handle_fn &&
          mig_max_fn(dev, &max_mig) == kNvmlSuccess) {
        for (unsigned m = 0; m < max_mig; ++m) {
          nvmlDevice_t mdev;
          if (mig_handle_fn(dev, m, &mdev) != kNvmlSuccess) continue;
          MigInstance inst;
          if (uuid_fn && uuid_fn(mdev, buf, sizeof buf) == kNvmlSuccess) inst.uuid = buf;
          NvmlMemory mm{};
          if (mem_fn(mdev, &mm) == kNvmlSuccess) inst.memory_bytes = static_cast<int64_t>(mm.total);
          a.mig_instances.push_back(std::move(inst));
        }
      }
    }
    a.model = MatchCatalogueModel(a.name, a.memory_bytes);
    if (a.model.empty()) a.model = a.name;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace tianshu::agent
