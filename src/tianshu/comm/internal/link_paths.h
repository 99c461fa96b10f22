// How two GPUs, or one node's share of a group, are connected: the link class of the path,
// its nominal bandwidth and its per-step latency, read off the topology (NVLink islands, PCIe
// switches, NUMA nodes, NICs, switch tiers). The cost model's formulas price these paths.
//   IntraPath p = ClassifyLocal(topo.TypeOf(node), /*mask=*/0b1111);  // GPUs 0-3 of a node
//   PairPath pp = Pair(topo, gpu_a, gpu_b, NodeOfGpu(topo, gpu_a), NodeOfGpu(topo, gpu_b), {});
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tianshu/comm/constants.h"
#include "tianshu/comm/cost_model.h"
#include "tianshu/model/topology.h"

namespace tianshu::comm::internal {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline const Constants& K() { return kConstants; }

inline double Us(double us) { return us * 1e-6; }

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

// The class, nominal bandwidth (one direction, per GPU) and hop latency of the GPUs of `mask`
// (local indexes) on one node of type `t`.
IntraPath ClassifyLocal(const model::ServerType& t, uint64_t mask);

// The NIC a local GPU sends through; -1 when the node lists none.
inline int NicOf(const model::ServerType& t, int local) {
  int nics = static_cast<int>(t.nics.size());
  if (nics == t.gpus_per_node) return local;  // one NIC per GPU: the common rail layout
  if (nics == 0) return -1;
  return std::min(nics - 1, local * nics / std::max(1, t.gpus_per_node));
}

// Sum of the line rates (bytes/s) of the NICs in `nic_mask`, or the fallback when none is listed.
double NicBytes(const model::ServerType& t, uint64_t nic_mask);

// The network link class of a path whose lowest common switch is at `tier`.
LinkClass NetClass(int tier);

// Latency of one network step between nodes whose lowest common switch is at `tier`.
double NetHopSeconds(const model::Topology& topo, int tier);

// The path between two GPUs.
struct PairPath {
  LinkClass cls;
  double bytes_per_sec;
  double latency_s;
};

// The path between GPUs `a` and `b` (global ids on nodes `na`, `nb`), with the bandwidth
// `o.measured` has for the pair (or node pair) in place of the nominal one.
PairPath Pair(const model::Topology& topo, int a, int b, int na, int nb, const CostOptions& o);

}  // namespace tianshu::comm::internal
