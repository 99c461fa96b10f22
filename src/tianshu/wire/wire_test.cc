#include "tianshu/wire/wire.h"

#include <gtest/gtest.h>

namespace tianshu::wire {
namespace {

WorkOrder SampleLaunch() {
  WorkOrder w;
  w.id = "j-000001.a1.launch.node-0";
  w.kind = OrderKind::kLaunch;
  w.job_id = "j-000001";
  w.attempt = 1;
  LaunchOrder l;
  l.job_name = "gpt";
  l.backend = "cuda";
  l.world_size = 2;
  l.master_addr = "127.0.0.1";
  l.master_port = 29501;
  l.checkpoint_dir = "/tmp/ckpt/j-000001";
  RankLaunch r;
  r.rank = 1;
  r.local_rank = 1;
  r.devices = {3};
  r.command = {"python3", "train.py"};
  r.env = {{"RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "3"}};
  l.ranks.push_back(r);
  l.cgroup.numa_nodes = {0};
  l.cgroup.devices = {3};
  w.launch = l;
  return w;
}

TEST(Wire, OrderRoundTrips) {
  WorkOrder w = SampleLaunch();
  auto back = ParseWorkOrder(ToJson(w).dump());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->id, w.id);
  ASSERT_TRUE(back->launch);
  EXPECT_EQ(back->launch->ranks[0].env.at("CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(back->launch->ranks[0].command[1], "train.py");
  EXPECT_EQ(back->launch->cgroup.devices, std::vector<int>{3});
}

TEST(Wire, RegisterAndHeartbeatRoundTrip) {
  RegisterRequest r;
  r.node = "node-0";
  r.agent_id = "a1";
  r.hardware.devices.push_back({.index = 0, .model = "A100-80GB", .declared = true});
  r.hardware.labels["leaf"] = "leaf-0";
  r.running.push_back({.order_id = "o", .job_id = "j", .attempt = 1, .rank = 0, .pid = 7});
  auto back = ParseRegisterRequest(ToJson(r).dump());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->hardware.devices[0].declared);
  EXPECT_EQ(back->running[0].pid, 7);

  Heartbeat h{.agent_id = "a1", .health = Health::kDegraded, .message = "fan"};
  h.devices.push_back({.index = 0, .utilization = 0.5});
  auto hb = ParseHeartbeat(ToJson(h).dump());
  ASSERT_TRUE(hb) << hb.error().message;
  EXPECT_EQ(hb->health, Health::kDegraded);
}

TEST(Wire, DeeplyNestedMessagesAreRefused) {
  std::string deep =
      R"({"agent_id":"a","reports":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto r = ParseReportBatch(deep);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("nested deeper than 64"), std::string::npos)
      << r.error().message;
}

TEST(Wire, StrictParsingNamesTheField) {
  auto a = ParseHeartbeat(R"({"agent_id":"a","health":"ok","bogus":1})");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().message, "bogus: unknown field");
  auto b = ParseHeartbeat(R"({"agent_id":"a","devices":[{"index":0,"utilization":2}]})");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, "devices[0].utilization: expected a number in [0, 1]");
  auto c = ParseReportBatch(R"({"agent_id":"a","reports":[{"order_id":"o","kind":"exploded"}]})");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("reports[0].kind"), std::string::npos);
  EXPECT_FALSE(ParseWorkOrder("{"));
  EXPECT_FALSE(ParseWorkOrder(R"({"id":"x","kind":"launch","job_id":"j"})"));  // no payload
  EXPECT_FALSE(ParseRegisterRequest(R"({"node":"a b","agent_id":"x","hardware":{}})"));
  EXPECT_FALSE(ParseHeartbeat(R"({"version":2,"agent_id":"a"})"));
}

}  // namespace
}  // namespace tianshu::wire
