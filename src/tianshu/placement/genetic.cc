// The genetic strategy: batch placement of several pending jobs at once.
//
// Chromosome: for every job of the batch, the nodes it uses and the ranks on each. Decoding
// walks the jobs in batch (priority) order on a working copy of the snapshot and repairs each
// gene so that every child is feasible (capacity, backend, labels, memory, storage): ranks a
// node can no longer take are dropped and refilled in the smallest subtree around the job's
// first node, else by the topology search; a job that still does not fit is left out (all or
// nothing). The repaired gene is written back (Lamarckian). Fitness is EvaluateBatch's cost.
//
// "Improved": the population is seeded with the heuristics' solutions (topology, topology
// least-loaded-first, best-fit, first-fit, spread) and mutants of topology's; elitism; tournament
// selection; crossover that keeps whole subtrees (per job, or every job inside a random switch
// subtree from one parent); adaptive mutation (raised while the best stalls, reset on improvement);
// a seed and a step budget (generations x population decodes); an early stop after `patience`
// generations without improvement. Because topology's solution is in the first generation and the
// elite survives, the result never costs more than topology's on the same input.
#include <algorithm>
#include <map>
#include <numeric>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/internal/tree_search.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement::internal {
namespace {

// A gene holding only this entry asks repair for the least-loaded topology choice.
constexpr int kLeastLoaded = -2;

struct Genome {
  std::vector<NodeCounts> genes;
  std::vector<Outcome> outcomes;
  double cost = 0;
};

NodeCounts GeneOf(const Outcome& o) {
  std::map<int, int> m;
  for (const RankSlot& s : o.ranks) ++m[s.node];
  return NodeCounts(m.begin(), m.end());
}

class Genetic final : public Strategy {
 public:
  explicit Genetic(const StrategyOptions& o) : options_(o) {}
  std::string_view Name() const override { return "genetic"; }

  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    return PlaceBatch(s, std::span<const PlacementRequest>(&r, 1)).front();
  }

  std::vector<Outcome> PlaceBatch(const ClusterState& s,
                                  std::span<const PlacementRequest> reqs) const override {
    if (reqs.empty()) return {};
    const GeneticOptions& g = options_.genetic;
    Rng rng(options_.seed);
    const int jobs = static_cast<int>(reqs.size());

    // Nodes each job could use at all, for mutations.
    std::vector<std::vector<int>> eligible(jobs);
    for (int j = 0; j < jobs; ++j) {
      for (int n = 0; n < s.topology().NumNodes(); ++n) {
        if (NodeCapacity(s, n, reqs[j]) > 0) eligible[j].push_back(n);
      }
    }

    std::vector<Genome> pop;
    // Seeds: the heuristics' batch solutions.
    auto seed_from = [&](const Strategy& h) {
      Genome x;
      for (const Outcome& o : h.PlaceBatch(s, reqs)) x.genes.push_back(GeneOf(o));
      Decode(s, reqs, &x);
      pop.push_back(std::move(x));
    };
    seed_from(*NewTopology(options_));
    const Genome topology_seed = pop.front();
    if (jobs == 1 && !topology_seed.outcomes.front().placed())
      return Finish(s, reqs, topology_seed);
    {
      // Every job on the least-loaded subtree that holds it.
      Genome x;
      x.genes.assign(jobs, NodeCounts{{kLeastLoaded, 0}});
      Decode(s, reqs, &x);
      pop.push_back(std::move(x));
    }
    seed_from(*NewBestFit(options_));
    seed_from(*NewFirstFit(options_));
    seed_from(*NewSpread(options_));
    while (static_cast<int>(pop.size()) < g.population) {
      Genome x = topology_seed;
      Mutate(s, reqs, eligible, 0.5, &rng, &x);
      Decode(s, reqs, &x);
      pop.push_back(std::move(x));
    }
    auto by_cost = [](const Genome& a, const Genome& b) { return a.cost < b.cost; };
    std::stable_sort(pop.begin(), pop.end(), by_cost);

    double best = pop.front().cost;
    double mutation = g.mutation;
    int stall = 0;
    for (int gen = 0; gen < g.generations && stall < g.patience; ++gen) {
      std::vector<Genome> next(pop.begin(),
                               pop.begin() + std::min<int>(g.elite, static_cast<int>(pop.size())));
      while (static_cast<int>(next.size()) < g.population) {
        const Genome& a = Tournament(pop, &rng);
        const Genome& b = Tournament(pop, &rng);
        Genome child;
        if (rng.Unit() < g.crossover) {
          child = Crossover(s, a, b, &rng);
        } else {
          child.genes = a.genes;
        }
        Mutate(s, reqs, eligible, mutation, &rng, &child);
        Decode(s, reqs, &child);
        next.push_back(std::move(child));
      }
      std::stable_sort(next.begin(), next.end(), by_cost);
      pop = std::move(next);
      if (pop.front().cost < best - 1e-9) {
        best = pop.front().cost;
        stall = 0;
        mutation = g.mutation;
      } else {
        ++stall;
        mutation = std::min(0.6, mutation * 1.5);
      }
    }
    const Genome& winner = pop.front().cost <= topology_seed.cost ? pop.front() : topology_seed;
    return Finish(s, reqs, winner);
  }

