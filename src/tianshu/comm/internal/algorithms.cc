#include "tianshu/comm/internal/algorithms.h"

#include <algorithm>
#include <cmath>

#include "tianshu/comm/internal/link_paths.h"

namespace tianshu::comm::internal {

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

namespace {

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

// The bandwidth a ring or tree runs at: its slowest link, inside a node (when a node holds
// more than one rank) or between nodes; *c records which one it was.
double SlowestLink(const Shape& sh, Candidate* c) {
  double bw = kInf;
  if (sh.max_ppn > 1) {
    bw = sh.intra_eff;
    c->bottleneck = sh.intra.cls;
  }
  if (sh.nodes > 1 && sh.inter_eff < bw) {
    bw = sh.inter_eff;
    c->bottleneck = sh.inter_bottleneck;
  }
  return bw;
}

}  // namespace

// Ring over the whole group (NCCL builds its rings node by node, so the group crosses each
// node boundary once per channel whatever the rank order).
Candidate Ring(const Shape& sh, Collective op, double bytes, Protocol p) {
  Candidate c;
  const int n = sh.ranks, m = sh.nodes;
  double bw = SlowestLink(sh, &c);
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
  double bw = SlowestLink(sh, &c);
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

}  // namespace tianshu::comm::internal
