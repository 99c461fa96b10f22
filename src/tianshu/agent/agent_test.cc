#include "tianshu/agent/agent.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>

#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

constexpr int64_t kSec = kNsPerSec;

// An agent over a fake file system (with fake v1 cgroupfs) and a fake process table.
struct Fixture {
  FakeSystemFiles fs;
  FakeProcessRunner runner;
  std::unique_ptr<CgroupDriver> cgroups;
  HostInfo host;
  AgentOptions options{
      .node = "n0", .workdir = "/w", .checkpoint_root = "/ckpt", .checkpoint_grace_ns = 10 * kSec};

  Fixture() {
    fs.AddFile("/proc/mounts",
               "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
               "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n");
    fs.AddFile("/proc/self/cgroup", "4:memory:/\n3:cpuset:/\n");
    fs.AddFile("/sys/fs/cgroup/cpuset/cpuset.cpus", "0-1");
    fs.AddFile("/sys/fs/cgroup/cpuset/cpuset.mems", "0");
    fs.AutoFiles("/sys/fs/cgroup/memory", {"cgroup.procs", "memory.limit_in_bytes"});
    fs.AutoFiles("/sys/fs/cgroup/cpuset", {"cgroup.procs", "cpuset.cpus", "cpuset.mems"});
    cgroups = std::move(*DetectCgroupDriver(fs, {}));
    host.hostname = "n0";
    host.cpus = 2;
    host.numa_nodes = {{0, {0, 1}, 1 << 30}};
    auto devs = ParseDeclaredDevices("4xA100-80GB");
    host.accelerators = *devs;
    host.declared_accelerators = true;
  }
  Agent Make() { return Agent(options, host, fs, *cgroups, runner); }
  // The machine's boot, as the agent reads it (a new id: the machine restarted).
  void Boot(const std::string& id) { fs.AddFile("/proc/sys/kernel/random/boot_id", id + "\n"); }
};

wire::WorkOrder LaunchOrder(const std::string& id, int ranks, std::string backend = "cuda") {
  wire::WorkOrder o;
  o.id = id;
  o.kind = wire::OrderKind::kLaunch;
  o.job_id = "j-1";
  o.attempt = 1;
  wire::LaunchOrder l;
  l.job_name = "ddp";
  l.backend = std::move(backend);
  l.world_size = ranks * 2;
  l.master_addr = "10.0.0.1";
  l.master_port = 29511;
  for (int r = 0; r < ranks; ++r) {
    l.ranks.push_back({.rank = ranks + r,
                       .local_rank = r,
                       .node_rank = 1,
                       .devices = {r},
                       .command = {"/usr/bin/python3", "train.py"},
                       .env = {{"NCCL_ALGO", "Ring"}}});
  }
  l.cgroup.memory_bytes = 1 << 30;
  o.launch = l;
  return o;
}

wire::WorkOrder StopOrder(const std::string& id, bool checkpoint_first, int64_t grace_ms) {
  wire::WorkOrder o;
  o.id = id;
  o.kind = wire::OrderKind::kStop;
  o.job_id = "j-1";
  o.attempt = 1;
  o.stop = wire::StopOrder{
      .reason = "preempt", .checkpoint_first = checkpoint_first, .grace_ms = grace_ms};
  return o;
}

std::vector<std::string> Kinds(const Agent& a) {
  std::vector<std::string> out;
  for (const auto& r : a.PendingReports()) {
    out.push_back(std::string(wire::ReportKindName(r.kind)) +
                  (r.rank >= 0 ? ":" + std::to_string(r.rank) : ""));
  }
  return out;
}

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

TEST(Agent, ARestartedJobIsToldWhereToResume) {
  Fixture f;
  f.fs.AddFile("/ckpt/j-1/latest", "step-000120.pt\n");
  Agent a = f.Make();
  a.Apply(LaunchOrder("o1", 1), 0);
  EXPECT_EQ(f.runner.procs_[100].spec.env.at("TIANSHU_RESUME_FROM"), "/ckpt/j-1/step-000120.pt");
}

