// The control plane driven over HTTP: a real server on a free loopback port with a temporary
// data directory; submit, list, cancel, bad input, node registration and loss, the work
// channel's idempotency, the event stream, metrics, and a restart from the store.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "server_fixture.h"
#include "tianshu/wire/rank_env.h"

namespace tianshu::testing {
namespace {

using nlohmann::json;

TEST(ServerApi, HealthzNeedsNoTokenEverythingElseDoes) {
  ServerFixture f;
  f.Start();
  httplib::Client raw("127.0.0.1", f.server().port());
  auto h = raw.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);

  auto none = raw.Get("/v1/jobs");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->body.find("missing bearer token"), std::string::npos);

  auto wrong = f.NewClient("not-the-token")->Post("/v1/jobs", JobYaml("a", 1), "application/yaml");
  ASSERT_FALSE(wrong);  // the client turns 401 into an error that says what to do
  EXPECT_NE(wrong.error().message.find("refused the token"), std::string::npos);
  EXPECT_EQ(f.Get("/v1/jobs").body["total"], 0);  // nothing changed
  auto metrics = raw.Get("/metrics");
  EXPECT_EQ(metrics->status, 401);

  // Every answer carries the server's clock as an RFC 9110 Date (tianshu doctor's clock check),
  // refused ones too.
  for (const auto* res : {&h.value(), &none.value()}) {
    std::string date = res->get_header_value("Date");
    std::tm tm{};
    ASSERT_NE(strptime(date.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm), nullptr) << date;
    int64_t offset = static_cast<int64_t>(timegm(&tm)) - static_cast<int64_t>(std::time(nullptr));
    EXPECT_LE(std::abs(offset), 5) << date;
  }
}

// A chunked upload is refused from its headers, before any of its body is read: cpp-httplib
// would otherwise buffer all of it before checking the size limit (200 MiB were seen).
TEST(ServerApi, ChunkedUploadIsRefusedBeforeItsBodyIsRead) {
  ServerFixture f;
  f.Start();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(f.server().port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // Headers and one 1 KiB chunk of a body that never ends: the answer comes anyway.
  std::string head = std::string("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                     kToken +
                     "\r\nContent-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "400\r\n" +
                     std::string(1024, '#') + "\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  // The server answers and closes the connection (Connection: close) without the body's end.
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    answer.append(buf, static_cast<size_t>(n));
  ::close(fd);
  ASSERT_FALSE(answer.empty()) << "no answer before the body ended";
  EXPECT_EQ(answer.rfind("HTTP/1.1 411", 0), 0u) << answer;
  EXPECT_NE(answer.find("chunked bodies are refused"), std::string::npos) << answer;
  EXPECT_EQ(f.Get("/v1/jobs").body["total"], 0);  // nothing was submitted
}

TEST(ServerApi, SubmitListGetCancel) {
  ServerFixture f;
  f.Start();
  auto r = f.Post("/v1/jobs", JobYaml("first", 2));
  ASSERT_EQ(r.status, 201) << r.text;
  std::string id = r.body["id"];
  EXPECT_EQ(id, "j-000001");
  EXPECT_EQ(r.body["state"], "pending");
  EXPECT_EQ(r.body["gpus"], 2);

  auto json_job = f.Post("/v1/jobs",
                         R"({"kind":"training","name":"second","model":{"profile":"llama2-7b"},
                             "gpus":1,"queue":"research",
                             "run":{"command":["sleep","1"],"env":{"FOO":"bar"}}})",
                         "application/json");
  ASSERT_EQ(json_job.status, 201) << json_job.text;
  EXPECT_EQ(json_job.body["run"]["command"][0], "sleep");

  auto list = f.Get("/v1/jobs");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["total"], 2);
  // Unfiltered, the total is counted without a walk: the same figures and order either way.
  auto oldest = f.Get("/v1/jobs?limit=1");
  EXPECT_EQ(oldest.body["total"], 2);
  EXPECT_EQ(oldest.body["shown"], 1);
  EXPECT_EQ(oldest.body["jobs"][0]["id"], id);
  auto newest = f.Get("/v1/jobs?limit=1&order=newest");
  EXPECT_EQ(newest.body["total"], 2);
  EXPECT_EQ(newest.body["jobs"][0]["id"], json_job.body["id"]);
  EXPECT_EQ(f.Get("/v1/jobs?limit=5&order=newest").body["shown"], 2);
  EXPECT_EQ(f.Get("/v1/jobs?queue=research").body["total"], 1);
  EXPECT_EQ(f.Get("/v1/jobs?state=running").body["total"], 0);

  auto got = f.Get("/v1/jobs/" + id);
  ASSERT_EQ(got.status, 200);
  ASSERT_EQ(got.body["history"].size(), 1u);
  EXPECT_EQ(got.body["history"][0]["to"], "pending");

  auto c = f.Post("/v1/jobs/" + id + "/cancel", "");
  ASSERT_EQ(c.status, 200) << c.text;
  EXPECT_EQ(c.body["state"], "cancelled");
  auto again = f.Post("/v1/jobs/" + id + "/cancel", "");
  EXPECT_EQ(again.status, 409);
  EXPECT_NE(again.ErrorText().find("already cancelled"), std::string::npos);
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body["history"].size(), 2u);

  EXPECT_EQ(f.Get("/v1/jobs/j-999999").status, 404);
  EXPECT_EQ(f.Get("/v1/jobs/nonsense").status, 404);
  EXPECT_EQ(f.Post("/v1/jobs/j-999999/cancel", "").status, 404);
  auto queues = f.Get("/v1/queues");
  ASSERT_EQ(queues.status, 200);
  EXPECT_EQ(queues.body["queues"].size(), 2u);
}

TEST(ServerApi, BadInputIsRefusedWithAClearMessageAndChangesNothing) {
  ServerFixture f;
  f.Start();
  struct Case {
    std::string body, type;
    int status;
    std::string needle;
  };
  std::vector<Case> cases = {
      {"name: [unclosed", "application/yaml", 400, "request"},
      {JobYaml("x", 2, "colour: blue\n"), "application/yaml", 400, "colour"},
      {"kind: training\nname: x\nmodel: {profile: llama2-7b}\ngpus: eight\n", "application/yaml",
       400, "gpus"},
      {JobYaml("x", 2, "run: {command: [a], shell: bash}\n"), "application/yaml", 400, "run.shell"},
      {JobYaml("x", 2, "run:\n  env: {RANK: '3'}\n"), "application/yaml", 400, "RANK"},
      {"{\"name\": ", "application/json", 400, "malformed JSON"},
      {"[1,2]", "application/json", 400, "expected a JSON object"},
      {R"({"name":"x","model":{"profile":"llama2-7b"},"gpus":"two"})", "application/json", 400,
       "gpus"},
      {"", "application/yaml", 400, "empty"},
      {JobYaml("x", 2), "image/png", 415, "unsupported content type"},
      {"node_groups: []\n", "application/yaml", 400, ""},
      {std::string(2 << 20, 'a'), "application/yaml", 413, "limit"},
  };
  for (const auto& c : cases) {
    auto r = f.client().Post("/v1/jobs", c.body, c.type);
    if (c.status == 413 && !r) continue;  // the server may close before the body is sent
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, c.status) << c.body.substr(0, 80) << " -> " << r->text;
    ASSERT_TRUE(r->body.is_object()) << r->text;
    EXPECT_NE(r->ErrorText().find(c.needle), std::string::npos) << r->ErrorText();
  }
  // Diagnostics carry the file name the client gave, as `tianshu validate` prints them.
  auto named = f.client().Post("/v1/jobs", JobYaml("x", 2, "colour: blue\n"), "application/yaml",
                               {{"X-Tianshu-File", "jobs/x.yaml"}});
  ASSERT_TRUE(named);
  EXPECT_NE(named->ErrorText().find("jobs/x.yaml:7:1: colour"), std::string::npos)
      << named->ErrorText();
  EXPECT_EQ(f.Get("/v1/jobs?state=bogus").status, 400);
  EXPECT_EQ(f.Get("/v1/jobs?colour=1").status, 400);
  EXPECT_EQ(f.Get("/v1/events?since=-4").status, 400);
  EXPECT_EQ(f.Get("/v1/nowhere").status, 404);
  auto bad_agent = f.Post("/v1/agents/register", R"({"node":"n","agent_id":"a","hardware":{},
                          "extra":1})",
                          "application/json");
  EXPECT_EQ(bad_agent.status, 400);
  EXPECT_NE(bad_agent.ErrorText().find("extra: unknown field"), std::string::npos);
  // The agents' calls take a node's own credential only: the admin token gets 403.
  EXPECT_EQ(f.Post("/v1/agents/ghost/heartbeat", "{", "application/json").status, 403);
  EXPECT_EQ(f.Get("/v1/agents/ghost/work").status, 403);
  FakeAgent ghost(f, "ghost", 1);
  ASSERT_EQ(ghost.Register().status, 200);
  auto node = f.NewClient(f.credentials.at("ghost"));
  EXPECT_EQ(node->Post("/v1/agents/ghost/heartbeat", "{", "application/json")->status, 400);
  EXPECT_EQ(node->Get("/v1/agents/other/work")->status, 403);
  EXPECT_EQ(node->Get("/v1/jobs")->status, 403);  // a node is not a user

  EXPECT_EQ(f.Get("/v1/jobs").body["total"], 0);
  EXPECT_EQ(f.Get("/v1/nodes").body["nodes"].size(), 1u);  // ghost
}

