// A stand-in for NVIDIA's libnvidia-ml.so.1 (the entry points the agent loads), for tests on
// machines without a GPU: two H200s, GPU-fake-0 busy 42% with 1,000,000 bytes in use, GPU-fake-1
// answering "not supported" for its utilisation (as a GPU in MIG mode does). Put its directory
// first in LD_LIBRARY_PATH of the process under test.
#include <cstdio>

namespace {
struct FakeDevice {
  int index;
};
FakeDevice g_devices[2] = {{0}, {1}};
struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned gpu, memory;
};
constexpr int kSuccess = 0, kNotSupported = 3;
}  // namespace

extern "C" {
int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int) { return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, FakeDevice** d) {
  if (i >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *d = &g_devices[i];
  return kSuccess;
}
int nvmlDeviceGetName(FakeDevice*, char* buf, unsigned n) {
  std::snprintf(buf, n, "NVIDIA H200");
  return kSuccess;
}
int nvmlDeviceGetUUID(FakeDevice* d, char* buf, unsigned n) {
  std::snprintf(buf, n, "GPU-fake-%d", d->index);
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(FakeDevice* d, Memory* m) {
  m->total = 150754820096ULL;
  m->used = d->index == 0 ? 1000000ULL : 0ULL;
  m->free = m->total - m->used;
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(FakeDevice* d, Utilization* u) {
  if (d->index == 1) return kNotSupported;
  u->gpu = 42;
  u->memory = 7;
  return kSuccess;
}
}