// Checkpoints go to one directory per attempt; the job's `latest` is written by the agent of
// rank 0, only for a checkpoint inside that attempt's directory and only while its lease holds.
TEST(Agent, OnlyACurrentAttemptPromotesLatest) {
  Fixture f;
  Agent a = f.Make();
  wire::WorkOrder first = LaunchOrder("o1", 1);
  first.launch->ranks[0].rank = 0;                                     // this node runs rank 0
  first.launch->ranks[0].env["TIANSHU_CHECKPOINT_DIR"] = "/ckpt/j-1";  // an older server's
  a.Apply(first, 0);
  const auto env = f.runner.procs_[100].spec.env;
  EXPECT_EQ(env.at("TIANSHU_CHECKPOINT_DIR"), "/ckpt/j-1/attempt-1");
  EXPECT_EQ(f.runner.procs_[100].spec.lease_path, "/w/lease");
  const std::string marker = env.at("TIANSHU_CHECKPOINT_MARKER");
  // Outside the attempt's directory (a forged path): not promoted.
  f.fs.AddFile("/ckpt/j-1/other/step-9.pt", "x");
  f.fs.AddFile(marker, R"({"step": 9, "path": "/ckpt/j-1/other/step-9.pt"})");
  a.Tick(kSec);
  EXPECT_FALSE(f.fs.Read("/ckpt/j-1/latest"));
  // Inside it: promoted, relative to the job's directory.
  f.fs.AddFile("/ckpt/j-1/attempt-1/step-10.pt", "x");
  f.fs.AddFile(marker, R"({"step": 10, "path": "/ckpt/j-1/attempt-1/step-10.pt"})");
  a.Tick(2 * kSec);
  auto latest = f.fs.Read("/ckpt/j-1/latest");
  ASSERT_TRUE(latest);
  EXPECT_EQ(*latest, "attempt-1/step-10.pt\n");
  EXPECT_EQ(f.fs.DurableReplaces("/ckpt/j-1/latest"), 1);  // a resume point survives a crash
  // The lease ran out (fenced): a later checkpoint is not promoted.
  a.SetLease(kSec);
  a.RenewLease(BootTimeNs() - 2 * kSec);
  EXPECT_FALSE(a.LeaseHeld());
  f.fs.AddFile("/ckpt/j-1/attempt-1/step-20.pt", "x");
  f.fs.AddFile(marker, R"({"step": 20, "path": "/ckpt/j-1/attempt-1/step-20.pt"})");
  a.Tick(3 * kSec);
  EXPECT_EQ(*f.fs.Read("/ckpt/j-1/latest"), "attempt-1/step-10.pt\n");
  // The next attempt resumes from it (once a heartbeat is answered again: under a lease that
  // ran out a launch is rejected).
  a.RenewLease(BootTimeNs());
  wire::WorkOrder second = LaunchOrder("o2", 1);
  second.attempt = 2;
  a.Apply(second, 4 * kSec);
  ASSERT_EQ(f.runner.procs_.size(), 2u);
  const auto& env2 = f.runner.procs_.rbegin()->second.spec.env;
  EXPECT_EQ(env2.at("TIANSHU_CHECKPOINT_DIR"), "/ckpt/j-1/attempt-2");
  EXPECT_EQ(env2.at("TIANSHU_RESUME_FROM"), "/ckpt/j-1/attempt-1/step-10.pt");
}