TEST(ServerApi, NodeRegistrationPlacementLossAndRetry) {
  ServerFixture f;
  f.Start(/*lost_after_ms=*/400);
  FakeAgent a(f, "node-a", 4);
  ASSERT_EQ(a.Register().status, 200);
  auto r = f.Post("/v1/jobs", JobYaml("train", 2, "run:\n  command: [python3, train.py]\n"));
  ASSERT_EQ(r.status, 201);
  std::string id = r.body["id"];

  std::vector<wire::WorkOrder> orders;
  ASSERT_TRUE(WaitFor([&] {
    a.Heartbeat();
    orders = a.Work(100);
    return !orders.empty();
  }));
  ASSERT_EQ(orders.size(), 1u);
  const wire::WorkOrder& launch = orders[0];
  EXPECT_EQ(launch.kind, wire::OrderKind::kLaunch);
  EXPECT_EQ(launch.id, id + ".a1.launch.node-a");
  ASSERT_TRUE(launch.launch);
  ASSERT_EQ(launch.launch->ranks.size(), 2u);
  EXPECT_EQ(launch.launch->world_size, 2);
  // What rank 1 runs with, as its agent builds it from the order.
  const auto env = wire::RankEnvironment(launch, launch.launch->ranks[1]);
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("TIANSHU_JOB_ID"), id);
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 1u);
  EXPECT_EQ(launch.launch->ranks[0].command[0], "python3");
  EXPECT_EQ(f.JobState(id), "starting");

  a.AcceptAndStart(launch);
  EXPECT_EQ(f.JobState(id), "running");
  auto nodes = f.Get("/v1/nodes");
  ASSERT_EQ(nodes.body["nodes"].size(), 1u);
  size_t allocated = 0;
  for (const auto& d : nodes.body["nodes"][0]["devices"]) allocated += d["allocations"].size();
  EXPECT_EQ(allocated, 2u);

  // node-a goes silent: it is declared lost and the job goes to the retry path.
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "pending"; }, 5000)) << f.JobState(id);
  auto job = f.Get("/v1/jobs/" + id);
  EXPECT_EQ(job.body["retries"], 1);
  // The retry is in the job's history; its message says why it waits now.
  ASSERT_FALSE(job.body["history"].empty());
  EXPECT_NE(job.body["history"].back()["reason"].get<std::string>().find("retry 1 of 2"),
            std::string::npos)
      << job.body.dump(2);
  EXPECT_EQ(job.body["message"].get<std::string>().find("waiting: no node takes new work"), 0u)
      << job.body.dump(2);
  EXPECT_EQ(f.Get("/v1/nodes/node-a").body["state"], "lost");

  // A lost node's agent is told to register again.
  auto hb = a.Heartbeat();
  EXPECT_TRUE(wire::ParseHeartbeatResponse(hb.text)->reregister);

  // A new node joins; the job restarts there with attempt 2 and finishes.
  FakeAgent b(f, "node-b", 8);
  ASSERT_EQ(b.Register().status, 200);
  ASSERT_TRUE(WaitFor([&] {
    b.Heartbeat();
    orders = b.Work(100);
    return !orders.empty();
  }));
  EXPECT_EQ(orders[0].id, id + ".a2.launch.node-b");
  b.AcceptAndStart(orders[0]);
  std::vector<wire::Report> exits;
  for (const auto& rk : orders[0].launch->ranks) {
    exits.push_back({.order_id = orders[0].id,
                     .kind = wire::ReportKind::kExited,
                     .job_id = id,
                     .rank = rk.rank,
                     .exit_code = 0});
  }
  ASSERT_EQ(b.Report(exits).status, 200);
  EXPECT_EQ(f.JobState(id), "succeeded");

  auto events = f.Get("/v1/events?since=0");
  std::vector<std::string> seen;
  for (const auto& e : events.body["events"]) {
    seen.push_back(e["type"].get<std::string>() + ":" + e["id"].get<std::string>() + ":" +
                   e["to"].get<std::string>());
  }
  auto has = [&](const std::string& s) {
    return std::find(seen.begin(), seen.end(), s) != seen.end();
  };
  EXPECT_TRUE(has("node:node-a:ready"));
  EXPECT_TRUE(has("node:node-a:lost"));
  EXPECT_TRUE(has("job:" + id + ":running"));
  EXPECT_TRUE(has("job:" + id + ":succeeded"));

  auto metrics = f.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->text.find("tianshu_nodes_lost_total 1"), std::string::npos);
  EXPECT_NE(metrics->text.find("tianshu_jobs{state=\"succeeded\"} 1"), std::string::npos);
  EXPECT_NE(metrics->text.find("tianshu_job_retries_total 1"), std::string::npos);
}

