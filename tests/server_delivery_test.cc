// How fast work moves through the control plane (issue 16): a held-open work request gets an
// order as soon as it is durable, a change asks for a scheduling cycle at once (not on the next
// period), jobs can be submitted held and released together, and a job's service counts from
// the moment its first rank runs (not from its placement); a report about one rank writes that
// fact alone, not the job's whole record.
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <thread>

#include "server_fixture.h"

namespace tianshu::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The node's own client for a held-open request (the FakeAgent's is busy meanwhile).
struct WorkWaiter {
  ServerFixture& f;
  FakeAgent& agent;
  Result<server::ApiResponse> Wait(const std::string& after, int wait_ms) {
    auto client = std::make_unique<server::Client>(
        server::ClientOptions{.server = "http://127.0.0.1:" + std::to_string(f.server().port()),
                              .token = f.credentials.at(agent.node()),
                              .timeout_ms = wait_ms + 10000});
    std::string path = "/v1/agents/" + agent.node() + "/work?agent_id=" + agent.agent_id() +
                       "&wait_ms=" + std::to_string(wait_ms);
    if (!after.empty()) path += "&after=" + after;
    return client->Get(path);
  }
};

// The first column of the first row `query` returns on the store file ("" if none).
std::string SqlValue(const std::string& db, const std::string& query) {
  sqlite3* h = nullptr;
  std::string out;
  EXPECT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  sqlite3_busy_timeout(h, 5000);
  char* err = nullptr;
  auto first = [](void* o, int n, char** v, char**) {
    auto* s = static_cast<std::string*>(o);
    if (s->empty() && n > 0 && v[0]) *s = v[0];
    return 0;
  };
  EXPECT_EQ(sqlite3_exec(h, query.c_str(), first, &out, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(h);
  return out;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

TEST(Delivery, AHeldOpenWorkRequestGetsAnOrderAsSoonAsItIsMade) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  WorkWaiter w{f, a};
  auto first = w.Wait("", 0);
  ASSERT_TRUE(first && first->status == 200) << (first ? first->text : first.error().message);
  const std::string cursor = first->body.value("cursor", "");
  ASSERT_FALSE(cursor.empty()) << first->text;
  EXPECT_TRUE(first->body["orders"].empty());

  // Held open for up to 30 s: the launch of a job submitted meanwhile ends it.
  const auto start = Clock::now();
  auto held = std::async(std::launch::async, [&] { return w.Wait(cursor, 30000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(f.Post("/v1/jobs", JobYaml("j", 8)).status, 201);
  auto got = held.get();
  const double waited = Seconds(start);
  ASSERT_TRUE(got && got->status == 200) << (got ? got->text : got.error().message);
  ASSERT_EQ(got->body["orders"].size(), 1u) << got->text;
  EXPECT_EQ(got->body["orders"][0]["kind"], "launch");
  EXPECT_LT(waited, 15.0) << "the request ran to its 30 s limit instead of ending with the order";
  const std::string next = got->body.value("cursor", "");
  EXPECT_NE(next, cursor);

  // With the new cursor, the same outstanding order does not end the wait again...
  const auto again_start = Clock::now();
  auto again = w.Wait(next, 400);
  ASSERT_TRUE(again && again->status == 200);
  EXPECT_GE(Seconds(again_start), 0.35);
  // ...though the answer still lists it (the agent has not accepted it yet).
  EXPECT_EQ(again->body["orders"].size(), 1u);

  // A cursor of another server run counts as none: the outstanding order comes at once.
  const auto other_start = Clock::now();
  auto other = w.Wait("someotherrun.99", 20000);
  ASSERT_TRUE(other && other->status == 200);
  EXPECT_EQ(other->body["orders"].size(), 1u);
  EXPECT_LT(Seconds(other_start), 10.0);

  auto bad = w.Wait("nonsense", 0);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->ErrorText().find("after"), std::string::npos) << bad->text;
}

TEST(Delivery, ASubmissionIsScheduledAtOnceNotOnTheNextPeriod) {
  ServerFixture f;
  // A period of a minute: only a change asking for a cycle can place the job within it.
  f.adjust = [](server::ServerOptions& o) { o.tick_ms = 60000; };
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto r = f.Post("/v1/jobs", JobYaml("j", 4));
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  EXPECT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; }, 20000))
      << f.Get("/v1/jobs/" + id).text;
}

TEST(Holds, HeldJobsWaitUntilReleasedTogetherAndAllOrNoneChanges) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto r = f.Post("/v1/jobs?hold=true", JobYaml("held-" + std::to_string(i), 4));
    ASSERT_EQ(r.status, 201) << r.text;
    EXPECT_EQ(r.body["held"], true);
    ids.push_back(r.body["id"]);
  }
  EXPECT_EQ(f.Post("/v1/jobs?hold=maybe", JobYaml("x", 1)).status, 400);
  auto free_job = f.Post("/v1/jobs", JobYaml("free", 8));
  ASSERT_EQ(free_job.status, 201);
  const std::string free_id = free_job.body["id"];
  // The free job takes the node; the held ones would fit after it, but stay held.
  ASSERT_TRUE(WaitFor([&] { return f.JobState(free_id) == "starting"; }));
  auto orders = a.Work(50);
  ASSERT_EQ(orders.size(), 1u);
  a.AcceptAndStart(orders[0]);
  a.ExitAll(orders[0], 0);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(free_id) == "succeeded"; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (const auto& id : ids) {
    auto j = f.Get("/v1/jobs/" + id);
    EXPECT_EQ(j.body["state"], "pending");
    EXPECT_EQ(j.body["held"], true);
    EXPECT_NE(j.body.value("message", "").find("held"), std::string::npos) << j.text;
  }

  // All or none: one unknown id, and nothing is released.
  auto partial =
      f.Post("/v1/jobs/release", json{{"ids", {ids[0], "j-999999"}}}.dump(), "application/json");
  EXPECT_EQ(partial.status, 404);
  EXPECT_NE(partial.ErrorText().find("nothing changed"), std::string::npos) << partial.text;
  EXPECT_EQ(f.Get("/v1/jobs/" + ids[0]).body["held"], true);
  // A job that is not held cannot be released; a finished one cannot be held.
  EXPECT_EQ(f.Post("/v1/jobs/hold", json{{"ids", {free_id}}}.dump(), "application/json").status,
            409);
  EXPECT_EQ(f.Post("/v1/jobs/release", R"({"ids": []})", "application/json").status, 400);
  EXPECT_EQ(f.Post("/v1/jobs/release", R"({"jobs": ["j-000001"]})", "application/json").status,
            400);

  auto released = f.Post("/v1/jobs/release", json{{"ids", ids}}.dump(), "application/json");
  ASSERT_EQ(released.status, 200) << released.text;
  ASSERT_EQ(released.body["jobs"].size(), 2u);
  for (const auto& id : ids) {
    EXPECT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; })) << id;
  }
  // Holding again is refused once they have started.
  EXPECT_EQ(f.Post("/v1/jobs/hold", json{{"ids", ids}}.dump(), "application/json").status, 409);
}

