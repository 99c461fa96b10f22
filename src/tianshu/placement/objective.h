// The cost of a batch placement that genetic minimises and exact optimises, shared so the
// two (and the benchmarks) measure the same thing. Per placed job j, with x_jn its ranks on
// node n and blocks the switch subtrees its nodes fall in:
//   cost_j = w.compute * sum_n x_jn * slow(n) / ranks_j                  (compute)
//          + w.network * (sum_{nodes, blocks used} c_level * (1 + load_block) - base)  (network)
//          + w.memory  * sum_n x_jn * need_j / device_memory(n) / ranks_j  (memory)
// slow(n) = peak of the fastest accelerator / peak of n's, minus 1; c_level is the relative
// cost of spreading one more node / leaf / spine (TierCosts); load_block is the allocated
// share of the block's GPUs in the snapshot (uplink load); base = the cost of one node under
// an idle single path. An unplaced job costs kUnplacedPenalty per rank. Linear in the use
// indicators, so the MIP of `exact` states the same objective.
//   BatchCost c = EvaluateBatch(snapshot, requests, outcomes, weights);
//   double per_tier = TierCosts(topology)[1];   // crossing a leaf
#pragma once

#include <span>
#include <vector>

#include "tianshu/placement/strategy.h"

namespace tianshu::placement {

inline constexpr double kUnplacedPenalty = 100.0;

struct BatchCost {
  double total = 0;
  double compute = 0;
  double network = 0;
  double memory = 0;
  int unplaced_jobs = 0;
  int max_tier_crossed = -1;  // the highest switch tier any job spans (-1: all on one node)
};

// c[0] = spreading over one more node, c[1 + t] = over one more block of tier t (the root
// tier excluded: it is a single block), priced with comm::CollectiveSeconds (see .cc).
std::vector<double> TierCosts(const model::Topology& topology);

// Slowdown of a node type's accelerator against the fastest in the cluster (>= 0).
std::vector<double> TypeSlowdowns(const model::Topology& topology);

// Whether no placement of `r` in `s` can cost less than `o` under EvaluateBatch, whatever the
// (non-negative) weights: every feasible placement takes the same GPUs (`o`, of whole GPUs,
// leaves none free in the cluster), or `o` is at the cost's lower bound (node types that differ
// in nothing the cost prices; the fewest nodes the ranks fit on and, at every switch tier below
// the root, the fewest blocks those nodes fit under, each block unloaded in `s`). A search may stop
// at such an `o`: the genetic strategy returns topology's placement at once when it is one (a gang
// of whole leaves on an idle fabric, a job that takes all that is free).
bool NoneCheaper(const ClusterState& s, const PlacementRequest& r, const Outcome& o);

BatchCost EvaluateBatch(const ClusterState& snapshot, std::span<const PlacementRequest> requests,
                        std::span<const Outcome> outcomes, const model::ResourceWeight& weights);

}  // namespace tianshu::placement
