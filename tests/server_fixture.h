// Test helpers for the control plane: a real server on a free loopback port with a temporary
// data directory, an API client holding its token, and a scripted fake agent that registers,
// heartbeats, polls its work channel and reports over the same HTTP API a real agent uses.
//   ServerFixture f;  f.Start();
//   auto r = f.client().Post("/v1/jobs", kJobYaml, "application/yaml");
//   FakeAgent a(f, "node-a", 4);  a.Register();
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "testing/direct_node.h"
#include "testing/etcd_env.h"
#include "tianshu/server/client.h"
#include "tianshu/server/http_server.h"
#include "tianshu/wire/wire.h"

namespace tianshu::testing {

inline constexpr const char* kToken = "test-token-0123456789";

inline std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  char* dir = mkdtemp(pattern.data());
  return dir ? std::string(dir) : std::string();
}

// A job of `gpus` GPUs; `extra` is appended (e.g. a run: section).
inline std::string JobYaml(const std::string& name, int gpus, const std::string& extra = "",
                           int max_retries = 2) {
  return "kind: training\nname: " + name +
         "\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, "
         "pp: 1}\ngpus: " +
         std::to_string(gpus) + "\nmax_retries: " + std::to_string(max_retries) + "\n" + extra;
}

// Polls `cond` every 10 ms until it holds or `timeout_ms` passes.
inline bool WaitFor(const std::function<bool()>& cond, int timeout_ms = 5000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class ServerFixture {
 public:
  ServerFixture() : dir_(MakeTempDir("tianshu-server")), store_(TestStoreUrl()) {
    // FakeAgents carry out no probe (docs/network.md): a test of probes turns them on.
    config.network.probes = false;
  }
  ~ServerFixture() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Start(int64_t lost_after_ms = 10000, size_t commit_batch = 512, bool preemption = true,
             std::vector<std::string> static_nodes = {}) {
    server::ServerOptions o;
    o.control.config = config;
    o.control.config.preemption = preemption;
    o.control.static_nodes = std::move(static_nodes);
    o.control.static_source = "cluster.yaml";
    o.host = "127.0.0.1";
    o.port = 0;
    o.data_dir = dir_;
    o.store = store_;
    o.token = kToken;
    o.tick_ms = 20;
    o.control.lost_after_ms = lost_after_ms;
    o.control.heartbeat_interval_ms = 100;
    o.control.commit_batch = commit_batch;
    o.control.placement = "topology";
    o.control.node_lease_ms = 0;     // no fencing unless a test asks for it (adjust)
    o.control.verify_ledger = true;  // every cycle checks the ledger against the records
    if (adjust) adjust(o);
    auto s = server::Server::Start(o);
    ASSERT_TRUE(s) << s.error().message;
    server_ = std::move(*s);
    client_ = NewClient();
  }
  // The engine configuration Start uses (its preemption comes from Start's argument).
  model::EngineConfig config;
  // Applied to the options last, before the server starts (grace periods, pool size...).
  std::function<void(server::ServerOptions&)> adjust;
  // Each node's credential, as its agent keeps it in its work directory (FakeAgent fills it).
  std::map<std::string, std::string> credentials;

  void Stop() {
    client_.reset();
    if (server_) {
      const auto ledger = server_->control_plane().Ledger();
      EXPECT_EQ(ledger.mismatches, 0)
          << "the ledger differed from the records: " << ledger.last_mismatch;
      server_->Stop();
    }
    server_.reset();
  }

  std::unique_ptr<server::Client> NewClient(const std::string& token = kToken) const {
    return std::make_unique<server::Client>(server::ClientOptions{
        .server = "http://127.0.0.1:" + std::to_string(server_->port()), .token = token});
  }
  server::Client& client() { return *client_; }
  server::Server& server() { return *server_; }
  const std::string& dir() const { return dir_; }
  const std::string& store() const { return store_; }  // "" for the SQLite file in dir()

  // GET that must succeed at the transport level.
  server::ApiResponse Get(const std::string& path) {
    auto r = client_->Get(path);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : server::ApiResponse{};
  }
  server::ApiResponse Post(const std::string& path, const std::string& body,
                           const std::string& type = "application/yaml") {
    auto r = client_->Post(path, body, type);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : server::ApiResponse{};
  }
  // Creates user `name` (admin token) and returns its token ("" and a failure when refused).
  std::string AddUser(const std::string& name) {
    auto u = Post("/v1/users", nlohmann::json{{"name", name}}.dump(), "application/json");
    EXPECT_EQ(u.status, 201) << u.text;
    return u.status == 201 ? u.body.value("token", "") : "";
  }
  std::string JobState(const std::string& id) {
    auto r = Get("/v1/jobs/" + id);
    return r.ok() ? r.body.value("state", "") : "";
  }

 private:
  std::string dir_;
  std::string store_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<server::Client> client_;
};

// Speaks the agent side of the API, step by step, as a test tells it to.
class FakeAgent {
 public:
  FakeAgent(ServerFixture& f, std::string node, int devices, std::string agent_id = "")
      : f_(f),
        node_(std::move(node)),
        devices_(devices),
        agent_id_(agent_id.empty() ? node_ + "-agent-1" : std::move(agent_id)) {}

  // Node labels it registers with ("leaf": the leaf switch the server places it under).
  std::map<std::string, std::string> labels;

  server::ApiResponse Register(const std::vector<wire::RunningRank>& running = {}) {
    wire::RegisterRequest r;
    r.node = node_;
    r.agent_id = agent_id_;
    r.address = "127.0.0.1";
    for (int i = 0; i < devices_; ++i) {
      r.hardware.devices.push_back(
          {.index = i, .model = "A100-80GB", .vendor = "nvidia", .numa = 0, .declared = true});
    }
    r.hardware.cpu_milli = 64000;
    r.hardware.memory_bytes = int64_t{512} << 30;
    r.hardware.labels = labels;
    r.running = running;
    // With the node's credential once it has one, else the admin token (which may join).
    auto res =
        Call(Node()->Post("/v1/agents/register", wire::Dump(wire::ToJson(r)), "application/json"));
    if (res.status == 200) {
      auto answer = wire::ParseRegisterResponse(res.text);
      EXPECT_TRUE(answer) << res.text;
      if (answer && !answer->credential.empty()) f_.credentials[node_] = answer->credential;
    }
    return res;
  }
  server::ApiResponse Heartbeat(wire::Health health = wire::Health::kOk,
                                const std::vector<wire::RunningRank>& running = {}) {
    wire::Heartbeat h{.agent_id = agent_id_, .health = health};
    h.running = running;
    return Call(Node()->Post("/v1/agents/" + node_ + "/heartbeat", wire::Dump(wire::ToJson(h)),
                             "application/json"));
  }
  // A heartbeat with what a test puts in it (network counters, progress); its agent id is ours.
  server::ApiResponse Heartbeat(wire::Heartbeat h) {
    h.agent_id = agent_id_;
    return Call(Node()->Post("/v1/agents/" + node_ + "/heartbeat", wire::Dump(wire::ToJson(h)),
                             "application/json"));
  }
  std::vector<wire::WorkOrder> Work(int wait_ms = 0) {
    auto r = Call(Node()->Get("/v1/agents/" + node_ + "/work?agent_id=" + agent_id_ +
                              "&wait_ms=" + std::to_string(wait_ms)));
    EXPECT_EQ(r.status, 200) << r.text;
    auto b = wire::ParseWorkBatch(r.text);
    EXPECT_TRUE(b) << (b ? "" : b.error().message);
    return b ? b->orders : std::vector<wire::WorkOrder>{};
  }
  server::ApiResponse Report(const std::vector<wire::Report>& reports) {
    wire::ReportBatch b{.agent_id = agent_id_, .reports = reports};
    return Call(Node()->Post("/v1/agents/" + node_ + "/reports", wire::Dump(wire::ToJson(b)),
                             "application/json"));
  }
  // Reports with a heartbeat in the same request (its agent id is ours).
  server::ApiResponse Report(const std::vector<wire::Report>& reports, wire::Heartbeat h) {
    h.agent_id = agent_id_;
    wire::ReportBatch b{.agent_id = agent_id_, .reports = reports, .heartbeat = std::move(h)};
    return Call(Node()->Post("/v1/agents/" + node_ + "/reports", wire::Dump(wire::ToJson(b)),
                             "application/json"));
  }
  // Accepts and starts every rank of a launch order.
  void AcceptAndStart(const wire::WorkOrder& o) {
    EXPECT_EQ(Report(AcceptedAndStarted(o)).status, 200);
  }
  // Every rank of a launch order exits with `code`.
  void ExitAll(const wire::WorkOrder& o, int code = 0) {
    std::vector<wire::Report> rs;
    for (const auto& r : o.launch->ranks) {
      rs.push_back({.order_id = o.id,
                    .kind = wire::ReportKind::kExited,
                    .job_id = o.job_id,
                    .rank = r.rank,
                    .exit_code = code});
    }
    EXPECT_EQ(Report(rs).status, 200);
  }
  const std::string& node() const { return node_; }
  const std::string& agent_id() const { return agent_id_; }

 private:
  server::ApiResponse Call(const Result<server::ApiResponse>& r) {
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : server::ApiResponse{};
  }
  // A client with the node's credential (the admin token before its first registration).
  server::Client* Node() {
    auto it = f_.credentials.find(node_);
    const std::string token = it == f_.credentials.end() ? kToken : it->second;
    if (!client_ || token != token_) {
      client_ = f_.NewClient(token);
      token_ = token;
    }
    return client_.get();
  }
  ServerFixture& f_;
  std::string node_;
  int devices_;
  std::string agent_id_;
  std::string token_;
  std::unique_ptr<server::Client> client_;
};

}  // namespace tianshu::testing
