#include <gtest/gtest.h>

#include <set>

#include "tianshu/model/load.h"
#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/testing.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement {
namespace {

std::set<int> Leaves(const model::Topology& t, const Outcome& o) {
  std::set<int> s;
  for (const RankSlot& r : o.ranks) s.insert(t.nodes[r.node].leaf);
  return s;
}
std::set<int> Nodes(const Outcome& o) {
  std::set<int> s;
  for (const RankSlot& r : o.ranks) s.insert(r.node);
  return s;
}

TEST(TopologyStrategy, SmallestSubtreeOnFatTree2048) {
  model::Topology t = testing::FatTree2048();
  ClusterState state(t);
  auto s = *MakeStrategy("topology");
  Outcome o8 = s->Place(state, {.name = "a", .ranks = 8});
  ASSERT_TRUE(o8.placed());
  EXPECT_EQ(Nodes(o8).size(), 1u);
  Outcome o128 = s->Place(state, {.name = "b", .ranks = 128});
  ASSERT_TRUE(o128.placed());
  EXPECT_EQ(Leaves(t, o128).size(), 1u);
  EXPECT_EQ(Nodes(o128).size(), 16u);
  Outcome o256 = s->Place(state, {.name = "c", .ranks = 256});
  ASSERT_TRUE(o256.placed());
  EXPECT_EQ(Leaves(t, o256).size(), 2u);
}

TEST(TopologyStrategy, PrefersTheMostUsedSubtreeThatFits) {
  model::Topology t = testing::FatTree2048();
  ClusterState state(t);
  // Leaf 3 is half full: a 64-GPU job goes there and leaves the idle leaves whole.
  for (int n = 48; n < 56; ++n) {
    for (int g = 0; g < 8; ++g) ASSERT_TRUE(state.TakeGpu(t.nodes[n].first_gpu + g, 1000));
  }
  auto s = *MakeStrategy("topology");
  Outcome o = s->Place(state, {.name = "j", .ranks = 64});
  ASSERT_TRUE(o.placed());
  ASSERT_EQ(Leaves(t, o).size(), 1u);
  EXPECT_EQ(*Leaves(t, o).begin(), t.nodes[48].leaf);
}

TEST(TopologyStrategy, SubNodeJobsKeepNvlinkSetsFree) {
  model::Topology t = testing::FatTree2048();
  ClusterState state(t);
  // Node 5 has GPU 0 busy: a 1-GPU job takes its PCIe partner (GPU 1) on that node.
  ASSERT_TRUE(state.TakeGpu(t.nodes[5].first_gpu, 1000));
  auto s = *MakeStrategy("topology");
  Outcome one = s->Place(state, {.name = "one", .ranks = 1});
  ASSERT_TRUE(one.placed());
  EXPECT_EQ(one.ranks[0].node, 5);
  EXPECT_EQ(one.ranks[0].gpu, t.nodes[5].first_gpu + 1);
  // A 2-GPU job on a fresh node takes one PCIe pair (beside a NIC).
  Outcome two = s->Place(state, {.name = "two", .ranks = 2});
  ASSERT_TRUE(two.placed());
  EXPECT_EQ(two.ranks[0].node, two.ranks[1].node);
  const auto& ty = t.TypeOf(two.ranks[0].node);
  int base = t.nodes[two.ranks[0].node].first_gpu;
  EXPECT_EQ(ty.gpu_pcie_switch[two.ranks[0].gpu - base],
            ty.gpu_pcie_switch[two.ranks[1].gpu - base]);
}

TEST(TopologyStrategy, PcieIslandsStayInOneIsland) {
  model::Topology t = *model::GenerateFatTree({.nodes = 4, .nodes_per_leaf = 4});
  t.types[0].intra_kind = model::IntraNodeKind::kNvLink;
  t.types[0].nvlink_domain_size = 4;
  ASSERT_TRUE(t.Finalize());
  ClusterState state(t);
  ASSERT_TRUE(state.TakeGpu(0, 1000));  // island 0 of node 0 has 3 free
  auto s = *MakeStrategy("topology");
  Outcome o = s->Place(state, {.name = "three", .ranks = 3});
  ASSERT_TRUE(o.placed());
  for (const RankSlot& r : o.ranks) {
    EXPECT_EQ(r.node, 0);
    EXPECT_LT(r.gpu, 4);
  }
}

TEST(TopologyStrategy, LingjunClosKeepsGangsUnderOneAsw) {
  auto t = model::LoadCluster("lingjun:" + testing::LingjunPath());
  ASSERT_TRUE(t) << t.error().message;
  ClusterState state(*t);
  auto s = *MakeStrategy("topology");
  int one_leaf = 0;
  for (int i = 0; i < 20; ++i) {
    PlacementRequest r{.name = "j" + std::to_string(i), .ranks = 32};
    Outcome o = s->Place(state, r);
    ASSERT_TRUE(o.placed()) << o.reason;
    one_leaf += Leaves(*t, o).size() == 1;
    EXPECT_TRUE(testing::ContiguousDomains(*t, o));
    ASSERT_TRUE(Apply(&state, r, o));
  }
  EXPECT_EQ(one_leaf, 20);
  // A gang larger than any ASW spans the fewest PSWs.
  Outcome big = s->Place(state, {.name = "big", .ranks = 512});
  ASSERT_TRUE(big.placed()) << big.reason;
  std::set<int> psws;
  for (const RankSlot& r : big.ranks) psws.insert(t->AncestorAt(r.node, 1));
  EXPECT_EQ(psws.size(), 1u);
}

TEST(Fit, NodeCapacityRespectsCpuAndMemory) {
  model::Topology t = testing::FatTree2048();
  ClusterState state(t);
  PlacementRequest r{.name = "x", .ranks = 8, .cpu_milli_per_rank = 40'000};
  EXPECT_EQ(NodeCapacity(state, 0, r), 3);  // 128 cores / 40
  r.single_node = true;
  EXPECT_EQ(NodeCapacity(state, 0, r), 0);
  EXPECT_EQ(NeverFits(state, r)->kind, OutcomeKind::kCanNeverFit);
}

}  // namespace
}  // namespace tianshu::placement