// A second user cannot release (or hold) the first one's jobs; an admin can.
TEST(Holds, OnlyTheOwnerOrAnAdminHoldsOrReleasesAJob) {
  ServerFixture f;
  f.Start();
  const std::string alice_token = f.AddUser("alice"), bob_token = f.AddUser("bob");
  ASSERT_FALSE(alice_token.empty() || bob_token.empty());
  auto alice = f.NewClient(alice_token);
  auto bob = f.NewClient(bob_token);
  auto made = alice->Post("/v1/jobs?hold=true", JobYaml("mine", 1), "application/yaml");
  ASSERT_TRUE(made && made->status == 201);
  const std::string id = made->body["id"];
  const std::string body = json{{"ids", {id}}}.dump();
  auto stolen = bob->Post("/v1/jobs/release", body, "application/json");
  ASSERT_TRUE(stolen);
  EXPECT_EQ(stolen->status, 403);
  EXPECT_NE(stolen->ErrorText().find("belongs to alice"), std::string::npos) << stolen->text;
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body["held"], true);
  auto own = alice->Post("/v1/jobs/release", body, "application/json");
  ASSERT_TRUE(own && own->status == 200) << (own ? own->text : own.error().message);
  auto held_by_bob = bob->Post("/v1/jobs/hold", body, "application/json");
  ASSERT_TRUE(held_by_bob);
  EXPECT_EQ(held_by_bob->status, 403);
  EXPECT_EQ(f.Post("/v1/jobs/hold", body, "application/json").status, 200);  // the admin
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body["held"], true);
}

