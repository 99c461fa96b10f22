// The agent over a fake file system and process table: launches, stops, checkpoints, the
// journal and restarts. Helpers: agent_test_util.h.
#include "tianshu/agent/agent.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>

#include "tianshu/agent/agent_test_util.h"
#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

TEST(Agent, LaunchesEachRankInTheJobCgroupWithItsEnvironment) {
  Fixture f;
  Agent a = f.Make();
  ASSERT_TRUE(a.Recover(0));
  a.Apply(LaunchOrder("o1", 2), 0);
  ASSERT_EQ(f.runner.procs_.size(), 2u);
  const SpawnSpec& s = f.runner.procs_.begin()->second.spec;
  EXPECT_EQ(s.env.at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(s.env.at("RANK"), "2");
  EXPECT_EQ(s.env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(s.env.at("NODE_RANK"), "1");
  EXPECT_EQ(s.env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(s.env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(s.env.at("MASTER_PORT"), "29511");
  EXPECT_EQ(s.env.at("NCCL_ALGO"), "Ring");  // the communicator plan's variables
  EXPECT_EQ(s.env.at("TIANSHU_JOB_ID"), "j-1");
  EXPECT_EQ(s.env.at("TIANSHU_CHECKPOINT_DIR"), "/ckpt/j-1/attempt-1");  // one per attempt
  EXPECT_EQ(s.env.at("TIANSHU_CHECKPOINT_MARKER"), "/w/jobs/job-j-1-a1/rank-2.ckpt");
  EXPECT_EQ(s.log_path, "/w/jobs/job-j-1-a1/rank-2.log");
  EXPECT_EQ(s.cgroup_procs_files.size(), 2u);
  EXPECT_EQ(f.fs.Content("/sys/fs/cgroup/memory/tianshu/job-j-1-a1/memory.limit_in_bytes"),
            "1073741824");
  EXPECT_EQ(Kinds(a), (std::vector<std::string>{"accepted", "started:2", "started:3"}));
  EXPECT_EQ(a.Running().size(), 2u);
}

TEST(Agent, VisibleDevicesFollowTheBackend) {
  for (auto [backend, var] :
       std::vector<std::pair<std::string, std::string>>{{"ascend", "ASCEND_RT_VISIBLE_DEVICES"},
                                                        {"rocm", "HIP_VISIBLE_DEVICES"},
                                                        {"musa", "MUSA_VISIBLE_DEVICES"}}) {
    wire::WorkOrder o = LaunchOrder("o", 1, backend);
    auto env = RankEnvironment(o, o.launch->ranks[0], "/c");
    EXPECT_EQ(env.at(var), "0") << backend;
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  }
}

TEST(Agent, ARepeatedOrderIsAcknowledgedButNotRepeated) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 2), 0);
  a.AckReports(a.PendingReports().size());
  a.Apply(LaunchOrder("o1", 2), 1);
  EXPECT_EQ(f.runner.procs_.size(), 2u);
  EXPECT_EQ(Kinds(a), (std::vector<std::string>{"accepted"}));
}

TEST(Agent, ExitsAreReportedAndTheCgroupRemoved) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 2), 0);
  a.AckReports(a.PendingReports().size());
  f.runner.Exit(100, {0, 0, false});
  f.runner.Exit(101, {0, SIGSEGV, false});
  a.Tick(kSec);
  ASSERT_EQ(a.PendingReports().size(), 2u);
  EXPECT_EQ(a.PendingReports()[0].exit_code, 0);
  EXPECT_EQ(a.PendingReports()[1].signal, SIGSEGV);
  EXPECT_EQ(a.PendingReports()[1].message, "killed by SIGSEGV");
  EXPECT_FALSE(f.fs.Exists("/sys/fs/cgroup/memory/tianshu/job-j-1-a1"));
  EXPECT_FALSE(a.Busy());
  EXPECT_TRUE(a.Running().empty());
}