// topology.leaves through the server: its nodes' "leaf" labels make the leaves. A 12-GPU job
// can never sit under one leaf, and waits saying so; an 8-GPU job bound to one leaf takes the
// two nodes of leaf l1, where first fit (the server's strategy here) would take node-a of l0
// and node-b; a job that then waits says it waits within its bound.
TEST(ServerApi, ALeafBoundIsHonouredOnTheNodesLeafLabels) {
  ServerFixture f;
  f.config.algorithm = "first-fit";
  f.config.small_job_algorithm = "same";
  f.config.long_queue_algorithm = "same";
  f.Start();
  std::vector<std::unique_ptr<FakeAgent>> agents;
  for (auto [node, leaf] : {std::pair{"node-a", "l0"}, {"node-b", "l1"}, {"node-c", "l1"}}) {
    agents.push_back(std::make_unique<FakeAgent>(f, node, 4));
    agents.back()->labels["leaf"] = leaf;
    ASSERT_EQ(agents.back()->Register().status, 200);
  }
  auto never = f.Post("/v1/jobs", JobYaml("never", 12, "topology: {leaves: 1}\n"));
  ASSERT_EQ(never.status, 201) << never.text;
  const std::string never_id = never.body["id"];
  ASSERT_TRUE(WaitFor([&] {
    return f.Get("/v1/jobs/" + never_id).body.value("message", "").find("topology.leaves") !=
           std::string::npos;
  })) << f.Get("/v1/jobs/" + never_id).body.dump(2);
  EXPECT_EQ(f.JobState(never_id), "pending");
  auto r = f.Post("/v1/jobs", JobYaml("bound", 8, "topology: {leaves: 1}\n"));
  ASSERT_EQ(r.status, 201) << r.text;
  const std::string id = r.body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; })) << f.JobState(id);
  const auto job = f.Get("/v1/jobs/" + id).body;
  std::set<std::string> nodes;
  for (const auto& p : job["placement"]) nodes.insert(p["node"]);
  EXPECT_EQ(nodes, (std::set<std::string>{"node-b", "node-c"})) << job.dump(2);
  auto waits = f.Post("/v1/jobs", JobYaml("waits", 8, "topology: {leaves: minimum}\n"));
  ASSERT_EQ(waits.status, 201) << waits.text;
  const std::string waits_id = waits.body["id"];
  ASSERT_TRUE(WaitFor([&] {
    return f.Get("/v1/jobs/" + waits_id).body.value("message", "") ==
           "waiting for capacity within topology.leaves: minimum";
  })) << f.Get("/v1/jobs/" + waits_id).body.dump(2);
}

TEST(ServerApi, WorkOrdersAreIdempotentAndFailuresRetryUpToMaxRetries) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  auto r = f.Post("/v1/jobs", JobYaml("flaky", 2, "", /*max_retries=*/1));
  ASSERT_EQ(r.status, 201) << r.text;
  std::string id = r.body["id"];
  std::vector<wire::WorkOrder> first, second;
  ASSERT_TRUE(WaitFor([&] { return !(first = a.Work(50)).empty(); }));
  second = a.Work();  // not yet accepted: delivered again, same id
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0].id, second[0].id);
  a.AcceptAndStart(first[0]);
  a.AcceptAndStart(first[0]);  // a duplicate report changes nothing
  EXPECT_TRUE(a.Work().empty());
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body["history"].size(), 3u);  // pending, starting, running

  // Rank 1 dies: the other rank is stopped, and the job retries (max_retries 1).
  ASSERT_EQ(a.Report({{.order_id = first[0].id,
                       .kind = wire::ReportKind::kExited,
                       .job_id = id,
                       .rank = 1,
                       .exit_code = 0,
                       .signal = 9}})
                .status,
            200);
  EXPECT_EQ(f.JobState(id), "stopping");
  auto stop = a.Work();
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].kind, wire::OrderKind::kStop);
  ASSERT_EQ(a.Report({{.order_id = stop[0].id, .kind = wire::ReportKind::kAccepted, .job_id = id},
                      {.order_id = stop[0].id, .kind = wire::ReportKind::kStopped, .job_id = id}})
                .status,
            200);
  auto after = f.Get("/v1/jobs/" + id);  // pending, or already placed again by the ticker
  EXPECT_EQ(after.body["retries"], 1);
  EXPECT_NE(after.body["state"], "stopping");
  std::vector<wire::WorkOrder> retry;
  ASSERT_TRUE(WaitFor([&] { return !(retry = a.Work(50)).empty(); }));
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].attempt, 2);
  a.AcceptAndStart(retry[0]);
  EXPECT_EQ(f.JobState(id), "running") << f.Get("/v1/jobs/" + id).text;
  // Reports about the old attempt are ignored.
  ASSERT_EQ(a.Report({{.order_id = first[0].id,
                       .kind = wire::ReportKind::kExited,
                       .job_id = id,
                       .rank = 0,
                       .exit_code = 1}})
                .status,
            200);
  EXPECT_EQ(f.JobState(id), "running");
  // Out of retries: the next failure is final.
  ASSERT_EQ(a.Report({{.order_id = retry[0].id,
                       .kind = wire::ReportKind::kExited,
                       .job_id = id,
                       .rank = 0,
                       .exit_code = 3}})
                .status,
            200);
  auto stop2 = a.Work();
  ASSERT_EQ(stop2.size(), 1u);
  ASSERT_EQ(a.Report({{.order_id = stop2[0].id, .kind = wire::ReportKind::kStopped, .job_id = id}})
                .status,
            200);
  EXPECT_EQ(f.JobState(id), "failed");
  EXPECT_EQ(f.Post("/v1/jobs/" + id + "/cancel", "").status, 409);
}

// Gang admission: a two-node gang whose second node never starts its ranks is released after
// scheduler.gang_timeout (the started node is told to stop, the devices are freed) and retried
// as a failed attempt; the retry starts once both nodes start their ranks.
TEST(ServerApi, GangNotStartedInTimeIsReleasedAndRetried) {
  ServerFixture f;
  f.config.gang_timeout_s = 1;
  f.Start();
  FakeAgent a(f, "node-a", 2);
  FakeAgent b(f, "node-b", 2);
  ASSERT_EQ(a.Register().status, 200);
  ASSERT_EQ(b.Register().status, 200);
  auto r = f.Post("/v1/jobs",
                  "kind: training\nname: gang\nmodel: llama2-7b\nnodes: 2\ngpus_per_node: 2\n"
                  "max_retries: 3\nrun:\n  command: [python3, train.py]\n");
  ASSERT_EQ(r.status, 201) << r.text;
  std::string id = r.body["id"];
  std::vector<wire::WorkOrder> oa, ob;
  ASSERT_TRUE(WaitFor([&] {
    a.Heartbeat();
    b.Heartbeat();
    if (oa.empty()) oa = a.Work(50);
    if (ob.empty()) ob = b.Work(50);
    return !oa.empty() && !ob.empty();
  }));
  ASSERT_EQ(oa[0].kind, wire::OrderKind::kLaunch);
  a.AcceptAndStart(oa[0]);  // node-b accepts nothing: the gang is partial
  EXPECT_EQ(f.JobState(id), "starting");
  // Within the timeout nothing happens; after it, node-a gets a stop order for attempt 1.
  std::vector<wire::WorkOrder> stop;
  ASSERT_TRUE(WaitFor(
      [&] {
        a.Heartbeat();
        b.Heartbeat();
        for (const auto& o : a.Work(50)) {
          if (o.kind == wire::OrderKind::kStop) stop.push_back(o);
        }
        return !stop.empty();
      },
      5000));
  EXPECT_EQ(stop[0].id, id + ".a1.stop.node-a");
  auto job = f.Get("/v1/jobs/" + id);
  EXPECT_NE(job.body["message"].get<std::string>().find("gang admission timed out: 2 of 4 ranks"),
            std::string::npos)
      << job.body["message"];
  // Both nodes report the attempt stopped: the job is pending again with one retry used.
  for (FakeAgent* ag : {&a, &b}) {
    ag->Report({{.order_id = id + ".a1.stop." + ag->node(),
                 .kind = wire::ReportKind::kStopped,
                 .job_id = id}});
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        a.Heartbeat();
        b.Heartbeat();
        auto j = f.Get("/v1/jobs/" + id);
        return j.body["retries"] == 1 && j.body["state"] != "stopping";
      },
      5000))
      << f.Get("/v1/jobs/" + id).body.dump();
  auto metrics = f.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->text.find("tianshu_gang_timeouts_total 1"), std::string::npos);
}