// The lease counts on CLOCK_BOOTTIME, which starts again at a reboot: a lease file of another
// boot is dropped (else its far deadline would never be renewed and shims never fence).
TEST(Agent, ALeaseFromAnotherBootIsDropped) {
  Fixture f;
  f.Boot("boot-2");
  f.fs.AddFile("/w/lease", "999999999999999999 boot-1\n");
  EXPECT_EQ(f.Make().LeaseDeadline(), 0);
  EXPECT_FALSE(f.fs.Read("/w/lease"));
  f.fs.AddFile("/w/lease", "123456 boot-2\n");
  Agent a = f.Make();
  EXPECT_EQ(a.LeaseDeadline(), 123456);
  a.SetLease(kSec);
  a.RenewLease(200000);
  EXPECT_EQ(*f.fs.Read("/w/lease"), LeaseRecord(200000 + kSec, "boot-2"));
  EXPECT_EQ(f.fs.Overwrites("/w/lease"), 0);  // an older agent's record is replaced
  a.RenewLease(300000);
  EXPECT_EQ(*f.fs.Read("/w/lease"), LeaseRecord(300000 + kSec, "boot-2"));
  EXPECT_EQ(f.fs.Overwrites("/w/lease"), 1);  // one of the same length is rewritten in place
  // Written at every answered heartbeat, never flushed to disk: it means nothing after a crash
  // of the machine (the next boot drops it, as above).
  EXPECT_EQ(f.fs.DurableReplaces("/w/lease"), 0);
  // A restarted agent takes its own record back, and refuses one whose numbers differ.
  EXPECT_EQ(f.Make().LeaseDeadline(), 300000 + kSec);
  f.fs.AddFile("/w/lease", "0000000000000300000 boot-2 0000000000000999999\n");
  EXPECT_EQ(f.Make().LeaseDeadline(), 0);
  EXPECT_FALSE(f.fs.Read("/w/lease"));
}

// Ranks adopted from an earlier agent process keep shims of that agent, perhaps an older
// version that reads the first number alone and cannot tell a torn read: while one runs, a
// renewal replaces the file whole; once they ended, it is rewritten in place.
TEST(Agent, TheLeaseIsReplacedWholeWhileAdoptedRanksRun) {
  Fixture f;
  f.Boot("boot-1");
  {
    Agent a = f.Make();
    ASSERT_TRUE(a.Recover(0));
    a.SetLease(kSec);
    a.RenewLease(BootTimeNs());
    a.Apply(LaunchOrder("o1", 1), 0);
  }  // the agent dies; its rank (pid 100) runs on
  Agent b = f.Make();
  ASSERT_TRUE(b.Recover(kSec));
  ASSERT_EQ(b.Running().size(), 1u);
  b.SetLease(kSec);
  const int before = f.fs.Overwrites("/w/lease");
  b.RenewLease(BootTimeNs());
  b.RenewLease(BootTimeNs() + 1);
  EXPECT_EQ(f.fs.Overwrites("/w/lease"), before);  // replaced both times
  f.runner.Exit(100, {0, 0, false});
  b.Tick(2 * kSec);
  EXPECT_TRUE(b.Running().empty());
  b.RenewLease(BootTimeNs() + 2);
  EXPECT_EQ(f.fs.Overwrites("/w/lease"), before + 1);
}

// The record the shims read: the deadline in 19 digits at both ends. A read torn by a rewrite
// in place shows two different numbers; an older agent's record has the number once.
TEST(Agent, ALeaseRecordTornByARewriteIsToldApart) {
  const std::string a = LeaseRecord(123'456'789'000, "b0a7-1"), b = LeaseRecord(987'000, "b0a7-1");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a, "0000000123456789000 b0a7-1 0000000123456789000\n");
  int64_t d = 0;
  EXPECT_EQ(ParseLeaseRecord(a.data(), a.size(), &d), LeaseRead::kDeadline);
  EXPECT_EQ(d, 123'456'789'000);
  // Every mix of the two at one point (a copy overtaking or overtaken by the rewrite) is either
  // one of them whole or torn: never a number neither of them holds.
  for (size_t cut = 0; cut <= a.size(); ++cut) {
    for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
      const std::string mixed = x.substr(0, cut) + y.substr(cut);
      const LeaseRead r = ParseLeaseRecord(mixed.data(), mixed.size(), &d);
      if (r == LeaseRead::kDeadline) {
        EXPECT_TRUE(mixed == a || mixed == b || d == 123'456'789'000 || d == 987'000) << mixed;
        EXPECT_TRUE(d == 123'456'789'000 || d == 987'000) << mixed;
      } else {
        EXPECT_EQ(r, LeaseRead::kTorn) << mixed;
      }
    }
  }
  const std::string older = "123456 boot-2\n", none = "none boot-2\n", junk = "x 1 2\n";
  EXPECT_EQ(ParseLeaseRecord(older.data(), older.size(), &d), LeaseRead::kDeadline);
  EXPECT_EQ(d, 123456);
  EXPECT_EQ(ParseLeaseRecord(none.data(), none.size(), &d), LeaseRead::kNone);
  EXPECT_EQ(ParseLeaseRecord(junk.data(), junk.size(), &d), LeaseRead::kInvalid);
  EXPECT_EQ(ParseLeaseRecord("", 0, &d), LeaseRead::kInvalid);
}

