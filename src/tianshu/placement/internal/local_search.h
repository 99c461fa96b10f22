// The genetic strategy's memetic step: a local search that takes a few jobs out of a decoded
// genome's placement and puts them back one by one, each on its cheapest candidate given the
// others, keeping a move only when the batch cost drops (genetic.cc describes the moves).
//   LocalSearch local(&decoder);
//   local.Improve(&genome, &rng);  // never raises genome.cost
#pragma once

#include <span>
#include <vector>

#include "tianshu/placement/internal/genome.h"
#include "tianshu/placement/internal/genome_decoder.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

// The per-job candidate nodes and the state of one local search, over the decoder's working
// state. Holds a reference to the decoder, which must outlive it. Not thread-safe.
class LocalSearch {
 public:
  LocalSearch(GenomeDecoder* decoder, std::span<const PlacementRequest> reqs);

  // For every job, the nodes that could take at least one of its ranks in the snapshot.
  const std::vector<std::vector<int>>& eligible() const { return eligible_; }

  // The local search described at the top; never raises the cost.
  void Improve(Genome* x, Rng* rng);

 private:
  // Two jobs that share a leaf, or either left out: the pairs worth a joint move.
  bool Related(int j, int k) const;
  // Takes the jobs of `order` out and puts them back in that order; keeps the result when the
  // batch cost drops, else puts the old placements back.
  bool Move(const std::vector<int>& order, int first_skip = 0);
  // Places job j on its cheapest candidate in work_; returns its cost.
  double Insert(int j, int skip = 0);
  // The fewest nodes below `sw` (the largest first, the last one the tightest that completes
  // the gang), preferring among equals nodes of leaves already used, then less loaded leaves.
  bool FewestNodes(const PlacementRequest& r, int sw, NodeCounts* out);

  GenomeDecoder& d_;
  std::span<const PlacementRequest> reqs_;
  int jobs_;
  std::vector<std::vector<int>> eligible_;
  std::vector<Outcome> outs_;
  std::vector<double> cost_;
  std::vector<NodeCounts> cands_;
  std::vector<int> cap_, pool_;
  std::vector<std::vector<int>> nodes_under_;
  int budget_ = 0;
};

}  // namespace tianshu::placement::internal
