// The server's scheduling ledger across node changes (issue 16): a node that only stops or
// resumes taking new work (cordon, uncordon) is marked in the long-lived engine, which is not
// rebuilt; a node joining the cluster view rebuilds it. Every cycle also replays the records
// into a fresh engine and compares (verify_ledger), so a marked ledger that drifted from the
// records fails here.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "testing/direct_node.h"
#include "tianshu/server/control_plane.h"

namespace {

using namespace tianshu;
using nlohmann::json;

class ServerLedger : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tianshu-ledger-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    auto store = server::OpenSqliteStore(dir_ + "/tianshu.db");
    ASSERT_TRUE(store) << store.error().message;
    server::ControlPlaneOptions o;
    o.config.preemption = false;
    o.config.network.probes = false;
    o.placement = "topology";
    o.admin_token = "admin-token";
    o.node_lease_ms = 0;
    o.verify_ledger = true;
    auto cp = server::ControlPlane::Open(std::move(*store), o, now_);
    ASSERT_TRUE(cp) << cp.error().message;
    cp_ = std::move(*cp);
  }
  void TearDown() override {
    cp_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Register(const std::string& node) {
    auto r =
        cp_->Register(tianshu::testing::A100Node(node, "agent-" + node, "leaf-0"), admin_, now_);
    ASSERT_TRUE(r) << r.error().message;
    nodes_.push_back(node);
  }
  std::string Submit(const std::string& name, int gpus = 8, bool hold = false) {
    auto r = server::ParseSubmitBody("application/yaml",
                                     "kind: training\nname: " + name +
                                         "\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, "
                                         "pp: 1}\ngpus: " +
                                         std::to_string(gpus) + "\nduration: 1h\n",
                                     name + ".yaml");
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return "";
    r->owner = "admin";
    r->hold = hold;
    auto made = cp_->Submit(std::move(*r), now_);
    EXPECT_TRUE(made) << made.error().message;
    return made ? made->job["id"].get<std::string>() : "";
  }
  // A tick, then every node's orders carried out at once (accepted, every rank started; a
  // stop order is only accepted while `stops_done` is false, and its ranks stay until it is
  // true).
  void Tick(bool stops_done = true) {
    now_ += 1000;
    cp_->Tick(now_);
    for (const std::string& name : nodes_) {
      if (failed_.contains(name)) continue;
      auto text = cp_->Work(name, "agent-" + name, 0);
      if (!text) continue;
      auto work = wire::ParseWorkBatch(*text);
      ASSERT_TRUE(work) << work.error().message;
      wire::ReportBatch b{.agent_id = "agent-" + name};
      for (const auto& order : work->orders) {
        if (order.kind == wire::OrderKind::kStop) {
          if (!stops_done) continue;  // asked again at the next tick
          b.reports.push_back(
              {.order_id = order.id, .kind = wire::ReportKind::kStopped, .job_id = order.job_id});
          continue;
        }
        for (auto& r : tianshu::testing::AcceptedAndStarted(order))
          b.reports.push_back(std::move(r));
      }
      if (!b.reports.empty()) (void)cp_->Reports(name, b, now_);
    }
  }
  void Admin(const std::string& node, const std::string& action) {
    auto r = cp_->AdminNode(node, action, admin_, now_);
    ASSERT_TRUE(r) << action << " " << node << ": " << r.error().message;
  }
  json Job(const std::string& id) {
    auto j = cp_->GetJob(id, admin_);
    EXPECT_TRUE(j) << id;
    return j ? *j : json::object();
  }
  // The node a one-node job holds ("" while it holds none).
  std::string NodeOf(const std::string& id) {
    const json j = Job(id);
    const json p = j.value("placement", json::array());
    return p.empty() ? "" : p[0].value("node", "");
  }

  // The node's agent says it can run no work (healthy again with `ok`).
  void Health(const std::string& node, bool ok) {
    auto r = cp_->Heartbeat(node,
                            {.agent_id = "agent-" + node,
                             .health = ok ? wire::Health::kOk : wire::Health::kFailed,
                             .message = ok ? "" : "test failure"},
                            now_);
    ASSERT_TRUE(r) << r.error().message;
    if (ok) {
      failed_.erase(node);
    } else {
      failed_.insert(node);
    }
  }

  // n0 and n1 registered, a 16-GPU job running on both; then n1 fails. Returns the job.
  std::string BigJobOnTwoNodesThenOneFails() {
    Register("n0");
    Register("n1");
    const std::string big = Submit("big", 16);
    Tick();
    EXPECT_EQ(Job(big).value("state", ""), "running") << Job(big).dump();
    Health("n1", false);
    return big;
  }
  // `big` still stops on n0: a new 8-GPU job waits for it, then takes n0. Returns that job.
  std::string NextJobWaitsForTheStopThenTakesN0(const std::string& big) {
    const std::string b = Submit("b");
    Tick(/*stops_done=*/false);
    Tick(/*stops_done=*/false);
    EXPECT_EQ(Job(big).value("state", ""), "stopping") << Job(big).dump();
    // big's ranks on n0 are still stopping: b must not be placed on their GPUs.
    EXPECT_EQ(Job(b).value("state", ""), "pending") << Job(b).dump();
    Tick(/*stops_done=*/true);
    Tick();
    EXPECT_EQ(NodeOf(b), "n0") << Job(b).dump();
    return b;
  }

  std::string dir_;
  std::vector<std::string> nodes_;  // registered
  std::set<std::string> failed_;
  int64_t now_ = 1'800'000'000'000;
  const server::Identity admin_{.name = "admin", .role = server::Role::kAdmin};
  std::unique_ptr<server::ControlPlane> cp_;
};

