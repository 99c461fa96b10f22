#include "tianshu/agent/discovery.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::string ReadTrim(SystemFiles& fs, const std::string& path) {
  auto r = fs.Read(path);
  return r ? std::string(Trim(*r)) : std::string();
}

int64_t ReadInt(SystemFiles& fs, const std::string& path, int64_t fallback) {
  int64_t v = 0;
  std::string s = ReadTrim(fs, path);
  return ParseInt64(s, &v) ? v : fallback;
}

bool IsPciAddress(std::string_view s) {
  // dddd:bb:dd.f
  return s.size() == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.';
}

// PCI addresses along a sysfs device path, root first.
std::vector<std::string> PciChain(const std::string& link) {
  std::vector<std::string> out;
  for (const auto& part : SplitString(link, '/')) {
    if (IsPciAddress(part)) out.push_back(part);
  }
  return out;
}

std::string LastPci(SystemFiles& fs, const std::string& path) {
  auto link = fs.ReadLink(path);
  if (!link) return "";
  auto chain = PciChain(*link);
  return chain.empty() ? "" : chain.back();
}

int64_t MemTotalKb(const std::string& meminfo) {
  for (const auto& line : SplitString(meminfo, '\n')) {
    auto pos = line.find("MemTotal:");
    if (pos == std::string::npos) continue;
    std::string rest(Trim(line.substr(pos + 9)));
    auto sp = rest.find(' ');
    int64_t kb = 0;
    if (ParseInt64(rest.substr(0, sp), &kb)) return kb;
  }
  return 0;
}

std::string PciKind(const std::string& vendor, const std::string& cls) {
  std::string c = cls.size() >= 6 ? cls.substr(0, 6) : cls;  // 0xCCSS
  if (c == "0x0300" || c == "0x0302" || c == "0x0380") {
    return vendor == "0x10de" || vendor == "0x1002" || vendor == "0x1d94" || vendor == "0x1ed5"
               ? "gpu"
               : "display";
  }
  if (c == "0x1200") return "accelerator";
  if (c == "0x0200" || c == "0x0207") return "nic";
  if (cls.rfind("0x010802", 0) == 0) return "nvme";
  if (c == "0x0604") return "bridge";
  return "other";
}

model::Vendor VendorOfPci(const std::string& vendor) {
  if (vendor == "0x10de") return model::Vendor::kNvidia;
  if (vendor == "0x19e5") return model::Vendor::kHuawei;
  if (vendor == "0x1d94") return model::Vendor::kHygon;
  if (vendor == "0x1ed5") return model::Vendor::kMooreThreads;
  return model::Vendor::kOther;
}

void SysfsCpu(SystemFiles& fs, HostInfo* h) {
  std::vector<int> online = ParseCpuList(ReadTrim(fs, "/sys/devices/system/cpu/online"));
  h->cpus = static_cast<int>(online.size());
  std::map<std::pair<int64_t, int64_t>, int> cores;
  std::map<int64_t, int> sockets;
  for (int cpu : online) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int64_t pkg = ReadInt(fs, base + "physical_package_id", 0);
    int64_t core = ReadInt(fs, base + "core_id", cpu);
    cores[{pkg, core}] = 1;
    sockets[pkg] = 1;
  }
  h->cores = static_cast<int>(cores.size());
  h->sockets = static_cast<int>(sockets.size());
  if (auto info = fs.Read("/proc/cpuinfo")) {
    for (const auto& line : SplitString(*info, '\n')) {
      if (StartsWith(line, "model name")) {
        auto pos = line.find(':');
        if (pos != std::string::npos) h->cpu_model = std::string(Trim(line.substr(pos + 1)));
        break;
      }
    }
  }
  if (auto mi = fs.Read("/proc/meminfo")) h->memory_bytes = MemTotalKb(*mi) * 1024;
  if (auto nodes = fs.List("/sys/devices/system/node")) {
    for (const auto& n : *nodes) {
      int64_t id = 0;
      if (!StartsWith(n, "node") || !ParseInt64(n.substr(4), &id)) continue;
      NumaNode node;
      node.id = static_cast<int>(id);
      std::string base = "/sys/devices/system/node/" + n;
      node.cpus = ParseCpuList(ReadTrim(fs, base + "/cpulist"));
      if (auto mi = fs.Read(base + "/meminfo")) node.memory_bytes = MemTotalKb(*mi) * 1024;
      h->numa_nodes.push_back(std::move(node));
    }
  }
  if (h->numa_nodes.empty()) h->numa_nodes.push_back({0, online, h->memory_bytes});
}

