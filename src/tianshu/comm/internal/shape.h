// The shape of a communicator group: everything the collective formulas need about it (ranks,
// nodes, ranks per node, the worst intra-node path, the NIC bandwidth and switch tiers it
// crosses, with contention and measured bandwidths applied), gathered in one pass over the GPUs.
//   Shape sh = Analyze(topo, gpus, options);
//   double ring_busbw = std::min(sh.intra_eff, sh.inter_eff);
#pragma once

#include <span>

#include "tianshu/comm/cost_model.h"
#include "tianshu/comm/internal/link_paths.h"
#include "tianshu/model/topology.h"

namespace tianshu::comm::internal {

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

// The shape of `gpus` (global ids in rank order). Uses per-thread scratch space: thread-safe,
// allocation-free once the scratch has grown to the topology.
Shape Analyze(const model::Topology& topo, std::span<const int> gpus, const CostOptions& o);

}  // namespace tianshu::comm::internal