TEST_F(ServerLedger, ACordonIsMarkedInTheLedgerAndANewNodeRebuildsIt) {
  Register("n0");
  Register("n1");
  const std::string a = Submit("a");
  Tick();
  const std::string held = NodeOf(a);
  ASSERT_FALSE(held.empty()) << Job(a).dump();
  const std::string other = held == "n0" ? "n1" : "n0";
  const int64_t rebuilds = cp_->Ledger().rebuilds;
  ASSERT_GE(rebuilds, 1);

  // The free node is cordoned: b finds no room, and the ledger was marked, not rebuilt.
  Admin(other, "cordon");
  const std::string b = Submit("b");
  Tick();
  EXPECT_EQ(Job(b).value("state", ""), "pending") << Job(b).dump();
  EXPECT_EQ(cp_->Ledger().rebuilds, rebuilds);
  EXPECT_EQ(cp_->Ledger().node_marks, 1);

  // The busy node is cordoned too: its job keeps running there.
  Admin(held, "cordon");
  Tick();
  EXPECT_EQ(Job(a).value("state", ""), "running") << Job(a).dump();
  EXPECT_EQ(NodeOf(a), held);
  EXPECT_EQ(cp_->Ledger().node_marks, 2);

  // Uncordoned, the free node takes b.
  Admin(other, "uncordon");
  Tick();
  EXPECT_EQ(NodeOf(b), other) << Job(b).dump();
  EXPECT_EQ(cp_->Ledger().rebuilds, rebuilds);
  EXPECT_EQ(cp_->Ledger().node_marks, 3);

  // A node that joins changes the cluster view: the ledger is rebuilt over it, and the job
  // waiting for a node starts there.
  const std::string c = Submit("c");
  Tick();
  EXPECT_EQ(Job(c).value("state", ""), "pending");
  Register("n2");
  Tick();
  EXPECT_EQ(NodeOf(c), "n2") << Job(c).dump();
  EXPECT_EQ(cp_->Ledger().rebuilds, rebuilds + 1);
  // Every cycle's replay of the records matched the marked ledger.
  EXPECT_EQ(cp_->Ledger().mismatches, 0) << cp_->Ledger().last_mismatch;
}

// A node that fails leaves its jobs stopping on the others: their GPUs there stay held until
// the ranks have stopped (nothing new starts on them before), and the failed node, and its
// return, are marks in the ledger, not rebuilds.
TEST_F(ServerLedger, AFailedNodesJobHoldsItsOtherGpusUntilStoppedAndItsReturnIsAMark) {
  const std::string big = BigJobOnTwoNodesThenOneFails();
  const int64_t rebuilds = cp_->Ledger().rebuilds;
  NextJobWaitsForTheStopThenTakesN0(big);
  EXPECT_EQ(Job(big).value("state", ""), "pending") << Job(big).dump();

  // n1 is back: big (16 GPUs) waits for b's node, but the ledger was marked, not rebuilt.
  Health("n1", true);
  Tick();
  EXPECT_EQ(cp_->Ledger().rebuilds, rebuilds);
  EXPECT_EQ(cp_->Ledger().node_marks, 2);  // n1 failed, n1 back
  // With big gone, a new job takes n1 again.
  ASSERT_TRUE(cp_->Cancel(big, admin_, now_));
  const std::string c = Submit("c");
  Tick();
  EXPECT_EQ(NodeOf(c), "n1") << Job(c).dump();
  EXPECT_EQ(cp_->Ledger().rebuilds, rebuilds);
  EXPECT_EQ(cp_->Ledger().mismatches, 0) << cp_->Ledger().last_mismatch;
}

