// The genetic strategy's operators on chromosomes: tournament selection, crossover that keeps
// whole genes (per job, or every job inside a random switch subtree from one parent) and
// mutation (re-anchor, drop a node, least-loaded, or let the topology search choose again).
//   Genome child = Crossover(snapshot, Tournament(pop, 3, &rng), Tournament(pop, 3, &rng), &rng);
//   Mutate(requests, eligible, /*rate=*/0.15, &rng, &child);  // then decode: repair fixes it
#pragma once

#include <span>
#include <vector>

#include "tianshu/placement/internal/genome.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

// The cheapest of `tournament` genomes drawn from `pop` (non-empty), by cost.
const Genome& Tournament(const std::vector<Genome>& pop, int tournament, Rng* rng);

// A child of a and b, undecoded. Whole genes only, so each job keeps the subtree it had in its
// parent.
Genome Crossover(const ClusterState& s, const Genome& a, const Genome& b, Rng* rng);

// Mutates each of x's genes with probability `rate`; `eligible` lists each job's usable nodes.
void Mutate(std::span<const PlacementRequest> reqs, const std::vector<std::vector<int>>& eligible,
            double rate, Rng* rng, Genome* x);

}  // namespace tianshu::placement::internal