TEST(Holds, AHoldSurvivesARestart) {
  ServerFixture f;
  f.Start();
  auto r = f.Post("/v1/jobs", JobYaml("later", 4));
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  ASSERT_EQ(f.Post("/v1/jobs/hold", json{{"ids", {id}}}.dump(), "application/json").status, 200);
  f.Stop();
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto j = f.Get("/v1/jobs/" + id);
  EXPECT_EQ(j.body["state"], "pending");
  EXPECT_EQ(j.body["held"], true);
  ASSERT_EQ(f.Post("/v1/jobs/release", json{{"ids", {id}}}.dump(), "application/json").status, 200);
  EXPECT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; }));
}

// Jobs released together queue from the release, as one batch: smallest first, behind a job
// submitted before the release though after them, and so again after a restart.
TEST(Holds, AReleaseQueuesItsJobsFromTheReleaseSmallestFirst) {
  ServerFixture f;
  f.Start();
  std::vector<std::string> held;
  for (auto [name, gpus] : {std::pair{"big", 8}, {"small", 4}}) {
    auto r = f.Post("/v1/jobs?hold=true", JobYaml(name, gpus));
    ASSERT_EQ(r.status, 201) << r.text;
    held.push_back(r.body["id"]);
  }
  auto later = f.Post("/v1/jobs", JobYaml("later", 4));
  ASSERT_EQ(later.status, 201);
  const std::string later_id = later.body["id"];
  ASSERT_EQ(f.Post("/v1/jobs/release", json{{"ids", held}}.dump(), "application/json").status, 200);
  f.Stop();
  f.Start();
  FakeAgent a(f, "n0", 8);  // room for the two of 4 GPUs, or for the one of 8
  ASSERT_EQ(a.Register().status, 200);
  EXPECT_TRUE(WaitFor([&] { return f.JobState(later_id) == "starting"; }))
      << f.Get("/v1/jobs/" + later_id).text;
  EXPECT_TRUE(WaitFor([&] { return f.JobState(held[1]) == "starting"; }))
      << f.Get("/v1/jobs/" + held[1]).text;
  EXPECT_EQ(f.JobState(held[0]), "pending");
}