// A shim fences its rank when the lease file is missing (so removing it cannot keep a rank
// alive past a partition): before a launch starts ranks, the file says what holds. Without a
// lease it says "none" (written again if someone removed it); with a lease given and none
// renewed yet, or one that ran out, the launch is rejected (the server retries it elsewhere;
// exit 127 would have failed the job for good) and nothing is journaled for it.
TEST(Agent, TheLeaseFileSaysWhatHoldsBeforeARankStarts) {
  Fixture f;
  f.Boot("boot-1");
  {
    Agent a = f.Make();
    a.SetLease(0);
    EXPECT_FALSE(f.fs.Read("/w/lease"));  // nothing written until a rank starts
    a.Apply(LaunchOrder("o1", 1), 0);
    ASSERT_EQ(f.runner.procs_.size(), 1u);
    EXPECT_EQ(*f.fs.Read("/w/lease"), "none boot-1\n");
    // A lease given later replaces it; taken away again, the file says "none" once more.
    a.SetLease(kSec);
    a.RenewLease(200000);
    EXPECT_EQ(*f.fs.Read("/w/lease"), LeaseRecord(200000 + kSec, "boot-1"));
    a.SetLease(0);
    EXPECT_EQ(*f.fs.Read("/w/lease"), "none boot-1\n");
    EXPECT_EQ(a.LeaseDeadline(), 0);
    // Removed by hand: the next launch writes it again before its ranks start.
    ASSERT_TRUE(f.fs.Remove("/w/lease"));
    wire::WorkOrder next = LaunchOrder("o3", 1);
    next.attempt = 2;
    a.Apply(next, kSec);
    EXPECT_EQ(f.runner.procs_.size(), 2u);
    EXPECT_EQ(*f.fs.Read("/w/lease"), "none boot-1\n");
  }
  // A restarted agent keeps "none" of this boot as it is.
  EXPECT_EQ(f.Make().LeaseDeadline(), 0);
  EXPECT_EQ(*f.fs.Read("/w/lease"), "none boot-1\n");
  // A lease given, none renewed yet; then one that ran out: rejected, nothing spawned.
  Fixture g;
  Agent b = g.Make();
  b.SetLease(kSec);
  auto rejected = [&](const std::string& order, const std::string& why) {
    for (const auto& r : b.PendingReports()) {
      if (r.order_id == order && r.kind == wire::ReportKind::kRejected) {
        return r.message.find(why) != std::string::npos;
      }
    }
    return false;
  };
  b.Apply(LaunchOrder("o2", 1), 0);
  EXPECT_TRUE(rejected("o2", "no node lease yet"));
  EXPECT_FALSE(g.fs.Read("/w/lease"));
  b.RenewLease(BootTimeNs() - 2 * kSec);  // ran out a second ago
  wire::WorkOrder late = LaunchOrder("o4", 1);
  late.attempt = 2;
  b.Apply(late, 0);
  EXPECT_TRUE(rejected("o4", "the node lease ran out"));
  EXPECT_TRUE(g.runner.procs_.empty());
  EXPECT_EQ(g.fs.Read("/w/journal.jsonl").value_or("").find("\"o4\""), std::string::npos);
}

TEST(Agent, StopOfAJobThatIsNotHereIsStoppedAtOnce) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(StopOrder("s9", false, 0), 0);
  EXPECT_EQ(Kinds(a), (std::vector<std::string>{"accepted", "stopped"}));
}

TEST(Agent, HardwareForRegistration) {
  Fixture f;
  Agent a = f.Make();
  wire::Hardware h = a.Hardware();
  ASSERT_EQ(h.devices.size(), 4u);
  EXPECT_TRUE(h.devices[0].declared);
  EXPECT_EQ(h.devices[0].vendor, "nvidia");
  EXPECT_EQ(h.cpu_milli, 2000);
  EXPECT_EQ(h.backend, "cuda");
}

}  // namespace
}  // namespace tianshu::agent
