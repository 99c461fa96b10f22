// NVIDIA's management library as the agent and the doctor load it: dlopen at run time (the
// binary starts on machines without a GPU), the subset of nvml.h they call (NVML 11+ layouts),
// and one session that resolves the common entry points and runs nvmlInit; its destructor runs
// nvmlShutdown and closes the library.
//   auto nvml = NvmlSession::Open();                 // "NVML not available: ..." without a driver
//   for (unsigned i = 0; i < (*nvml)->Count(); ++i) auto dev = (*nvml)->Device(i);
#pragma once

#include <memory>
#include <string>

#include "tianshu/base/status.h"

namespace tianshu::agent::internal {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEnableState_t = int;  // NVML_FEATURE_DISABLED 0, NVML_FEATURE_ENABLED 1
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlPciInfo {  // nvmlPciInfo_t v3
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
inline constexpr nvmlReturn_t kNvmlSuccess = 0;

// One nvmlInit..nvmlShutdown span. Not thread-safe; one per probe.
class NvmlSession {
 public:
  // Loads libnvidia-ml.so.1, resolves the v2 entry points, runs nvmlInit and counts devices.
  // Errors: "NVML not available: <dlerror>", missing entry points, nvmlInit or count failures.
  [[nodiscard]] static Result<std::unique_ptr<NvmlSession>> Open();
  ~NvmlSession();
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;

  unsigned Count() const { return count_; }
  // Handle of device `index`, or "nvmlDeviceGetHandleByIndex: <NVML's error>".
  [[nodiscard]] Result<nvmlDevice_t> Device(unsigned index) const;
  // nvmlDeviceGetName, "" when it fails.
  std::string Name(nvmlDevice_t dev) const;
  // "0000:3b:00.0" from nvmlDeviceGetPciInfo_v3, "" when it fails.
  std::string PciAddress(nvmlDevice_t dev) const;
  // NVML's text for a return code (the number when nvmlErrorString is missing).
  std::string ErrorText(nvmlReturn_t r) const;
  // An optional entry point by name, nullptr when this driver lacks it.
  template <typename F>
  F Symbol(const char* name) const {
    return reinterpret_cast<F>(Lookup(name));
  }

 private:
  NvmlSession() = default;
  void* Lookup(const char* name) const;

  void* lib_ = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*handle_)(unsigned, nvmlDevice_t*) = nullptr;
  const char* (*error_)(nvmlReturn_t) = nullptr;
  unsigned count_ = 0;
};

}  // namespace tianshu::agent::internal
