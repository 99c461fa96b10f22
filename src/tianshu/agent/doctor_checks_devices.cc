// The doctor's accelerator checks (3: NVML health, the other vendors' tools) and the
// collective-library environment (6).
#include <algorithm>

#include "tianshu/agent/doctor.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

int CountVendor(const std::vector<Accelerator>& list, model::Vendor v, bool declared) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](const Accelerator& a) {
    return a.vendor == v && a.declared == declared;
  }));
}

std::string Numbers(const std::vector<int>& v) {
  std::vector<std::string> parts;
  for (int x : v) parts.push_back(std::to_string(x));
  return Join(parts, ",");
}

std::string LastLine(const std::string& text) {
  auto lines = SplitString(text, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::string l(Trim(*it));
    if (l.empty()) continue;
    if (l.size() <= 160) return l;
    // Cut on a UTF-8 character boundary (never inside a multi-byte sequence).
    size_t cut = 160;
    while (cut > 0 && (static_cast<unsigned char>(l[cut]) & 0xC0) == 0x80) --cut;
    return l.substr(0, cut) + "...";
  }
  return "(no output)";
}

std::string Subject(const GpuHealth& g) {
  return "GPU " + std::to_string(g.index) +
         (g.pci_address.empty() ? "" : " (" + g.pci_address + ")");
}

Finding EccFinding(const GpuHealth& g) {
  std::string i = std::to_string(g.index);
  if (!g.error.empty()) {
    return {"nvidia", Subject(g), CheckStatus::kFail, "NVML cannot open the GPU: " + g.error,
            "the GPU is inaccessible (fallen off the bus?): look for Xid errors in `dmesg | grep "
            "-i xid`, drain the node and reset the GPU (`nvidia-smi -r -i " +
                i + "`) or the node"};
  }
  Finding f{"nvidia", Subject(g), CheckStatus::kOk, g.name.empty() ? "" : g.name + ": ", ""};
  if (!g.ecc_enabled) {
    f.detail += "ECC not supported";
    return f;
  }
  f.detail += std::string("ECC ") + (*g.ecc_enabled ? "enabled" : "disabled");
  if (g.ecc_uncorrected) {
    f.detail += ", " + std::to_string(*g.ecc_uncorrected) + " uncorrected error(s) since boot";
  }
  if (g.ecc_uncorrected && *g.ecc_uncorrected > 0) {
    f.status = CheckStatus::kFail;
    f.fix = "drain the node, inspect `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i " + i +
            "`, reset the GPU (`nvidia-smi -r -i " + i + "`) or have it replaced";
  } else if (!*g.ecc_enabled) {
    f.status = CheckStatus::kWarn;
    f.fix = "enable ECC: `nvidia-smi -i " + i + " -e 1`, then reboot";
  } else if (g.ecc_pending && *g.ecc_pending != *g.ecc_enabled) {
    f.status = CheckStatus::kWarn;
    f.detail += " (changes at the next reboot)";
    f.fix = "reboot the node to apply the pending ECC mode";
  }
  return f;
}

struct VendorTool {
  model::Vendor vendor;
  const char* check;  // finding name
  const char* label;  // for messages
  std::vector<std::string> argv;
  const char* install;
};

const std::vector<VendorTool>& VendorTools() {
  static const std::vector<VendorTool> kTools = {
      {model::Vendor::kHuawei,
       "ascend",
       "Huawei Ascend",
       {"npu-smi", "info"},
       "install the Ascend driver and CANN toolkit (npu-smi is in /usr/local/sbin)"},
      {model::Vendor::kHygon,
       "rocm",
       "ROCm (AMD/Hygon)",
       {"rocm-smi", "--showhw"},
       "install the ROCm/DTK driver stack (rocm-smi is in /opt/rocm/bin)"},
      {model::Vendor::kMooreThreads,
       "musa",
       "Moore Threads",
       {"mthreads-gmi"},
       "install the MUSA driver (mthreads-gmi ships with it)"},
  };
  return kTools;
}

}  // namespace

