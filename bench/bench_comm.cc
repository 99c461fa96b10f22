// How long comm/ takes to price collectives: the call placement/ makes per candidate.
// Target (issue 3): one AllReduce on a 1024-GPU placement under 10 us.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "tianshu/comm/cost_model.h"

namespace {

using namespace tianshu;

const model::Topology& Cluster() {
  static const model::Topology t = *model::GenerateFatTree({.nodes = 256, .nodes_per_leaf = 16});
  return t;
}

void BM_AllReduce1024Gpus(benchmark::State& state) {
  const auto& topo = Cluster();
  std::vector<int> gpus(1024);
  std::iota(gpus.begin(), gpus.end(), 0);
  for (auto _ : state) {
    double s = comm::CollectiveSeconds(topo, gpus, comm::Collective::kAllReduce, int64_t{1} << 30,
                                       comm::Algorithm::kAuto);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_AllReduce1024Gpus);

// A data-parallel group of 128 ranks, one per node, scattered over leaves in rank order.
void BM_AllReduce128RanksOnePerNode(benchmark::State& state) {
  const auto& topo = Cluster();
  std::vector<int> gpus;
  for (int i = 0; i < 128; ++i) gpus.push_back(((i * 37) % 256) * 8);
  for (auto _ : state) {
    double s = comm::CollectiveSeconds(topo, gpus, comm::Collective::kAllReduce, 8 << 20);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_AllReduce128RanksOnePerNode);

void BM_AllToAll1024Gpus(benchmark::State& state) {
  const auto& topo = Cluster();
  std::vector<int> gpus(1024);
  std::iota(gpus.begin(), gpus.end(), 512);
  for (auto _ : state) {
    double s = comm::CollectiveSeconds(topo, gpus, comm::Collective::kAllToAll, 256 << 20);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_AllToAll1024Gpus);

}  // namespace

BENCHMARK_MAIN();
