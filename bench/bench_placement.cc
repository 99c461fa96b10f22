// Placement benchmarks (issue 4): decision time of topology and genetic, exact on a small
// batch, and the quality of every strategy against exact on random small instances.
//   build/bench/bench_placement --benchmark_filter=Topology
//   build/bench/bench_placement --benchmark_filter=Quality
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tianshu/model/topology.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/objective.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement {
namespace {

using internal::Rng;

model::Topology Cluster(int gpus) {
  const int nodes = gpus / 8;
  const int leaves = nodes / 16;
  // 2,048 GPUs: leaf/spine; larger: 32 leaves per spine block under a core tier.
  return *model::GenerateFatTree(
      {.nodes = nodes, .nodes_per_leaf = 16, .leaves_per_spine = leaves > 16 ? 32 : 0});
}

// A busy cluster: `share` of the nodes fully allocated, and a few stray GPUs elsewhere.
void Busy(ClusterState* s, double share, uint64_t seed) {
  Rng rng(seed);
  const auto& t = s->topology();
  for (int n = 0; n < t.NumNodes(); ++n) {
    const double u = rng.Unit();
    const int first = t.nodes[n].first_gpu;
    if (u < share) {
      for (int g = 0; g < t.GpusOn(n); ++g) (void)s->TakeGpu(first + g, 1000);
    } else if (u < share + 0.1) {
      (void)s->TakeGpu(first + rng.Below(t.GpusOn(n)), 1000);
    }
  }
}

void BM_TopologyGang256(benchmark::State& state) {
  model::Topology t = Cluster(static_cast<int>(state.range(0)));
  ClusterState s(t);
  Busy(&s, 0.5, 1);
  auto strategy = *MakeStrategy("topology");
  PlacementRequest r{.name = "gang", .ranks = 256};
  int placed = 0;
  for (auto _ : state) {
    Outcome o = strategy->Place(s, r);
    placed += o.placed();
    benchmark::DoNotOptimize(o);
  }
  state.counters["placed"] = placed == static_cast<int>(state.iterations());
  state.counters["gpus"] = t.NumGpus();
}
BENCHMARK(BM_TopologyGang256)->Arg(2048)->Arg(16384)->Arg(131072)->Unit(benchmark::kMillisecond);

std::vector<PlacementRequest> Batch(int jobs, uint64_t seed) {
  Rng rng(seed);
  const int sizes[] = {1, 2, 4, 8, 8, 16, 16, 32, 64};
  std::vector<PlacementRequest> v;
  for (int j = 0; j < jobs; ++j) {
    v.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(9)]});
  }
  return v;
}

void BM_GeneticBatch32(benchmark::State& state) {
  model::Topology t = Cluster(2048);
  ClusterState s(t);
  Busy(&s, 0.4, 2);
  auto genetic = *MakeStrategy("genetic");
  auto topology = *MakeStrategy("topology");
  std::vector<PlacementRequest> reqs = Batch(32, 3);
  std::vector<Outcome> out;
  for (auto _ : state) {
    out = genetic->PlaceBatch(s, reqs);
    benchmark::DoNotOptimize(out);
  }
  model::ResourceWeight w;
  BatchCost g = EvaluateBatch(s, reqs, out, w);
  BatchCost p = EvaluateBatch(s, reqs, topology->PlaceBatch(s, reqs), w);
  state.counters["cost"] = g.total;
  state.counters["topology_cost"] = p.total;
  state.counters["network"] = g.network;
  state.counters["topology_network"] = p.network;
  state.counters["unplaced"] = g.unplaced_jobs;
  state.counters["max_tier"] = g.max_tier_crossed;
}
BENCHMARK(BM_GeneticBatch32)->Unit(benchmark::kMillisecond);