std::vector<Finding> CheckNvidia(const HostInfo& host, GpuHealthLibrary* nvml,
                                 const std::vector<Accelerator>& declared) {
  const int on_pci = CountVendor(host.accelerators, model::Vendor::kNvidia, false);
  const int decl = CountVendor(declared, model::Vendor::kNvidia, true);
  const int expected = std::max(on_pci, decl);
  std::string sources = std::to_string(on_pci) + " on PCI";
  if (decl > 0) sources += ", " + std::to_string(decl) + " declared";
  Result<std::vector<GpuHealth>> gpus =
      nvml ? nvml->Probe() : Result<std::vector<GpuHealth>>(Fail("NVML not consulted"));
  if (!gpus || gpus->empty()) {
    std::string why = gpus ? "NVML sees no GPU" : gpus.error().message;
    if (expected == 0) {
      return {{"nvidia", "GPUs", CheckStatus::kAbsent, "no NVIDIA GPU (" + why + ")", ""}};
    }
    return {{"nvidia", "GPUs", CheckStatus::kFail,
             std::to_string(expected) + " NVIDIA GPU(s) expected (" + sources + "), but " + why,
             "load the NVIDIA driver so that `nvidia-smi` lists the GPUs (`modprobe nvidia`, "
             "`dmesg | grep -i nvrm`)"}};
  }
  std::vector<Finding> out;
  const int seen = static_cast<int>(gpus->size());
  if (seen < expected) {
    out.push_back({"nvidia", "GPUs", CheckStatus::kFail,
                   "NVML sees " + std::to_string(seen) + " GPU(s), expected " +
                       std::to_string(expected) + " (" + sources + ")",
                   "a GPU is missing: look for Xid / 'fallen off the bus' in `dmesg`, then reset "
                   "or drain the node"});
  } else {
    out.push_back({"nvidia", "GPUs", CheckStatus::kOk,
                   std::to_string(seen) + " GPU(s) through NVML (" + sources + ")", ""});
  }
  for (const GpuHealth& g : *gpus) out.push_back(EccFinding(g));

  // NVLink, as `nvidia-smi nvlink -s` lists it: links that exist, active or not.
  bool any_links = false, any_up = false;
  for (const GpuHealth& g : *gpus) {
    any_links = any_links || !g.nvlinks_up.empty() || !g.nvlinks_down.empty();
    any_up = any_up || !g.nvlinks_up.empty();
  }
  if (!any_links) {
    out.push_back({"nvlink", "GPUs", CheckStatus::kAbsent, "no NVLink links on these GPUs", ""});
    return out;
  }
  if (!any_up) {
    out.push_back({"nvlink", "GPUs", CheckStatus::kWarn,
                   "NVLink links exist but none is active on any GPU",
                   "on NVSwitch systems start the fabric manager (`systemctl start "
                   "nvidia-fabricmanager`); check `nvidia-smi nvlink -s`"});
    return out;
  }
  for (const GpuHealth& g : *gpus) {
    size_t total = g.nvlinks_up.size() + g.nvlinks_down.size();
    if (total == 0) continue;
    std::string count = std::to_string(g.nvlinks_up.size()) + "/" + std::to_string(total) + " up";
    if (g.nvlinks_down.empty()) {
      out.push_back({"nvlink", Subject(g), CheckStatus::kOk, count, ""});
    } else {
      std::string i = std::to_string(g.index);
      out.push_back({"nvlink", Subject(g), CheckStatus::kFail,
                     "link(s) " + Numbers(g.nvlinks_down) + " down (" + count + ")",
                     "inspect `nvidia-smi nvlink -s -i " + i + "` and `nvidia-smi nvlink -e -i " +
                         i +
                         "`; reset the GPU or drain the node for repair (traffic of this "
                         "GPU falls back to slower paths)"});
    }
  }
  return out;
}

