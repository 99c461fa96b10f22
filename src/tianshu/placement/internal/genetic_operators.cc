#include "tianshu/placement/internal/genetic_operators.h"

namespace tianshu::placement::internal {

const Genome& Tournament(const std::vector<Genome>& pop, int tournament, Rng* rng) {
  int best = rng->Below(static_cast<int>(pop.size()));
  for (int i = 1; i < tournament; ++i) {
    int c = rng->Below(static_cast<int>(pop.size()));
    if (pop[c].cost < pop[best].cost) best = c;
  }
  return pop[best];
}

Genome Crossover(const ClusterState& s, const Genome& a, const Genome& b, Rng* rng) {
  Genome child;
  const int jobs = static_cast<int>(a.genes.size());
  child.genes.resize(jobs);
  const auto& topo = s.topology();
  if (rng->Unit() < 0.5 || topo.switches.size() < 2) {
    for (int j = 0; j < jobs; ++j) child.genes[j] = rng->Unit() < 0.5 ? a.genes[j] : b.genes[j];
    return child;
  }
  // Every job that lies inside one random subtree in `a` comes from `a`, the rest from `b`.
  const int sw = rng->Below(static_cast<int>(topo.switches.size()));
  const int tier = topo.switches[sw].tier;
  for (int j = 0; j < jobs; ++j) {
    bool inside = !a.genes[j].empty();
    for (auto [n, k] : a.genes[j]) inside = inside && topo.AncestorAt(n, tier) == sw;
    child.genes[j] = inside ? a.genes[j] : b.genes[j];
  }
  return child;
}

void Mutate(std::span<const PlacementRequest> reqs, const std::vector<std::vector<int>>& eligible,
            double rate, Rng* rng, Genome* x) {
  const int jobs = static_cast<int>(reqs.size());
  x->genes.resize(jobs);
  for (int j = 0; j < jobs; ++j) {
    if (rng->Unit() >= rate) continue;
    NodeCounts& gene = x->genes[j];
    const int kind = rng->Below(4);
    if (kind == 0 && !eligible[j].empty()) {
      // Re-anchor the job on a random node it may use; repair grows it around that node.
      gene = {{eligible[j][rng->Below(static_cast<int>(eligible[j].size()))], reqs[j].ranks}};
    } else if (kind == 3) {
      gene = {{kLeastLoaded, 0}};
    } else if (kind == 1 && !gene.empty()) {
      // Give up one node; repair refills nearby.
      gene.erase(gene.begin() + rng->Below(static_cast<int>(gene.size())));
    } else {
      // Let the topology search choose again, given the jobs decoded before it.
      gene.clear();
    }
  }
}

}  // namespace tianshu::placement::internal
