#include "tianshu/comm/internal/link_paths.h"

#include <bit>
#include <vector>

#include "tianshu/comm/bandwidth_matrix.h"

namespace tianshu::comm::internal {

IntraPath ClassifyLocal(const model::ServerType& t, uint64_t mask) {
  IntraPath p;
  int count = std::popcount(mask);
  if (count <= 1) return p;
  const double lat = static_cast<double>(t.intra_latency_ns) * 1e-9;
  const double pcie =
      t.pcie_bandwidth.IsZero() ? K().fallback_pcie_gbytes * 1e9 : t.pcie_bandwidth.BytesPerSec();
  int first = std::countr_zero(mask);
  bool same_island = true, same_switch = true, same_numa = true;
  for (uint64_t m = mask; m; m &= m - 1) {
    int g = std::countr_zero(m);
    if (t.NvlinkIsland(g) != t.NvlinkIsland(first)) same_island = false;
    auto at = [](const std::vector<int>& v, int i) {
      return i < static_cast<int>(v.size()) ? v[i] : 0;
    };
    if (at(t.gpu_pcie_switch, g) != at(t.gpu_pcie_switch, first)) same_switch = false;
    if (at(t.gpu_numa, g) != at(t.gpu_numa, first)) same_numa = false;
  }
  bool nvlink = t.intra_kind == model::IntraNodeKind::kNvSwitch ||
                (t.intra_kind == model::IntraNodeKind::kNvLink && same_island);
  if (nvlink && !t.intra_bandwidth.IsZero()) {
    p.cls = LinkClass::kNvLink;
    p.bytes_per_sec = t.intra_bandwidth.BytesPerSec();
    p.hop_latency_s = lat > 0 ? lat : Us(K().nvlink_hop_us);
    return p;
  }
  p.hop_latency_s = std::max(lat, Us(K().pcie_hop_us));
  if (same_switch) {
    p.cls = LinkClass::kPcieSwitch;
    p.bytes_per_sec = pcie;
  } else {
    p.cls = LinkClass::kPcieHost;
    p.bytes_per_sec = pcie * (same_numa ? K().host_bridge_factor : K().cross_numa_factor);
  }
  return p;
}

double NicBytes(const model::ServerType& t, uint64_t nic_mask) {
  if (t.nics.empty()) return K().fallback_nic_gbytes * 1e9;
  double sum = 0;
  for (uint64_t m = nic_mask; m; m &= m - 1) {
    int i = std::countr_zero(m);
    if (i < static_cast<int>(t.nics.size())) sum += t.nics[i].bandwidth.BytesPerSec();
  }
  return sum;
}

LinkClass NetClass(int tier) {
  switch (tier) {
    case 0:
      return LinkClass::kNicLeaf;
    case 1:
      return LinkClass::kLeafSpine;
    default:
      return LinkClass::kSpineCore;
  }
}

double NetHopSeconds(const model::Topology& topo, int tier) {
  double s = Us(K().nic_hop_us);
  const int T = static_cast<int>(topo.tiers.size());
  for (int i = 0; i < std::min(tier, T); ++i)
    s += 2e-9 * static_cast<double>(topo.tiers[i].latency_ns);
  if (tier >= 0 && tier < T) s += 1e-9 * static_cast<double>(topo.tiers[tier].latency_ns);
  return s;
}

PairPath Pair(const model::Topology& topo, int a, int b, int na, int nb, const CostOptions& o) {
  PairPath pp{LinkClass::kSameDevice, 0, 0};
  if (a == b) {
    const auto& t = topo.TypeOf(na);
    pp.bytes_per_sec = t.accelerator.hbm_bandwidth.BytesPerSec() / 2;
    if (pp.bytes_per_sec <= 0) pp.bytes_per_sec = 1e12;
    return pp;
  }
  if (na == nb) {
    const auto& t = topo.TypeOf(na);
    int la = a - topo.nodes[na].first_gpu, lb = b - topo.nodes[na].first_gpu;
    uint64_t mask = (la < 64 ? uint64_t{1} << la : 0) | (lb < 64 ? uint64_t{1} << lb : 0);
    IntraPath ip = ClassifyLocal(t, mask);
    double eff = ip.cls == LinkClass::kNvLink ? K().p2p_nvlink_efficiency : K().pcie_efficiency;
    pp = {ip.cls, ip.bytes_per_sec * eff, ip.hop_latency_s};
    if (o.measured) {
      if (auto v = o.measured->GpuPair(a, b)) pp.bytes_per_sec = *v;
    }
    return pp;
  }
  const auto& ta = topo.TypeOf(na);
  const auto& tb = topo.TypeOf(nb);
  auto nic_bw = [&](const model::ServerType& t, int local) {
    int i = NicOf(t, local);
    return i < 0 ? K().fallback_nic_gbytes * 1e9 : t.nics[i].bandwidth.BytesPerSec();
  };
  double bw =
      std::min(nic_bw(ta, a - topo.nodes[na].first_gpu), nic_bw(tb, b - topo.nodes[nb].first_gpu)) *
      K().net_efficiency;
  int tier = topo.CommonTier(na, nb);
  if (o.contended) {
    // Every NIC below the crossed uplinks is busy too: the flow gets 1/oversubscription of
    // each tier it climbs through.
    for (int t = 0; t < tier && t < static_cast<int>(topo.tiers.size()); ++t) {
      bw /= std::max(1.0, topo.tiers[t].oversubscription);
    }
  }
  pp = {NetClass(tier), bw, NetHopSeconds(topo, tier)};
  if (o.measured) {
    if (auto v = o.measured->GpuPair(a, b)) {
      pp.bytes_per_sec = *v;
    } else if (auto w = o.measured->NodePair(na, nb)) {
      double nics = static_cast<double>(std::max<size_t>(1, ta.nics.size()));
      pp.bytes_per_sec = *w / nics;
    }
  }
  return pp;
}

}  // namespace tianshu::comm::internal
