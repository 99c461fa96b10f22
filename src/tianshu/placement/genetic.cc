// The genetic strategy: batch placement of several pending jobs at once.
//
// Chromosome: for every job of the batch, the nodes it uses and the ranks on each. Decoding
// walks the jobs in batch (priority) order on a working copy of the snapshot and repairs each
// gene so that every child is feasible (capacity, backend, labels, memory, storage): ranks a
// node can no longer take are dropped and refilled in the smallest subtree around the job's
// first node, else by the topology search; a job that still does not fit is left out (all or
// nothing). The repaired gene is written back (Lamarckian). Fitness is EvaluateBatch's cost
// (computed per job with the tier costs and switch loads cached once per call).
//
// "Improved": the population is seeded with the heuristics' solutions (topology, topology
// least-loaded-first, best-fit, first-fit, spread), the best of them after local search, and
// mutants of topology's and of that one; elitism; tournament selection; crossover that keeps
// whole subtrees (per job, or every job inside a random switch subtree from one parent); adaptive
// mutation (raised while the best stalls, reset on improvement); a seed and a step budget
// (generations x population decodes); an early stop after `patience` generations without
// improvement.
//
// Memetic: the best seed and the final best go through a local search that takes a few jobs
// out of the placement and puts them back one by one, each on its cheapest candidate given
// the others (per switch subtree, best-fit descent and the fewest nodes; per leaf, the best
// single node; ties go to the tightest fit): single jobs, then pairs in both orders (the moves
// that let a large job take a node a small one can leave); in batches of up to 8 jobs also
// pairs with the first job on its second or third choice, every triple and the whole batch
// reordered; then random groups of two or three. A move is kept only when the batch cost
// drops; the work is bounded in insertions.
//
// Where every job takes whole GPUs, decoding and the local search take GPUs as drafts (the
// first free ones of each node: what a node can take next depends only on how many are free)
// and the winner's GPUs are picked at the end as the other strategies do. The result is
// checked with EvaluateBatch against topology's own placement and never costs more.
#include <algorithm>
#include <optional>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/genetic_operators.h"
#include "tianshu/placement/internal/genome.h"
#include "tianshu/placement/internal/genome_decoder.h"
#include "tianshu/placement/internal/local_search.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/objective.h"

// The chromosome and its pricing live in internal/genome and internal/pricer, decoding and repair
// in internal/genome_decoder, the memetic local search in internal/local_search and the
// operators in internal/genetic_operators; this file is the search loop.
namespace tianshu::placement::internal {
namespace {

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
    const std::vector<Outcome> topology_out = NewTopology(options_)->PlaceBatch(s, reqs);
    if (jobs == 1 && !topology_out.front().placed()) return Finish(s, reqs, topology_out);
    // No search where none can find a cheaper one (a 1,024-GPU gang on idle leaves spent about
    // 50 ms of the server's cycle, under its lock, in a search that could only tie).
    // (Not for nested gang groups: the search does not see them, and Grouped judges the split.)
    if (jobs == 1 && reqs.front().groups.empty() &&
        NoneCheaper(s, reqs.front(), topology_out.front())) {
      return Finish(s, reqs, topology_out);
    }
    GenomeDecoder decoder(s, reqs, options_);
    LocalSearch local(&decoder, reqs);
    const auto& eligible = local.eligible();

    std::vector<Genome> pop;
    // Seeds: the heuristics' batch solutions.
    auto seed_from = [&](const std::vector<Outcome>& placed) {
      Genome x;
      for (const Outcome& o : placed) x.genes.push_back(GeneOf(o));
      decoder.Decode(&x);
      pop.push_back(std::move(x));
    };
    seed_from(topology_out);
    const Genome topology_seed = pop.front();
    {
      // Every job on the least-loaded subtree that holds it.
      Genome x;
      x.genes.assign(jobs, NodeCounts{{kLeastLoaded, 0}});
      decoder.Decode(&x);
      pop.push_back(std::move(x));
    }
    seed_from(NewBestFit(options_)->PlaceBatch(s, reqs));
    seed_from(NewFirstFit(options_)->PlaceBatch(s, reqs));
    seed_from(NewSpread(options_)->PlaceBatch(s, reqs));
    auto by_cost = [](const Genome& a, const Genome& b) { return a.cost < b.cost; };
    std::stable_sort(pop.begin(), pop.end(), by_cost);
    // Memetic seed: the best heuristic solution after local search.
    {
      Genome x = pop.front();
      local.Improve(&x, &rng);
      pop.insert(pop.begin(), std::move(x));
    }
    while (static_cast<int>(pop.size()) < g.population) {
      Genome x = rng.Unit() < 0.5 ? topology_seed : pop.front();
      Mutate(reqs, eligible, 0.5, &rng, &x);
      decoder.Decode(&x);
      pop.push_back(std::move(x));
    }
    std::stable_sort(pop.begin(), pop.end(), by_cost);

    double best = pop.front().cost;
    double improved_from = best;
    double mutation = g.mutation;
    int stall = 0;
    for (int gen = 0; gen < g.generations && stall < g.patience; ++gen) {
      std::vector<Genome> next(pop.begin(),
                               pop.begin() + std::min<int>(g.elite, static_cast<int>(pop.size())));
      while (static_cast<int>(next.size()) < g.population) {
        const Genome& a = Tournament(pop, g.tournament, &rng);
        const Genome& b = Tournament(pop, g.tournament, &rng);
        Genome child;
        if (rng.Unit() < g.crossover) {
          child = Crossover(s, a, b, &rng);
        } else {
          child.genes = a.genes;
        }
        Mutate(reqs, eligible, mutation, &rng, &child);
        decoder.Decode(&child);
        next.push_back(std::move(child));
      }
      std::stable_sort(next.begin(), next.end(), by_cost);
      pop = std::move(next);
      if (pop.front().cost < best - kCostEps) {
        best = pop.front().cost;
        stall = 0;
        mutation = g.mutation;
      } else {
        ++stall;
        mutation = std::min(0.6, mutation * 1.5);
      }
    }
    // Memetic finish: local search on the best, unless it is the one already searched.
    if (pop.front().cost < improved_from - kCostEps) local.Improve(&pop.front(), &rng);
    // The guarantee, on the measure itself: never worse than topology's placement.
    const model::ResourceWeight& w = options_.weights;
    std::optional<std::vector<Outcome>> out = decoder.Materialize(pop.front());
    if (!out || EvaluateBatch(s, reqs, *out, w).total >
                    EvaluateBatch(s, reqs, topology_out, w).total + kCostEps) {
      out = topology_out;
    }
    return Finish(s, reqs, std::move(*out));
  }

 private:
  std::vector<Outcome> Finish(const ClusterState& s, std::span<const PlacementRequest> reqs,
                              std::vector<Outcome> out) const {
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

  StrategyOptions options_;
};

}  // namespace

std::unique_ptr<Strategy> NewGenetic(const StrategyOptions& o) {
  return std::make_unique<Genetic>(o);
}

}  // namespace tianshu::placement::internal
