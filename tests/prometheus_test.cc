// A real Prometheus (Debian's `prometheus`) scraping `tianshu serve` (with the admin token as its
// bearer, from a credentials file) and a `tianshu agent` (its /metrics beside the rank logs) on
// loopback, with a one-GPU job running (issue 19): Prometheus finds both targets up, and its
// query API answers the node's allocated GPUs, the scheduling cycle's histogram and the agent's
// ranks; `promtool check metrics` passes on both endpoints; both processes log JSON lines.
// Skipped where prometheus or promtool is not installed (scripts/install-deps.sh installs them).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "testing/processes.h"
#include "testing/run_command.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tianshu::testing::Slurp;
using tianshu::testing::SpawnLogged;
using tianshu::testing::WaitForSeconds;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";

class PrometheusScrape : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kPrometheus) || !fs::exists(kPromtool)) {
      GTEST_SKIP() << kPrometheus << " or " << kPromtool
                   << " is not installed (Debian's prometheus; scripts/install-deps.sh)";
    }
    char tmpl[] = "/tmp/tianshu-prometheus-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    port_ = tianshu::testing::FreeLoopbackPort();
    // Two queues, one with a quota; the job runs in `research`, `production` stays empty.
    std::ofstream(dir_ + "/engine.yaml") << "queues:\n  - {name: research, quota: 1}\n"
                                            "  - {name: production, weight: 2}\n";
    server_ = SpawnLogged(
        {TIANSHU_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(port_), "--data",
         dir_ + "/server", "--config", dir_ + "/engine.yaml", "--log-format", "json"},
        dir_ + "/server.log");
    ASSERT_TRUE(WaitForSeconds([&] { return fs::exists(dir_ + "/server/token"); }, 30));
    token_ = Slurp(dir_ + "/server/token");
    while (!token_.empty() && (token_.back() == '\n' || token_.back() == ' ')) token_.pop_back();
    ASSERT_TRUE(WaitForSeconds([&] { return Get(port_, "/healthz").first == 200; }, 30))
        << Slurp(dir_ + "/server.log");
    agent_port_ = tianshu::testing::FreeLoopbackPort();
    std::vector<std::string> agent = {TIANSHU_BINARY,  "agent",
                                      "--server",      "127.0.0.1:" + std::to_string(port_),
                                      "--token-file",  dir_ + "/server/token",
                                      "--node",        "n0",
                                      "--workdir",     dir_ + "/agent",
                                      "--address",     "127.0.0.1:" + std::to_string(agent_port_),
                                      "--cgroup-mode", "none",
                                      "--log-format",  "json"};
    // Devices declared, or found through the stand-in NVML (the agent inherits the variable).
    if (fake_nvml_) {
      ::setenv("LD_LIBRARY_PATH", FAKE_NVML_DIR, 1);
    } else {
      agent.insert(agent.end(), {"--devices", "2xA100-80GB"});
    }
    agent_ = SpawnLogged(agent, dir_ + "/agent.log");
    if (fake_nvml_) ::unsetenv("LD_LIBRARY_PATH");
    ASSERT_TRUE(WaitForSeconds(
        [&] {
          auto [status, body] = Get(port_, "/v1/nodes", token_);
          auto j = json::parse(body, nullptr, false);
          return status == 200 && j.contains("nodes") && j["nodes"].size() == 1 &&
                 j["nodes"][0]["state"] == "ready";
        },
        30))
        << Slurp(dir_ + "/agent.log");
  }

  void TearDown() override {
    Stop(prometheus_);
    Stop(agent_);
    // The ranks (sleep) the agent left running: it keeps them for the next agent to adopt.
    std::ifstream journal(dir_ + "/agent/journal.jsonl");
    for (std::string line; std::getline(journal, line);) {
      auto r = json::parse(line, nullptr, false);
      if (r.is_object() && r.value("pid", 0) > 0) ::kill(-r["pid"].get<pid_t>(), SIGKILL);
    }
    Stop(server_);
    if (dir_.empty()) return;
    if (HasFailure()) {
      std::cout << "kept " << dir_ << " for inspection\n";
    } else {
      fs::remove_all(dir_);
    }
  }

  static void Stop(pid_t& pid) { tianshu::testing::Terminate(pid); }

  // GET http://127.0.0.1:PORT/PATH: (status, body), status -1 when nothing answered.
  static std::pair<int, std::string> Get(int port, const std::string& path,
                                         const std::string& bearer = "") {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(10, 0);
    httplib::Headers h;
    if (!bearer.empty()) h.emplace("Authorization", "Bearer " + bearer);
    auto r = c.Get(path, h);
    if (!r) return {-1, ""};
    return {r->status, r->body};
  }

  // Starts Prometheus scraping the server (bearer from the token file) and the agent every
  // second.
  void StartPrometheus() {
    prometheus_port_ = tianshu::testing::FreeLoopbackPort();
    std::ofstream(dir_ + "/prometheus.yml") << "global:\n"
                                               "  scrape_interval: 1s\n"
                                               "  scrape_timeout: 1s\n"
                                               "scrape_configs:\n"
                                               "  - job_name: tianshu-server\n"
                                               "    authorization:\n"
                                               "      type: Bearer\n"
                                               "      credentials_file: "
                                            << dir_ << "/server/token\n"
                                            << "    static_configs:\n"
                                               "      - targets: ['127.0.0.1:"
                                            << port_ << "']\n"
                                            << "  - job_name: tianshu-agent\n"
                                               "    static_configs:\n"
                                               "      - targets: ['127.0.0.1:"
                                            << agent_port_ << "']\n";
    prometheus_ = SpawnLogged(
        {kPrometheus, "--config.file=" + dir_ + "/prometheus.yml",
         "--storage.tsdb.path=" + dir_ + "/tsdb",
         "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port_), "--log.level=warn"},
        dir_ + "/prometheus.log");
  }

  // An instant query through Prometheus's HTTP API: its result vector ([] on any failure).
  json Query(const std::string& promql) {
    auto [status, body] =
        Get(prometheus_port_, "/api/v1/query?query=" + httplib::detail::encode_query_param(promql));
    auto j = json::parse(body, nullptr, false);
    if (status != 200 || !j.is_object() || j.value("status", "") != "success") return json::array();
    return j["data"]["result"];
  }
  // The value of a query's only sample, NaN when it has not exactly one.
  double Scalar(const std::string& promql) {
    json r = Query(promql);
    if (r.size() != 1) return std::nan("");
    return std::stod(r[0]["value"][1].get<std::string>());
  }

  // `promtool check metrics` on what PATH of PORT serves: (exit status, its output).
  std::pair<int, std::string> Promtool(int port, const std::string& path, const std::string& name,
                                       const std::string& bearer = "") {
    auto [status, body] = Get(port, path, bearer);
    if (status != 200) return {-1, "GET " + path + ": HTTP " + std::to_string(status)};
    const std::string file = dir_ + "/" + name + ".prom";
    std::ofstream(file) << body;
    auto r = tianshu::testing::RunCommand(std::string(kPromtool) + " check metrics < " + file);
    return {r.exit_code, r.out + r.err};
  }

  bool fake_nvml_ = false;  // the agent finds its GPUs through tests/testing/fake_nvml.cc
  std::string dir_, token_;
  int port_ = 0, agent_port_ = 0, prometheus_port_ = 0;
  pid_t server_ = -1, agent_ = -1, prometheus_ = -1;
};

