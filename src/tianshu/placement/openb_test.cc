#include "tianshu/placement/openb.h"

#include <gtest/gtest.h>

#include <string>

namespace tianshu::placement {
namespace {

const std::string kDir = std::string(TIANSHU_SHARED_DATA) + "/openb/";

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

TEST(Openb, FragmentationRunIsReproducible) {
  auto nodes = *ReadOpenbNodes(kDir + "openb_node_list_gpu_node.csv");
  auto pods = *ReadOpenbPods(kDir + "openb_pod_list_default.csv");
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

}  // namespace
}  // namespace tianshu::placement