// Held again and released again, a job queues from its last release: a job submitted between
// the two releases goes first.
TEST(Holds, AJobQueuesFromItsLastRelease) {
  ServerFixture f;
  f.Start();
  auto held = f.Post("/v1/jobs?hold=true", JobYaml("big", 8));
  ASSERT_EQ(held.status, 201) << held.text;
  const std::string big = held.body["id"];
  const std::string ids = json{{"ids", {big}}}.dump();
  ASSERT_EQ(f.Post("/v1/jobs/release", ids, "application/json").status, 200);
  ASSERT_EQ(f.Post("/v1/jobs/hold", ids, "application/json").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto between = f.Post("/v1/jobs", JobYaml("between", 4));
  ASSERT_EQ(between.status, 201);
  const std::string between_id = between.body["id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(f.Post("/v1/jobs/release", ids, "application/json").status, 200);
  FakeAgent a(f, "n0", 8);  // room for one of them
  ASSERT_EQ(a.Register().status, 200);
  EXPECT_TRUE(WaitFor([&] { return f.JobState(between_id) == "starting"; }))
      << f.Get("/v1/jobs/" + between_id).text;
  EXPECT_EQ(f.JobState(big), "pending");
}

TEST(Service, CountsFromTheFirstRankStartNotFromThePlacement) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  auto r = f.Post("/v1/jobs", JobYaml("j", 8));
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; }));
  // Placed, launch not yet started for 1 s: no service.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body["attained_gpu_s"], 0.0);
  auto orders = a.Work(50);
  ASSERT_EQ(orders.size(), 1u);
  a.AcceptAndStart(orders[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const double s = f.Get("/v1/jobs/" + id).body["attained_gpu_s"].get<double>();
  EXPECT_GT(s, 8 * 0.3);
  EXPECT_LT(s, 8 * 0.6 + 8 * 1.0) << "the launch wait was charged as service";
}

// A gang's per-rank reports are progress rows of their own (issue 16: a report rewrites only what
// changed): once its first rank started, the job's stored record is not rewritten by the next
// ranks' starts, and the rows bring them back after a restart, so the last rank's start still
// completes the gang. A store of schema v2, whose records carry that progress inside, is
// migrated: the progress moves to rows when it is loaded.
TEST(Records, RankReportsWriteRowsNotTheJobsRecordAndSurviveARestart) {
  if (StoreIsEtcd()) GTEST_SKIP() << "reads or writes the SQLite file itself";
  ServerFixture f;
  f.Start();
  const std::string db = f.dir() + "/tianshu.db";
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  auto r = f.Post("/v1/jobs", JobYaml("gang", 8));
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; }));
  auto orders = a.Work(50);
  ASSERT_EQ(orders.size(), 1u);
  const wire::WorkOrder launch = orders[0];
  ASSERT_EQ(launch.launch->ranks.size(), 8u);
  auto report = [&](wire::ReportKind kind, int rank) {
    EXPECT_EQ(a.Report({{.order_id = launch.id, .kind = kind, .job_id = id, .rank = rank}}).status,
              200);
  };
  auto record = [&] { return SqlValue(db, "SELECT doc FROM jobs WHERE id = '" + id + "'"); };
  auto rows = [&](const std::string& prefix) {
    return std::stoi(SqlValue(db, "SELECT count(*) FROM job_progress WHERE job_id = '" + id +
                                      "' AND key LIKE '" + prefix + "%'"));
  };
  report(wire::ReportKind::kAccepted, 0);
  report(wire::ReportKind::kStarted, 0);  // the first start also sets the run's start time
  const std::string after_first = record();
  for (int rank = 1; rank < 6; ++rank) report(wire::ReportKind::kStarted, rank);
  EXPECT_EQ(record(), after_first) << "a rank's start rewrote the job's record";
  EXPECT_EQ(rows("s/"), 6);
  EXPECT_EQ(rows("a/"), 1);
  EXPECT_EQ(f.JobState(id), "starting");

  // The ranks run on across a restart of the server.
  std::vector<wire::RunningRank> running;
  for (const auto& rank : launch.launch->ranks) {
    running.push_back({launch.id, id, launch.attempt, rank.rank, 1000 + rank.rank});
  }
  f.Stop();
  f.Start();
  FakeAgent b(f, "n0", 8);  // the same agent, connecting to the restarted server
  ASSERT_EQ(b.Register(running).status, 200);
  auto report_b = [&](wire::ReportKind kind, int rank) {
    EXPECT_EQ(b.Report({{.order_id = launch.id, .kind = kind, .job_id = id, .rank = rank}}).status,
              200);
  };
  report_b(wire::ReportKind::kStarted, 6);
  EXPECT_EQ(f.JobState(id), "starting");    // 7 of 8: the 6 from before the restart count
  report_b(wire::ReportKind::kStarted, 6);  // a duplicate changes nothing
  EXPECT_EQ(rows("s/"), 7);

  // Back to schema v2: the progress inside the record, no progress table.
  f.Stop();
  std::string started = "[0,1,2,3,4,5,6]";
  std::string sql = "UPDATE jobs SET doc = json_set(doc, '$.started', json('" + started +
                    "'), '$.launch_accepted', json('[\"n0\"]')) WHERE id = '" + id +
                    "'; DROP TABLE job_progress; PRAGMA user_version=2;";
  EXPECT_EQ(SqlValue(db, sql + " SELECT 'ok'"), "ok");
  f.Start();
  EXPECT_EQ(rows("s/"), 7) << "the v2 record's progress did not move to rows";
  EXPECT_EQ(json::parse(record()).count("started"), 0u) << "the v2 record was not rewritten";
  FakeAgent c(f, "n0", 8);
  ASSERT_EQ(c.Register(running).status, 200);
  EXPECT_EQ(
      c.Report(
           {{.order_id = launch.id, .kind = wire::ReportKind::kStarted, .job_id = id, .rank = 7}})
          .status,
      200);
  EXPECT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }, 5000))
      << f.Get("/v1/jobs/" + id).text;
  EXPECT_EQ(json::parse(record()).count("started"), 0u) << "the record still carries progress";

  // A rank fails: the job is stopped and retried; its next attempt starts with no progress
  // rows of the last one.
  EXPECT_EQ(c.Report({{.order_id = launch.id,
                       .kind = wire::ReportKind::kExited,
                       .job_id = id,
                       .rank = 3,
                       .exit_code = 1}})
                .status,
            200);
  orders = c.Work(50);
  ASSERT_EQ(orders.size(), 1u);
  ASSERT_EQ(orders[0].kind, wire::OrderKind::kStop);
  EXPECT_EQ(c.Report({{.order_id = orders[0].id, .kind = wire::ReportKind::kStopped, .job_id = id}})
                .status,
            200);
  ASSERT_TRUE(WaitFor([&] { return f.Get("/v1/jobs/" + id).body.value("attempt", 0) == 2; }))
      << f.Get("/v1/jobs/" + id).text;
  // (The view shows attempt 2 as soon as it is decided; its change is durable a moment later.)
  EXPECT_TRUE(WaitFor([&] {
    return SqlValue(db, "SELECT count(*) FROM job_progress WHERE job_id = '" + id +
                            "' AND attempt = 1") == "0";
  }));
}

