// The tianshu binary, driven as a user would drive it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace tianshu {
namespace {

using testing::RunCommand;
const std::string kBin = TIANSHU_BINARY;
const std::string kSource = TIANSHU_SOURCE_DIR;
const std::string kShared = TIANSHU_SHARED_DATA;

TEST(Cli, ValidateAcceptsExamples) {
  auto r = RunCommand(kBin + " validate " + kSource + "/examples/*.yaml " + kSource +
                      "/examples/jobs/*.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cluster 'a100-2048': 256 nodes, 2048 GPUs"), std::string::npos) << r.out;
}

TEST(Cli, ValidateRejectsWithFileLineColumnAndExit1) {
  auto r = RunCommand("cd " + kSource + "/tests/data/bad && " + kBin +
                      " validate engine-unknown-key.yaml job-tp-not-divide.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("engine-unknown-key.yaml:2:3: scheduler.algoritm: unknown key 'algoritm' "
                       "(did you mean 'algorithm'?)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("job-tp-not-divide.yaml:4:19: parallelism.tp: tensor-parallel degree 3 "
                       "does not divide the 16 GPUs"),
            std::string::npos)
      << r.err;
}

TEST(Cli, ValidateJson) {
  auto r = RunCommand("cd " + kSource + "/tests/data/bad && " + kBin +
                      " validate --output json engine-weights-sum.yaml");
  EXPECT_EQ(r.exit_code, 1);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_FALSE(j[0]["valid"].get<bool>());
  EXPECT_EQ(j[0]["diagnostics"][0]["line"], 4);
  EXPECT_EQ(j[0]["diagnostics"][0]["path"], "cluster.resource_weight");
}

nlohmann::json Show(const std::string& cluster) {
  auto r = RunCommand(kBin + " topology show --output json " + cluster);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(Cli, TopologyShow2048) {
  auto j = Show(kSource + "/examples/cluster-2048.yaml");
  EXPECT_EQ(j["nodes"], 256);
  EXPECT_EQ(j["gpus"], 2048);
  EXPECT_EQ(j["gpus_by_model"]["A100-80GB"], 2048);
  ASSERT_EQ(j["tiers"].size(), 2u);
  EXPECT_EQ(j["tiers"][0]["name"], "leaf");
  EXPECT_EQ(j["tiers"][0]["switches"], 16);
  EXPECT_DOUBLE_EQ(j["tiers"][0]["uplink_gbps_per_switch"].get<double>(), 16 * 8 * 200.0);
  EXPECT_EQ(j["tiers"][0]["links_down"], 2048);  // one per NIC
  EXPECT_DOUBLE_EQ(j["tiers"][0]["oversubscription"].get<double>(), 1.0);
  // Non-blocking: half of the 256 x 1.6 Tb/s injection crosses the bisection.
  EXPECT_DOUBLE_EQ(j["bisection_gbps"].get<double>(), 256 * 1600.0 / 2);
}

TEST(Cli, TopologyShowOversubscribed4096) {
  auto j = Show(kSource + "/examples/cluster-4096.yaml");
  EXPECT_EQ(j["gpus"], 4096);
  ASSERT_EQ(j["tiers"].size(), 3u);
  EXPECT_EQ(j["tiers"][1]["switches"], 4);
  // 2:1 at the spine uplinks halves the bisection.
  EXPECT_DOUBLE_EQ(j["bisection_gbps"].get<double>(), 512 * 1600.0 / 2 / 2);
}

TEST(Cli, TopologyShowLingjun) {
  auto j = Show(kShared + "/lingjun/topo.csv");
  EXPECT_EQ(j["nodes"], 847);
  ASSERT_EQ(j["tiers"].size(), 3u);
  EXPECT_EQ(j["tiers"][0]["switches"], 119);
  EXPECT_EQ(j["tiers"][1]["switches"], 3);
  EXPECT_EQ(j["tiers"][2]["switches"], 1);
}

TEST(Cli, TopologyShowOpenb) {
  auto j = Show(kShared + "/openb/openb_node_list_gpu_node.csv");
  EXPECT_EQ(j["nodes"], 1213);
  EXPECT_EQ(j["gpus"], 6212);
  EXPECT_EQ(j["gpus_by_model"]["T4-16GB"], 842);
}

TEST(Cli, TopologyShowRefusesBadInput) {
  auto r = RunCommand(kBin + " topology show fat-tree:nodes=-3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "fat-tree: nodes must be a whole number, got '-3'\n");
  auto usage = RunCommand(kBin + " topology show");
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace tianshu
