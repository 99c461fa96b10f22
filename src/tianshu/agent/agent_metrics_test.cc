#include "tianshu/agent/agent_metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "tianshu/agent/log_server.h"

namespace tianshu::agent {
namespace {

AgentFigures Figures() {
  AgentFigures f;
  f.node = "n0";
  f.cgroup_mode = "v2";
  f.devices = {{.index = 0, .model = "A100-80GB", .uuid = "GPU-a"},
               {.index = 1, .model = "A100-80GB", .uuid = "GPU-b"}};
  f.held.jobs = 1;
  f.held.cgroups = 1;
  f.held.ranks_running = 2;
  f.held.orders = {{"launch", 3}};
  f.session.heartbeats = 7;
  f.session.heartbeat_failures = 2;
  f.registrations = 1;
  f.registered = true;
  return f;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(AgentMetrics, CountsWhatTheAgentHoldsAndDid) {
  const std::string t = RenderAgentMetrics(Figures());
  for (const char* line :
       {"tianshu_agent_info{node=\"n0\",cgroup_mode=\"v2\"} 1", "tianshu_agent_registered 1",
        "tianshu_agent_heartbeats_total 7", "tianshu_agent_heartbeat_failures_total 2",
        "tianshu_agent_ranks_running 2", "tianshu_agent_cgroups 1",
        "tianshu_agent_orders_total{kind=\"launch\"} 3",
        "tianshu_agent_orders_total{kind=\"stop\"} 0", "tianshu_agent_gpus 2",
        "tianshu_agent_gpu_measured 0",
        "tianshu_agent_gpu_info{gpu=\"1\",model=\"A100-80GB\",uuid=\"GPU-b\",declared=\"false\"} "
        "1"}) {
    EXPECT_TRUE(Has(t, line)) << line << "\n" << t;
  }
  // Not measured: no utilisation sample at all, and no lease in force: no lease family.
  EXPECT_EQ(t.find("tianshu_agent_gpu_utilization_ratio{"), std::string::npos) << t;
  EXPECT_EQ(t.find("tianshu_agent_lease_remaining_seconds"), std::string::npos) << t;
}

TEST(AgentMetrics, ExportsOnlyWhatNvmlMeasured) {
  AgentFigures f = Figures();
  f.measuring = true;
  f.usage = {{.index = 0, .utilization = 0.25, .memory_used_bytes = 1024, .healthy = true},
             {.index = 1, .healthy = false}};  // lost: no utilisation
  f.lease_remaining_ns = 1'500'000'000;
  const std::string t = RenderAgentMetrics(f);
  EXPECT_TRUE(Has(t, "tianshu_agent_gpu_utilization_ratio{gpu=\"0\"} 0.25")) << t;
  EXPECT_TRUE(Has(t, "tianshu_agent_gpu_memory_used_bytes{gpu=\"0\"} 1024")) << t;
  EXPECT_TRUE(Has(t, "tianshu_agent_gpu_healthy{gpu=\"1\"} 0")) << t;
  EXPECT_EQ(t.find("tianshu_agent_gpu_utilization_ratio{gpu=\"1\"}"), std::string::npos) << t;
  EXPECT_TRUE(Has(t, "tianshu_agent_lease_remaining_seconds 1.5")) << t;
}

TEST(AgentMetrics, ServedBesideTheLogsWithoutAToken) {
  AgentMetrics metrics;
  metrics.Publish(Figures());
  auto server = LogServer::Start({.host = "127.0.0.1",
                                  .port = 0,
                                  .token = "log-key",
                                  .workdir = "/nonexistent",
                                  .metrics = [&metrics] { return metrics.Render(); }});
  ASSERT_TRUE(server) << server.error().message;
  httplib::Client c("127.0.0.1", (*server)->port());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_TRUE(Has(res->body, "tianshu_agent_ranks_running 2")) << res->body;
  // The logs still need the key.
  EXPECT_EQ(c.Get("/v1/logs/j-1/0")->status, 401);
}

}  // namespace
}  // namespace tianshu::agent
