// The genetic strategy's chromosome: for every job of a batch, the nodes it uses and the ranks
// on each (a gene), with the outcomes and batch cost that decoding gave it.
//   Genome x;  x.genes.push_back(GeneOf(topology_outcome));
//   bool ok = ValidGene(request, x.genes[0]);  // node counts that make up the gang
#pragma once

#include <vector>

#include "tianshu/placement/internal/tree_search.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

// A gene holding only this entry asks repair for the least-loaded topology choice.
inline constexpr int kLeastLoaded = -2;
// Batch costs closer than this are equal.
inline constexpr double kCostEps = 1e-9;

// One chromosome: a gene per job of the batch (batch order), and once decoded the repaired
// genes, their outcomes and the batch cost.
struct Genome {
  std::vector<NodeCounts> genes;
  std::vector<Outcome> outcomes;
  double cost = 0;
};

// The gene of an outcome: its nodes in ascending order, with the ranks on each.
NodeCounts GeneOf(const Outcome& o);

// True when `counts` is a gang of r: positive counts adding up to r.ranks, gpus_per_node ranks
// on each node where the request fixes it, one node for a single-node request.
bool ValidGene(const PlacementRequest& r, const NodeCounts& counts);

}  // namespace tianshu::placement::internal