TEST_F(PrometheusScrape, ServerAndAgentScrapedAndQueried) {
  // A one-GPU job that runs until the test ends.
  {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + token_}},
                    "kind: training\nname: scraped\nmodel: {profile: llama2-7b}\ngpus: 1\n"
                    "queue: research\nrun:\n  command: [sleep, '600']\n",
                    "application/yaml");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
  }
  ASSERT_TRUE(WaitForSeconds(
      [&] {
        auto j = json::parse(Get(port_, "/v1/jobs/j-000001", token_).second, nullptr, false);
        return j.is_object() && j.value("state", "") == "running";
      },
      30))
      << Get(port_, "/v1/jobs/j-000001", token_).second << Slurp(dir_ + "/agent.log");

  StartPrometheus();
  // Both targets up: each scrape was parsed whole (a malformed exposition makes a target down).
  ASSERT_TRUE(WaitForSeconds(
      [&] {
        auto j = json::parse(Get(prometheus_port_, "/api/v1/targets").second, nullptr, false);
        if (!j.is_object() || !j.contains("data")) return false;
        int up = 0;
        for (const auto& t : j["data"]["activeTargets"]) up += t.value("health", "") == "up";
        return up == 2;
      },
      40))
      << Get(prometheus_port_, "/api/v1/targets").second << Slurp(dir_ + "/prometheus.log");
  // Wait until a scrape after the job started has been stored.
  ASSERT_TRUE(
      WaitForSeconds([&] { return Scalar("tianshu_node_gpus_allocated{node=\"n0\"}") == 1; }, 20))
      << Query("tianshu_node_gpus_allocated").dump();

  EXPECT_EQ(Scalar("tianshu_node_gpus{node=\"n0\"}"), 2);
  EXPECT_EQ(Query("tianshu_gpu_allocated_ratio{node=\"n0\"}").size(), 2u);
  EXPECT_EQ(Scalar("sum(tianshu_gpu_allocated_ratio{node=\"n0\"})"), 1);
  // The cycle that placed the job was observed; the histogram works in PromQL.
  EXPECT_GE(Scalar("tianshu_cycle_seconds_count"), 1);
  EXPECT_EQ(Scalar("tianshu_cycle_seconds_bucket{le=\"+Inf\"} - ignoring(le) "
                   "tianshu_cycle_seconds_count"),
            0);
  EXPECT_FALSE(std::isnan(Scalar("histogram_quantile(0.5, tianshu_cycle_seconds_bucket)")));
  // Per queue: the job waited in `research` once and holds a GPU of its quota; the empty
  // `production` has its samples too, and no quota sample (it has none).
  EXPECT_EQ(Scalar("tianshu_queue_wait_seconds_count{queue=\"research\"}"), 1);
  EXPECT_EQ(Scalar("tianshu_queue_running_gpus{queue=\"research\"}"), 1);
  EXPECT_EQ(Scalar("tianshu_queue_quota_gpus{queue=\"research\"}"), 1);
  EXPECT_EQ(Scalar("tianshu_queue_pending{queue=\"production\"}"), 0);
  EXPECT_EQ(Scalar("tianshu_queue_running_gpus{queue=\"production\"}"), 0);
  EXPECT_EQ(Scalar("tianshu_queue_wait_seconds_count{queue=\"production\"}"), 0);
  EXPECT_TRUE(Query("tianshu_queue_quota_gpus{queue=\"production\"}").empty());
  // HTTP requests by route pattern, never by raw path.
  EXPECT_GE(Scalar("tianshu_http_requests_total{method=\"GET\",route=\"/v1/jobs/{job}\","
                   "code=\"200\"}"),
            1);
  EXPECT_TRUE(Query("tianshu_http_requests_total{route=\"/v1/jobs/j-000001\"}").empty());
  EXPECT_EQ(Scalar("tianshu_build_info{job=\"tianshu-server\"}"), 1);
  // The agent's own figures.
  EXPECT_EQ(Scalar("tianshu_agent_ranks_running{job=\"tianshu-agent\"}"), 1);
  EXPECT_EQ(Scalar("tianshu_agent_orders_total{kind=\"launch\"}"), 1);
  EXPECT_EQ(Scalar("tianshu_agent_registered"), 1);
  EXPECT_GE(Scalar("tianshu_agent_heartbeats_total"), 1);
  // Declared devices are not measured: no utilisation, on either side.
  EXPECT_EQ(Scalar("tianshu_agent_gpu_measured"), 0);
  EXPECT_TRUE(Query("tianshu_gpu_utilization_ratio").empty());
  EXPECT_TRUE(Query("tianshu_agent_gpu_utilization_ratio").empty());

  auto [server_rc, server_out] = Promtool(port_, "/metrics", "server", token_);
  EXPECT_EQ(server_rc, 0) << server_out;
  auto [agent_rc, agent_out] = Promtool(agent_port_, "/metrics", "agent");
  EXPECT_EQ(agent_rc, 0) << agent_out;

  // Both log one JSON object a line with time, level and component.
  for (const char* log : {"server.log", "agent.log"}) {
    std::istringstream lines(Slurp(dir_ + "/" + log));
    int n = 0;
    for (std::string line; std::getline(lines, line);) {
      auto j = json::parse(line, nullptr, false);
      ASSERT_TRUE(j.is_object()) << log << ": " << line;
      EXPECT_TRUE(j.contains("time") && j.contains("level") && j.contains("component") &&
                  j.contains("message"))
          << line;
      ++n;
    }
    EXPECT_GE(n, 1) << log;
  }
}

