// The doctor's network checks: RDMA ports (1), NIC link and MTU (2), GPU-NIC NUMA affinity (4).
#include <algorithm>
#include <map>

#include "tianshu/agent/doctor.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

constexpr char kIbRoot[] = "/sys/class/infiniband";
constexpr char kNetRoot[] = "/sys/class/net";
// RoCE carries a 4096-byte RDMA MTU plus headers: the netdev needs at least 4200 bytes
// (NVIDIA's RoCE configuration guide), else the RDMA MTU drops to 1024 or 2048.
constexpr int64_t kRoceMinMtu = 4200;
constexpr int64_t kEthernetMtu = 1500;

std::string Text(SystemFiles& fs, const std::string& path) {
  auto r = fs.Read(path);
  return r ? std::string(Trim(*r)) : std::string();
}

// "4: ACTIVE" -> {4, "ACTIVE"}; {-1, text} when there is no number.
std::pair<int64_t, std::string> CodedValue(const std::string& text) {
  auto colon = text.find(':');
  int64_t code = -1;
  if (colon == std::string::npos || !ParseInt64(Trim(text.substr(0, colon)), &code)) {
    return {-1, text};
  }
  return {code, std::string(Trim(text.substr(colon + 1)))};
}

// ibstat's words for the logical port state (IBA spec 14.2.5.6 PortInfo:PortState).
std::string IbstatState(int64_t code, const std::string& raw) {
  switch (code) {
    case 1:
      return "Down";
    case 2:
      return "Initializing";
    case 3:
      return "Armed";
    case 4:
      return "Active";
    case 5:
      return "Active defer";
    default:
      return raw.empty() ? "unknown" : raw;
  }
}

// Why a port is not active and what to do, from the state pair.
std::string PortFix(const std::string& dev, const std::string& port, int64_t state, int64_t phys,
                    const std::string& link_layer) {
  std::string where = "`ibstat " + dev + " " + port + "`";
  if (phys == 5 && state == 2 && link_layer != "Ethernet") {
    return "link is up but not configured: no subnet manager reached this port; check that "
           "opensm (or the switch's SM) runs (`sminfo`), then " +
           where;
  }
  if (phys == 3) return "the port is disabled: enable it on the switch side, then " + where;
  if (phys == 2 || phys == 1) {
    return "no physical link: reseat or replace the cable/transceiver and check the switch "
           "port (`mlxlink -d " +
           dev + "`), then " + where;
  }
  if (link_layer == "Ethernet") {
    return "RoCE port down: bring its netdev up (`ip link set dev <if> up`) and check the "
           "switch port, then " +
           where;
  }
  return "check the cable, the switch port and " + where;
}

// netdev -> {RDMA device, link layer of its first port}, from /sys/class/infiniband/*/device/net.
std::map<std::string, std::pair<std::string, std::string>> RdmaNetdevs(SystemFiles& fs) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  auto devs = fs.List(kIbRoot);
  if (!devs) return out;
  for (const auto& d : *devs) {
    std::string base = std::string(kIbRoot) + "/" + d;
    std::string layer;
    if (auto ports = fs.List(base + "/ports"); ports && !ports->empty()) {
      layer = Text(fs, base + "/ports/" + ports->front() + "/link_layer");
    }
    if (auto nets = fs.List(base + "/device/net")) {
      for (const auto& n : *nets) out[n] = {d, layer};
    }
  }
  return out;
}

std::string Speed(int64_t mbps) {
  if (mbps <= 0) return "speed unknown";
  if (mbps % 1000 == 0) return "speed " + std::to_string(mbps / 1000) + " Gb/s";
  return "speed " + std::to_string(mbps) + " Mb/s";
}

const PciDevice* FindPci(const HostInfo& host, const std::string& address) {
  for (const auto& d : host.pci) {
    if (d.address == address) return &d;
  }
  return nullptr;
}