// The same when the failed node is removed while its job still stops elsewhere: the ledger is
// rebuilt without the node, and the job still holds what it has on the others.
TEST_F(ServerLedger, RemovingAFailedNodeLeavesItsStoppingJobHoldingTheOtherGpus) {
  const std::string big = BigJobOnTwoNodesThenOneFails();
  Tick(/*stops_done=*/false);
  Admin("n1", "remove");
  NextJobWaitsForTheStopThenTakesN0(big);
  EXPECT_EQ(cp_->Ledger().mismatches, 0) << cp_->Ledger().last_mismatch;
}

// The job listing asked for unfinished states walks the state indexes, not every job kept: the
// same jobs, in the same order, with the same total, as the walk over every job gives; and so
// does the queue listing without its finished counts.
using ServerViews = ServerLedger;
TEST_F(ServerViews, ListingUnfinishedJobsGivesWhatTheFullWalkGives) {
  Register("n0");
  Register("n1");
  const std::string a = Submit("a"), s = Submit("s");
  Tick();
  ASSERT_EQ(Job(a).value("state", ""), "running");
  ASSERT_EQ(Job(s).value("state", ""), "running");
  const std::string b = Submit("b"), c = Submit("c"), d = Submit("d");
  const std::string h = Submit("h", 8, /*hold=*/true);
  ASSERT_TRUE(cp_->Cancel(c, admin_, now_));  // waiting: cancelled at once
  ASSERT_TRUE(cp_->Cancel(s, admin_, now_));  // running: stopping until its ranks stop
  Tick(/*stops_done=*/false);
  ASSERT_EQ(Job(s).value("state", ""), "stopping");
  auto ids = [](const json& listing) {
    std::vector<std::string> out;
    for (const auto& j : listing["jobs"]) out.push_back(j["id"]);
    return out;
  };
  // Each listing as the index path gives it, and as the walk over every job gives it (a
  // finished state no job is in sends it there).
  auto both = [&](server::JobFilter f) {
    const json fast = cp_->ListJobs(f);
    f.states.push_back("succeeded");
    const json walked = cp_->ListJobs(f);
    EXPECT_EQ(fast, walked);
    return fast;
  };
  const json newest =
      both({.states = {"running", "pending", "stopping"}, .newest_first = true, .limit = 2});
  EXPECT_EQ(ids(newest), (std::vector<std::string>{h, d})) << newest.dump();
  EXPECT_EQ(newest["total"], 5);
  const json pending = both({.states = {"pending"}});
  EXPECT_EQ(ids(pending), (std::vector<std::string>{b, d, h})) << pending.dump();
  EXPECT_EQ(both({.states = {"held"}})["jobs"].size(), 1u);
  const json placed = both({.states = {"stopping", "running"}, .newest_first = true});
  EXPECT_EQ(ids(placed), (std::vector<std::string>{s, a})) << placed.dump();
  // A finished state among them: every job is walked.
  const json all = cp_->ListJobs({.states = {"cancelled", "running"}, .newest_first = true});
  EXPECT_EQ(ids(all), (std::vector<std::string>{c, a})) << all.dump();

  // Unfiltered (the console's poll of the newest): counted without a walk, the same as the walk
  // over every state gives, both ways round.
  for (bool newest_first : {true, false}) {
    server::JobFilter every{.newest_first = newest_first, .limit = 2};
    const json quick_all = cp_->ListJobs(every);
    every.states = {"pending",   "starting", "running",  "stopping",
                    "succeeded", "failed",   "cancelled"};
    EXPECT_EQ(quick_all, cp_->ListJobs(every)) << newest_first;
    EXPECT_EQ(quick_all["shown"], 2);
  }

  // The queues without the finished counts (the console's sampler): the same figures else.
  const json full = cp_->ListQueues(), quick = cp_->ListQueues(/*count_finished=*/false);
  ASSERT_EQ(full["queues"].size(), 1u) << full.dump();
  ASSERT_EQ(quick["queues"].size(), 1u) << quick.dump();
  EXPECT_EQ(full["queues"][0]["finished"], 1);
  EXPECT_TRUE(quick["queues"][0]["finished"].is_null());
  for (const char* field : {"pending", "active", "gpus_in_use"}) {
    EXPECT_EQ(quick["queues"][0][field], full["queues"][0][field]) << field;
  }
  EXPECT_EQ(quick["queues"][0]["pending"], 3);  // b, d and the held h
  EXPECT_EQ(quick["queues"][0]["active"], 2);   // a running, s stopping
}

}  // namespace