// The agent's NVML path on a machine without a GPU: a stand-in libnvidia-ml.so.1 reports two
// H200s, the first 42% busy, the second "not supported" (as in MIG mode). What NVML measured
// reaches the agent's /metrics and, through the heartbeats, the server's; the unmeasured GPU has
// no utilisation sample on either.
class FakeNvmlScrape : public PrometheusScrape {
 protected:
  FakeNvmlScrape() { fake_nvml_ = true; }
};

TEST_F(FakeNvmlScrape, MeasuredUsageReachesBothEndpoints) {
  std::string server, agent;
  ASSERT_TRUE(WaitForSeconds(
      [&] {
        server = Get(port_, "/metrics", token_).second;
        agent = Get(agent_port_, "/metrics").second;
        // The agent publishes its figures just after the heartbeat that carried them.
        return server.find("\ntianshu_gpu_utilization_ratio{") != std::string::npos &&
               agent.find("\ntianshu_agent_gpu_utilization_ratio{") != std::string::npos;
      },
      20))
      << server << agent << Slurp(dir_ + "/agent.log");
  auto has = [](const std::string& text, const std::string& line) {
    return text.find("\n" + line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has(server, "tianshu_gpu_utilization_ratio{node=\"n0\",gpu=\"0\"} 0.42")) << server;
  EXPECT_TRUE(has(server, "tianshu_gpu_memory_used_bytes{node=\"n0\",gpu=\"0\"} 1000000"))
      << server;
  EXPECT_TRUE(has(server,
                  "tianshu_gpu_info{node=\"n0\",gpu=\"1\",model=\"H200-141GB\","
                  "uuid=\"GPU-fake-1\"} 1"))
      << server;
  EXPECT_EQ(server.find("tianshu_gpu_utilization_ratio{node=\"n0\",gpu=\"1\"}"), std::string::npos)
      << server;
  EXPECT_TRUE(has(agent, "tianshu_agent_gpu_measured 1")) << agent;
  EXPECT_TRUE(has(agent, "tianshu_agent_gpu_utilization_ratio{gpu=\"0\"} 0.42")) << agent;
  EXPECT_EQ(agent.find("tianshu_agent_gpu_utilization_ratio{gpu=\"1\"}"), std::string::npos)
      << agent;
  auto [server_rc, server_out] = Promtool(port_, "/metrics", "server", token_);
  EXPECT_EQ(server_rc, 0) << server_out;
  auto [agent_rc, agent_out] = Promtool(agent_port_, "/metrics", "agent");
  EXPECT_EQ(agent_rc, 0) << agent_out;
}

}  // namespace
