#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/internal/testing.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement {
namespace {

// A fragmented cluster and a batch of jobs of mixed sizes.
std::vector<PlacementRequest> Batch(int jobs, uint64_t seed) {
  internal::Rng rng(seed);
  const int sizes[] = {1, 2, 4, 8, 8, 16, 24, 32, 64};
  std::vector<PlacementRequest> v;
  for (int j = 0; j < jobs; ++j) {
    v.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(9)]});
  }
  return v;
}

void Fragment(ClusterState* s, uint64_t seed, double share) {
  internal::Rng rng(seed);
  for (int g = 0; g < s->topology().NumGpus(); ++g) {
    if (rng.Unit() < share) {
      ASSERT_TRUE(s->TakeGpu(g, 1000));
    }
  }
}

TEST(GeneticStrategy, NeverWorseThanTopologyOnFatTree2048) {
  model::Topology t = testing::FatTree2048();
  auto genetic = *MakeStrategy("genetic");
  auto topology = *MakeStrategy("topology");
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ClusterState state(t);
    Fragment(&state, seed, 0.6);
    auto reqs = Batch(32, seed);
    auto g = genetic->PlaceBatch(state, reqs);
    auto p = topology->PlaceBatch(state, reqs);
    model::ResourceWeight w;
    double cg = EvaluateBatch(state, reqs, g, w).total;
    double cp = EvaluateBatch(state, reqs, p, w).total;
    EXPECT_LE(cg, cp + 1e-9) << "seed " << seed;
  }
}

TEST(GeneticStrategy, NeverWorseThanTopologyOnLingjun) {
  auto t = model::LoadCluster("lingjun:" + testing::LingjunPath());
  ASSERT_TRUE(t) << t.error().message;
  auto genetic = *MakeStrategy("genetic");
  auto topology = *MakeStrategy("topology");
  ClusterState state(*t);
  Fragment(&state, 3, 0.5);
  auto reqs = Batch(24, 3);
  auto g = genetic->PlaceBatch(state, reqs);
  auto p = topology->PlaceBatch(state, reqs);
  model::ResourceWeight w;
  EXPECT_LE(EvaluateBatch(state, reqs, g, w).total, EvaluateBatch(state, reqs, p, w).total + 1e-9);
  for (const Outcome& o : g) EXPECT_TRUE(o.placed()) << o.reason;
}

// The quality benchmark's instances (bench_placement BM_QualityGap), a few of them: genetic
// within 2% of exact's optimum on average, never worse than topology.
TEST(GeneticStrategy, CloseToExactOnSmallInstances) {
  double gap_sum = 0;
  int instances = 0;
  for (int i = 0; i < 8; ++i) {
    internal::Rng rng(1000 + i);
    const bool three = i % 2 == 1;
    model::Topology t = *model::GenerateFatTree({.nodes = 16,
                                                 .nodes_per_leaf = 4,
                                                 .leaves_per_spine = three ? 2 : 0,
                                                 .oversubscription = three ? 2.0 : 1.0});
    ClusterState state(t);
    const double share = 0.3 + 0.4 * rng.Unit();
    for (int g = 0; g < t.NumGpus(); ++g) {
      if (rng.Unit() < share) {
        ASSERT_TRUE(state.TakeGpu(g, 1000));
      }
    }
    std::vector<PlacementRequest> reqs;
    const int jobs = 4 + rng.Below(3);
    const int sizes[] = {1, 2, 4, 6, 8, 12, 16};
    for (int j = 0; j < jobs; ++j)
      reqs.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(7)]});
    StrategyOptions o;
    o.seed = 7 + i;
    std::vector<Outcome> e = (*MakeStrategy("exact", o))->PlaceBatch(state, reqs);
    bool proven = true;
    for (const Outcome& x : e) proven = proven && x.reason.find("not proven") == std::string::npos;
    if (!proven) continue;
    const double ce = EvaluateBatch(state, reqs, e, o.weights).total;
    const double cg =
        EvaluateBatch(state, reqs, (*MakeStrategy("genetic", o))->PlaceBatch(state, reqs),
                      o.weights)
            .total;
    const double cp =
        EvaluateBatch(state, reqs, (*MakeStrategy("topology", o))->PlaceBatch(state, reqs),
                      o.weights)
            .total;
    EXPECT_LE(cg, cp + 1e-9) << "instance " << i;
    gap_sum += (cg - ce) / std::max(std::abs(ce), 1e-9);
    ++instances;
  }
  ASSERT_GT(instances, 4);
  EXPECT_LE(gap_sum / instances, 0.02);
}

}  // namespace
}  // namespace tianshu::placement
