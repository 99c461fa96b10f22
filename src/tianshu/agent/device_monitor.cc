#include "tianshu/agent/device_monitor.h"

#include "tianshu/agent/internal/nvml.h"

namespace tianshu::agent {

using namespace internal;  // NOLINT(google-build-using-namespace): nvml.h's names

namespace {

struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};
constexpr nvmlReturn_t kNvmlGpuIsLost = 15;  // NVML_ERROR_GPU_IS_LOST

}  // namespace

NvmlDeviceMonitor::~NvmlDeviceMonitor() = default;

Result<std::unique_ptr<NvmlDeviceMonitor>> NvmlDeviceMonitor::Open(
    const std::vector<Accelerator>& accelerators) {
  auto nvml = NvmlSession::Open();
  if (!nvml) return std::unexpected(nvml.error());
  auto uuid_fn =
      (*nvml)->Symbol<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetUUID");
  if (!uuid_fn) return Fail("NVML: libnvidia-ml.so.1 lacks nvmlDeviceGetUUID");
  std::unique_ptr<NvmlDeviceMonitor> m(new NvmlDeviceMonitor());
  for (unsigned i = 0; i < (*nvml)->Count(); ++i) {
    auto dev = (*nvml)->Device(i);
    char uuid[128] = {0};
    if (!dev || uuid_fn(*dev, uuid, sizeof uuid) != kNvmlSuccess || uuid[0] == 0) continue;
    for (const Accelerator& a : accelerators) {
      if (!a.declared && a.uuid == uuid) m->devices_.emplace_back(a.index, i);
    }
  }
  if (m->devices_.empty()) return Fail("NVML: none of its devices is one the agent discovered");
  m->nvml_ = std::move(*nvml);
  return m;
}

std::vector<wire::DeviceUsage> NvmlDeviceMonitor::Sample() {
  auto util_fn = nvml_->Symbol<nvmlReturn_t (*)(nvmlDevice_t, NvmlUtilization*)>(
      "nvmlDeviceGetUtilizationRates");
  auto mem_fn =
      nvml_->Symbol<nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
  std::vector<wire::DeviceUsage> out;
  if (!util_fn || !mem_fn) return out;
  for (const auto& [index, nvml_index] : devices_) {
    auto dev = nvml_->Device(nvml_index);
    if (!dev) continue;
    NvmlUtilization u{};
    const nvmlReturn_t r = util_fn(*dev, &u);
    if (r == kNvmlGpuIsLost) {
      out.push_back({.index = index, .healthy = false});
      continue;
    }
    // Not supported (MIG mode) or failed: no reading rather than a made-up one.
    NvmlMemory mem{};
    if (r != kNvmlSuccess || mem_fn(*dev, &mem) != kNvmlSuccess) continue;
    out.push_back({.index = index,
                   .utilization = std::min(100U, u.gpu) / 100.0,
                   .memory_used_bytes = static_cast<int64_t>(mem.used),
                   .healthy = true});
  }
  return out;
}

}  // namespace tianshu::agent
