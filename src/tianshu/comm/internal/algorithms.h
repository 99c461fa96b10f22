// The collective formulas: alpha-beta costs of ring, tree, hierarchical, NVLS and all-to-all
// over a group's Shape, per NCCL protocol, and of point-to-point send/receive chains.
//   Candidate c = Ring(Analyze(topo, gpus, o), Collective::kAllReduce, 1 << 30, Protocol::kSimple);
//   double seconds = c.lat + c.bw_seconds;
#pragma once

#include <span>

#include "tianshu/comm/cost_model.h"
#include "tianshu/comm/internal/shape.h"
#include "tianshu/model/topology.h"

namespace tianshu::comm::internal {

// Bus bandwidth -> time factors of nccl-tests (PERFORMANCE.md): time = bytes * F / busbw.
double BusFactor(Collective op, int n);

struct Candidate {
  double lat = 0;
  double bw_seconds = 0;  // bytes-dependent part
  double busbw = 0;
  LinkClass bottleneck = LinkClass::kSameDevice;
};

// Ring over the whole group (NCCL builds its rings node by node, so the group crosses each
// node boundary once per channel whatever the rank order).
Candidate Ring(const Shape& sh, Collective op, double bytes, Protocol p);

// Double binary tree across nodes, chain inside them (AllReduce only).
Candidate Tree(const Shape& sh, double bytes, Protocol p);

// Intra-node reduce-scatter, inter-node allreduce among the nodes' peers (ring or tree,
// whichever is cheaper), intra-node all-gather. Stages run one after another.
Candidate Hierarchical(const Shape& sh, Collective op, double bytes, Protocol p);

// NVLink SHARP: the switch reduces, each GPU sends and receives the buffer once; across
// nodes, NVLS inside and a pipelined inter-node stage on the NICs (NCCL's NVLS tree).
Candidate Nvls(const Shape& sh, double bytes, Protocol p);

// All-to-all: the intra-node and inter-node shares of every rank's bytes, whichever is slower.
Candidate AllToAll(const Shape& sh, double bytes, Protocol p);

// Every rank i sends to rank i+1 at once: the slowest pair, LL or Simple, whichever is cheaper.
CollectiveCost SendRecvCost(const model::Topology& topo, std::span<const int> gpus, double bytes,
                            const CostOptions& o);

}  // namespace tianshu::comm::internal
