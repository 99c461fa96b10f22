#include "tianshu/comm/comm_plan.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace tianshu::comm {
namespace {

model::Topology FatTree(int nodes, const std::string& gpu = "A100-80GB") {
  return *model::GenerateFatTree({.nodes = nodes, .gpu = gpu, .nodes_per_leaf = 4});
}

std::vector<int> Iota(int n, int from = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

int Node(const model::Topology& t, int gpu) { return NodeOfGpu(t, gpu); }

TEST(CommPlan, TensorGroupsInsideNodesDataGroupsOnOneRail) {
  auto topo = FatTree(8);
  // The allocation arrives shuffled; the plan orders it by the fabric.
  std::vector<int> gpus = Iota(64);
  std::reverse(gpus.begin(), gpus.end());
  auto plan = PlanCommunicators(topo, gpus, {.tp = 8, .pp = 2, .dp = 4});
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ(plan->NumGroups(GroupKind::kTensor), 8);
  EXPECT_EQ(plan->NumGroups(GroupKind::kData), 16);
  EXPECT_EQ(plan->NumGroups(GroupKind::kPipeline), 32);
  for (int i = 0; i < plan->NumGroups(GroupKind::kTensor); ++i) {
    auto g = plan->GroupGpus(GroupKind::kTensor, i);
    std::set<int> nodes;
    for (int x : g) nodes.insert(Node(topo, x));
    EXPECT_EQ(nodes.size(), 1u) << "tp group " << i;
  }
  for (int i = 0; i < plan->NumGroups(GroupKind::kData); ++i) {
    auto g = plan->GroupGpus(GroupKind::kData, i);
    std::set<int> locals;
    for (int x : g) locals.insert(x % 8);
    EXPECT_EQ(locals.size(), 1u) << "dp group " << i << " is not rail-aligned";
  }
  // Every GPU is used exactly once.
  std::set<int> all(plan->rank_to_gpu.begin(), plan->rank_to_gpu.end());
  EXPECT_EQ(all.size(), 64u);
}

TEST(CommPlan, PipelineInnerKeepsStagesOnNeighbouringNodes) {
  auto topo = FatTree(16);
  auto gpus = Iota(128);
  CommOptions o;
  o.order = RankOrder::kPipelineInner;
  auto plan = PlanCommunicators(topo, gpus, {.tp = 8, .pp = 4, .dp = 4}, o);
  ASSERT_TRUE(plan.has_value());
  auto pp = plan->GroupGpus(GroupKind::kPipeline, 0);
  // Four stages on four consecutive nodes of one leaf.
  for (int x : pp) EXPECT_EQ(topo.nodes[Node(topo, x)].leaf, topo.nodes[Node(topo, pp[0])].leaf);
  CommOptions d;
  auto data_inner = PlanCommunicators(topo, gpus, {.tp = 8, .pp = 4, .dp = 4}, d);
  auto dp = data_inner->GroupGpus(GroupKind::kData, 0);
  for (int x : dp) EXPECT_EQ(topo.nodes[Node(topo, x)].leaf, topo.nodes[Node(topo, dp[0])].leaf);
}

TEST(CommPlan, SpreadTensorPutsPeersOnDifferentLeaves) {
  auto topo = FatTree(8);
  auto gpus = Iota(64);
  CommOptions o;
  o.order = RankOrder::kSpreadTensor;
  auto plan = PlanCommunicators(topo, gpus, {.tp = 8, .pp = 1, .dp = 8}, o);
  ASSERT_TRUE(plan.has_value());
  auto g = plan->GroupGpus(GroupKind::kTensor, 0);
  std::set<int> nodes, leaves;
  for (int x : g) {
    nodes.insert(Node(topo, x));
    leaves.insert(topo.nodes[Node(topo, x)].leaf);
  }
  EXPECT_EQ(nodes.size(), 8u);
  EXPECT_EQ(leaves.size(), 2u);
  EXPECT_NE(topo.nodes[Node(topo, g[0])].leaf, topo.nodes[Node(topo, g[1])].leaf);
}

TEST(CommPlan, RejectsMismatchedLayouts) {
  auto topo = FatTree(2);
  EXPECT_FALSE(PlanCommunicators(topo, Iota(16), {.tp = 8, .pp = 1, .dp = 1}).has_value());
  EXPECT_FALSE(PlanCommunicators(topo, Iota(16), {.tp = 8, .pp = 1, .dp = 2, .ep = 3}).has_value());
  EXPECT_FALSE(PlanCommunicators(topo, Iota(16, 8), {.tp = 8, .pp = 1, .dp = 2}).has_value());
}

TEST(CommPlan, EnvironmentPerBackend) {
  CommOptions o;
  o.buffer_bytes = 8 << 20;
  o.traffic = TrafficClass::kPriority;
  auto nccl = CommEnvironment(o, {Algorithm::kRing, Algorithm::kTree}, {Protocol::kLL}, false);
  EXPECT_EQ(nccl["NCCL_ALGO"], "Tree,Ring");
  EXPECT_EQ(nccl["NCCL_PROTO"], "LL,Simple");
  EXPECT_EQ(nccl["NCCL_BUFFSIZE"], std::to_string(8 << 20));
  EXPECT_EQ(nccl["NCCL_IB_TC"], "136");
  EXPECT_EQ(nccl["NCCL_IB_SL"], "4");
  EXPECT_EQ(nccl["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(nccl["NCCL_SOCKET_IFNAME"], "^lo,docker");
  o.backend = model::Backend::kAscend;
  auto hccl = CommEnvironment(o, {}, {}, false);
  EXPECT_EQ(hccl["HCCL_CONNECT_TIMEOUT"], "600");
  EXPECT_EQ(hccl["HCCL_BUFFSIZE"], "8");  // MB
  EXPECT_EQ(hccl.count("NCCL_ALGO"), 0u);
  o.backend = model::Backend::kRocm;
  EXPECT_EQ(CommEnvironment(o, {}, {}, false).count("NCCL_BUFFSIZE"), 1u);
  o.backend = model::Backend::kMusa;
  EXPECT_EQ(CommEnvironment(o, {}, {}, false).count("MCCL_BUFFSIZE"), 1u);
  // An explicit ALLREDUCE_ALGO pins the all-reduce's algorithm, and only the all-reduce's.
  o.backend = model::Backend::kCuda;
  o.allreduce_algo = Algorithm::kRing;
  EXPECT_EQ(CommEnvironment(o, {Algorithm::kTree}, {}, false)["NCCL_ALGO"], "allreduce:ring");
  o.allreduce_algo = Algorithm::kTree;
  EXPECT_EQ(CommEnvironment(o, {Algorithm::kRing}, {}, false)["NCCL_ALGO"], "allreduce:tree");
}

TEST(CommPlan, ThresholdSplitsLatencyAndBandwidthAlgorithms) {
  auto topo = *model::GenerateFatTree({.nodes = 64, .nodes_per_leaf = 16});
  auto g = Iota(512);
  CommOptions o;
  o.allreduce_threshold_bytes = 8'000'000;
  auto small = PlanCollective(topo, g, Collective::kAllReduce, 1 << 20, o);
  auto large = PlanCollective(topo, g, Collective::kAllReduce, 8'000'000, o);
  EXPECT_EQ(small.algorithm, Algorithm::kTree);
  EXPECT_EQ(large.algorithm, Algorithm::kRing);
  o.allreduce_algo = Algorithm::kHierarchical;
  EXPECT_EQ(PlanCollective(topo, g, Collective::kAllReduce, 1 << 20, o).algorithm,
            Algorithm::kHierarchical);
}

TEST(CommPlan, OptionsFromEngineConfig) {
  model::EngineConfig c;
  c.allreduce_algo = "tree";
  c.network_buffer_size_bytes = 16 << 20;
  c.allreduce_threshold_bytes = 1 << 20;
  auto o = CommOptionsFrom(c, model::Backend::kAscend, -5);
  EXPECT_EQ(o.allreduce_algo, Algorithm::kTree);
  EXPECT_EQ(o.buffer_bytes, 16 << 20);
  EXPECT_EQ(o.allreduce_threshold_bytes, 1 << 20);
  EXPECT_EQ(o.traffic, TrafficClass::kBulk);
  EXPECT_EQ(o.backend, model::Backend::kAscend);
}

}  // namespace
}  // namespace tianshu::comm
