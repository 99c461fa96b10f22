// Hardware discovery of one node: hwloc for CPUs, cores and NUMA (sysfs when hwloc is absent),
// sysfs for the PCIe tree, NICs, RDMA devices and block devices, the vendor library for
// accelerators (NVML, loaded at run time with dlopen so the binary starts without a GPU), and
// PCI vendor ids for the other backends. Declared devices (`--devices 8xA100-80GB`) replace
// the accelerator list and are marked `declared`, never `found`.
//   RealSystemFiles fs; NvmlLibrary nvml; HwlocProbe hwloc;
//   Result<HostInfo> h = Discover(fs, {.cpu = &hwloc, .nvml = &nvml}, {});
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tianshu/agent/host.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/base/status.h"

namespace tianshu::agent {

// CPU/NUMA topology source (hwloc in production). Fills sockets, cores, cpus, cpu_model,
// numa_nodes and memory_bytes; an error leaves the sysfs reading in place.
class CpuTopologyProbe {
 public:
  virtual ~CpuTopologyProbe() = default;
  [[nodiscard]] virtual Status Fill(HostInfo* host) = 0;
  virtual std::string_view Name() const = 0;
};

// NVIDIA's management library. Probe() lists the GPUs with memory, UUID, PCI address and MIG
// mode; it never changes a GPU setting. An error means "library absent or failed" and is
// reported as a note, not a failure of discovery.
class GpuLibrary {
 public:
  virtual ~GpuLibrary() = default;
  [[nodiscard]] virtual Result<std::vector<Accelerator>> Probe() = 0;
  virtual std::string_view Name() const = 0;
};

// hwloc 2.x, topology loaded once per Fill() call.
class HwlocProbe final : public CpuTopologyProbe {
 public:
  Status Fill(HostInfo* host) override;
  std::string_view Name() const override { return "hwloc"; }
};

// libnvidia-ml.so.1 through dlopen; absent library -> error "NVML not available: ...".
class NvmlLibrary final : public GpuLibrary {
 public:
  Result<std::vector<Accelerator>> Probe() override;
  std::string_view Name() const override { return "nvml"; }
};

// A fixed answer, for tests.
class FakeGpuLibrary final : public GpuLibrary {
 public:
  explicit FakeGpuLibrary(Result<std::vector<Accelerator>> answer) : answer_(std::move(answer)) {}
  Result<std::vector<Accelerator>> Probe() override { return answer_; }
  std::string_view Name() const override { return "fake-nvml"; }

 private:
  Result<std::vector<Accelerator>> answer_;
};

struct DiscoveryProbes {
  CpuTopologyProbe* cpu = nullptr;  // nullptr: sysfs only
  GpuLibrary* nvml = nullptr;       // nullptr: PCI ids only
};

struct DiscoveryOptions {
  // "8xA100-80GB" or "4xH100-80GB,4xA100-80GB"; empty: discover.
  std::string declared_devices;
  std::string hostname;  // override (several agents on one machine); "" = the kernel's
};

// Parses a --devices declaration into accelerators with `declared` set. Errors name the part
// that is wrong and suggest the nearest catalogue model.
[[nodiscard]] Result<std::vector<Accelerator>> ParseDeclaredDevices(std::string_view text);

// The catalogue model for a vendor's device name and memory size ("NVIDIA H200", 141 GiB ->
// "H200-141GB"), or "" when none matches.
std::string MatchCatalogueModel(std::string_view name, int64_t memory_bytes);

// Runs every probe. Fails only on unusable declarations; anything the host lacks becomes a note.
[[nodiscard]] Result<HostInfo> Discover(SystemFiles& fs, const DiscoveryProbes& probes,
                                        const DiscoveryOptions& options);

// Parses a kernel CPU list ("0-3,8,10-11").
std::vector<int> ParseCpuList(std::string_view text);
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace tianshu::agent
