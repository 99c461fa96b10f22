// Accelerators, vendors and software backends, with a catalogue of the devices users run.
//
// A cluster file names a model ("A100-80GB") and may override any figure; the catalogue
// supplies the rest. Figures are vendor datasheet values for dense BF16/FP16 tensor math.
//   const AcceleratorSpec* a = FindAccelerator("H100-80GB");
//   double seconds = flops / (a->peak_tflops * 1e12);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/units.h"

namespace tianshu::model {

enum class Vendor {
  kNvidia,        // CUDA devices, NVML for discovery
  kHuawei,        // Ascend NPUs, CANN/HCCL
  kHygon,         // Hygon DCU, ROCm/RCCL
  kMooreThreads,  // MTT GPUs, MUSA/MCCL
  kOther,         // anything else (e.g. the openb trace's anonymous models)
};

// The software stack a job's ranks run on; a job never spans two.
enum class Backend {
  kCuda,    // NVIDIA CUDA + NCCL
  kAscend,  // Huawei CANN + HCCL
  kRocm,    // ROCm/DTK + RCCL (Hygon DCU)
  kMusa,    // Moore Threads MUSA + MCCL
};

std::string_view VendorName(Vendor v);
std::string_view BackendName(Backend b);
std::optional<Vendor> ParseVendor(std::string_view s);
std::optional<Backend> ParseBackend(std::string_view s);
Backend DefaultBackend(Vendor v);
std::vector<std::string> VendorNames();
std::vector<std::string> BackendNames();

struct AcceleratorSpec {
  std::string model;  // "A100-80GB"
  Vendor vendor = Vendor::kNvidia;
  int64_t memory_bytes = 0;    // device memory (HBM)
  double peak_tflops = 0;      // dense BF16/FP16 tensor TFLOP/s
  Bandwidth hbm_bandwidth;     // device memory bandwidth
  bool mig_capable = false;    // MIG (NVIDIA) or vendor partitions
  int max_partitions = 1;      // MIG slices (7 on A100/H100) or vendor equivalent
  double busy_watts = 0;       // board power while computing (TDP)
  double idle_watts = 0;       // board power while allocated but idle / unallocated
  Bandwidth nvlink_bandwidth;  // default per-GPU NVLink bandwidth (one direction), 0 if none
};

// The catalogue entry for a model name (case-insensitive), or nullptr.
const AcceleratorSpec* FindAccelerator(std::string_view model);
std::vector<std::string> AcceleratorModels();

}  // namespace tianshu::model
