#include "tianshu/model/topology.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tianshu/model/cluster_state.h"

namespace tianshu::model {
namespace {

TEST(FatTree, CountsAndCapacities) {
  auto t = GenerateFatTree({.nodes = 256, .nodes_per_leaf = 16, .oversubscription = 2});
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->NumNodes(), 256);
  EXPECT_EQ(t->NumGpus(), 2048);
  EXPECT_EQ(t->tiers.size(), 2u);
  const Switch& leaf = t->switches[t->nodes[0].leaf];
  EXPECT_EQ(leaf.nodes.size(), 16u);
  EXPECT_DOUBLE_EQ(leaf.downlink.Gbps(), 16 * 8 * 200.0);
  EXPECT_DOUBLE_EQ(leaf.uplink.Gbps(), 16 * 8 * 200.0 / 2);
  // 16 leaves, cut 8 | 8 at the spine: 8 leaves' uplinks.
  EXPECT_DOUBLE_EQ(t->BisectionBandwidth().Gbps(), 8 * 12800.0);
}

// The most whole GPUs free on one node below each switch follows takes, returns and health,
// also when the node that held the most loses some (kept incrementally by RefreshNode).
TEST(ClusterState, SwitchMaxNodeWholeGpusFollowsEveryChange) {
  auto t = GenerateFatTree({.nodes = 4, .nodes_per_leaf = 2});  // 8 GPUs a node, 2 leaves
  ASSERT_TRUE(t) << t.error().message;
  ClusterState s(*t);
  const int root = t->Root();
  const int leaf0 = t->nodes[0].leaf;
  const int leaf1 = t->nodes[2].leaf;
  auto take = [&](int node, int gpus) {
    for (int g = 0; g < gpus; ++g) {
      const int gpu = t->nodes[node].first_gpu + g;
      ASSERT_TRUE(s.TakeGpu(gpu, kMilliPerGpu));
    }
  };
  // The brute-force answer, for every switch.
  auto check = [&](const char* when) {
    for (size_t sw = 0; sw < t->switches.size(); ++sw) {
      int best = 0;
      for (int n = 0; n < t->NumNodes(); ++n) {
        for (int up = t->nodes[n].leaf; up >= 0; up = t->switches[up].parent) {
          if (up == static_cast<int>(sw)) best = std::max(best, s.FreeWholeGpus(n));
        }
      }
      EXPECT_EQ(s.SwitchMaxNodeWholeGpus(static_cast<int>(sw)), best) << when << ", switch " << sw;
    }
  };
  check("idle");
  take(0, 3);  // node 0: 5, node 1: 8
  take(1, 6);  // node 1: 2, the leaf's largest shrinks below node 0
  check("node 1 shrank");
  EXPECT_EQ(s.SwitchMaxNodeWholeGpus(leaf0), 5);
  EXPECT_EQ(s.SwitchMaxNodeWholeGpus(root), 8);
  take(2, 8);
  take(3, 1);
  check("leaf 1 full but one node");
  EXPECT_EQ(s.SwitchMaxNodeWholeGpus(leaf1), 7);
  s.SetHealthy(3, false);
  check("node 3 unhealthy");
  EXPECT_EQ(s.SwitchMaxNodeWholeGpus(leaf1), 0);
  EXPECT_EQ(s.SwitchMaxNodeWholeGpus(root), 5);
  ASSERT_TRUE(s.ReturnGpu(t->nodes[1].first_gpu, kMilliPerGpu));
  s.SetHealthy(3, true);
  check("returned and healthy again");
  EXPECT_EQ(s.SwitchMaxNodeWholeGpus(root), 7);
}

TEST(FatTree, CommonTierCountsHops) {
  auto t = GenerateFatTree({.nodes = 64, .nodes_per_leaf = 8, .leaves_per_spine = 4});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tiers.size(), 3u);
  EXPECT_EQ(t->CommonTier(3, 3), -1);
  EXPECT_EQ(t->CommonTier(0, 7), 0);
  EXPECT_EQ(t->CommonTier(0, 8), 1);
  EXPECT_EQ(t->CommonTier(0, 40), 2);
  EXPECT_EQ(t->NodesUnder(t->AncestorAt(40, 1)).size(), 32u);
}

TEST(FatTree, SpecParsing) {
  auto o = ParseFatTreeSpec(
      "fat-tree:nodes=256,gpus_per_node=8,gpu=A100-80GB,leaf_radix=16,oversubscription=2");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->nodes, 256);
  EXPECT_EQ(o->nodes_per_leaf, 16);
  EXPECT_DOUBLE_EQ(o->oversubscription, 2);
  auto bad = ParseFatTreeSpec("fat-tree:nodez=4");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "fat-tree: unknown key 'nodez' (did you mean 'nodes'?)");
  EXPECT_FALSE(GenerateFatTree({.nodes = 0}));
  EXPECT_FALSE(GenerateFatTree({.gpu = "Z9000"}));
}

TEST(Topology, FinalizeRejectsTwoRoots) {
  Topology t;
  t.tiers = {{"leaf"}};
  t.switches = {{.name = "a", .tier = 0}, {.name = "b", .tier = 0}};
  auto st = t.Finalize();
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("several top-level switches"), std::string::npos);
}

}  // namespace
}  // namespace tianshu::model
