// How long estimate/ takes to search parallelism for a large job.
// Target (issue 3): an `auto` search for a 175B job on 1024 GPUs under 50 ms.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "tianshu/estimate/search.h"

namespace {

using namespace tianshu;

void BM_AutoSearch175bOn1024Gpus(benchmark::State& state) {
  const model::Topology topo = *model::GenerateFatTree({.nodes = 256, .nodes_per_leaf = 16});
  std::vector<int> gpus(1024);
  std::iota(gpus.begin(), gpus.end(), 0);
  const model::ModelSpec& m = *model::FindModelProfile("gpt3-175b");
  int evaluated = 0;
  for (auto _ : state) {
    auto r = estimate::SearchParallelism(topo, m, m.global_batch, gpus, {}, {});
    evaluated = r->evaluated;
    benchmark::DoNotOptimize(r);
  }
  state.counters["configurations"] = evaluated;
}
BENCHMARK(BM_AutoSearch175bOn1024Gpus)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
