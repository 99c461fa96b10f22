#include <dlfcn.h>

#include <cstdio>

#include "tianshu/agent/internal/nvml.h"

namespace tianshu::agent::internal {

Result<std::unique_ptr<NvmlSession>> NvmlSession::Open() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return Fail("NVML not available: ", dlerror());
  std::unique_ptr<NvmlSession> s(new NvmlSession());
  s->lib_ = lib;  // closed by the destructor from here on
  auto init = s->Symbol<nvmlReturn_t (*)()>("nvmlInit_v2");
  auto count = s->Symbol<nvmlReturn_t (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  s->handle_ =
      s->Symbol<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
  s->error_ = s->Symbol<const char* (*)(nvmlReturn_t)>("nvmlErrorString");
  auto shutdown = s->Symbol<nvmlReturn_t (*)()>("nvmlShutdown");
  if (!init || !shutdown || !count || !s->handle_) {
    return Fail("NVML: libnvidia-ml.so.1 lacks the v2 entry points");
  }
  if (nvmlReturn_t r = init(); r != kNvmlSuccess) {
    return Fail("NVML: nvmlInit: ", s->ErrorText(r));
  }
  s->shutdown_ = shutdown;  // initialised: shut down by the destructor
  if (nvmlReturn_t r = count(&s->count_); r != kNvmlSuccess) {
    return Fail("NVML: nvmlDeviceGetCount: ", s->ErrorText(r));
  }
  return s;
}

NvmlSession::~NvmlSession() {
  if (shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

void* NvmlSession::Lookup(const char* name) const { return dlsym(lib_, name); }

std::string NvmlSession::ErrorText(nvmlReturn_t r) const {
  return error_ ? std::string(error_(r)) : "NVML error " + std::to_string(r);
}

Result<nvmlDevice_t> NvmlSession::Device(unsigned index) const {
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = handle_(index, &dev); r != kNvmlSuccess) {
    return Fail("nvmlDeviceGetHandleByIndex: ", ErrorText(r));
  }
  return dev;
}

std::string NvmlSession::Name(nvmlDevice_t dev) const {
  auto name = Symbol<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetName");
  char buf[128] = {0};
  if (!name || name(dev, buf, sizeof buf) != kNvmlSuccess) return "";
  return buf;
}

std::string NvmlSession::PciAddress(nvmlDevice_t dev) const {
  auto pci = Symbol<nvmlReturn_t (*)(nvmlDevice_t, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v3");
  NvmlPciInfo info{};
  if (!pci || pci(dev, &info) != kNvmlSuccess) return "";
  char addr[32];
  std::snprintf(addr, sizeof addr, "%04x:%02x:%02x.0", info.domain, info.bus, info.device);
  return addr;
}

}  // namespace tianshu::agent::internal