void SysfsPci(SystemFiles& fs, HostInfo* h) {
  auto devs = fs.List("/sys/bus/pci/devices");
  if (!devs) {
    h->notes.push_back("PCI: " + devs.error().message);
    return;
  }
  for (const auto& addr : *devs) {
    std::string base = "/sys/bus/pci/devices/" + addr;
    PciDevice d;
    d.address = addr;
    d.vendor_id = ReadTrim(fs, base + "/vendor");
    d.device_id = ReadTrim(fs, base + "/device");
    d.class_id = ReadTrim(fs, base + "/class");
    d.numa = static_cast<int>(ReadInt(fs, base + "/numa_node", -1));
    if (auto link = fs.ReadLink(base)) {
      auto chain = PciChain(*link);
      if (chain.size() >= 2) d.parent_bridge = chain[chain.size() - 2];
    }
    d.kind = PciKind(d.vendor_id, d.class_id);
    h->pci.push_back(std::move(d));
  }
}

int PciNuma(const HostInfo& h, const std::string& addr) {
  for (const auto& d : h.pci) {
    if (d.address == addr) return d.numa;
  }
  return -1;
}

void SysfsNet(SystemFiles& fs, HostInfo* h) {
  auto names = fs.List("/sys/class/net");
  if (!names) return;
  for (const auto& n : *names) {
    std::string base = "/sys/class/net/" + n;
    NetInterface nic;
    nic.name = n;
    nic.pci_address = LastPci(fs, base);
    nic.is_virtual = !fs.Exists(base + "/device");
    nic.speed_mbps = std::max<int64_t>(0, ReadInt(fs, base + "/speed", 0));
    nic.mac = ReadTrim(fs, base + "/address");
    nic.numa = PciNuma(*h, nic.pci_address);
    h->nics.push_back(std::move(nic));
  }
}

void SysfsRdma(SystemFiles& fs, HostInfo* h) {
  auto names = fs.List("/sys/class/infiniband");
  if (!names) {
    h->notes.push_back("RDMA: no /sys/class/infiniband (no RDMA devices or driver)");
    return;
  }
  for (const auto& n : *names) {
    std::string base = "/sys/class/infiniband/" + n;
    RdmaDevice d;
    d.name = n;
    d.pci_address = LastPci(fs, base);
    d.numa = PciNuma(*h, d.pci_address);
    if (auto ports = fs.List(base + "/ports")) {
      d.ports = static_cast<int>(ports->size());
      if (!ports->empty()) {
        std::string p = base + "/ports/" + ports->front();
        d.link_layer = ReadTrim(fs, p + "/link_layer");
        std::string rate = ReadTrim(fs, p + "/rate");  // "100 Gb/sec (4X EDR)"
        int64_t g = 0;
        if (ParseInt64(rate.substr(0, rate.find(' ')), &g)) d.rate_gbps = g;
      }
    }
    if (auto nets = fs.List(base + "/device/net")) d.netdevs = *nets;
    h->rdma.push_back(std::move(d));
  }
}

void SysfsBlock(SystemFiles& fs, HostInfo* h) {
  auto names = fs.List("/sys/block");
  if (!names) return;
  for (const auto& n : *names) {
    if (StartsWith(n, "loop") || StartsWith(n, "ram") || StartsWith(n, "zram") ||
        StartsWith(n, "dm-")) {
      continue;
    }
    std::string base = "/sys/block/" + n;
    BlockDevice b;
    b.name = n;
    b.dev = ReadTrim(fs, base + "/dev");
    b.size_bytes = ReadInt(fs, base + "/size", 0) * 512;
    b.rotational = ReadInt(fs, base + "/queue/rotational", 0) == 1;
    b.nvme = StartsWith(n, "nvme");
    b.model = ReadTrim(fs, base + "/device/model");
    b.pci_address = LastPci(fs, base);
    b.numa = PciNuma(*h, b.pci_address);
    h->block_devices.push_back(std::move(b));
  }
  bool any_nvme = std::any_of(h->block_devices.begin(), h->block_devices.end(),
                              [](const BlockDevice& b) { return b.nvme; });
  if (!any_nvme) {
    h->notes.push_back(
        "NVMe: no NVMe block device; checkpoint I/O limits apply to " +
        (h->block_devices.empty() ? std::string("nothing") : h->block_devices.front().name));
  } else {
    h->notes.push_back(
        "NVMe namespace management: not probed (needs an admin identify); per-job namespaces "
        "are planned, not applied");
  }
}