TEST(ServerApi, CancelRunningJobStopsItsRanks) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  std::string id = f.Post("/v1/jobs", JobYaml("c", 1)).body["id"];
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] { return !(o = a.Work(50)).empty(); }));
  a.AcceptAndStart(o[0]);
  auto c = f.Post("/v1/jobs/" + id + "/cancel", "");
  ASSERT_EQ(c.status, 200);
  EXPECT_EQ(c.body["state"], "stopping");
  auto stop = a.Work();
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].stop->reason, "cancel");
  a.Report({{.order_id = stop[0].id, .kind = wire::ReportKind::kStopped, .job_id = id}});
  EXPECT_EQ(f.JobState(id), "cancelled");
}

// A job cancelled after it was placed but before its node fetched the launch: the launch is
// withdrawn, so the node's work holds only the stop, and nothing of the job is sent again.
TEST(ServerApi, CancelBeforeTheLaunchIsFetchedWithdrawsTheLaunch) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  std::string id = f.Post("/v1/jobs", JobYaml("c", 1)).body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; }));
  ASSERT_EQ(f.Post("/v1/jobs/" + id + "/cancel", "").status, 200);
  auto o = a.Work();
  ASSERT_EQ(o.size(), 1u);
  ASSERT_TRUE(o[0].stop);
  EXPECT_EQ(o[0].job_id, id);
  a.Report({{.order_id = o[0].id, .kind = wire::ReportKind::kStopped, .job_id = id}});
  EXPECT_EQ(f.JobState(id), "cancelled");
  EXPECT_TRUE(a.Work().empty());
}

// scheduler.preemption: a higher-priority job on a full cluster makes the lower-priority one
// checkpoint and stop (no retry spent), runs, and the first is placed again afterwards. An
// equal-priority job waits; with preemption off, so does a higher one.
TEST(ServerApi, HigherPriorityJobPreemptsWithACheckpoint) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  std::string low = f.Post("/v1/jobs", JobYaml("low", 2)).body["id"];
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] { return !(o = a.Work(50)).empty(); }));
  a.AcceptAndStart(o[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(low) == "running"; }));

  std::string same = f.Post("/v1/jobs", JobYaml("same", 2)).body["id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(f.JobState(low), "running");  // equal priority does not preempt
  EXPECT_EQ(f.Post("/v1/jobs/" + same + "/cancel", "").status, 200);

  std::string high = f.Post("/v1/jobs", JobYaml("high", 2, "priority: 10\n")).body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(low) == "stopping"; }));
  // The scheduler's change is visible before it is durable, its stop order only after: wait.
  auto stop = a.Work(5000);
  ASSERT_EQ(stop.size(), 1u);
  ASSERT_TRUE(stop[0].stop.has_value());
  EXPECT_EQ(stop[0].stop->reason, "preempt");
  EXPECT_TRUE(stop[0].stop->checkpoint_first);
  EXPECT_EQ(f.JobState(high), "pending");  // until the victim has stopped
  a.Report({{.order_id = stop[0].id, .kind = wire::ReportKind::kStopped, .job_id = low}});

  std::vector<wire::WorkOrder> launch;
  ASSERT_TRUE(WaitFor([&] { return !(launch = a.Work(50)).empty(); }));
  ASSERT_TRUE(launch[0].launch.has_value());
  EXPECT_EQ(launch[0].job_id, high);
  auto lj = f.Get("/v1/jobs/" + low).body;
  EXPECT_EQ(lj.value("state", ""), "pending");
  EXPECT_EQ(lj.value("retries", -1), 0);  // a preemption is not a failure
  // Its run counts as 2D-LAS service (2 GPUs for at least the 200 ms it ran), kept across
  // the server's cycles and stores.
  EXPECT_GE(lj.value("attained_gpu_s", 0.0), 0.4);
  EXPECT_NE(f.Get("/metrics").text.find("tianshu_job_preemptions_total 1"), std::string::npos);

  // The high job ends; the low one is placed again.
  a.AcceptAndStart(launch[0]);
  a.ExitAll(launch[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(high) == "succeeded"; }));
  ASSERT_TRUE(WaitFor([&] { return !(launch = a.Work(50)).empty(); }));
  EXPECT_EQ(launch[0].job_id, low);
  EXPECT_EQ(launch[0].attempt, 2);
}

// The preemptor waits on the victim's slots until the victim has stopped. When the victim's
// node is lost before it reports the stop, the victim is requeued by the loss and the
// preemptor, whose reserved slots went with the node, is placed again: on the next node that
// joins, before the victim.
TEST(ServerApi, APreemptorWhoseVictimsNodeIsLostIsPlacedAgain) {
  ServerFixture f;
  f.Start(/*lost_after_ms=*/600);
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  std::string low = f.Post("/v1/jobs", JobYaml("low", 2)).body["id"];
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] {
    a.Heartbeat();
    return !(o = a.Work(50)).empty();
  }));
  a.AcceptAndStart(o[0]);
  std::string high = f.Post("/v1/jobs", JobYaml("high", 2, "priority: 10\n")).body["id"];
  ASSERT_TRUE(WaitFor([&] {
    a.Heartbeat();
    return f.JobState(low) == "stopping";
  }));
  EXPECT_EQ(f.JobState(high), "pending");
  // node-a goes silent with the stop unanswered.
  ASSERT_TRUE(WaitFor([&] { return f.Get("/v1/nodes/node-a").body["state"] == "lost"; }, 5000));
  ASSERT_TRUE(WaitFor([&] { return f.JobState(low) == "pending"; }, 5000)) << f.JobState(low);
  EXPECT_EQ(f.JobState(high), "pending");

  FakeAgent b(f, "node-b", 2);
  ASSERT_EQ(b.Register().status, 200);
  std::vector<wire::WorkOrder> launch;
  ASSERT_TRUE(WaitFor([&] {
    b.Heartbeat();
    return !(launch = b.Work(50)).empty();
  }));
  ASSERT_TRUE(launch[0].launch.has_value());
  EXPECT_EQ(launch[0].job_id, high);
  EXPECT_EQ(launch[0].attempt, 1);
  b.AcceptAndStart(launch[0]);
  b.ExitAll(launch[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(high) == "succeeded"; }));
  ASSERT_TRUE(WaitFor([&] {
    b.Heartbeat();
    return !(launch = b.Work(50)).empty();
  }));
  EXPECT_EQ(launch[0].job_id, low);
  EXPECT_EQ(launch[0].attempt, 2);
}

TEST(ServerApi, PreemptionOffMeansTheHigherJobWaits) {
  ServerFixture f;
  f.Start(10000, 512, /*preemption=*/false);
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  std::string low = f.Post("/v1/jobs", JobYaml("low", 2)).body["id"];
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] { return !(o = a.Work(50)).empty(); }));
  a.AcceptAndStart(o[0]);
  std::string high = f.Post("/v1/jobs", JobYaml("high", 2, "priority: 10\n")).body["id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(f.JobState(low), "running");
  EXPECT_EQ(f.JobState(high), "pending");
  EXPECT_TRUE(a.Work().empty());
}