void BM_ExactBatch8x32(benchmark::State& state) {
  model::Topology t = *model::GenerateFatTree({.nodes = 32, .nodes_per_leaf = 8});
  ClusterState s(t);
  Busy(&s, 0.3, 4);
  auto exact = *MakeStrategy("exact");
  std::vector<PlacementRequest> reqs = Batch(8, 5);
  std::vector<Outcome> out;
  for (auto _ : state) {
    out = exact->PlaceBatch(s, reqs);
    benchmark::DoNotOptimize(out);
  }
  state.counters["cost"] = EvaluateBatch(s, reqs, out, model::ResourceWeight{}).total;
  bool proven = true;
  for (const Outcome& o : out) proven = proven && o.reason.find("not proven") == std::string::npos;
  state.counters["proven_optimal"] = proven;
  auto topology = *MakeStrategy("topology");
  auto genetic = *MakeStrategy("genetic");
  state.counters["topology_cost"] =
      EvaluateBatch(s, reqs, topology->PlaceBatch(s, reqs), model::ResourceWeight{}).total;
  state.counters["genetic_cost"] =
      EvaluateBatch(s, reqs, genetic->PlaceBatch(s, reqs), model::ResourceWeight{}).total;
}
BENCHMARK(BM_ExactBatch8x32)->Iterations(1)->Unit(benchmark::kMillisecond);

// 200 random small instances: 16 nodes in 4 leaves (2 spines when `3tier`), fragmented, a
// batch of 4-6 jobs. Gap = (cost - exact) / exact, per strategy, averaged.
void BM_QualityGap(benchmark::State& state) {
  const std::vector<std::string> names = {"genetic", "topology", "best-fit", "first-fit",
                                          "spread",  "random",   "fgd"};
  std::map<std::string, double> gap_sum;
  std::map<std::string, double> gap_max;
  int genetic_worse = 0, exact_done = 0, instances = 0;
  for (auto _ : state) {
    for (int i = 0; i < 200; ++i) {
      Rng rng(1000 + i);
      const bool three = i % 2 == 1;
      model::Topology t = *model::GenerateFatTree({.nodes = 16,
                                                   .nodes_per_leaf = 4,
                                                   .leaves_per_spine = three ? 2 : 0,
                                                   .oversubscription = three ? 2.0 : 1.0});
      ClusterState s(t);
      const double share = 0.3 + 0.4 * rng.Unit();
      for (int g = 0; g < t.NumGpus(); ++g) {
        if (rng.Unit() < share) (void)s.TakeGpu(g, 1000);
      }
      std::vector<PlacementRequest> reqs;
      const int jobs = 4 + rng.Below(3);
      const int sizes[] = {1, 2, 4, 6, 8, 12, 16};
      for (int j = 0; j < jobs; ++j) {
        reqs.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(7)]});
      }
      StrategyOptions o;
      o.seed = 7 + i;
      auto exact = *MakeStrategy("exact", o);
      std::vector<Outcome> e = exact->PlaceBatch(s, reqs);
      bool proven = true;
      for (const Outcome& x : e)
        proven = proven && x.reason.find("not proven") == std::string::npos;
      if (!proven) continue;
      ++exact_done;
      const double ce = EvaluateBatch(s, reqs, e, o.weights).total;
      std::map<std::string, double> c;
      for (const std::string& n : names) {
        auto st = *MakeStrategy(n, o);
        c[n] = EvaluateBatch(s, reqs, st->PlaceBatch(s, reqs), o.weights).total;
        const double gap = (c[n] - ce) / std::max(std::abs(ce), 1e-9);
        gap_sum[n] += gap;
        gap_max[n] = std::max(gap_max[n], gap);
      }
      genetic_worse += c["genetic"] > c["topology"] + 1e-9;
      ++instances;
    }
  }
  for (const std::string& n : names) {
    state.counters["gap_" + n] = gap_sum[n] / std::max(1, instances);
    state.counters["maxgap_" + n] = gap_max[n];
  }
  state.counters["exact_proven"] = exact_done;
  state.counters["genetic_worse_than_topology"] = genetic_worse;
}
BENCHMARK(BM_QualityGap)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace tianshu::placement

BENCHMARK_MAIN();
