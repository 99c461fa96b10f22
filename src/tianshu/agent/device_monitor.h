// The accelerators' usage, for the agent's heartbeats and its /metrics, measured where a driver
// tells it: NVIDIA GPUs through NVML (the busy fraction over NVML's last sample period, device
// memory in use). A device it cannot measure (declared with --devices, another vendor, MIG mode,
// no driver) gets no reading at all: nothing is made up.
//   auto m = NvmlDeviceMonitor::Open(host.accelerators);  // an error without an NVIDIA driver
//   std::vector<wire::DeviceUsage> now = (*m)->Sample();
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tianshu/agent/host.h"
#include "tianshu/base/status.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

namespace internal {
class NvmlSession;
}

class DeviceMonitor {
 public:
  virtual ~DeviceMonitor() = default;
  // One reading per device it can measure, with the agent's device index; a device the driver
  // reports lost has healthy = false and no utilisation. Not thread-safe.
  virtual std::vector<wire::DeviceUsage> Sample() = 0;
};

class NvmlDeviceMonitor final : public DeviceMonitor {
 public:
  // Loads NVML and pairs its devices with the discovered accelerators by UUID (declared ones
  // have none and are never paired). Errors: NVML not available, or no device paired.
  [[nodiscard]] static Result<std::unique_ptr<NvmlDeviceMonitor>> Open(
      const std::vector<Accelerator>& accelerators);
  ~NvmlDeviceMonitor() override;
  std::vector<wire::DeviceUsage> Sample() override;

 private:
  NvmlDeviceMonitor() = default;
  std::unique_ptr<internal::NvmlSession> nvml_;
  std::vector<std::pair<int, unsigned>> devices_;  // agent index, NVML index
};

}  // namespace tianshu::agent