std::vector<Finding> CheckVendorTools(const HostInfo& host, CommandRunner* commands,
                                      const std::vector<Accelerator>& declared,
                                      const std::map<std::string, std::string>& env,
                                      int timeout_ms) {
  auto path_it = env.find("PATH");
  const std::string path = path_it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : path_it->second;
  std::vector<Finding> out;
  for (const VendorTool& t : VendorTools()) {
    const int on_pci = CountVendor(host.accelerators, t.vendor, false);
    const int decl = CountVendor(declared, t.vendor, true);
    const int expected = std::max(on_pci, decl);
    std::string sources = std::to_string(on_pci) + " on PCI";
    if (decl > 0) sources += ", " + std::to_string(decl) + " declared";
    const std::string& tool = t.argv.front();
    std::string full = commands ? commands->Which(tool, path) : "";
    if (full.empty()) {
      if (expected == 0) {
        out.push_back({t.check, tool, CheckStatus::kAbsent,
                       std::string("no ") + t.label + " device and no " + tool + " on PATH", ""});
      } else {
        out.push_back({t.check, tool, CheckStatus::kFail,
                       std::to_string(expected) + " " + t.label + " device(s) (" + sources +
                           "), but " + tool + " is not on PATH",
                       t.install});
      }
      continue;
    }
    std::vector<std::string> argv = t.argv;
    argv.front() = full;
    std::string shown = "`" + Join(t.argv, " ") + "`";
    auto ran = commands->Run(argv, timeout_ms);
    Finding f{t.check, tool, CheckStatus::kOk, "", ""};
    // A tool that fails on a node without the devices is a leftover install, not a fault.
    CheckStatus bad = expected > 0 ? CheckStatus::kFail : CheckStatus::kWarn;
    if (!ran) {
      f.status = bad;
      f.detail = shown + " could not run: " + ran.error().message;
      f.fix = "check the permissions of " + full + " or reinstall it";
    } else if (ran->exit_status == 0) {
      f.detail = shown + " exited 0 (" + sources + ")";
    } else {
      f.status = bad;
      f.detail =
          shown +
          (ran->exit_status == 124 ? " timed out after " + std::to_string(timeout_ms / 1000) + " s"
                                   : " exited " + std::to_string(ran->exit_status)) +
          ": " + LastLine(ran->output) + " (" + sources + ")";
      f.fix = "the driver cannot reach the devices: run " + shown +
              " by hand, check `dmesg` and the driver's logs; reload the driver or drain the "
              "node";
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> CheckCollectiveEnv(bool nvidia, bool ascend,
                                        const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return std::string(Trim(it->second));
  };
  std::vector<Finding> out;
  if (nvidia) {
    // PyTorch reads TORCH_NCCL_ASYNC_ERROR_HANDLING (2.2+) before the older name. 1 tears the
    // process down on a NCCL error or timeout, so the gang restarts instead of hanging; 3
    // (PyTorch's later default) also tears down, without aborting communicators first.
    const char* name = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
    auto v = get(name);
    if (!v) {
      name = "NCCL_ASYNC_ERROR_HANDLING";
      v = get(name);
    }
    if (v && (*v == "1" || *v == "3")) {
      out.push_back({"env", "NCCL", CheckStatus::kOk, std::string(name) + "=" + *v, ""});
    } else {
      out.push_back({"env", "NCCL", CheckStatus::kWarn,
                     v ? std::string(name) + "=" + *v + ": NCCL errors may hang the job"
                       : "TORCH_NCCL_ASYNC_ERROR_HANDLING and NCCL_ASYNC_ERROR_HANDLING are unset",
                     "set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (and NCCL_ASYNC_ERROR_HANDLING=1 for "
                     "older PyTorch) in the jobs' environment, so a failed collective ends the "
                     "rank and the gang restarts"});
    }
  }
  if (ascend) {
    // HCCL waits this many seconds for all ranks to connect; large jobs start slower than that.
    constexpr int64_t kMinTimeout = 120;
    auto v = get("HCCL_CONNECT_TIMEOUT");
    int64_t s = 0;
    if (v && ParseInt64(*v, &s) && s >= kMinTimeout) {
      out.push_back({"env", "HCCL", CheckStatus::kOk, "HCCL_CONNECT_TIMEOUT=" + *v, ""});
    } else {
      out.push_back(
          {"env", "HCCL", CheckStatus::kWarn,
           v ? "HCCL_CONNECT_TIMEOUT=" + *v + " (below 120 s)" : "HCCL_CONNECT_TIMEOUT is unset",
           "set HCCL_CONNECT_TIMEOUT=1200 (at least 120) in the jobs' environment so "
           "large gangs finish connecting"});
    }
  }
  if (out.empty()) {
    out.push_back({"env", "collectives", CheckStatus::kAbsent,
                   "no NVIDIA or Ascend device: no NCCL/HCCL settings to check", ""});
  }
  return out;
}

}  // namespace tianshu::agent