TEST(Agent, StopCheckpointsFirstThenTerminates) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 2), 0);
  a.AckReports(a.PendingReports().size());
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-2.ready", "");  // both past their rendezvous
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-3.ready", "");
  a.Apply(StopOrder("s1", true, 5000), kSec);
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1}));
  a.Tick(2 * kSec);  // no markers yet: still waiting
  EXPECT_EQ(f.runner.procs_[100].signals.size(), 1u);
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-2.ckpt", R"({"step": 40, "path": "/ckpt/s40.pt"})");
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-3.ckpt", R"({"step": 40, "path": "/ckpt/s40.pt"})");
  a.Tick(3 * kSec);  // markers seen: checkpointed, then SIGTERM
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1, SIGTERM}));
  a.Tick(4 * kSec);  // the fake dies on SIGTERM
  EXPECT_EQ(Kinds(a), (std::vector<std::string>{"accepted", "checkpointed:2", "checkpointed:3",
                                                "exited:2", "exited:3", "stopped"}));
  EXPECT_EQ(a.PendingReports()[1].step, 40);
  EXPECT_EQ(a.PendingReports()[3].signal, SIGTERM);
  EXPECT_EQ(a.PendingReports()[3].step, 40);
}

TEST(Agent, StopEscalatesToSigkillAfterTheGracePeriods) {
  Fixture f;
  f.runner.die_on_term = false;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 1), 0);
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-1.ready", "");
  a.Apply(StopOrder("s1", true, 5000), 0);
  a.Tick(9 * kSec);
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1}));
  a.Tick(10 * kSec);  // checkpoint grace over: SIGTERM
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1, SIGTERM}));
  EXPECT_EQ(a.NextDeadline(), 15 * kSec);
  a.Tick(15 * kSec);  // term grace over: SIGKILL
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1, SIGTERM, SIGKILL}));
  a.Tick(16 * kSec);
  const wire::Report& last = a.PendingReports().back();
  EXPECT_EQ(last.kind, wire::ReportKind::kStopped);
  EXPECT_NE(last.message.find("no checkpoint marker within 10s"), std::string::npos);
  EXPECT_NE(last.message.find("SIGKILL after 5000 ms"), std::string::npos) << last.message;
}

TEST(Agent, CheckpointOrderSignalsAndWaitsForMarkers) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 1), 0);
  a.AckReports(a.PendingReports().size());
  wire::WorkOrder c{.id = "c1",
                    .kind = wire::OrderKind::kCheckpoint,
                    .job_id = "j-1",
                    .attempt = 1,
                    .checkpoint = wire::CheckpointOrder{"periodic"}};
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-1.ready", "");
  a.Apply(c, kSec);
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1}));
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-1.ckpt", R"({"step": 7, "path": "p"})");
  a.Tick(2 * kSec);
  EXPECT_EQ(Kinds(a), (std::vector<std::string>{"accepted", "checkpointed:1"}));
  EXPECT_EQ(a.PendingReports()[1].order_id, "c1");
  EXPECT_TRUE(f.runner.procs_[100].exit == std::nullopt);  // still running
}

// Found: SIGUSR1 arriving during torch's rendezvous killed train_gpt.py ("Interrupted system
// call"); with checkpoint_interval 6s on a loaded host 3 of 4 attempts died. A rank now gets the
// signal only once it is ready: it created $TIANSHU_READY_FILE, wrote a marker, or has run for
// ready_timeout.
TEST(Agent, CheckpointSignalsWaitUntilEachRankIsReady) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 2), 0);
  EXPECT_EQ(f.runner.procs_[100].spec.env.at("TIANSHU_READY_FILE"),
            "/w/jobs/job-j-1-a1/rank-2.ready");
  wire::WorkOrder c{.id = "c1",
                    .kind = wire::OrderKind::kCheckpoint,
                    .job_id = "j-1",
                    .attempt = 1,
                    .checkpoint = wire::CheckpointOrder{"periodic"}};
  a.Apply(c, kSec);  // both still in their rendezvous: nothing is sent
  a.Tick(2 * kSec);
  EXPECT_TRUE(f.runner.procs_[100].signals.empty());
  EXPECT_TRUE(f.runner.procs_[101].signals.empty());
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-2.ready", "");
  a.Tick(3 * kSec);
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGUSR1}));
  EXPECT_TRUE(f.runner.procs_[101].signals.empty());
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-3.ready", "");
  a.Tick(4 * kSec);
  EXPECT_EQ(f.runner.procs_[101].signals, (std::vector<int>{SIGUSR1}));
  a.Tick(5 * kSec);  // sent once
  EXPECT_EQ(f.runner.procs_[100].signals.size(), 1u);

  // A workload that never says it is ready gets the signal once it has run ready_timeout.
  Fixture g;
  Agent b = g.Make();
  b.Apply(LaunchOrder("o1", 1), 0);
  b.Apply(c, 119 * kSec);
  EXPECT_TRUE(g.runner.procs_[100].signals.empty());
  b.Tick(120 * kSec);
  EXPECT_EQ(g.runner.procs_[100].signals, (std::vector<int>{SIGUSR1}));
}