// cluster.node_discovery: static — a node outside the cluster file is refused and changes
// nothing; the file's nodes that have not registered are listed as waiting, never placed on.
TEST(ServerApi, StaticDiscoveryAdmitsOnlyTheClusterFilesNodes) {
  ServerFixture f;
  f.Start(10000, 512, true, {"node-a", "node-b"});
  FakeAgent stranger(f, "node-x", 8);
  auto r = stranger.Register();
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.text.find("not in the static cluster cluster.yaml"), std::string::npos) << r.text;
  auto nodes = f.Get("/v1/nodes").body["nodes"];
  ASSERT_EQ(nodes.size(), 2u);
  for (const auto& n : nodes) EXPECT_EQ(n["state"], "waiting") << n.dump();

  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  nodes = f.Get("/v1/nodes").body["nodes"];
  ASSERT_EQ(nodes.size(), 2u);
  std::map<std::string, std::string> state;
  for (const auto& n : nodes) state[n["name"]] = n["state"];
  EXPECT_EQ(state["node-a"], "ready");
  EXPECT_EQ(state["node-b"], "waiting");
  EXPECT_EQ(f.Get("/v1/nodes/node-x").status, 404);
  // A job that needs node-b's GPUs too waits; one that fits node-a runs there.
  std::string big = f.Post("/v1/jobs", JobYaml("big", 4)).body["id"];
  std::string small = f.Post("/v1/jobs", JobYaml("small", 2)).body["id"];
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] { return !(o = a.Work(50)).empty(); }));
  EXPECT_EQ(o[0].job_id, small);
  EXPECT_EQ(f.JobState(big), "pending");
}

// Launch orders carry the collective library's environment planned for the placement
// (comm/), under the job's own run.env, which wins.
TEST(ServerApi, LaunchOrdersCarryTheCommunicatorEnvironment) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "node-a", 4);
  ASSERT_EQ(a.Register().status, 200);
  f.Post("/v1/jobs",
         JobYaml("c", 4, "run:\n  command: [/bin/true]\n  env: {NCCL_PROTO: Simple}\n"));
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] { return !(o = a.Work(50)).empty(); }));
  ASSERT_TRUE(o[0].launch.has_value());
  ASSERT_EQ(o[0].launch->ranks.size(), 4u);
  for (const auto& r : o[0].launch->ranks) {
    EXPECT_EQ(r.env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
    EXPECT_FALSE(r.env.at("NCCL_ALGO").empty());
    EXPECT_EQ(r.env.at("NCCL_BUFFSIZE"), std::to_string(4 << 20));  // NETWORK_BUFFER_SIZE
    EXPECT_EQ(r.env.at("NCCL_PROTO"), "Simple");                    // the job's own value
    EXPECT_EQ(wire::RankEnvironment(o[0], r).at("WORLD_SIZE"), "4");
  }
}

// Jobs whose rank 0 shares a node get rendezvous ports of their own, from
// cluster.rendezvous_ports (the default keeps below the ephemeral range, where a client
// connection in TIME_WAIT fails torch's TCPStore bind).
TEST(ServerApi, JobsSharingAMasterNodeGetDistinctRendezvousPortsFromTheRange) {
  ServerFixture f;
  f.config.rendezvous_port_low = 21000;
  f.config.rendezvous_port_high = 21007;
  f.Start();
  FakeAgent a(f, "node-a", 8);
  ASSERT_EQ(a.Register().status, 200);
  std::set<std::string> ports;
  json ids = json::array();
  for (int i = 0; i < 8; ++i) {
    auto r = f.Post("/v1/jobs?hold=true",
                    JobYaml("p" + std::to_string(i), 1, "run:\n  command: [/bin/true]\n"));
    ASSERT_EQ(r.status, 201);
    ids.push_back(r.body["id"]);
  }
  // Released together, so that one cycle starts all eight (the ports taken are gathered once
  // per change, and each start must see the ones before it): as many jobs as ports, so that
  // their hashed first choices almost surely collide.
  ASSERT_EQ(f.Post("/v1/jobs/release", json{{"ids", ids}}.dump(), "application/json").status, 200);
  // Work answers every outstanding order each time: one launch per job, by order id.
  std::map<std::string, wire::WorkOrder> launches;
  ASSERT_TRUE(WaitFor([&] {
    a.Heartbeat();
    for (auto& o : a.Work(50)) launches[o.id] = o;
    return launches.size() >= 8;
  }));
  for (const auto& [id, o] : launches) {
    ASSERT_TRUE(o.launch.has_value());
    EXPECT_GE(o.launch->master_port, 21000);
    EXPECT_LE(o.launch->master_port, 21007);
    ports.insert(std::to_string(o.launch->master_port));
    EXPECT_EQ(wire::RankEnvironment(o, o.launch->ranks[0]).at("MASTER_PORT"),
              std::to_string(o.launch->master_port));
  }
  EXPECT_EQ(ports.size(), 8u);
}

TEST(ServerApi, EventStreamLongPollAndServerSentEvents) {
  ServerFixture f;
  f.Start();
  ASSERT_EQ(f.Post("/v1/jobs", JobYaml("e1", 1)).status, 201);
  auto first = f.Get("/v1/events?since=0");
  ASSERT_EQ(first.body["events"].size(), 1u);
  int64_t next = first.body["next"];

  // A long poll returns as soon as something happens.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto c = f.NewClient();
    (void)c->Post("/v1/jobs", JobYaml("e2", 1), "application/yaml");
  });
  auto start = std::chrono::steady_clock::now();
  auto polled = f.Get("/v1/events?since=" + std::to_string(next) + "&wait_ms=10000");
  later.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(polled.body["events"].size(), 1u);
  EXPECT_EQ(polled.body["events"][0]["name"], "e2");

  // Server-sent events from the beginning.
  httplib::Client raw("127.0.0.1", f.server().port());
  raw.set_bearer_token_auth(kToken);
  std::string got;
  auto res =
      raw.Get("/v1/events", {{"Accept", "text/event-stream"}}, [&](const char* data, size_t n) {
        got.append(data, n);
        return got.find("e2") == std::string::npos;  // stop once both are in
      });
  EXPECT_NE(got.find("event: job"), std::string::npos) << got;
  EXPECT_NE(got.find("id: 1\n"), std::string::npos) << got;
  EXPECT_NE(got.find("e2"), std::string::npos) << got;
}

TEST(ServerApi, MetricsInPrometheusFormat) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "node-a", 4);
  ASSERT_EQ(a.Register().status, 200);
  ASSERT_EQ(f.Post("/v1/jobs", JobYaml("m", 2)).status, 201);
  ASSERT_EQ(f.Post("/v1/jobs", JobYaml("huge", 64)).status, 201);
  (void)f.client().Post("/v1/jobs", "nope: [", "application/yaml");
  // Orders are out once the cycle that placed "m" (and tried "huge") has finished.
  ASSERT_TRUE(WaitFor([&] { return !a.Work().empty(); }));
  std::string m = f.client().Get("/metrics")->text;
  for (const char* needle :
       {"# TYPE tianshu_queue_length gauge", "tianshu_queue_length 1",
        "tianshu_jobs{state=\"starting\"} 1", "tianshu_gpus{state=\"allocated\"} 2.000",
        "tianshu_gpus{state=\"free\"} 2.000", "# TYPE tianshu_cycle_seconds histogram",
        "tianshu_cycle_seconds_bucket{le=\"+Inf\"}",
        "tianshu_placement_outcomes_total{outcome=\"placed\"} 1",
        "tianshu_submissions_total{result=\"accepted\"} 2",
        "tianshu_submissions_total{result=\"rejected\"} 1", "tianshu_nodes{state=\"ready\"} 1"}) {
    EXPECT_NE(m.find(needle), std::string::npos) << needle << "\n" << m;
  }
}

