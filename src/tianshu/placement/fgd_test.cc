#include "tianshu/placement/fgd.h"

#include <gtest/gtest.h>

#include "tianshu/placement/internal/testing.h"

namespace tianshu::placement {
namespace {

TEST(Fragmentation, MatchesThePaperDefinition) {
  model::Topology t =
      *model::GenerateFatTree({.nodes = 2, .gpus_per_node = 4, .nodes_per_leaf = 2});
  // Workload: half whole-GPU tasks, half 600-milli tasks.
  FragmentationModel f({{.cpu_milli = 1000, .gpus = 1, .gpu_milli = 1000, .weight = 1},
                        {.cpu_milli = 1000, .gpus = 1, .gpu_milli = 600, .weight = 1}},
                       t);
  int free[] = {1000, 500, 0, 700};
  // Whole tasks: 500 + 700 unusable; 600 tasks: 500 unusable.
  EXPECT_DOUBLE_EQ(f.Fragmentation(0, 64000, free), 0.5 * 1200 + 0.5 * 500);
  // No CPU left: every free share is a fragment.
  EXPECT_DOUBLE_EQ(f.Fragmentation(0, 0, free), 2200);
}

TEST(FgdStrategy, SharedTaskFillsTheMatchingHole) {
  model::Topology t = testing::FatTree2048();
  ClusterState state(t);
  ASSERT_TRUE(state.TakeGpu(t.nodes[7].first_gpu + 2, 500));
  StrategyOptions o;
  o.workload = {{.cpu_milli = 0, .gpus = 1, .gpu_milli = 1000, .weight = 3},
                {.cpu_milli = 0, .gpus = 1, .gpu_milli = 500, .weight = 1}};
  auto s = *MakeStrategy("fgd", o);
  Outcome r = s->Place(state, {.name = "half", .ranks = 1, .gpu_milli = 500});
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(r.ranks[0].gpu, t.nodes[7].first_gpu + 2);
}

TEST(FgdStrategy, WorksOnLingjunAndGangs) {
  auto t = model::LoadCluster("lingjun:" + testing::LingjunPath());
  ASSERT_TRUE(t) << t.error().message;
  ClusterState state(*t);
  auto s = *MakeStrategy("fgd");
  Outcome big = s->Place(state, {.name = "big", .ranks = 64});
  ASSERT_TRUE(big.placed()) << big.reason;
  Outcome small = s->Place(state, {.name = "small", .ranks = 1, .gpu_milli = 250});
  ASSERT_TRUE(small.placed()) << small.reason;
}

}  // namespace
}  // namespace tianshu::placement