// A stop that asks for a checkpoint first, while a rank is still starting: nothing has been
// trained since the last checkpoint, so the ranks are stopped at once, never sent SIGUSR1.
TEST(Agent, AStopBeforeTheRanksAreReadySkipsTheCheckpoint) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 2), 0);
  f.fs.AddFile("/w/jobs/job-j-1-a1/rank-2.ready", "");  // rank 3 is not ready
  a.Apply(StopOrder("s1", true, 5000), kSec);
  EXPECT_EQ(f.runner.procs_[100].signals, (std::vector<int>{SIGTERM}));
  EXPECT_EQ(f.runner.procs_[101].signals, (std::vector<int>{SIGTERM}));
  a.Tick(2 * kSec);
  const wire::Report& last = a.PendingReports().back();
  EXPECT_EQ(last.kind, wire::ReportKind::kStopped);
  EXPECT_NE(last.message.find("no checkpoint: rank(s) 3 not ready yet"), std::string::npos)
      << last.message;
}

TEST(Agent, ARestartedAgentAdoptsItsRanksAndStartsNothingTwice) {
  Fixture f;
  {
    Agent a = f.Make();
    ASSERT_TRUE(a.Recover(0));
    a.Apply(LaunchOrder("o1", 2), 0);
    f.runner.Exit(101, {3, 0, false});
    a.Tick(kSec);
  }  // the agent dies; rank 2 (pid 100) runs on, rank 3 exited with 3
  Agent b = f.Make();
  ASSERT_TRUE(b.Recover(2 * kSec));
  EXPECT_EQ(f.runner.procs_.size(), 2u);  // nothing started again
  ASSERT_EQ(b.Running().size(), 1u);
  EXPECT_EQ(b.Running()[0].pid, 100);
  b.Apply(LaunchOrder("o1", 2), 2 * kSec);  // redelivered: acknowledged only
  EXPECT_EQ(f.runner.procs_.size(), 2u);
  f.runner.Exit(100, {0, 0, false});
  b.Tick(3 * kSec);
  bool exited0 = false;
  for (const auto& r : b.PendingReports()) {
    exited0 = exited0 || (r.kind == wire::ReportKind::kExited && r.rank == 2);
  }
  EXPECT_TRUE(exited0);
  EXPECT_FALSE(b.Busy());
  // A third start finds a compacted journal with nothing to do.
  Agent c = f.Make();
  ASSERT_TRUE(c.Recover(4 * kSec));
  EXPECT_TRUE(c.Running().empty());
  EXPECT_EQ(f.runner.procs_.size(), 2u);
}

// The journal is not flushed to disk: after the machine restarts it may have lost its tail (an
// order kept, its ranks' starts gone), and what it names died with the machine. A journal of an
// earlier boot is therefore not resumed: nothing is started, adopted or stopped again, and each
// rank that had not ended is reported ended (SIGKILL), so the server fails the attempt at once.
TEST(Agent, AJournalOfAnEarlierBootIsNotResumed) {
  Fixture f;
  f.Boot("boot-1");
  {
    Agent a = f.Make();
    ASSERT_TRUE(a.Recover(0));
    a.Apply(LaunchOrder("o1", 2), 0);
    f.runner.Exit(101, {3, 0, false});
    a.Tick(kSec);
    a.Apply(StopOrder("s1", false, 5000), kSec);  // rank 2 is sent SIGTERM, and stays
  }  // the machine restarts: rank 2 (pid 100) was running, rank 3 had exited with 3
  f.Boot("boot-2");
  const size_t spawned = f.runner.procs_.size();
  Agent b = f.Make();
  ASSERT_TRUE(b.Recover(2 * kSec));
  EXPECT_EQ(f.runner.procs_.size(), spawned);  // nothing started again
  EXPECT_TRUE(b.Running().empty());            // nor adopted
  std::map<int, wire::Report> exited;
  const wire::Report* stopped = nullptr;
  for (const auto& r : b.PendingReports()) {
    EXPECT_NE(r.kind, wire::ReportKind::kStarted);
    if (r.kind == wire::ReportKind::kExited) exited[r.rank] = r;
    if (r.kind == wire::ReportKind::kStopped) stopped = &r;
  }
  // The stop is done: the server, which may send it again, would otherwise wait on it.
  ASSERT_NE(stopped, nullptr);
  EXPECT_EQ(stopped->order_id, "s1");
  ASSERT_EQ(exited.size(), 2u);
  EXPECT_EQ(exited[2].signal, SIGKILL);
  EXPECT_NE(exited[2].message.find("machine restarted"), std::string::npos) << exited[2].message;
  EXPECT_EQ(exited[3].exit_code, 3);  // what the journal recorded
  EXPECT_EQ(exited[3].signal, 0);
  ASSERT_EQ(b.RecoveryWarnings().size(), 1u);
  EXPECT_NE(b.RecoveryWarnings()[0].find("boot boot-1"), std::string::npos)
      << b.RecoveryWarnings()[0];
  b.Apply(LaunchOrder("o1", 2), 3 * kSec);  // redelivered: acknowledged only
  EXPECT_EQ(f.runner.procs_.size(), spawned);
  // The compacted journal is this boot's: the next start finds nothing to resume or report.
  Agent c = f.Make();
  ASSERT_TRUE(c.Recover(4 * kSec));
  EXPECT_TRUE(c.RecoveryWarnings().empty());
  EXPECT_TRUE(c.PendingReports().empty());
}