TEST(ServerApi, RestartRebuildsFromTheStoreAndAgentReports) {
  ServerFixture f;
  f.Start();
  std::string launch_id, id, id2;
  {
    FakeAgent a(f, "node-a", 2);
    ASSERT_EQ(a.Register().status, 200);
    id = f.Post("/v1/jobs", JobYaml("keep", 2)).body["id"];
    std::vector<wire::WorkOrder> o;
    ASSERT_TRUE(WaitFor([&] { return !(o = a.Work(50)).empty(); }));
    a.AcceptAndStart(o[0]);
    launch_id = o[0].id;
    id2 = f.Post("/v1/jobs", JobYaml("waiting", 2)).body["id"];
  }
  f.Stop();
  f.Start();
  EXPECT_EQ(f.JobState(id), "running");
  EXPECT_EQ(f.JobState(id2), "pending");
  EXPECT_EQ(f.Get("/v1/nodes/node-a").body["state"], "ready");
  // The agent restarted too, and still runs rank 0 but lost rank 1: the attempt fails and the
  // job retries; nothing is launched twice while the ranks it reports are running.
  FakeAgent a2(f, "node-a", 2, "node-a-agent-2");
  ASSERT_EQ(
      a2.Register({{.order_id = launch_id, .job_id = id, .attempt = 1, .rank = 0, .pid = 1000}})
          .status,
      200);
  EXPECT_EQ(f.JobState(id), "stopping");
  auto work = a2.Work();
  ASSERT_EQ(work.size(), 1u);
  EXPECT_EQ(work[0].kind, wire::OrderKind::kStop);
  a2.Report({{.order_id = work[0].id, .kind = wire::ReportKind::kStopped, .job_id = id}});
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body["retries"], 1);
  // A rank nobody owns any more (a finished attempt) is stopped once, not twice.
  a2.Heartbeat(wire::Health::kOk, {{.order_id = "j-000777.a1.launch.node-a",
                                    .job_id = "j-000777",
                                    .attempt = 1,
                                    .rank = 0,
                                    .pid = 4}});
  a2.Heartbeat(wire::Health::kOk, {{.order_id = "j-000777.a1.launch.node-a",
                                    .job_id = "j-000777",
                                    .attempt = 1,
                                    .rank = 0,
                                    .pid = 4}});
  int stale = 0;
  for (const auto& o : a2.Work()) stale += o.job_id == "j-000777" ? 1 : 0;
  EXPECT_EQ(stale, 1);
}

// Waits for the node's next orders.
std::vector<wire::WorkOrder> NextOrders(FakeAgent& a, int timeout_ms = 8000) {
  std::vector<wire::WorkOrder> o;
  WaitFor([&] { return !(o = a.Work(50)).empty(); }, timeout_ms);
  return o;
}

// A rank's environment as a launch order sets it ("" when unset).
std::string EnvOf(const wire::WorkOrder& o, const std::string& key) {
  if (!o.launch || o.launch->ranks.empty()) return "";
  auto it = o.launch->ranks.front().env.find(key);
  return it == o.launch->ranks.front().env.end() ? "" : it->second;
}

// The stop order of a resize or a move: checkpoint first, then `stopped`.
void CheckpointAndStop(FakeAgent& a, const wire::WorkOrder& stop, int64_t step) {
  a.Report({{.order_id = stop.id,
             .kind = wire::ReportKind::kCheckpointed,
             .job_id = stop.job_id,
             .rank = 0,
             .step = step,
             .path = "/ckpt/step-" + std::to_string(step) + ".pt"},
            {.order_id = stop.id, .kind = wire::ReportKind::kStopped, .job_id = stop.job_id}});
}

// task_scheduler.elastic_scaling under the server: an elastic job grows into an idle node
// through a checkpoint and a relaunch at the new size, and gives that node back (the same way)
// when a higher-priority job arrives that does not fit. Preemption is on: the shrink is taken
// instead of evicting the whole job.
TEST(ServerApi, ElasticJobGrowsIntoAnIdleNodeAndShrinksForAHigherPriorityJob) {
  ServerFixture f;
  f.config.elastic_scaling = true;
  f.config.scaling_interval_s = 1;
  f.Start(10000, 512, /*preemption=*/true);
  FakeAgent a(f, "node-a", 2);
  FakeAgent b(f, "node-b", 2);
  ASSERT_EQ(a.Register().status, 200);
  ASSERT_EQ(b.Register().status, 200);
  std::string id =
      f.Post("/v1/jobs",
             JobYaml("grow", 2,
                     "nodes: 1\ngpus_per_node: 2\nelastic: {min_nodes: 1, max_nodes: 2}\n"))
          .body["id"];
  std::vector<wire::WorkOrder> oa, ob;
  ASSERT_TRUE(WaitFor([&] {
    oa = a.Work();
    ob = b.Work();
    return !oa.empty() || !ob.empty();
  }));
  FakeAgent& first = oa.empty() ? b : a;
  FakeAgent& other = oa.empty() ? a : b;
  const wire::WorkOrder launch1 = oa.empty() ? ob[0] : oa[0];
  ASSERT_TRUE(launch1.launch.has_value());
  EXPECT_EQ(launch1.launch->world_size, 2);
  first.AcceptAndStart(launch1);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }));

  // One scaling interval later, with nothing waiting, it grows: checkpoint and stop first.
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "stopping"; }, 8000));
  auto stop = NextOrders(first);
  ASSERT_EQ(stop.size(), 1u);
  ASSERT_TRUE(stop[0].stop.has_value());
  EXPECT_EQ(stop[0].stop->reason, "resize");
  EXPECT_TRUE(stop[0].stop->checkpoint_first);
  auto j = f.Get("/v1/jobs/" + id).body;
  EXPECT_EQ(j["reshape"].value("kind", ""), "resize");
  EXPECT_EQ(j["reshape"].value("gpus", 0), 4);
  // The other node is reserved for the relaunch: a job submitted now does not take it.
  std::string filler = f.Post("/v1/jobs", JobYaml("filler", 2)).body["id"];
  CheckpointAndStop(first, stop[0], 40);

  // Relaunched on both nodes at world size 4, from the checkpoint, the parallelism re-planned.
  auto la = NextOrders(first);
  auto lb = NextOrders(other);
  ASSERT_EQ(la.size(), 1u);
  ASSERT_EQ(lb.size(), 1u);
  for (const auto* o : {&la[0], &lb[0]}) {
    ASSERT_TRUE(o->launch.has_value());
    EXPECT_EQ(o->job_id, id);
    EXPECT_EQ(o->attempt, 2);
    EXPECT_EQ(o->launch->world_size, 4);
    EXPECT_EQ(EnvOf(*o, "TIANSHU_RESUME_STEP"), "40");
    EXPECT_EQ(std::stoi(EnvOf(*o, "TIANSHU_TP")) * std::stoi(EnvOf(*o, "TIANSHU_PP")) *
                  std::stoi(EnvOf(*o, "TIANSHU_DP")),
              4);
  }
  first.AcceptAndStart(la[0]);
  other.AcceptAndStart(lb[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }));
  j = f.Get("/v1/jobs/" + id).body;
  EXPECT_EQ(j.value("gpus", 0), 4);
  EXPECT_EQ(j.value("gpus_requested", 0), 2);
  EXPECT_EQ(j.value("resizes", 0), 1);
  EXPECT_EQ(j.value("retries", -1), 0);  // a resize is not a failure
  EXPECT_EQ(f.JobState(filler), "pending");
  EXPECT_NE(f.Get("/metrics").text.find("tianshu_job_resizes_total 1"), std::string::npos);
  EXPECT_EQ(f.Post("/v1/jobs/" + filler + "/cancel", "").status, 200);

  // A higher-priority job of 2 GPUs: the elastic job gives one node back (never below
  // min_nodes), and the arrival starts there once the job has relaunched on the other.
  std::string high = f.Post("/v1/jobs", JobYaml("high", 2, "priority: 10\n")).body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "stopping"; }, 8000));
  auto sa = NextOrders(first);
  auto sb = NextOrders(other);
  ASSERT_EQ(sa.size(), 1u);
  ASSERT_EQ(sb.size(), 1u);
  EXPECT_EQ(sa[0].stop->reason, "resize");
  EXPECT_EQ(f.JobState(high), "pending");
  CheckpointAndStop(first, sa[0], 70);
  CheckpointAndStop(other, sb[0], 70);
  // Work() lists every order not yet acted on: the launches, once both are out.
  std::vector<wire::WorkOrder> na, nb;
  ASSERT_TRUE(WaitFor([&] {
    na = first.Work();
    nb = other.Work();
    return na.size() + nb.size() >= 2;
  }));
  ASSERT_EQ(na.size(), 1u);
  ASSERT_EQ(nb.size(), 1u);
  // One node relaunches the elastic job at 2 ranks, the other starts the arrival.
  std::map<std::string, int> world;
  for (const auto* o : {&na[0], &nb[0]}) {
    ASSERT_TRUE(o->launch.has_value());
    world[o->job_id] = o->launch->world_size;
  }
  EXPECT_EQ(world[id], 2);
  EXPECT_EQ(world[high], 2);
  j = f.Get("/v1/jobs/" + id).body;
  EXPECT_EQ(j.value("resizes", 0), 2);
  EXPECT_EQ(j.value("attempt", 0), 3);
  EXPECT_NE(f.Get("/metrics").text.find("tianshu_job_preemptions_total 0"), std::string::npos);
}