// Both behind the same PCIe switch port (or bridge): GPUDirect RDMA stays off the root complex.
bool SameSwitch(const HostInfo& host, const std::string& a, const std::string& b) {
  const PciDevice* pa = FindPci(host, a);
  const PciDevice* pb = FindPci(host, b);
  return pa && pb && !pa->parent_bridge.empty() && pa->parent_bridge == pb->parent_bridge;
}

}  // namespace

std::vector<Finding> CheckRdmaPorts(SystemFiles& fs, bool expect_rdma) {
  auto devs = fs.List(kIbRoot);
  if (!devs || devs->empty()) {
    if (expect_rdma) {
      return {{"rdma", "RDMA devices", CheckStatus::kFail,
               "no device under /sys/class/infiniband, but --expect-rdma was given",
               "load the RDMA driver (`modprobe mlx5_ib`), install the NIC firmware/OFED, then "
               "`ibv_devices` must list the adapters"}};
    }
    return {{"rdma", "RDMA devices", CheckStatus::kAbsent,
             "no /sys/class/infiniband devices (no RDMA adapter or driver)", ""}};
  }
  std::vector<Finding> out;
  for (const auto& dev : *devs) {
    std::string base = std::string(kIbRoot) + "/" + dev + "/ports";
    auto ports = fs.List(base);
    if (!ports || ports->empty()) {
      out.push_back({"rdma", dev, CheckStatus::kFail, "no ports under " + base,
                     "the driver did not bring up the adapter: check `dmesg | grep " + dev +
                         "` and the firmware"});
      continue;
    }
    for (const auto& port : *ports) {
      std::string p = base + "/" + port + "/";
      auto [state, state_raw] = CodedValue(Text(fs, p + "state"));
      auto [phys, phys_raw] = CodedValue(Text(fs, p + "phys_state"));
      std::string rate = Text(fs, p + "rate");  // "200 Gb/sec (4X HDR)"
      std::string layer = Text(fs, p + "link_layer");
      std::string detail =
          "State: " + IbstatState(state, state_raw) +
          ", Physical state: " + (phys_raw.empty() ? "unknown" : phys_raw) +
          ", Rate: " + (rate.empty() ? "unknown" : rate.substr(0, rate.find(' '))) +
          ", Link layer: " + (layer.empty() ? "unknown" : layer);
      bool healthy = state == 4 && phys == 5;
      out.push_back({"rdma", dev + " port " + port, healthy ? CheckStatus::kOk : CheckStatus::kFail,
                     detail, healthy ? "" : PortFix(dev, port, state, phys, layer)});
    }
  }
  return out;
}

std::vector<Finding> CheckNics(SystemFiles& fs) {
  auto names = fs.List(kNetRoot);
  if (!names) {
    return {{"nic", "network interfaces", CheckStatus::kAbsent, "no /sys/class/net", ""}};
  }
  auto rdma = RdmaNetdevs(fs);
  std::vector<Finding> out;
  for (const auto& n : *names) {
    std::string base = std::string(kNetRoot) + "/" + n;
    // Virtual interfaces (bridges, veths, bonds' masters, ifb, lo) have no `device` link.
    if (n == "lo" || !fs.Exists(base + "/device")) continue;
    std::string oper = Text(fs, base + "/operstate");
    int64_t mtu = 0, speed = 0;
    bool has_mtu = ParseInt64(Text(fs, base + "/mtu"), &mtu);
    if (!ParseInt64(Text(fs, base + "/speed"), &speed)) speed = -1;
    auto r = rdma.find(n);
    bool backs_rdma = r != rdma.end();
    bool roce = backs_rdma && r->second.second == "Ethernet";
    std::string detail = "operstate " + (oper.empty() ? std::string("unknown") : oper) + ", mtu " +
                         (has_mtu ? std::to_string(mtu) : std::string("unknown")) + ", " +
                         Speed(speed);
    if (backs_rdma) {
      detail += ", backs " + r->second.first + (roce ? " (RoCE)" : " (IPoIB)");
    }
    Finding f{"nic", n, CheckStatus::kOk, detail, ""};
    if (oper != "up" && backs_rdma) {
      f.status = oper == "down" ? CheckStatus::kFail : CheckStatus::kWarn;
      f.fix = "the interface under " + r->second.first + " is " + (oper.empty() ? "?" : oper) +
              ": `ip link set dev " + n + " up`, then check the cable and the switch port";
    } else if (oper == "down") {
      f.detail += " (not used for RDMA)";
    } else if (roce && has_mtu && mtu < kRoceMinMtu) {
      f.status = CheckStatus::kWarn;
      f.fix = "RoCE needs MTU >= 4200 for a 4096-byte RDMA MTU: `ip link set dev " + n +
              " mtu 4200` (or 9000, matching the switch)";
    } else if (has_mtu && mtu < kEthernetMtu) {
      f.status = CheckStatus::kWarn;
      f.fix = "MTU " + std::to_string(mtu) + " is below Ethernet's 1500: if the network allows, " +
              "`ip link set dev " + n + " mtu 1500`; else expect lower TCP throughput";
    }
    out.push_back(std::move(f));
  }
  if (out.empty()) {
    out.push_back({"nic", "network interfaces", CheckStatus::kAbsent,
                   "no physical NIC (only lo and virtual interfaces)", ""});
  }
  return out;
}

