#include "tianshu/comm/cost_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "tianshu/base/strings.h"
#include "tianshu/comm/bandwidth_matrix.h"
#include "tianshu/comm/constants.h"

namespace tianshu::comm {

std::string_view LinkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kSameDevice:
      return "same-device";
    case LinkClass::kNvLink:
      return "nvlink";
    case LinkClass::kPcieSwitch:
      return "pcie-switch";
    case LinkClass::kPcieHost:
      return "pcie-host";
    case LinkClass::kNicLeaf:
      return "nic-leaf";
    case LinkClass::kLeafSpine:
      return "leaf-spine";
    case LinkClass::kSpineCore:
      return "spine-core";
  }
  return "?";
}

std::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "allreduce";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reducescatter";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

std::string_view AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kNvls:
      return "nvls";
  }
  return "?";
}

std::optional<Algorithm> ParseAlgorithm(std::string_view s) {
  std::string l = ToLower(s);
  if (l == "auto") return Algorithm::kAuto;
  if (l == "ring") return Algorithm::kRing;
  if (l == "tree") return Algorithm::kTree;
  if (l == "hierarchical") return Algorithm::kHierarchical;
  if (l == "nvls") return Algorithm::kNvls;
  return std::nullopt;
}

std::string_view ProtocolName(Protocol p) {
  switch (p) {
    case Protocol::kLL:
      return "LL";
    case Protocol::kLL128:
      return "LL128";
    case Protocol::kSimple:
      return "Simple";
  }
  return "?";
}

int NodeOfGpu(const model::Topology& topo, int gpu) {
  const auto& nodes = topo.nodes;
  if (nodes.empty() || gpu < 0 || gpu >= topo.NumGpus()) return -1;
  // Nodes are numbered in first_gpu order by Topology::Finalize.
  auto it = std::upper_bound(nodes.begin(), nodes.end(), gpu,
                             [](int g, const model::Node& n) { return g < n.first_gpu; });
  return static_cast<int>(it - nodes.begin()) - 1;
}

