#include <gtest/gtest.h>

#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/internal/testing.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement {
namespace {

TEST(ExactStrategy, OptimalOnSmallInstancesAndBelowHeuristics) {
  model::Topology t = *model::GenerateFatTree({.nodes = 16, .nodes_per_leaf = 4});
  auto exact = *MakeStrategy("exact");
  auto genetic = *MakeStrategy("genetic");
  auto topology = *MakeStrategy("topology");
  model::ResourceWeight w;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    internal::Rng rng(seed);
    ClusterState state(t);
    for (int g = 0; g < t.NumGpus(); ++g) {
      if (rng.Unit() < 0.5) {
        ASSERT_TRUE(state.TakeGpu(g, 1000));
      }
    }
    std::vector<PlacementRequest> reqs;
    const int sizes[] = {2, 4, 6, 8, 12};
    for (int j = 0; j < 5; ++j)
      reqs.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(5)]});
    auto e = exact->PlaceBatch(state, reqs);
    double ce = EvaluateBatch(state, reqs, e, w).total;
    double cg = EvaluateBatch(state, reqs, genetic->PlaceBatch(state, reqs), w).total;
    double cp = EvaluateBatch(state, reqs, topology->PlaceBatch(state, reqs), w).total;
    EXPECT_LE(ce, cg + 1e-6) << "seed " << seed;
    EXPECT_LE(ce, cp + 1e-6) << "seed " << seed;
    for (const Outcome& o : e) EXPECT_EQ(o.reason.find("not proven"), std::string::npos);
  }
}

TEST(ExactStrategy, RespectsFiltersOnLingjunSubset) {
  model::Topology t = testing::MixedBackends();
  ClusterState state(t);
  auto exact = *MakeStrategy("exact");
  Outcome o = exact->Place(state, {.name = "npu", .ranks = 16, .backend = model::Backend::kAscend});
  ASSERT_TRUE(o.placed()) << o.reason;
  for (const RankSlot& r : o.ranks) EXPECT_GE(r.node, 16);
}

}  // namespace
}  // namespace tianshu::placement