// A job's record is written straight as text (JobDoc, with wire::JsonWriter), not through a
// document tree: the text is what wire::Dump writes for the document it holds, whatever the
// submission's bytes (quotes, backslashes, tabs, CJK, emoji in its text, command and
// environment), and the job, once it ran and ended, reads back whole after a restart: its API
// view is the same, field for field.
TEST(Records, AJobsRecordIsTheTextDumpWouldWriteAndReadsBackWhole) {
  if (StoreIsEtcd()) GTEST_SKIP() << "reads the SQLite file itself";
  ServerFixture f;
  f.Start();
  const std::string db = f.dir() + "/tianshu.db";
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  const std::string yaml =
      JobYaml("record", 8,
              "# \"quoted\" \\back\\slash\ttab \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x9a\x80\n"
              "run:\n  command: [/bin/echo, \"say \\\"hi\\\"\", \"\xe6\xa8\xa1\xe5\x9e\x8b\"]\n"
              "  env: {NOTE: \"a\\tb \\\\ c\", EMOJI: \"\xf0\x9f\x9a\x80\"}\n");
  auto r = f.Post("/v1/jobs", yaml);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  const std::string id = r.body["id"];
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "starting"; }));
  auto orders = a.Work(50);
  ASSERT_EQ(orders.size(), 1u);
  a.AcceptAndStart(orders[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }));
  const std::string doc = SqlValue(db, "SELECT doc FROM jobs WHERE id = '" + id + "'");
  const json d = json::parse(doc);
  EXPECT_EQ(doc, wire::Dump(d));
  EXPECT_EQ(d["text"], yaml);
  EXPECT_EQ(d["run"]["command"], json({"/bin/echo", "say \"hi\"", "\xe6\xa8\xa1\xe5\x9e\x8b"}));
  EXPECT_EQ(d["run"]["env"]["NOTE"], "a\tb \\ c");
  EXPECT_EQ(d["placement"].size(), 8u);
  EXPECT_EQ(d["history"].back()["to"], "running");
  // It ends: an ended run ([start, end, GPUs], the GPUs a float) and attained service.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  a.ExitAll(orders[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "succeeded"; }));
  const std::string ended = SqlValue(db, "SELECT doc FROM jobs WHERE id = '" + id + "'");
  const json e = json::parse(ended);
  EXPECT_EQ(ended, wire::Dump(e));
  ASSERT_EQ(e["runs"].size(), 1u) << ended;
  EXPECT_TRUE(e["runs"][0][2].is_number_float()) << ended;
  EXPECT_DOUBLE_EQ(e["runs"][0][2].get<double>(), 8.0);
  EXPECT_GT(e["attained_gpu_s"].get<double>(), 0.0);
  // The whole view (every field the record keeps, as the API shows it) reads back the same.
  const json before = f.Get("/v1/jobs/" + id).body;
  f.Stop();
  f.Start();
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body, before);
  EXPECT_EQ(SqlValue(db, "SELECT doc FROM jobs WHERE id = '" + id + "'"), ended);
}

