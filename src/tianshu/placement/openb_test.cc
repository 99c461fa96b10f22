#include "tianshu/placement/openb.h"

#include <gtest/gtest.h>

#include <string>

namespace tianshu::placement {
namespace {

const std::string kDir = std::string(TIANSHU_DATA_DIR) + "/openb/";

// The shipped openb GPU nodes and default pods, read once per test (a missing file fails the
// test instead of crashing it).
class OpenbSample : public ::testing::Test {
 protected:
  void SetUp() override {
    auto nodes = ReadOpenbNodes(kDir + "openb_node_list_gpu_node.csv");
    ASSERT_TRUE(nodes) << nodes.error().message;
    nodes_ = *nodes;
    auto pods = ReadOpenbPods(kDir + "openb_pod_list_default.csv");
    ASSERT_TRUE(pods) << pods.error().message;
    pods_ = *pods;
  }
  std::vector<OpenbNode> nodes_;
  std::vector<OpenbPod> pods_;
};

TEST(Openb, ReadsTheTrace) {
  auto nodes = ReadOpenbNodes(kDir + "openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes) << nodes.error().message;
  EXPECT_EQ(nodes->size(), 1213u);
  int gpus = 0;
  for (const auto& n : *nodes) gpus += n.gpus;
  EXPECT_EQ(gpus, 6212);
  auto pods = ReadOpenbPods(kDir + "openb_pod_list_default.csv");
  ASSERT_TRUE(pods) << pods.error().message;
  EXPECT_EQ(pods->size(), 8152u);
  EXPECT_FALSE(ReadOpenbPods(kDir + "missing.csv"));
}

TEST_F(OpenbSample, FragmentationRunIsReproducible) {
  auto nodes = nodes_;
  auto pods = pods_;
  nodes.resize(200);
  pods.resize(1200);
  auto a = RunFragmentation(nodes, pods, "best-fit", {.inflate = 1.3, .seed = 42});
  auto b = RunFragmentation(nodes, pods, "best-fit", {.inflate = 1.3, .seed = 42});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_DOUBLE_EQ(a->allocation_ratio, b->allocation_ratio);
  EXPECT_GE(a->arrived_ratio, 1.3);
  EXPECT_GT(a->allocation_ratio, 0.5);
  EXPECT_LE(a->allocation_ratio, 1.0);
  EXPECT_GT(a->pods_failed, 0);
}

// The paper simulator's target workload (GetTypicalPods): kinds counted without memory,
// CPU-only kinds kept, and only the most popular kinds until they cover 95% of the pods.
TEST(Openb, PaperTypicalWorkloadKeepsThePopularKinds) {
  std::vector<PlacementRequest> pods;
  auto add = [&](int n, int64_t cpu, int ranks, int milli) {
    for (int i = 0; i < n; ++i) {
      PlacementRequest r;
      r.ranks = ranks;
      r.gpu_milli = milli;
      r.cpu_milli_per_rank = cpu;
      r.memory_bytes_per_rank = int64_t{1} << (20 + i % 3);  // memory: not part of the kind
      pods.push_back(r);
    }
  };
  add(60, 4000, 1, 500);   // 60%
  add(30, 8000, 1, 1000);  // 30%
  add(6, 2000, 1, 0);      // 6%: CPU-only, kept (60 + 30 + 6 = 96% >= 95%)
  add(4, 32000, 8, 1000);  // 4%: dropped
  auto typical = TypicalWorkload(pods, {.paper_typical = true, .popularity = 0.95});
  ASSERT_EQ(typical.size(), 3u);
  EXPECT_DOUBLE_EQ(typical[0].weight, 60);
  EXPECT_EQ(typical[0].gpu_milli, 500);
  EXPECT_EQ(typical[1].cpu_milli, 8000);
  EXPECT_EQ(typical[2].gpus, 0);  // the CPU-only kind
  auto all = TypicalWorkload(pods, {.paper_typical = true, .popularity = 1.0});
  EXPECT_EQ(all.size(), 4u);
}

// The paper's protocol (--faithful): originals first, copies after, the figure averaged over
// the placements while the arrived share rounds to 130%; reproducible for a seed.
TEST_F(OpenbSample, FaithfulRunReportsThePapersWindow) {
  auto nodes = nodes_;
  auto pods = pods_;
  nodes.resize(200);
  pods.resize(1200);
  FragmentationOptions o{.inflate = 1.3, .seed = 42};
  o.workload.paper_typical = true;
  o.paper_order = true;
  auto a = RunFragmentation(nodes, pods, "fgd", o);
  auto b = RunFragmentation(nodes, pods, "fgd", o);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_DOUBLE_EQ(a->allocation_ratio, b->allocation_ratio);
  // Copies stop before the next one would pass 130% (per-GPU share), so it ends just below.
  EXPECT_LE(a->arrived_ratio, 1.3);
  EXPECT_GT(a->arrived_ratio, 1.28);
  EXPECT_GT(a->allocation_ratio_window, 0.5);
  EXPECT_LE(a->allocation_ratio_window, a->allocation_ratio + 1e-12);  // allocation only grows
  o.seed = 43;
  auto c = RunFragmentation(nodes, pods, "fgd", o);
  ASSERT_TRUE(c);
  EXPECT_NE(a->allocation_ratio, c->allocation_ratio);
}

}  // namespace
}  // namespace tianshu::placement
