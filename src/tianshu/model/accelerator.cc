#include "tianshu/model/accelerator.h"

#include "tianshu/base/strings.h"

namespace tianshu::model {
namespace {

constexpr int64_t kGiB = 1LL << 30;

// Datasheet figures: dense BF16/FP16 tensor TFLOP/s, HBM bandwidth, TDP, NVLink per GPU per
// direction. Idle power is a typical nvidia-smi reading of an allocated idle board.
const std::vector<AcceleratorSpec>& Catalogue() {
  static const std::vector<AcceleratorSpec> kCatalogue = {
      {"A100-40GB", Vendor::kNvidia, 40 * kGiB, 312, Bandwidth::FromGBps(1555), true, 7, 400, 60,
       Bandwidth::FromGBps(300)},
      {"A100-80GB", Vendor::kNvidia, 80 * kGiB, 312, Bandwidth::FromGBps(2039), true, 7, 400, 60,
       Bandwidth::FromGBps(300)},
      {"A800-80GB", Vendor::kNvidia, 80 * kGiB, 312, Bandwidth::FromGBps(2039), true, 7, 400, 60,
       Bandwidth::FromGBps(200)},
      {"H100-80GB", Vendor::kNvidia, 80 * kGiB, 989, Bandwidth::FromGBps(3350), true, 7, 700, 90,
       Bandwidth::FromGBps(450)},
      {"H800-80GB", Vendor::kNvidia, 80 * kGiB, 989, Bandwidth::FromGBps(3350), true, 7, 700, 90,
       Bandwidth::FromGBps(200)},
      {"H200-141GB", Vendor::kNvidia, 141 * kGiB, 989, Bandwidth::FromGBps(4800), true, 7, 700, 90,
       Bandwidth::FromGBps(450)},
      {"V100-16GB", Vendor::kNvidia, 16 * kGiB, 125, Bandwidth::FromGBps(900), false, 1, 300, 40,
       Bandwidth::FromGBps(150)},
      {"V100-32GB", Vendor::kNvidia, 32 * kGiB, 125, Bandwidth::FromGBps(900), false, 1, 300, 40,
       Bandwidth::FromGBps(150)},
      {"P100-16GB", Vendor::kNvidia, 16 * kGiB, 18.7, Bandwidth::FromGBps(732), false, 1, 250, 30,
       Bandwidth{}},
      {"T4-16GB", Vendor::kNvidia, 16 * kGiB, 65, Bandwidth::FromGBps(320), false, 1, 70, 10,
       Bandwidth{}},
      {"A10-24GB", Vendor::kNvidia, 24 * kGiB, 125, Bandwidth::FromGBps(600), false, 1, 150, 20,
       Bandwidth{}},
      {"L40S-48GB", Vendor::kNvidia, 48 * kGiB, 362, Bandwidth::FromGBps(864), false, 1, 350, 35,
       Bandwidth{}},
      {"Ascend-910B", Vendor::kHuawei, 64 * kGiB, 313, Bandwidth::FromGBps(1600), true, 4, 400, 70,
       Bandwidth::FromGBps(196)},
      {"DCU-K100", Vendor::kHygon, 64 * kGiB, 196, Bandwidth::FromGBps(896), false, 1, 300, 50,
       Bandwidth::FromGBps(100)},
      {"MTT-S4000", Vendor::kMooreThreads, 48 * kGiB, 100, Bandwidth::FromGBps(768), false, 1, 450,
       50, Bandwidth::FromGBps(120)},
      // The openb (Alibaba) trace names some models only by code; figures are those of the
      // closest public part and exist so that speed and power are defined, not measured.
      {"G2", Vendor::kOther, 16 * kGiB, 65, Bandwidth::FromGBps(320), false, 1, 70, 10,
       Bandwidth{}},
      {"G3", Vendor::kOther, 24 * kGiB, 125, Bandwidth::FromGBps(600), false, 1, 150, 20,
       Bandwidth{}},
  };
  return kCatalogue;
}

struct Alias {
  const char* alias;
  const char* model;
};
constexpr Alias kAliases[] = {
    {"A100", "A100-80GB"},    {"H100", "H100-80GB"},  {"H800", "H800-80GB"},
    {"A800", "A800-80GB"},    {"H200", "H200-141GB"}, {"V100M16", "V100-16GB"},
    {"V100M32", "V100-32GB"}, {"V100", "V100-32GB"},  {"P100", "P100-16GB"},
    {"T4", "T4-16GB"},        {"A10", "A10-24GB"},    {"910B", "Ascend-910B"},
    {"K100", "DCU-K100"},     {"S4000", "MTT-S4000"},
};

}  // namespace

std::string_view VendorName(Vendor v) {
  switch (v) {
    case Vendor::kNvidia:
      return "nvidia";
    case Vendor::kHuawei:
      return "huawei";
    case Vendor::kHygon:
      return "hygon";
    case Vendor::kMooreThreads:
      return "moore-threads";
    case Vendor::kOther:
      return "other";
  }
  return "other";
}

std::string_view BackendName(Backend b) {
  switch (b) {
    case Backend::kCuda:
      return "cuda";
    case Backend::kAscend:
      return "ascend";
    case Backend::kRocm:
      return "rocm";
    case Backend::kMusa:
      return "musa";
  }
  return "cuda";
}

std::vector<std::string> VendorNames() {
  return {"nvidia", "huawei", "hygon", "moore-threads", "other"};
}
std::vector<std::string> BackendNames() { return {"cuda", "ascend", "rocm", "musa"}; }

std::optional<Vendor> ParseVendor(std::string_view s) {
  std::string l = ToLower(s);
  if (l == "nvidia") return Vendor::kNvidia;
  if (l == "huawei" || l == "ascend") return Vendor::kHuawei;
  if (l == "hygon") return Vendor::kHygon;
  if (l == "moore-threads" || l == "mthreads" || l == "moorethreads") return Vendor::kMooreThreads;
  if (l == "other") return Vendor::kOther;
  return std::nullopt;
}

std::optional<Backend> ParseBackend(std::string_view s) {
  std::string l = ToLower(s);
  if (l == "cuda") return Backend::kCuda;
  if (l == "ascend") return Backend::kAscend;
  if (l == "rocm") return Backend::kRocm;
  if (l == "musa") return Backend::kMusa;
  return std::nullopt;
}

Backend DefaultBackend(Vendor v) {
  switch (v) {
    case Vendor::kHuawei:
      return Backend::kAscend;
    case Vendor::kHygon:
      return Backend::kRocm;
    case Vendor::kMooreThreads:
      return Backend::kMusa;
    default:
      return Backend::kCuda;
  }
}

const AcceleratorSpec* FindAccelerator(std::string_view model) {
  std::string want = ToLower(model);
  for (const Alias& a : kAliases) {
    if (ToLower(a.alias) == want) want = ToLower(a.model);
  }
  for (const auto& spec : Catalogue()) {
    if (ToLower(spec.model) == want) return &spec;
  }
  return nullptr;
}

std::vector<std::string> AcceleratorModels() {
  std::vector<std::string> out;
  for (const auto& spec : Catalogue()) out.push_back(spec.model);
  return out;
}

}  // namespace tianshu::model