// scheduler.migration under the server: a 2-GPU job that needs one whole node waits while two
// 1-GPU jobs hold one GPU on each node; one of them moves (checkpoint, relaunch on the other
// node), and the waiting job starts on the node it left.
TEST(ServerApi, MigrationDefragmentsSoAWaitingJobStarts) {
  ServerFixture f;
  f.config.migration = true;
  f.Start(10000, 512, /*preemption=*/false);
  FakeAgent a(f, "node-a", 2);
  FakeAgent b(f, "node-b", 2);
  ASSERT_EQ(a.Register().status, 200);
  ASSERT_EQ(b.Register().status, 200);
  // Three 1-GPU jobs: two share a node, the third takes the other; then one of the pair ends.
  std::map<std::string, std::pair<FakeAgent*, wire::WorkOrder>> at;
  std::vector<std::string> ids;
  for (const char* name : {"one", "two", "three"}) {
    ids.push_back(f.Post("/v1/jobs", JobYaml(name, 1, "duration: 10h\n")).body["id"]);
    ASSERT_TRUE(WaitFor([&] {
      for (FakeAgent* ag : {&a, &b}) {
        for (auto& o : ag->Work()) {
          if (o.launch && !at.contains(o.job_id)) {
            ag->AcceptAndStart(o);
            at.emplace(o.job_id, std::make_pair(ag, o));
          }
        }
      }
      return at.contains(ids.back());
    }));
  }
  std::string ending;
  for (const auto& x : ids) {
    for (const auto& y : ids) {
      if (x != y && at.at(x).first == at.at(y).first) ending = x;
    }
  }
  ASSERT_FALSE(ending.empty()) << "two 1-GPU jobs were expected to share a node";
  auto& [end_agent, end_launch] = at.at(ending);
  end_agent->Report({{.order_id = end_launch.id,
                      .kind = wire::ReportKind::kExited,
                      .job_id = ending,
                      .rank = 0,
                      .exit_code = 0}});
  ASSERT_TRUE(WaitFor([&] { return f.JobState(ending) == "succeeded"; }));

  std::string whole =
      f.Post("/v1/jobs", JobYaml("whole", 2, "nodes: 1\ngpus_per_node: 2\nduration: 1h\n"))
          .body["id"];
  std::string mover;
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& x : ids) {
      if (x != ending && f.JobState(x) == "stopping") mover = x;
    }
    return !mover.empty();
  }));
  auto moving = f.Get("/v1/jobs/" + mover).body;
  EXPECT_EQ(moving["reshape"].value("kind", ""), "migrate");
  FakeAgent* from = at.at(mover).first;
  FakeAgent* to = from == &a ? &b : &a;
  auto stop = NextOrders(*from);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].stop->reason, "migrate");
  EXPECT_TRUE(stop[0].stop->checkpoint_first);
  EXPECT_EQ(f.JobState(whole), "pending");
  CheckpointAndStop(*from, stop[0], 12);
  // The mover relaunches on the other node; the waiting job takes the node it left.
  auto relaunch = NextOrders(*to);
  auto started = NextOrders(*from);
  ASSERT_EQ(relaunch.size(), 1u);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(relaunch[0].job_id, mover);
  EXPECT_EQ(relaunch[0].attempt, 2);
  EXPECT_EQ(EnvOf(relaunch[0], "TIANSHU_RESUME_STEP"), "12");
  EXPECT_EQ(started[0].job_id, whole);
  EXPECT_EQ(started[0].launch->ranks.size(), 2u);
  EXPECT_EQ(f.Get("/v1/jobs/" + mover).body.value("migrations", 0), 1);
  EXPECT_NE(f.Get("/metrics").text.find("tianshu_job_migrations_total 1"), std::string::npos);
}

// scheduler.colocation under the server: an inference service overlays a GPU that a training
// job holds whole, on the same node, holding no GPU share of its own, where the serving model
// predicts it keeps its latency objective. With `priority` on CUDA
// both are MPS clients, the service at normal and training at below-normal client priority.
// With `none` the service waits for a GPU of its own.
TEST(ServerApi, InferenceServiceOverlaysTrainingGpusUnderColocation) {
  for (const std::string mode : {"priority", "none"}) {
    SCOPED_TRACE(mode);
    ServerFixture f;
    f.config.colocation = mode;
    f.Start(10000, 512, /*preemption=*/false);
    FakeAgent a(f, "node-a", 2);
    ASSERT_EQ(a.Register().status, 200);
    std::string train = f.Post("/v1/jobs", JobYaml("train", 2)).body["id"];
    auto launch = NextOrders(a);
    ASSERT_EQ(launch.size(), 1u);
    ASSERT_TRUE(launch[0].launch.has_value());
    a.AcceptAndStart(launch[0]);
    ASSERT_TRUE(WaitFor([&] { return f.JobState(train) == "running"; }));
    EXPECT_EQ(EnvOf(launch[0], "CUDA_MPS_CLIENT_PRIORITY"), mode == "priority" ? "1" : "");
    if (mode == "priority") {
      // The serving model predicts a 50 ms objective cannot be kept next to training (one
      // request alone takes longer): no overlay.
      std::string tight =
          f.Post("/v1/jobs",
                 "kind: inference\nname: tight\nmodel: {profile: llama2-7b}\ngpus: 1\n"
                 "inference: {request_rate: 0.3, latency_slo: 50ms, batch: 8, max_seq_len: 1024}\n")
              .body["id"];
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_TRUE(a.Work().empty());
      EXPECT_EQ(f.JobState(tight), "pending");
      EXPECT_EQ(f.Post("/v1/jobs/" + tight + "/cancel", "").status, 200);
    }
    std::string serve =
        f.Post("/v1/jobs",
               "kind: inference\nname: chat\nmodel: {profile: llama2-7b}\ngpus: 1\n"
               "inference: {request_rate: 0.3, latency_slo: 8s, batch: 8, max_seq_len: 1024}\n")
            .body["id"];
    if (mode == "none") {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_TRUE(a.Work().empty());
      EXPECT_EQ(f.JobState(serve), "pending");
      continue;
    }
    auto overlay = NextOrders(a);
    ASSERT_EQ(overlay.size(), 1u);
    ASSERT_TRUE(overlay[0].launch.has_value());
    EXPECT_EQ(overlay[0].job_id, serve);
    ASSERT_EQ(overlay[0].launch->ranks.size(), 1u);
    const auto& devices = launch[0].launch->ranks;
    const int d = overlay[0].launch->ranks[0].devices.at(0);
    EXPECT_TRUE(std::any_of(devices.begin(), devices.end(),
                            [&](const wire::RankLaunch& r) { return r.devices.at(0) == d; }));
    EXPECT_EQ(EnvOf(overlay[0], "TIANSHU_COLOCATION"), "priority");
    EXPECT_EQ(EnvOf(overlay[0], "CUDA_MPS_CLIENT_PRIORITY"), "0");
    a.AcceptAndStart(overlay[0]);
    ASSERT_TRUE(WaitFor([&] { return f.JobState(serve) == "running"; }));
    EXPECT_TRUE(f.Get("/v1/jobs/" + serve).body.value("colocated", false));
    EXPECT_FALSE(f.Get("/v1/jobs/" + train).body.value("colocated", true));
    // The overlay holds no share: 2 of 2 GPUs allocated, not 3.
    EXPECT_NE(f.Get("/metrics").text.find("tianshu_gpus{state=\"allocated\"} 2.000\n"),
              std::string::npos)
        << f.Get("/metrics").text;
    // A second service overlays the other GPU (one GPU's worth of services per GPU).
    std::string second =
        f.Post("/v1/jobs",
               "kind: inference\nname: chat2\nmodel: {profile: llama2-7b}\ngpus: 1\n"
               "inference: {request_rate: 0.3, latency_slo: 8s, batch: 8, max_seq_len: 1024}\n")
            .body["id"];
    auto next = NextOrders(a);
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].job_id, second);
    EXPECT_NE(next[0].launch->ranks[0].devices.at(0), d);
  }
}