// A job array (sbatch --array) is one job per task, made in one change: the tasks have
// consecutive ids, each launch carries its task's index, a retry with the same key gets the same
// array (another array under that key is refused), the tasks survive a restart, and an array
// whose bodies would exceed 16 MiB is refused whole.
TEST(Arrays, EachTaskIsAJobThatKnowsItsIndex) {
  ServerFixture f;
  f.Start();
  auto post = [&](const std::string& query, const std::string& key) {
    auto r = f.client().Post("/v1/jobs" + query, JobYaml("sweep", 2), "application/yaml",
                             {{"Idempotency-Key", key}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : server::ApiResponse{};
  };
  auto r = post("?array=0-4:2", "sweep-1");
  ASSERT_EQ(r.status, 201) << r.text;
  const std::string array_id = r.body["array_id"];
  ASSERT_EQ(r.body["ids"].size(), 3u) << r.text;
  EXPECT_EQ(r.body["ids"][0], array_id);
  auto replay = post("?array=0-4:2", "sweep-1");
  EXPECT_EQ(replay.status, 200) << replay.text;
  EXPECT_EQ(replay.body["ids"], r.body["ids"]);
  EXPECT_EQ(post("?array=0-5", "sweep-1").status, 422);
  EXPECT_EQ(post("", "sweep-1").status, 422);  // the same key for a plain job
  EXPECT_EQ(post("?array=2-1", "sweep-2").status, 400);
  const std::string big(64 * 1024, '#');
  auto too_big =
      f.client().Post("/v1/jobs?array=0-299", JobYaml("big", 1) + big, "application/yaml");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413) << too_big->text;
  EXPECT_EQ(f.Get("/v1/jobs").body["total"], 3);

  f.Stop();
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  std::map<std::string, std::string> task_of;  // job id -> TIANSHU_ARRAY_TASK_ID of its ranks
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& o : a.Work(50)) {
      if (!o.launch) continue;
      for (const auto& rank : o.launch->ranks) {
        EXPECT_EQ(rank.env.at("TIANSHU_ARRAY_JOB_ID"), array_id);
        EXPECT_EQ(rank.env.at("TIANSHU_ARRAY_TASK_COUNT"), "3");
        task_of[o.job_id] = rank.env.at("TIANSHU_ARRAY_TASK_ID");
      }
    }
    return task_of.size() == 3;
  })) << task_of.size();
  for (size_t i = 0; i < 3; ++i) {
    const std::string id = r.body["ids"][i];
    EXPECT_EQ(task_of[id], std::to_string(2 * i)) << id;
    EXPECT_EQ(f.Get("/v1/jobs/" + id).body["array"]["index"], 2 * i);
  }

  // scancel ARRAYID: every unfinished task at once; a task's id is not an array's.
  const std::string second = r.body["ids"][1];
  EXPECT_EQ(f.Post("/v1/jobs/" + second + "/cancel?array=true", "").status, 400);
  EXPECT_EQ(f.Post("/v1/jobs/" + second + "/cancel", "").status, 200);  // one task alone
  auto all = f.Post("/v1/jobs/" + array_id + "/cancel?array=true", "");
  ASSERT_EQ(all.status, 200) << all.text;
  EXPECT_EQ(all.body["cancelled"].size(), 3u) << all.text;  // the stopping one included
  for (const auto& id : r.body["ids"]) {
    EXPECT_NE(f.JobState(id), "running") << id;
  }
}

