#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tianshu::placement