void PciAccelerators(SystemFiles& fs, HostInfo* h) {
  int index = 0;
  for (const auto& d : h->pci) {
    if (d.kind != "gpu" && d.kind != "accelerator") continue;
    model::Vendor v = VendorOfPci(d.vendor_id);
    if (v == model::Vendor::kOther && d.vendor_id != "0x1002") continue;
    Accelerator a;
    a.index = index++;
    a.vendor = v == model::Vendor::kOther ? model::Vendor::kHygon : v;  // AMD -> ROCm backend
    a.name = "pci " + d.vendor_id + ":" + d.device_id;
    a.pci_address = d.address;
    a.numa = d.numa;
    a.source = "pci";
    switch (a.vendor) {
      case model::Vendor::kNvidia:
        a.device_node = "/dev/nvidia" + std::to_string(a.index);
        break;
      case model::Vendor::kHuawei:
        a.device_node = "/dev/davinci" + std::to_string(a.index);
        break;
      default:
        break;
    }
    h->accelerators.push_back(std::move(a));
  }
  (void)fs;
}

}  // namespace

std::vector<int> ParseCpuList(std::string_view text) {
  std::vector<int> out;
  for (const auto& part : SplitString(Trim(text), ',')) {
    if (part.empty()) continue;
    auto dash = part.find('-');
    int64_t a = 0, b = 0;
    if (dash == std::string::npos) {
      if (ParseInt64(part, &a)) out.push_back(static_cast<int>(a));
    } else if (ParseInt64(part.substr(0, dash), &a) && ParseInt64(part.substr(dash + 1), &b)) {
      for (int64_t i = a; i <= b; ++i) out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<int> c = cpus;
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  std::string out;
  for (size_t i = 0; i < c.size();) {
    size_t j = i;
    while (j + 1 < c.size() && c[j + 1] == c[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(c[i]);
    if (j > i) out += "-" + std::to_string(c[j]);
    i = j + 1;
  }
  return out;
}

std::string MatchCatalogueModel(std::string_view name, int64_t memory_bytes) {
  std::string upper;
  for (char ch : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string best;
  int64_t best_diff = -1;
  for (const std::string& m : model::AcceleratorModels()) {
    const model::AcceleratorSpec* spec = model::FindAccelerator(m);
    if (!spec || spec->vendor == model::Vendor::kOther) continue;
    std::string base = m.substr(0, m.find('-'));  // "H200", "Ascend"
    if (base == "Ascend" || base == "DCU" || base == "MTT") base = m.substr(m.find('-') + 1);
    std::string ub;
    for (char ch : base) ub += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (upper.find(ub) == std::string::npos) continue;
    int64_t diff = memory_bytes > 0 ? std::abs(spec->memory_bytes - memory_bytes) : 0;
    if (best.empty() || diff < best_diff) {
      best = m;
      best_diff = diff;
    }
  }
  return best;
}

Result<std::vector<Accelerator>> ParseDeclaredDevices(std::string_view text) {
  std::vector<Accelerator> out;
  for (const auto& raw : SplitString(text, ',')) {
    std::string part(Trim(raw));
    if (part.empty()) continue;
    auto x = part.find_first_of("xX");
    int64_t count = 0;
    if (x == std::string::npos || !ParseInt64(part.substr(0, x), &count) || count <= 0 ||
        count > 64) {
      return Fail("--devices: '", part, "' is not COUNTxMODEL (e.g. 8xA100-80GB)");
    }
    std::string model_name = part.substr(x + 1);
    const model::AcceleratorSpec* spec = model::FindAccelerator(model_name);
    if (!spec) {
      std::string near = NearestWord(model_name, model::AcceleratorModels());
      return Fail("--devices: unknown accelerator '", model_name, "'",
                  near.empty() ? std::string() : "; did you mean '" + near + "'?");
    }
    for (int64_t i = 0; i < count; ++i) {
      Accelerator a;
      a.index = static_cast<int>(out.size());
      a.model = spec->model;
      a.name = spec->model;
      a.vendor = spec->vendor;
      a.memory_bytes = spec->memory_bytes;
      a.uuid = "declared-" + std::to_string(a.index);
      a.source = "declared";
      a.declared = true;
      if (spec->mig_capable) a.mig_enabled = false;
      out.push_back(std::move(a));
    }
  }
  if (out.empty()) return Fail("--devices: nothing declared");
  return out;
}

int HostInfo::NumaOfAccelerator(int index) const {
  for (const auto& a : accelerators) {
    if (a.index == index) return a.numa;
  }
  return -1;
}

Result<HostInfo> Discover(SystemFiles& fs, const DiscoveryProbes& probes,
                          const DiscoveryOptions& options) {
  HostInfo h;
  h.hostname =
      options.hostname.empty() ? ReadTrim(fs, "/proc/sys/kernel/hostname") : options.hostname;
  h.kernel = ReadTrim(fs, "/proc/sys/kernel/osrelease");
  SysfsCpu(fs, &h);
  SysfsPci(fs, &h);
  h.sources.push_back("sysfs");
  if (probes.cpu) {
    HostInfo copy = h;
    if (Status s = probes.cpu->Fill(&copy); s) {
      h = std::move(copy);
      h.sources.push_back(std::string(probes.cpu->Name()));
    } else {
      h.notes.push_back(std::string(probes.cpu->Name()) + ": " + s.error().message);
    }
  }
  SysfsNet(fs, &h);
  SysfsRdma(fs, &h);
  SysfsBlock(fs, &h);

  // cgroup mode, as the isolation layer will pick it.
  std::string mounts = ReadTrim(fs, "/proc/mounts");
  bool v1 = mounts.find(" cgroup ") != std::string::npos;
  bool v2 = false;
  for (const auto& line : SplitString(mounts, '\n')) {
    auto f = SplitString(line, ' ');
    if (f.size() >= 3 && f[2] == "cgroup2") {
      std::string ctl = ReadTrim(fs, f[1] + "/cgroup.controllers");
      if (ctl.find("memory") != std::string::npos && ctl.find("cpuset") != std::string::npos) {
        v2 = true;
      }
    }
  }
  h.cgroup_mode = v2 ? "v2" : v1 ? "v1" : "none";

  if (!options.declared_devices.empty()) {
    auto declared = ParseDeclaredDevices(options.declared_devices);
    if (!declared) return std::unexpected(declared.error());
    h.accelerators = std::move(*declared);
    h.declared_accelerators = true;
    h.sources.push_back("declared");
    h.notes.push_back("accelerators are declared with --devices, not found on this host");
    return h;
  }
  bool have = false;
  if (probes.nvml) {
    auto gpus = probes.nvml->Probe();
    if (gpus && !gpus->empty()) {
      for (auto& a : *gpus) {
        if (a.numa < 0) a.numa = PciNuma(h, a.pci_address);
      }
      h.accelerators = std::move(*gpus);
      h.sources.push_back(std::string(probes.nvml->Name()));
      have = true;
    } else {
      h.notes.push_back(gpus ? std::string(probes.nvml->Name()) + ": no devices"
                             : gpus.error().message);
    }
  }
  if (!have) {
    PciAccelerators(fs, &h);
    if (h.accelerators.empty()) {
      h.notes.push_back(
          "accelerators: none found (no NVIDIA/Ascend/Hygon/AMD/Moore Threads PCI "
          "device); declare some with --devices for testing");
    } else {
      h.notes.push_back(
          "accelerators: from PCI ids only (vendor library absent); memory and "
          "partitions unknown");
    }
  }
  (void)kGiB;
  return h;
}

}  // namespace tianshu::agent