// The boot record counts only as the journal's first line: one appended later (a rank that runs
// as the agent's user can append) does not make a restart in the same boot drop every rank.
TEST(Agent, ABootRecordAppendedLaterIsNotTheJournals) {
  Fixture f;
  f.Boot("boot-1");
  {
    Agent a = f.Make();
    ASSERT_TRUE(a.Recover(0));
    a.Apply(LaunchOrder("o1", 2), 0);
  }  // the agent dies with two ranks running
  ASSERT_TRUE(f.fs.Append("/w/journal.jsonl", "{\"t\": \"boot\", \"id\": \"boot-0\"}\n"));
  Agent b = f.Make();
  ASSERT_TRUE(b.Recover(kSec));
  EXPECT_EQ(b.Running().size(), 2u);  // adopted, not reported killed
  EXPECT_TRUE(b.RecoveryWarnings().empty());
  for (const auto& r : b.PendingReports()) EXPECT_NE(r.kind, wire::ReportKind::kExited);
}

// A rank that ended while the agent was away without an exit file (its shim was killed with
// it) is reported killed: it was reported as exit 0, which the server counts as success.
TEST(Agent, ARankWhoseEndIsUnknownIsReportedKilledNotSucceeded) {
  Fixture f;
  {
    Agent a = f.Make();
    ASSERT_TRUE(a.Recover(0));
    a.Apply(LaunchOrder("o1", 1), 0);
  }
  Agent b = f.Make();
  ASSERT_TRUE(b.Recover(kSec));
  ASSERT_EQ(b.Running().size(), 1u);
  f.runner.Exit(b.Running()[0].pid, {0, 0, true});
  b.Tick(2 * kSec);
  const wire::Report& e = b.PendingReports().back();
  ASSERT_EQ(e.kind, wire::ReportKind::kExited);
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_NE(e.message.find("exit status unknown"), std::string::npos) << e.message;
}

// Found: a rank appended one line to the journal (its path follows from the checkpoint
// marker's) and the next agent start exited with "corrupt journal record". Now the line is
// skipped, named and kept aside, and the ranks the journal knows are still adopted.
TEST(Agent, ATamperedJournalLineIsSkippedAndReportedNotFatal) {
  Fixture f;
  {
    Agent a = f.Make();
    ASSERT_TRUE(a.Recover(0));
    a.Apply(LaunchOrder("o1", 2), 0);
  }  // the agent dies with two ranks running
  auto text = f.fs.Read("/w/journal.jsonl");
  ASSERT_TRUE(text);
  ASSERT_TRUE(f.fs.Append("/w/journal.jsonl", "rm -rf / # not a record\n"));
  ASSERT_TRUE(f.fs.Append("/w/journal.jsonl", "{\"t\": \"seen\", \"id\": \"later\"}\n"));
  ASSERT_TRUE(f.fs.Append("/w/journal.jsonl", "{\"t\": \"se"));  // a torn append: dropped
  Agent b = f.Make();
  ASSERT_TRUE(b.Recover(kSec));
  ASSERT_EQ(b.RecoveryWarnings().size(), 1u);
  const int bad_line = static_cast<int>(std::count(text->begin(), text->end(), '\n')) + 1;
  EXPECT_EQ(b.RecoveryWarnings()[0],
            "/w/journal.jsonl:" + std::to_string(bad_line) + ": corrupt journal record");
  EXPECT_EQ(b.Running().size(), 2u);      // still adopted
  EXPECT_EQ(f.runner.procs_.size(), 2u);  // and not started again
  auto kept = f.fs.Read("/w/journal.jsonl.rejected");
  ASSERT_TRUE(kept);
  EXPECT_EQ(*kept, "rm -rf / # not a record\n");
  // The compacted journal no longer holds it: the next start is clean.
  Agent c = f.Make();
  ASSERT_TRUE(c.Recover(2 * kSec));
  EXPECT_TRUE(c.RecoveryWarnings().empty());
  // Each recovery's compaction reached the disk before the agent acted again.
  EXPECT_EQ(f.fs.DurableReplaces("/w/journal.jsonl"), 3);
}