// A job that gives no duration is scheduled with a learned estimate: the run time of the
// succeeded jobs like it (what the GPUs were held for), kept across a server restart.
TEST(ServerApi, JobsWithoutADurationGetALearnedRuntimeEstimate) {
  ServerFixture f;
  f.Start(10000, 512, /*preemption=*/false);
  FakeAgent a(f, "node-a", 2);
  ASSERT_EQ(a.Register().status, 200);
  std::string given = f.Post("/v1/jobs", JobYaml("given", 2, "duration: 2h\n")).body["id"];
  auto gj = f.Get("/v1/jobs/" + given).body;
  EXPECT_EQ(gj.value("runtime_estimate_source", ""), "user");
  EXPECT_DOUBLE_EQ(gj.value("runtime_estimate_s", 0.0), 7200);
  EXPECT_EQ(f.Post("/v1/jobs/" + given + "/cancel", "").status, 200);
  ASSERT_TRUE(WaitFor([&] {  // a launch already out is stopped first
    for (const auto& o : a.Work()) {
      if (o.stop) {
        a.Report({{.order_id = o.id, .kind = wire::ReportKind::kStopped, .job_id = o.job_id}});
      }
    }
    return f.JobState(given) == "cancelled";
  }));

  std::string first = f.Post("/v1/jobs", JobYaml("first", 2)).body["id"];
  EXPECT_EQ(f.Get("/v1/jobs/" + first).body.value("runtime_estimate_source", ""), "none");
  std::vector<wire::WorkOrder> o;
  ASSERT_TRUE(WaitFor([&] {
    o = a.Work(50);
    return !o.empty() && o[0].launch && o[0].job_id == first;
  }));
  a.AcceptAndStart(o[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  a.ExitAll(o[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(first) == "succeeded"; }));
  std::string next = f.Post("/v1/jobs", JobYaml("next", 2)).body["id"];
  auto nj = f.Get("/v1/jobs/" + next).body;
  EXPECT_EQ(nj.value("runtime_estimate_source", ""), "history");
  const double est = nj.value("runtime_estimate_s", 0.0);
  EXPECT_GE(est, 0.25);
  EXPECT_LT(est, 5.0);
  // Another size has no history of its own or by size.
  std::string other = f.Post("/v1/jobs", JobYaml("other", 1)).body["id"];
  EXPECT_EQ(f.Get("/v1/jobs/" + other).body.value("runtime_estimate_source", ""), "none");
  f.Stop();
  f.Start(10000, 512, /*preemption=*/false);
  auto again = f.Get("/v1/jobs/" + next).body;
  EXPECT_EQ(again.value("runtime_estimate_source", ""), "history");
  EXPECT_DOUBLE_EQ(again.value("runtime_estimate_s", 0.0), est);
}

// Elastic scaling, migration, co-location and a fair-share configuration with queues start;
// a bad configuration is refused by name.
TEST(ServerApi, StartsEveryPolicyConfigAndRefusesABadOneByName) {
  const std::string dir = MakeTempDir("tianshu-server-config");
  auto options = [&](auto edit) {
    server::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.data_dir = dir;
    o.token = kToken;
    edit(o.control.config);
    return o;
  };
  auto bad = server::Server::Start(options([](auto& c) { c.order = "lottery"; }));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("lottery"), std::string::npos) << bad.error().message;
  auto elastic = server::Server::Start(options([](auto& c) {
    c.elastic_scaling = true;
    c.migration = true;
    c.colocation = "priority";
  }));
  ASSERT_TRUE(elastic) << elastic.error().message;
  (*elastic)->Stop();
  auto fair = server::Server::Start(options([](auto& c) {
    c.order = "fair-share";
    c.queues = {{.name = "research", .quota_gpus = 8}};
  }));
  ASSERT_TRUE(fair) << fair.error().message;
  (*fair)->Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// On etcd a change must fit one transaction (max-txn-ops): a request whose change would not is
// refused with 413 before anything changes, and the store goes on working (one oversized change
// would fail it, and the server with it).
TEST(ServerApi, AChangeTooLargeForTheStoreIsRefusedBeforeAnythingChanges) {
  if (!StoreIsEtcd()) GTEST_SKIP() << "SQLite takes changes of any size";
  ServerFixture f;
  f.adjust = [](server::ServerOptions& o) { o.store += "?max-txn-ops=20"; };
  f.Start();
  auto array = f.Post("/v1/jobs?array=0-9", JobYaml("many", 1));  // 10 records and 10 events
  EXPECT_EQ(array.status, 413) << array.text;
  EXPECT_NE(array.ErrorText().find("max-txn-ops"), std::string::npos) << array.text;
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    auto r = f.Post("/v1/jobs?hold=true", JobYaml("held-" + std::to_string(i), 1));
    ASSERT_EQ(r.status, 201) << r.text;
    ids.push_back(r.body["id"]);
  }
  auto all = f.Post("/v1/jobs/release", nlohmann::json{{"ids", ids}}.dump(), "application/json");
  EXPECT_EQ(all.status, 413) << all.text;
  EXPECT_EQ(f.Get("/v1/jobs?state=pending").body["total"], 10);
  for (const auto& id : ids) EXPECT_TRUE(f.Get("/v1/jobs/" + id).body["held"].get<bool>()) << id;
  const std::vector<std::string> half(ids.begin(), ids.begin() + 5);
  auto some = f.Post("/v1/jobs/release", nlohmann::json{{"ids", half}}.dump(), "application/json");
  EXPECT_EQ(some.status, 200) << some.text;
  EXPECT_EQ(f.Get("/healthz").status, 200);  // the store never failed
  EXPECT_EQ(f.Post("/v1/jobs", JobYaml("after", 1)).status, 201);
}

}  // namespace
}  // namespace tianshu::testing