 private:
  std::vector<Outcome> Finish(const ClusterState& s, std::span<const PlacementRequest> reqs,
                              const Genome& x) const {
    std::vector<Outcome> out = x.outcomes;
    for (size_t j = 0; j < out.size(); ++j) {
      if (out[j].placed()) continue;
      // Say why: never, or not now (given the jobs placed before it).
      if (auto never = NeverFits(s, reqs[j])) {
        out[j] = *never;
      } else if (out[j].reason.empty()) {
        out[j] = NotNow(reqs[j], 0);
      }
    }
    return out;
  }

  // Repairs and decodes every gene in batch order; sets outcomes and cost.
  void Decode(const ClusterState& s, std::span<const PlacementRequest> reqs, Genome* x) const {
    ClusterState work = s;
    const int jobs = static_cast<int>(reqs.size());
    x->genes.resize(jobs);
    x->outcomes.assign(jobs, Outcome{});
    for (int j = 0; j < jobs; ++j) {
      const PlacementRequest& r = reqs[j];
      NodeCounts counts = Repair(work, r, x->genes[j]);
      Outcome o;
      if (!counts.empty()) o = FinishPlacement(work, r, counts);
      if (o.placed() && Apply(&work, r, o)) {
        x->genes[j] = GeneOf(o);
        x->outcomes[j] = std::move(o);
      } else {
        x->genes[j].clear();
        x->outcomes[j] = NotNow(r, 0);
      }
    }
    x->cost = EvaluateBatch(s, reqs, x->outcomes, options_.weights).total;
  }

  NodeCounts Repair(const ClusterState& work, const PlacementRequest& r,
                    const NodeCounts& gene) const {
    if (gene.size() == 1 && gene.front().first == kLeastLoaded) {
      auto fresh = TopologyChoose(work, r, /*least_loaded=*/true);
      return fresh ? *fresh : NodeCounts{};
    }
    NodeCounts counts;
    int left = r.ranks;
    for (auto [n, k] : gene) {
      if (left == 0) break;
      int cap = NodeCapacity(work, n, r);
      int take = std::min({k, cap, left});
      if (r.gpus_per_node > 0)
        take = (cap >= r.gpus_per_node && k >= r.gpus_per_node) ? r.gpus_per_node : 0;
      if (r.single_node) take = cap >= r.ranks && counts.empty() ? r.ranks : 0;
      if (take > 0) {
        counts.push_back({n, take});
        left -= take;
      }
    }
    if (left == 0) return counts;
    if (!counts.empty() && !r.single_node) {
      const int anchor = counts.front().first;
      const int tiers = static_cast<int>(work.topology().tiers.size());
      for (int t = 0; t < tiers; ++t) {
        NodeCounts trial = counts;
        if (FillBelow(work, r, work.topology().AncestorAt(anchor, t), left, &trial)) return trial;
      }
    }
    auto fresh = TopologyChoose(work, r);
    return fresh ? *fresh : NodeCounts{};
  }

  const Genome& Tournament(const std::vector<Genome>& pop, Rng* rng) const {
    int best = rng->Below(static_cast<int>(pop.size()));
    for (int i = 1; i < options_.genetic.tournament; ++i) {
      int c = rng->Below(static_cast<int>(pop.size()));
      if (pop[c].cost < pop[best].cost) best = c;
    }
    return pop[best];
  }

  // Whole genes only, so each job keeps the subtree it had in its parent.
  Genome Crossover(const ClusterState& s, const Genome& a, const Genome& b, Rng* rng) const {
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

  void Mutate(const ClusterState& s, std::span<const PlacementRequest> reqs,
              const std::vector<std::vector<int>>& eligible, double rate, Rng* rng,
              Genome* x) const {
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
    (void)s;
  }

  StrategyOptions options_;
};

}  // namespace

std::unique_ptr<Strategy> NewGenetic(const StrategyOptions& o) {
  return std::make_unique<Genetic>(o);
}

}  // namespace tianshu::placement::internal