TEST(Agent, PlaceholderRanksEndAfterTheirDuration) {
  Fixture f;
  Agent a = f.Make();
  wire::WorkOrder o = LaunchOrder("o1", 1);
  o.launch->ranks[0].command.clear();
  o.launch->ranks[0].env["TIANSHU_DURATION_S"] = "30";
  a.Apply(o, 0);
  EXPECT_TRUE(f.runner.procs_.empty());
  EXPECT_FALSE(a.Busy());
  EXPECT_EQ(a.NextDeadline(), 30 * kSec);
  a.Tick(29 * kSec);
  EXPECT_EQ(a.Running().size(), 1u);
  a.Tick(30 * kSec);
  EXPECT_TRUE(a.Running().empty());
  EXPECT_EQ(a.PendingReports().back().kind, wire::ReportKind::kExited);
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// The journal's records go to the file in as few appends (writes) as what they promise allows:
// an order at once, before anything is done for it; a spawned rank's start at once, before the
// next spawn; placeholder starts together at the end of the order, and a tick's exits together.
// An 8-rank placeholder launch wrote 9 appends and its end 9 (the Slurm peer's burst spent its
// agents' time there); now 2 and 1.
TEST(Agent, JournalAppendsAreBatchedButPrecedeEveryAction) {
  Fixture f;
  Agent a = f.Make();
  ASSERT_TRUE(a.Recover(0));
  const std::string journal = "/w/journal.jsonl";
  wire::WorkOrder o = LaunchOrder("o1", 4);
  for (auto& r : o.launch->ranks) {
    r.command.clear();
    r.env["TIANSHU_DURATION_S"] = "30";
  }
  int appends = f.fs.Appends(journal);
  a.Apply(o, 0);
  EXPECT_EQ(f.fs.Appends(journal) - appends, 2);  // the order, then the four starts
  EXPECT_EQ(Lines(f.fs.Content(journal)), 5);
  appends = f.fs.Appends(journal);
  a.Tick(30 * kSec);
  EXPECT_TRUE(a.Running().empty());
  EXPECT_EQ(f.fs.Appends(journal) - appends, 1);  // four exits (and the job's end) at once

  // Real ranks: at every spawn and signal, what came before is already in the journal.
  std::vector<int> at_action;
  f.runner.before_action = [&] { at_action.push_back(Lines(f.fs.Content(journal))); };
  const int before = Lines(f.fs.Content(journal));
  appends = f.fs.Appends(journal);
  wire::WorkOrder real = LaunchOrder("o2", 2);
  real.job_id = "j-2";
  a.Apply(real, 31 * kSec);
  ASSERT_EQ(at_action.size(), 2u);
  EXPECT_EQ(at_action[0], before + 1);  // the order
  EXPECT_EQ(at_action[1], before + 2);  // and the first rank's start
  EXPECT_EQ(Lines(f.fs.Content(journal)), before + 3);
  EXPECT_EQ(f.fs.Appends(journal) - appends, 3);  // each at once
  wire::WorkOrder stop = StopOrder("o3", false, 1000);
  stop.job_id = "j-2";
  at_action.clear();
  a.Apply(stop, 32 * kSec);
  ASSERT_FALSE(at_action.empty());
  EXPECT_EQ(at_action[0], before + 4);  // the stop order, before its first signal
}

}  // namespace
}  // namespace tianshu::agent