std::vector<Finding> CheckAffinity(const HostInfo& host) {
  std::vector<const Accelerator*> accels;
  for (const auto& a : host.accelerators) {
    if (!a.declared && !a.pci_address.empty()) accels.push_back(&a);
  }
  if (accels.empty()) {
    return {{"affinity", "accelerators", CheckStatus::kAbsent,
             "no accelerator on the PCI bus to place next to a NIC", ""}};
  }
  std::vector<const NetInterface*> nics;
  for (const auto& n : host.nics) {
    if (!n.is_virtual && !n.pci_address.empty()) nics.push_back(&n);
  }
  if (host.rdma.empty() && nics.empty()) {
    return {{"affinity", "accelerators", CheckStatus::kAbsent, "no RDMA device and no physical NIC",
             ""}};
  }
  if (host.numa_nodes.size() <= 1) {
    return {{"affinity", "accelerators", CheckStatus::kOk,
             "one NUMA node: every NIC is local to every accelerator", ""}};
  }
  std::vector<Finding> out;
  const bool by_rdma = !host.rdma.empty();
  for (const Accelerator* a : accels) {
    std::string subject = "accelerator " + std::to_string(a->index) + " (" + a->pci_address + ")";
    if (a->numa < 0) {
      out.push_back({"affinity", subject, CheckStatus::kWarn,
                     "the kernel does not know its NUMA node (numa_node -1)",
                     "enable NUMA/ACPI SRAT reporting in the firmware so ranks can be pinned "
                     "next to their device"});
      continue;
    }
    std::vector<std::string> local, remote;
    if (by_rdma) {
      for (const auto& r : host.rdma) {
        std::string name = r.name;
        if (SameSwitch(host, a->pci_address, r.pci_address)) name += " (same PCIe switch)";
        (r.numa == a->numa ? local : remote).push_back(name);
      }
    } else {
      for (const NetInterface* n : nics) {
        (n->numa == a->numa ? local : remote).push_back(n->name);
      }
    }
    std::string what = by_rdma ? "RDMA NIC" : "NIC";
    std::string numa = "NUMA " + std::to_string(a->numa);
    if (!local.empty()) {
      out.push_back({"affinity", subject, CheckStatus::kOk, numa + ": " + Join(local, ", "), ""});
    } else {
      out.push_back(
          {"affinity", subject, CheckStatus::kWarn,
           numa + ": no " + what + " on this NUMA node (" + Join(remote, ", ") + " elsewhere)",
           "traffic of this device crosses the CPU interconnect: check the PCIe "
           "layout (`nvidia-smi topo -m` / `lstopo`) and move a NIC to this socket"});
    }
  }
  return out;
}

}  // namespace tianshu::agent
