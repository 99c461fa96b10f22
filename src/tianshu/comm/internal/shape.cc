#include "tianshu/comm/internal/shape.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <vector>

#include "tianshu/comm/bandwidth_matrix.h"

namespace tianshu::comm::internal {

namespace {

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

}  // namespace

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

}  // namespace tianshu::comm::internal