bool HasNvls(const model::ServerType& type) {
  if (type.accelerator.vendor != model::Vendor::kNvidia) return false;
  if (type.intra_kind != model::IntraNodeKind::kNvSwitch) return false;
  const std::string& m = type.accelerator.model;
  // Hopper (H100/H200/H800, GH200) and Blackwell (B100/B200/GB200) NVSwitch systems.
  return !m.empty() && (m[0] == 'H' || m[0] == 'B' || StartsWith(m, "GH") || StartsWith(m, "GB"));
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const Constants& K() { return kConstants; }

double Us(double us) { return us * 1e-6; }

// A node cache: consecutive GPUs of a rank list usually share a node.
struct NodeCursor {
  const model::Topology& topo;
  int node = -1;
  int lo = 0, hi = 0;
  int Of(int gpu) {
    if (gpu >= lo && gpu < hi) return node;
    node = NodeOfGpu(topo, gpu);
    if (node < 0) return -1;
    lo = topo.nodes[node].first_gpu;
    hi = lo + topo.GpusOn(node);
    return node;
  }
};

// The local-GPU classification of one node's share of the group.
struct IntraPath {
  LinkClass cls = LinkClass::kSameDevice;
  double bytes_per_sec = kInf;  // nominal, one direction, per GPU
  double hop_latency_s = 0;
};

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

int NicOf(const model::ServerType& t, int local) {
  int nics = static_cast<int>(t.nics.size());
  if (nics == t.gpus_per_node) return local;  // one NIC per GPU: the common rail layout
  if (nics == 0) return -1;
  return std::min(nics - 1, local * nics / std::max(1, t.gpus_per_node));
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

// Everything about a group that the formulas need, gathered in one pass.
struct Shape {
  int ranks = 0;
  int nodes = 0;
  int min_ppn = 0, max_ppn = 0;
  int top_tier = -1;            // -1: one node
  bool uniform = true;          // same GPUs per node everywhere
  bool nvls = true;             // every node can run NVLS
  bool ll128 = true;            // every node is NVIDIA with NVLink inside
  IntraPath intra;              // worst intra-node path (nominal)
  double intra_eff = 0;         // achieved intra bus bandwidth, bytes/s (after efficiency/measured)
  double node_bw = kInf;        // least NIC bandwidth a node gives the group, bytes/s (nominal)
  double inter_eff = kInf;      // achieved per-node inter-node bandwidth for a ring
  double a2a_inter_eff = kInf;  // achieved per-node bandwidth for all-to-all traffic
  double net_hop_s = 0;         // latency of one inter-node step at the top tier
  LinkClass net_class = LinkClass::kNicLeaf;
  LinkClass inter_bottleneck = LinkClass::kNicLeaf;  // NIC or the tier that throttled
};

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

// Scratch space reused by every call on a thread; indexed by node / switch id.
struct Scratch {
  std::vector<int> node_stamp, node_count;
  std::vector<uint64_t> node_gpu_mask, node_nic_mask;
  std::vector<int> touched_nodes;
  std::vector<int> sw_stamp, sw_nodes, sw_gpus;
  std::vector<double> sw_bw;
  std::vector<int> touched_sw;
  int stamp = 0;
  void Fit(const model::Topology& topo) {
    size_t n = topo.nodes.size(), s = topo.switches.size();
    if (node_stamp.size() < n) {
      node_stamp.resize(n, 0);
      node_count.resize(n);
      node_gpu_mask.resize(n);
      node_nic_mask.resize(n);
    }
    if (sw_stamp.size() < s) {
      sw_stamp.resize(s, 0);
      sw_nodes.resize(s);
      sw_gpus.resize(s);
      sw_bw.resize(s);
    }
    if (++stamp == std::numeric_limits<int>::max()) {
      std::fill(node_stamp.begin(), node_stamp.end(), 0);
      std::fill(sw_stamp.begin(), sw_stamp.end(), 0);
      stamp = 1;
    }
    touched_nodes.clear();
    touched_sw.clear();
  }
};

Scratch& TheScratch() {
  thread_local Scratch s;
  return s;
}

Shape Analyze(const model::Topology& topo, std::span<const int> gpus, const CostOptions& o) {
  Shape sh;
  sh.ranks = static_cast<int>(gpus.size());
  Scratch& sc = TheScratch();
  sc.Fit(topo);
  NodeCursor cur{topo};
  // The hot loop: runs of GPUs on one node reuse the node's figures.
  int cn = -1, lo = 0, hi = 0;
  const model::ServerType* type = nullptr;
  bool nic_per_gpu = false;
  for (int g : gpus) {
    if (g < lo || g >= hi) {
      cn = cur.Of(g);
      if (cn < 0) {
        lo = hi = 0;
        continue;
      }
      lo = cur.lo;
      hi = cur.hi;
      type = &topo.TypeOf(cn);
      nic_per_gpu = static_cast<int>(type->nics.size()) == type->gpus_per_node;
      if (sc.node_stamp[cn] != sc.stamp) {
        sc.node_stamp[cn] = sc.stamp;
        sc.node_count[cn] = 0;
        sc.node_gpu_mask[cn] = 0;
        sc.node_nic_mask[cn] = 0;
        sc.touched_nodes.push_back(cn);
      }
    }
    int local = g - lo;
    ++sc.node_count[cn];
    if (local < 64) sc.node_gpu_mask[cn] |= uint64_t{1} << local;
    int nic = nic_per_gpu ? local : NicOf(*type, local);
    if (nic >= 0 && nic < 64) sc.node_nic_mask[cn] |= uint64_t{1} << nic;
  }
  sh.nodes = static_cast<int>(sc.touched_nodes.size());
  if (sh.nodes == 0) return sh;
  const int first = sc.touched_nodes[0];
  sh.min_ppn = std::numeric_limits<int>::max();
  // Nodes of one type with the same GPUs in the group classify alike: remember the last one.
  const model::ServerType* memo_type = nullptr;
  uint64_t memo_gpu_mask = 0, memo_nic_mask = 0;
  IntraPath memo_path;
  double memo_nic_bytes = 0;
  bool memo_nic_valid = false;
  for (int n : sc.touched_nodes) {
    const auto& t = topo.TypeOf(n);
    int c = sc.node_count[n];
    if (&t != memo_type) {
      memo_type = &t;
      memo_gpu_mask = ~uint64_t{0};
      memo_nic_valid = false;
    }
    sh.min_ppn = std::min(sh.min_ppn, c);
    sh.max_ppn = std::max(sh.max_ppn, c);
    if (!HasNvls(t)) sh.nvls = false;
    if (t.accelerator.vendor != model::Vendor::kNvidia ||
        t.intra_kind == model::IntraNodeKind::kPcie) {
      sh.ll128 = false;
    }
    if (c > 1) {
      if (sc.node_gpu_mask[n] != memo_gpu_mask) {
        memo_gpu_mask = sc.node_gpu_mask[n];
        memo_path = ClassifyLocal(t, memo_gpu_mask);
      }
      const IntraPath& p = memo_path;
      if (p.bytes_per_sec < sh.intra.bytes_per_sec || p.cls > sh.intra.cls) {
        if (p.cls >= sh.intra.cls) sh.intra.cls = p.cls;
        sh.intra.bytes_per_sec = std::min(sh.intra.bytes_per_sec, p.bytes_per_sec);
      }
      sh.intra.hop_latency_s = std::max(sh.intra.hop_latency_s, p.hop_latency_s);
    }
    if (sh.nodes > 1) {
      if (!memo_nic_valid || sc.node_nic_mask[n] != memo_nic_mask) {
        memo_nic_mask = sc.node_nic_mask[n];
        memo_nic_bytes = NicBytes(t, memo_nic_mask);
        memo_nic_valid = true;
      }
      sh.node_bw = std::min(sh.node_bw, memo_nic_bytes);
      sh.top_tier = std::max(sh.top_tier, topo.CommonTier(first, n));
    }
  }
  sh.uniform = sh.min_ppn == sh.max_ppn;

  // Achieved intra-node bandwidth: nominal times efficiency, or the measured GPU pairs.
  double eff = sh.intra.cls == LinkClass::kNvLink ? K().nvlink_efficiency : K().pcie_efficiency;
  sh.intra_eff = sh.intra.bytes_per_sec * eff;
  if (o.measured && o.measured->HasGpuPairs() && sh.max_ppn > 1) {
    // The ring visits each node's GPUs in rank order; take the slowest measured edge.
    // Uncovered edges keep their nominal figure.
    double worst = kInf;
    bool uncovered = false;
    for (size_t i = 0; i + 1 < gpus.size(); ++i) {
      if (cur.Of(gpus[i]) != cur.Of(gpus[i + 1])) continue;
      if (auto v = o.measured->GpuPair(gpus[i], gpus[i + 1])) {
        worst = std::min(worst, *v);
      } else {
        uncovered = true;
      }
    }
    if (worst < kInf) sh.intra_eff = uncovered ? std::min(worst, sh.intra_eff) : worst;
  }

  if (sh.nodes == 1) return sh;

  // Inter-node: the group's NICs, then the share of every uplink tier below the top tier.
  sh.net_class = NetClass(sh.top_tier);
  sh.net_hop_s = NetHopSeconds(topo, sh.top_tier);
  sh.inter_eff = sh.node_bw * K().net_efficiency;
  sh.a2a_inter_eff = sh.node_bw * K().net_efficiency * K().alltoall_efficiency;
  sh.inter_bottleneck = LinkClass::kNicLeaf;
  if (o.measured && o.measured->HasNodePairs()) {
    double worst = kInf;
    bool uncovered = false;
    // Node ring in order of first appearance; uncovered pairs keep their nominal figure.
    const auto& tn = sc.touched_nodes;
    for (size_t i = 0; i < tn.size(); ++i) {
      int a = tn[i], b = tn[(i + 1) % tn.size()];
      auto v = o.measured->NodePair(a, b);
      if (!v) {
        uncovered = true;
        continue;
      }
      const auto& t = topo.TypeOf(a);
      double frac = t.nics.empty() ? 1.0
                                   : static_cast<double>(std::popcount(sc.node_nic_mask[a])) /
                                         static_cast<double>(t.nics.size());
      worst = std::min(worst, *v * frac);
    }
    if (worst < kInf) {
      if (uncovered) worst = std::min(worst, sh.inter_eff);
      sh.inter_eff = worst;
      sh.a2a_inter_eff = worst * K().alltoall_efficiency;
    }
  }
  for (int tier = 0; tier < sh.top_tier; ++tier) {
    for (int n : sc.touched_nodes) {
      int s = topo.AncestorAt(n, tier);
      if (sc.sw_stamp[s] != sc.stamp) {
        sc.sw_stamp[s] = sc.stamp;
        sc.sw_nodes[s] = 0;
        sc.sw_gpus[s] = 0;
        sc.touched_sw.push_back(s);
      }
      ++sc.sw_nodes[s];
      sc.sw_gpus[s] += topo.GpusOn(n);
    }
  }
  for (int s : sc.touched_sw) {
    const model::Switch& sw = topo.switches[s];
    if (sw.uplink.IsZero() || sw.gpus == 0) continue;
    double up = sw.uplink.BytesPerSec() * K().net_efficiency;
    double avail = o.contended ? up * sc.sw_gpus[s] / sw.gpus : up;
    // A ring (or tree) enters and leaves a subtree once per channel: one node's worth.
    double ring_need = sh.node_bw * K().net_efficiency;
    if (avail < ring_need) {
      double f = avail / ring_need;
      if (sh.inter_eff > sh.node_bw * K().net_efficiency * f) {
        sh.inter_eff = std::min(sh.inter_eff, sh.node_bw * K().net_efficiency * f);
        sh.inter_bottleneck = NetClass(sw.tier + 1);
      }
    }
    // All-to-all sends the fraction of its bytes bound outside the subtree through it.
    double j = sc.sw_nodes[s];
    double out_frac = 1.0 - j / sh.nodes;
    double a2a_need = j * sh.node_bw * K().net_efficiency * K().alltoall_efficiency * out_frac;
    if (a2a_need > avail && a2a_need > 0) {
      sh.a2a_inter_eff = std::min(sh.a2a_inter_eff, sh.a2a_inter_eff * avail / a2a_need);
    }
  }
  return sh;
}

// Bus bandwidth -> time factors of nccl-tests (PERFORMANCE.md): time = bytes * F / busbw.
double BusFactor(Collective op, int n) {
  double dn = n;
  switch (op) {
    case Collective::kAllReduce:
      return 2.0 * (dn - 1) / dn;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (dn - 1) / dn;
    case Collective::kBroadcast:
    case Collective::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

double ProtoBw(Protocol p, Algorithm a) {
  switch (p) {
    case Protocol::kLL:
      return a == Algorithm::kTree ? K().ll_tree_bw_factor : K().ll_bw_factor;
    case Protocol::kLL128:
      return K().ll128_bw_factor;
    case Protocol::kSimple:
      return 1.0;
  }
  return 1.0;
}
int P(Protocol p) { return static_cast<int>(p); }

struct Candidate {
  double lat = 0;
  double bw_seconds = 0;  // bytes-dependent part
  double busbw = 0;
  LinkClass bottleneck = LinkClass::kSameDevice;
};

// Ring over the whole group (NCCL builds its rings node by node, so the group crosses each
// node boundary once per channel whatever the rank order).
Candidate Ring(const Shape& sh, Collective op, double bytes, Protocol p) {
  Candidate c;
  const int n = sh.ranks, m = sh.nodes;
  double bw = kInf;
  if (sh.max_ppn > 1) {
    bw = sh.intra_eff;
    c.bottleneck = sh.intra.cls;
  }
  if (m > 1 && sh.inter_eff < bw) {
    bw = sh.inter_eff;
    c.bottleneck = sh.inter_bottleneck;
  }
  bw *= ProtoBw(p, Algorithm::kRing);
  // AllReduce runs the ring twice (reduce-scatter then all-gather); the rest once.
  const int rounds = op == Collective::kAllReduce ? 2 : 1;
  const int steps = rounds * (n - 1);
  const int inter_steps = rounds * (m - 1);
  double intra_hop = sh.intra.hop_latency_s + Us(K().intra_proto_us[P(p)]);
  double net_hop = sh.net_hop_s + Us(K().net_proto_us[P(p)]);
  c.lat = Us(K().base_us[P(p)]) + (steps - inter_steps) * intra_hop + inter_steps * net_hop;
  c.busbw = bw;
  c.bw_seconds = bytes * BusFactor(op, n) / bw;
  return c;
}

// Double binary tree across nodes, chain inside them (AllReduce only).
Candidate Tree(const Shape& sh, double bytes, Protocol p) {
  Candidate c;
  const int n = sh.ranks, m = sh.nodes;
  double bw = kInf;
  if (sh.max_ppn > 1) {
    bw = sh.intra_eff;
    c.bottleneck = sh.intra.cls;
  }
  if (m > 1 && sh.inter_eff < bw) {
    bw = sh.inter_eff;
    c.bottleneck = sh.inter_bottleneck;
  }
  bw *= K().tree_efficiency * ProtoBw(p, Algorithm::kTree);
  double intra_hop = sh.intra.hop_latency_s + Us(K().intra_proto_us[P(p)]);
  double net_hop = sh.net_hop_s + Us(K().net_proto_us[P(p)]) +
                   (p == Protocol::kSimple ? Us(K().tree_simple_extra_us) : 0.0);
  double depth = m > 1 ? std::ceil(std::log2(static_cast<double>(m))) : 0.0;
  c.lat = Us(K().base_us[P(p)]) + 2.0 * ((sh.max_ppn - 1) * intra_hop + depth * net_hop);
  c.busbw = bw;
  c.bw_seconds = bytes * BusFactor(Collective::kAllReduce, n) / bw;
  return c;
}

// Intra-node reduce-scatter, inter-node allreduce among the nodes' peers (ring or tree,
// whichever is cheaper), intra-node all-gather. Stages run one after another.
Candidate Hierarchical(const Shape& sh, Collective op, double bytes, Protocol p) {
  Candidate c;
  const int m = sh.nodes, g = sh.max_ppn;
  double intra_hop = sh.intra.hop_latency_s + Us(K().intra_proto_us[P(p)]);
  double net_hop = sh.net_hop_s + Us(K().net_proto_us[P(p)]);
  double pb = ProtoBw(p, Algorithm::kRing);
  double intra_bw = sh.intra_eff * pb;
  double inter_bw = sh.inter_eff * pb;
  double intra_phases = op == Collective::kAllReduce ? 2.0 : 1.0;
  double t_intra = g > 1 ? intra_phases * bytes * (g - 1.0) / g / intra_bw : 0.0;
  double lat_intra = g > 1 ? intra_phases * (g - 1) * intra_hop : 0.0;
  double t_inter = 0, lat_inter = 0;
  if (m > 1) {
    // Each GPU carries bytes/g over its share (1/g) of the node's NICs: the per-node load is
    // the whole buffer.
    double f = op == Collective::kAllReduce ? 2.0 * (m - 1.0) / m : (m - 1.0) / m;
    t_inter = bytes * f / inter_bw;
    double ring_lat = (op == Collective::kAllReduce ? 2.0 : 1.0) * (m - 1) * net_hop;
    double tree_lat = 2.0 * std::ceil(std::log2(static_cast<double>(m))) * net_hop;
    lat_inter = op == Collective::kAllReduce ? std::min(ring_lat, tree_lat) : ring_lat;
  }
  c.lat = Us(K().base_us[P(p)]) * (g > 1 && m > 1 ? 2.0 : 1.0) + lat_intra + lat_inter;
  c.bw_seconds = t_intra + t_inter;
  double total = c.bw_seconds > 0 ? c.bw_seconds : 1e-30;
  c.busbw = bytes * BusFactor(op, sh.ranks) / total;
  c.bottleneck = t_inter > t_intra ? sh.inter_bottleneck : sh.intra.cls;
  return c;
}

// NVLink SHARP: the switch reduces, each GPU sends and receives the buffer once; across
// nodes, NVLS inside and a pipelined inter-node stage on the NICs (NCCL's NVLS tree).
Candidate Nvls(const Shape& sh, double bytes, Protocol p) {
  Candidate c;
  const int m = sh.nodes;
  double algbw_intra = sh.intra.bytes_per_sec * K().nvls_efficiency;
  if (sh.intra_eff < sh.intra.bytes_per_sec * K().nvlink_efficiency) {
    algbw_intra *= sh.intra_eff / (sh.intra.bytes_per_sec * K().nvlink_efficiency);  // measured
  }
  double t = bytes / algbw_intra;
  c.bottleneck = LinkClass::kNvLink;
  double lat =
      Us(K().base_us[P(p)]) + 2.0 * (sh.intra.hop_latency_s + Us(K().intra_proto_us[P(p)]));
  if (m > 1) {
    double net_hop = sh.net_hop_s + Us(K().net_proto_us[P(p)]);
    double t_inter = bytes * 2.0 * (m - 1.0) / m / sh.inter_eff;
    if (t_inter > t) {
      t = t_inter;
      c.bottleneck = sh.inter_bottleneck;
    }
    lat += 2.0 * std::ceil(std::log2(static_cast<double>(m))) * net_hop;
  }
  c.lat = lat;
  c.bw_seconds = t;
  c.busbw = bytes * BusFactor(Collective::kAllReduce, sh.ranks) / t;
  return c;
}

Candidate AllToAll(const Shape& sh, double bytes, Protocol p) {
  Candidate c;
  const double n = sh.ranks;
  const double g = sh.max_ppn;
  double t_intra = g > 1 ? bytes * (g - 1) / n / (sh.intra_eff * K().alltoall_efficiency) : 0;
  double t_inter = sh.nodes > 1 ? g * bytes * (n - g) / n / sh.a2a_inter_eff : 0;
  c.bw_seconds = std::max(t_intra, t_inter);
  c.bottleneck = t_inter > t_intra ? sh.inter_bottleneck : sh.intra.cls;
  double hop = sh.nodes > 1 ? sh.net_hop_s + Us(K().net_proto_us[P(p)])
                            : sh.intra.hop_latency_s + Us(K().intra_proto_us[P(p)]);
  c.lat = Us(K().base_us[P(p)]) + hop + (n - 1) * Us(K().alltoall_per_peer_us);
  c.bw_seconds /= ProtoBw(p, Algorithm::kRing);
  c.busbw =
      c.bw_seconds > 0 ? bytes * BusFactor(Collective::kAllToAll, sh.ranks) / c.bw_seconds : 0;
  return c;
}

struct PairPath {
  LinkClass cls;
  double bytes_per_sec;
  double latency_s;
};

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

CollectiveCost SendRecvCost(const model::Topology& topo, std::span<const int> gpus, double bytes,
                            const CostOptions& o) {
  CollectiveCost best;
  best.algorithm = Algorithm::kRing;
  NodeCursor cur{topo};
  double worst = 0;
  for (size_t i = 0; i + 1 < gpus.size(); ++i) {
    int na = cur.Of(gpus[i]);
    int nb = cur.Of(gpus[i + 1]);
    if (na < 0 || nb < 0) continue;
    PairPath pp = Pair(topo, gpus[i], gpus[i + 1], na, nb, o);
    // Small messages go LL, large Simple: the cheaper of the two per pair.
    double t_simple = Us(K().p2p_base_us) + pp.latency_s +
                      Us(K().net_proto_us[P(Protocol::kSimple)]) * (pp.cls >= LinkClass::kNicLeaf) +
                      bytes / pp.bytes_per_sec;
    double t_ll =
        Us(K().p2p_base_us) + pp.latency_s + bytes / (pp.bytes_per_sec * K().ll_bw_factor);
    bool ll = o.allow_ll && t_ll < t_simple;
    double t = ll ? t_ll : t_simple;
    best.span = std::max(best.span, pp.cls);
    if (t > worst) {
      worst = t;
      best.seconds = t;
      best.protocol = ll ? Protocol::kLL : Protocol::kSimple;
      best.bottleneck = pp.cls;
      best.latency_seconds = Us(K().p2p_base_us) + pp.latency_s;
      best.bus_bytes_per_sec = pp.bytes_per_sec * (ll ? K().ll_bw_factor : 1.0);
    }
  }
  return best;
}

}  // namespace

LinkClass ClassBetween(const model::Topology& topo, int gpu_a, int gpu_b) {
  int na = NodeOfGpu(topo, gpu_a), nb = NodeOfGpu(topo, gpu_b);
  if (na < 0 || nb < 0) return LinkClass::kSpineCore;
  return Pair(topo, gpu_a, gpu_b, na, nb, {}).cls;
}

double BusBandwidth(Collective op, int ranks, int64_t bytes, double seconds) {
  if (seconds <= 0 || ranks <= 0) return 0;
  return static_cast<double>(bytes) / seconds * BusFactor(op, ranks);
}

CollectiveCost CostCollective(const model::Topology& topo, std::span<const int> gpus, Collective op,
                              int64_t bytes_i, Algorithm algo, const CostOptions& o) {
  CollectiveCost out;
  out.algorithm = algo == Algorithm::kAuto ? Algorithm::kRing : algo;
  if (gpus.size() <= 1 || bytes_i <= 0) return out;
  const double bytes = static_cast<double>(bytes_i);
  if (op == Collective::kSendRecv) return SendRecvCost(topo, gpus, bytes, o);

  Shape sh = Analyze(topo, gpus, o);
  if (sh.nodes == 0) return out;
  out.span = sh.nodes > 1 ? sh.net_class : sh.intra.cls;

  double best = kInf;
  auto consider = [&](Algorithm a, Protocol p, const Candidate& c) {
    double t = c.lat + c.bw_seconds;
    if (!(t < best)) return;
    best = t;
    out.seconds = t;
    out.algorithm = a;
    out.protocol = p;
    out.latency_seconds = c.lat;
    out.bus_bytes_per_sec = c.busbw;
    out.bottleneck = c.bottleneck;
  };
  const bool all_reduce = op == Collective::kAllReduce;
  const bool can_tree = all_reduce && sh.nodes > 1;
  const bool can_hier =
      (all_reduce || op == Collective::kAllGather || op == Collective::kReduceScatter) &&
      sh.nodes > 1 && sh.max_ppn > 1 && sh.uniform;
  const bool can_nvls = all_reduce && sh.nvls && sh.max_ppn > 1 && sh.uniform;
  Algorithm want = algo;
  if ((want == Algorithm::kTree && !can_tree) || (want == Algorithm::kHierarchical && !can_hier) ||
      (want == Algorithm::kNvls && !can_nvls)) {
    want = Algorithm::kAuto;  // the group cannot run it: NCCL would fall back too
  }
  for (Protocol p : {Protocol::kLL, Protocol::kLL128, Protocol::kSimple}) {
    if (p == Protocol::kLL && !o.allow_ll) continue;
    if (p == Protocol::kLL128 && (!o.allow_ll128 || !sh.ll128)) continue;
    if (op == Collective::kAllToAll) {
      if (p == Protocol::kLL128) continue;
      consider(Algorithm::kRing, p, AllToAll(sh, bytes, p));
      continue;
    }
    if (want == Algorithm::kAuto || want == Algorithm::kRing) {
      consider(Algorithm::kRing, p, Ring(sh, op, bytes, p));
    }
    if (can_tree && (want == Algorithm::kAuto || want == Algorithm::kTree)) {
      consider(Algorithm::kTree, p, Tree(sh, bytes, p));
    }
    if (can_hier && want == Algorithm::kHierarchical) {
      consider(Algorithm::kHierarchical, p, Hierarchical(sh, op, bytes, p));
    }
    if (can_nvls && p == Protocol::kSimple &&
        (want == Algorithm::kAuto || want == Algorithm::kNvls)) {
      consider(Algorithm::kNvls, p, Nvls(sh, bytes, p));
    }
  }
  return out;
}

double BottleneckBandwidth(const model::Topology& topo, std::span<const int> gpus,
                           const CostOptions& o, LinkClass* bottleneck) {
  if (gpus.size() <= 1) {
    if (bottleneck) *bottleneck = LinkClass::kSameDevice;
    return kInf;
  }
  Shape sh = Analyze(topo, gpus, o);
  Candidate c = Ring(sh, Collective::kAllReduce, 1.0, Protocol::kSimple);
  if (bottleneck) *bottleneck = c.bottleneck;
  return c.busbw;
}

}  // namespace tianshu::comm