// A node reports only about its own orders of a job it runs: a forged report from another node
// (a rejected launch, a stop, a checkpoint with a path of its choice), or one naming another
// node's order, changes nothing and writes nothing.
TEST(Reports, AForgedReportAboutAnotherNodesJobChangesNothing) {
  if (StoreIsEtcd()) GTEST_SKIP() << "reads or writes the SQLite file itself";
  ServerFixture f;
  f.Start();
  const std::string db = f.dir() + "/tianshu.db";
  FakeAgent a(f, "n0", 8), b(f, "n0.x", 8);  // a name that ends like another's order ids
  ASSERT_EQ(a.Register().status, 200);
  ASSERT_EQ(b.Register().status, 200);
  auto r = f.Post("/v1/jobs", JobYaml("victim", 8));
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  std::vector<wire::WorkOrder> orders;
  FakeAgent* holder = nullptr;
  ASSERT_TRUE(WaitFor([&] {
    for (FakeAgent* x : {&a, &b}) {
      if (!(orders = x->Work(50)).empty()) {
        holder = x;
        return true;
      }
    }
    return false;
  }));
  FakeAgent* other = holder == &a ? &b : &a;
  holder->AcceptAndStart(orders[0]);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }));
  const std::string launch = orders[0].id;
  const std::string forged_launch = id + ".a1.launch." + other->node();
  const std::string record = SqlValue(db, "SELECT doc FROM jobs WHERE id = '" + id + "'");
  const std::string rows = SqlValue(db, "SELECT count(*) FROM job_progress");
  for (const auto& [order, kind] : std::vector<std::pair<std::string, wire::ReportKind>>{
           {forged_launch, wire::ReportKind::kRejected},
           {launch, wire::ReportKind::kRejected},  // the holder's order, from the other node
           {launch, wire::ReportKind::kExited},
           {id + ".a1.stop." + other->node(), wire::ReportKind::kStopped},
           {forged_launch, wire::ReportKind::kCheckpointed}}) {
    EXPECT_EQ(other
                  ->Report({{.order_id = order,
                             .kind = kind,
                             .job_id = id,
                             .rank = 0,
                             .exit_code = 1,
                             .step = 1000,
                             .path = "/attacker/ckpt"}})
                  .status,
              200);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto j = f.Get("/v1/jobs/" + id).body;
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j.value("last_checkpoint", ""), "") << j.dump();
  EXPECT_EQ(SqlValue(db, "SELECT doc FROM jobs WHERE id = '" + id + "'"), record);
  EXPECT_EQ(SqlValue(db, "SELECT count(*) FROM job_progress"), rows);
  // The holder's own checkpoint report counts.
  EXPECT_EQ(holder
                ->Report({{.order_id = launch,
                           .kind = wire::ReportKind::kCheckpointed,
                           .job_id = id,
                           .rank = 0,
                           .step = 10,
                           .path = "/ckpt/10"}})
                .status,
            200);
  EXPECT_EQ(f.Get("/v1/jobs/" + id).body.value("last_checkpoint", ""), "/ckpt/10");
}

// A heartbeat may come with a report batch, one request for both: the server applies the
// reports and then the heartbeat in one change, and answers both. A batch without one is answered
// as before; a heartbeat of another agent id is refused with the batch.
TEST(Reports, AHeartbeatWithAReportBatchIsAppliedAndAnswered) {
  ServerFixture f;
  f.Start();
  FakeAgent a(f, "n0", 8);
  ASSERT_EQ(a.Register().status, 200);
  auto r = f.Post("/v1/jobs", JobYaml("with-beat", 8));
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  std::vector<wire::WorkOrder> orders;
  ASSERT_TRUE(WaitFor([&] { return !(orders = a.Work(50)).empty(); }));
  const auto reports = AcceptedAndStarted(orders[0]);
  auto res = a.Report(reports, wire::Heartbeat{.health = wire::Health::kDegraded,
                                               .message = "disk slow",
                                               .cpu_utilization = 0.25});
  ASSERT_EQ(res.status, 200) << res.text;
  auto answer = wire::ParseReportsAnswer(res.text);
  ASSERT_TRUE(answer) << res.text;
  EXPECT_EQ(answer->accepted, static_cast<int64_t>(reports.size()));
  ASSERT_TRUE(answer->heartbeat) << res.text;
  EXPECT_FALSE(answer->heartbeat->reregister);
  ASSERT_TRUE(WaitFor([&] { return f.JobState(id) == "running"; }));
  auto node_view = [&] {
    const json nodes = f.Get("/v1/nodes").body["nodes"];
    for (const auto& n : nodes) {
      if (n["name"] == "n0") return n;
    }
    return json();
  };
  EXPECT_EQ(node_view()["state"], "degraded") << node_view().dump();
  EXPECT_DOUBLE_EQ(node_view()["cpu_utilization"].get<double>(), 0.25);
  // Without a heartbeat: answered as before, with none.
  res = a.Report({});
  ASSERT_EQ(res.status, 200) << res.text;
  EXPECT_EQ(res.text.find("heartbeat"), std::string::npos) << res.text;
  // Of another agent: refused whole, the node's state unchanged.
  wire::ReportBatch forged{.agent_id = a.agent_id(),
                           .heartbeat = wire::Heartbeat{.agent_id = "someone-else"}};
  auto client = f.NewClient(f.credentials.at("n0"));
  auto refused =
      client->Post("/v1/agents/n0/reports", wire::Dump(wire::ToJson(forged)), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->text;
  EXPECT_NE(refused->text.find("heartbeat.agent_id"), std::string::npos) << refused->text;
  EXPECT_EQ(node_view()["state"], "degraded");
}

// A second user can neither cancel another's array nor reuse its Idempotency-Key to get it;
// the owner can cancel it.
TEST(Arrays, OnlyTheOwnerOrAnAdminCancelsAnArray) {
  ServerFixture f;
  f.Start();
  const std::string alice_token = f.AddUser("alice"), bob_token = f.AddUser("bob");
  ASSERT_FALSE(alice_token.empty() || bob_token.empty());
  auto alice = f.NewClient(alice_token);
  auto bob = f.NewClient(bob_token);
  auto made = alice->Post("/v1/jobs?hold=true&array=0-3", JobYaml("mine", 1), "application/yaml",
                          {{"Idempotency-Key", "k1"}});
  ASSERT_TRUE(made && made->status == 201) << (made ? made->text : made.error().message);
  const std::string id = made->body["array_id"];
  auto stolen = bob->Post("/v1/jobs/" + id + "/cancel?array=true", "", "application/json");
  ASSERT_TRUE(stolen);
  EXPECT_EQ(stolen->status, 403) << stolen->text;
  for (const auto& task : made->body["ids"]) EXPECT_EQ(f.JobState(task), "pending");
  // Keys are per user: bob's equal key makes bob's own array, not alice's.
  auto bobs = bob->Post("/v1/jobs?hold=true&array=0-3", JobYaml("mine", 1), "application/yaml",
                        {{"Idempotency-Key", "k1"}});
  ASSERT_TRUE(bobs && bobs->status == 201) << (bobs ? bobs->text : bobs.error().message);
  EXPECT_NE(bobs->body["array_id"], id);
  auto own = alice->Post("/v1/jobs/" + id + "/cancel?array=true", "", "application/json");
  ASSERT_TRUE(own && own->status == 200) << (own ? own->text : own.error().message);
  EXPECT_EQ(own->body["cancelled"].size(), 4u);
  for (const auto& task : made->body["ids"]) EXPECT_EQ(f.JobState(task), "cancelled");
}

}  // namespace
}  // namespace tianshu::testing
