// The agent with real processes (no cgroups needed): exit codes and logs, the checkpoint
// protocol (SIGUSR1 -> marker -> SIGTERM -> SIGKILL), and a restarted agent adopting ranks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "tianshu/agent/agent.h"
#include "tianshu/agent/discovery.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class AgentProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tianshu-agent-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    cgroups_ = std::move(*DetectCgroupDriver(fs_, {.force_mode = "none"}));
    host_.hostname = "n0";
    host_.accelerators = *ParseDeclaredDevices("2xA100-80GB");
    host_.declared_accelerators = true;
    options_ = {.node = "n0",
                .workdir = dir_ + "/work",
                .checkpoint_root = dir_ + "/ckpt",
                .checkpoint_grace_ns = 5 * kNsPerSec,
                .base_env = {{"PATH", "/usr/bin:/bin"}}};
    ASSERT_TRUE(fs_.MakeDirs(options_.workdir));
  }
  void TearDown() override { (void)!std::system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Agent> Make(PosixProcessRunner& runner) {
    return std::make_unique<Agent>(options_, host_, fs_, *cgroups_, runner);
  }

  static wire::WorkOrder Launch(const std::string& id, std::vector<std::string> command) {
    wire::WorkOrder o{.id = id, .kind = wire::OrderKind::kLaunch, .job_id = "j-7", .attempt = 1};
    o.launch = wire::LaunchOrder{.job_name = "t", .backend = "cuda", .world_size = 1};
    o.launch->ranks.push_back({.rank = 0, .devices = {1}, .command = std::move(command)});
    return o;
  }
  static wire::WorkOrder Stop(bool checkpoint_first, int64_t grace_ms) {
    wire::WorkOrder o{
        .id = "stop-1", .kind = wire::OrderKind::kStop, .job_id = "j-7", .attempt = 1};
    o.stop = wire::StopOrder{
        .reason = "preempt", .checkpoint_first = checkpoint_first, .grace_ms = grace_ms};
    return o;
  }

  // Ticks until `done` holds or `seconds` pass.
  static bool TickUntil(Agent& a, const std::function<bool()>& done, int seconds) {
    for (int i = 0; i < seconds * 50; ++i) {
      a.Tick(Now());
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  static const wire::Report* Find(const Agent& a, wire::ReportKind kind) {
    for (const auto& r : a.PendingReports()) {
      if (r.kind == kind) return &r;
    }
    return nullptr;
  }

  RealSystemFiles fs_;
  std::unique_ptr<CgroupDriver> cgroups_;
  HostInfo host_;
  AgentOptions options_;
  std::string dir_;
};

// What a job's owner controls (its marker, its checkpoint directory's `latest`) is read by the
// root agent without following a symlink to a root-only file, blocking on a FIFO, taking a
// hard link to another file, or reading without bound.
TEST(UntrustedFiles, OnlyRegularSingleLinkFilesAreReadAndOnlyUpToTheCap) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/tianshu-untrusted-XXXXXX";
  const std::string d = ::mkdtemp(tmpl);
  RealSystemFiles files;
  std::ofstream(d + "/marker") << R"({"step": 5, "path": "/ckpt/s5"})";
  auto ok = files.ReadUntrusted(d + "/marker", 4096);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(*ok, R"({"step": 5, "path": "/ckpt/s5"})");
  EXPECT_EQ(files.ReadUntrusted(d + "/marker", 8)->size(), 8u);
  std::ofstream(d + "/secret") << "root only";
  fs::create_symlink(d + "/secret", d + "/link");
  EXPECT_FALSE(files.ReadUntrusted(d + "/link", 4096));
  fs::create_hard_link(d + "/secret", d + "/hard");
  EXPECT_FALSE(files.ReadUntrusted(d + "/hard", 4096));
  ASSERT_EQ(::mkfifo((d + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(files.ReadUntrusted(d + "/fifo", 4096));  // returns at once, not blocked
  fs::remove_all(d);
}

TEST_F(AgentProcesses, ReportsTheExitCodeAndKeepsTheLog) {
  PosixProcessRunner runner;
  auto a = Make(runner);
  ASSERT_TRUE(a->Recover(Now()));
  a->Apply(Launch("l1", {"/bin/sh", "-c", "echo rank $RANK sees $CUDA_VISIBLE_DEVICES; exit 3"}),
           Now());
  ASSERT_TRUE(TickUntil(
      *a, [&] { return Find(*a, wire::ReportKind::kExited); }, 20));
  const wire::Report* e = Find(*a, wire::ReportKind::kExited);
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_EQ(e->signal, 0);
  auto log = fs_.Read(a->LogPath("j-7", 0));
  ASSERT_TRUE(log) << a->LogPath("j-7", 0);
  EXPECT_EQ(*log, "rank 0 sees 1\n");
}

// The shim holds SIGCHLD to wait on its rank (and ignores the stop signals to outlive it), and
// the agent blocks the signals it waits for and ignores SIGPIPE: the rank itself starts with no
// signal blocked and none ignored, also under a lease.
TEST_F(AgentProcesses, ARankStartsWithNoSignalBlockedOrIgnored) {
  PosixProcessRunner runner;
  auto a = Make(runner);
  ASSERT_TRUE(a->Recover(Now()));
  a->SetLease(60 * kNsPerSec);
  a->RenewLease(BootTimeNs());
  // As `tianshu agent` runs (tools/tianshu: main.cc and cmd_agent.cc), for the launch only.
  sigset_t agents, before;
  sigemptyset(&agents);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&agents, s);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &agents, &before), 0);
  auto* pipe_before = ::signal(SIGPIPE, SIG_IGN);
  // grep itself, not a shell (which clears its mask when it starts).
  a->Apply(Launch("l1", {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}), Now());
  ::signal(SIGPIPE, pipe_before);
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, &before, nullptr), 0);
  ASSERT_TRUE(TickUntil(
      *a, [&] { return Find(*a, wire::ReportKind::kExited); }, 20));
  EXPECT_EQ(Find(*a, wire::ReportKind::kExited)->exit_code, 0);
  auto log = fs_.Read(a->LogPath("j-7", 0));
  ASSERT_TRUE(log);
  EXPECT_EQ(*log, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

// A bandwidth probe's rank runs at nice 19 (it measures on idle nodes and should not slow work
// arriving meanwhile); a job's rank keeps the agent's priority. The "Python" here prints the nice
// value the kernel gives its process (field 19 of /proc/self/stat).
TEST_F(AgentProcesses, AProbeRunsAtTheLowestPriorityAndAJobDoesNot) {
  const std::string python = dir_ + "/fake-python";
  ASSERT_TRUE(fs_.Replace(python, "#!/bin/sh\nexec cut -d' ' -f19 /proc/self/stat\n",
                          SystemFiles::Sync::kThisBoot));
  ASSERT_EQ(::chmod(python.c_str(), 0755), 0);
  ASSERT_TRUE(fs_.Replace(dir_ + "/probe.py", "", SystemFiles::Sync::kThisBoot));
  options_.probe_python = python;
  options_.probe_script = dir_ + "/probe.py";
  PosixProcessRunner runner;
  auto a = Make(runner);
  ASSERT_TRUE(a->Recover(Now()));
  a->SetLease(60 * kNsPerSec);
  a->RenewLease(BootTimeNs());
  wire::WorkOrder probe = Launch("p1", {});
  probe.job_id = "probe-1";
  probe.launch->probe = wire::ProbeSpec{.method = "gloo", .bytes = 1024, .seconds = 0.1};
  a->Apply(probe, Now());
  a->Apply(Launch("l1", {"cut", "-d", " ", "-f19", "/proc/self/stat"}), Now());
  ASSERT_TRUE(TickUntil(
      *a,
      [&] {
        int exited = 0;
        for (const auto& r : a->PendingReports()) exited += r.kind == wire::ReportKind::kExited;
        return exited == 2;
      },
      20));
  auto nice = [&](const std::string& job) {
    auto log = fs_.Read(a->LogPath(job, 0));
    EXPECT_TRUE(log) << job;
    return log ? std::string(Trim(*log)) : std::string();
  };
  EXPECT_EQ(nice("probe-1"), "19");
  EXPECT_EQ(nice("j-7"), std::to_string(::getpriority(PRIO_PROCESS, 0)));
}

TEST_F(AgentProcesses, StopAsksForACheckpointThenTerminates) {
  PosixProcessRunner runner;
  auto a = Make(runner);
  // A rank that checkpoints on SIGUSR1 (writes its marker), says it is ready once its trap is
  // set, and dies on SIGTERM.
  std::string script =
      "trap 'echo \"{\\\"step\\\": 5, \\\"path\\\": \\\"$TIANSHU_CHECKPOINT_DIR/s5\\\"}\" > "
      "$TIANSHU_CHECKPOINT_MARKER' USR1; touch \"$TIANSHU_READY_FILE\"; "
      "while :; do sleep 0.05; done";
  a->Apply(Launch("l1", {"/bin/sh", "-c", script}), Now());
  // Stopped once its trap is set (its ready file exists), not after a fixed pause: on a loaded
  // machine the shell took longer than 300 ms and no checkpoint was asked for.
  auto ready = [&] {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      if (e.path().extension() == ".ready") return true;
    }
    return false;
  };
  ASSERT_TRUE(TickUntil(*a, ready, 20));
  a->Apply(Stop(true, 2000), Now());
  ASSERT_TRUE(TickUntil(
      *a, [&] { return Find(*a, wire::ReportKind::kStopped); }, 20));
  const wire::Report* c = Find(*a, wire::ReportKind::kCheckpointed);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->step, 5);
  EXPECT_EQ(c->order_id, "stop-1");
  const wire::Report* e = Find(*a, wire::ReportKind::kExited);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->signal, SIGTERM);
  EXPECT_EQ(e->step, 5);
  EXPECT_EQ(Find(*a, wire::ReportKind::kStopped)->message, "preempt");
}

TEST_F(AgentProcesses, ARankThatIgnoresSigtermIsKilled) {
  PosixProcessRunner runner;
  auto a = Make(runner);
  a->Apply(Launch("l1", {"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}), Now());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  a->Apply(Stop(false, 300), Now());
  ASSERT_TRUE(TickUntil(
      *a, [&] { return Find(*a, wire::ReportKind::kStopped); }, 20));
  EXPECT_EQ(Find(*a, wire::ReportKind::kExited)->signal, SIGKILL);
  EXPECT_NE(Find(*a, wire::ReportKind::kStopped)->message.find("SIGKILL after 300 ms"),
            std::string::npos);
}

TEST_F(AgentProcesses, ARestartedAgentAdoptsTheRankAndLearnsHowItEnded) {
  PosixProcessRunner first_runner;
  int64_t pid = 0;
  {
    auto a = Make(first_runner);
    ASSERT_TRUE(a->Recover(Now()));
    a->Apply(Launch("l1", {"/bin/sh", "-c", "sleep 1; exit 7"}), Now());
    ASSERT_EQ(a->Running().size(), 1u);
    pid = a->Running()[0].pid;
  }  // the agent goes away; the rank runs on
  PosixProcessRunner second_runner;
  auto b = Make(second_runner);
  ASSERT_TRUE(b->Recover(Now()));
  ASSERT_EQ(b->Running().size(), 1u);
  EXPECT_EQ(b->Running()[0].pid, pid);
  b->Apply(Launch("l1", {"/bin/sh", "-c", "sleep 1; exit 7"}), Now());  // redelivered
  ASSERT_TRUE(TickUntil(
      *b, [&] { return Find(*b, wire::ReportKind::kExited); }, 20));
  EXPECT_EQ(Find(*b, wire::ReportKind::kExited)->exit_code, 7);
  // Exactly one start in the journal: nothing ran twice.
  auto journal = fs_.Read(options_.workdir + "/journal.jsonl");
  ASSERT_TRUE(journal);
  size_t starts = 0;
  for (size_t p = journal->find("\"start\""); p != std::string::npos;
       p = journal->find("\"start\"", p + 1)) {
    ++starts;
  }
  EXPECT_EQ(starts, 1u);
}

// Fencing: once the agent's lease has run out, each rank's shim kills its whole process group,
// also when the agent is gone; the exit file says it was fenced. A renewed lease keeps it.
TEST_F(AgentProcesses, ShimsKillTheirRanksWhenTheLeaseRunsOutEvenWithoutTheAgent) {
  PosixProcessRunner runner;
  int64_t pid = 0;
  auto alive = [](pid_t p) {  // a zombie (the shim, whose parent is this test) counts as gone
    auto stat = ReadFileOrEmpty("/proc/" + std::to_string(p) + "/stat");
    auto paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
  };
  {
    auto a = Make(runner);
    ASSERT_TRUE(a->Recover(Now()));
    a->SetLease(kNsPerSec);
    a->RenewLease(BootTimeNs());  // runs out 1 s from now
    // The rank starts a child of its own (same process group): it goes too.
    a->Apply(Launch("l1", {"/bin/sh", "-c", "sleep 60 & echo $! > child.pid; wait"}), Now());
    ASSERT_EQ(a->Running().size(), 1u);
    pid = a->Running()[0].pid;
    // Renewed while the agent lives: still running after the first deadline.
    for (int i = 0; i < 8; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      a->RenewLease(BootTimeNs());
    }
    EXPECT_TRUE(alive(static_cast<pid_t>(pid))) << "killed under a renewed lease";
  }  // the agent dies: nobody renews
  // The rank's own child (a grandchild of this test, reaped by init) must go with the group.
  std::string child_pid_file;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
    if (e.path().filename() == "child.pid") child_pid_file = e.path();
  }
  ASSERT_FALSE(child_pid_file.empty());
  const pid_t child = std::stoi(*fs_.Read(child_pid_file));
  EXPECT_TRUE(alive(child));
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((alive(child) || alive(static_cast<pid_t>(pid))) &&
         std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(alive(child)) << "the rank's child outlived the lease";
  EXPECT_FALSE(alive(static_cast<pid_t>(pid))) << "the shim outlived the lease";
  // A restarted agent learns it was fenced.
  PosixProcessRunner second;
  auto b = Make(second);
  ASSERT_TRUE(b->Recover(Now()));
  ASSERT_TRUE(TickUntil(
      *b, [&] { return Find(*b, wire::ReportKind::kExited); }, 20));
  const auto* exited = Find(*b, wire::ReportKind::kExited);
  EXPECT_EQ(exited->signal, SIGKILL);
  EXPECT_NE(exited->message.find("fenced"), std::string::npos) << exited->message;
}

// The shim fails closed: a lease file removed by hand (or by a cleaner of the work directory)
// fences the rank, where it used to mean "no lease" and kept the rank past any partition.
// Without a lease the file says "none" and the rank runs on.
TEST_F(AgentProcesses, ARankWhoseLeaseFileIsRemovedIsFenced) {
  PosixProcessRunner runner;
  auto a = Make(runner);
  ASSERT_TRUE(a->Recover(Now()));
  a->SetLease(0);
  a->Apply(Launch("l1", {"/bin/sh", "-c", "sleep 60"}), Now());
  ASSERT_EQ(a->Running().size(), 1u);
  EXPECT_EQ(fs_.Read(a->LeasePath()).value_or("").substr(0, 4), "none");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // three looks of the shim
  a->Tick(Now());
  EXPECT_FALSE(Find(*a, wire::ReportKind::kExited)) << "killed without a lease";
  // A lease of a minute, renewed now: then the file goes.
  a->SetLease(60 * kNsPerSec);
  a->RenewLease(BootTimeNs());
  ASSERT_TRUE(std::filesystem::remove(a->LeasePath()));
  ASSERT_TRUE(TickUntil(
      *a, [&] { return Find(*a, wire::ReportKind::kExited); }, 20));
  const auto* exited = Find(*a, wire::ReportKind::kExited);
  EXPECT_EQ(exited->signal, SIGKILL);
  EXPECT_NE(exited->message.find("fenced"), std::string::npos) << exited->message;
}

// The shim's look at the lease file (real files): a whole record decides and is remembered; a
// torn one (read five times, 2 ms apart) leaves the decision to the last whole deadline, and with
// none the rank is fenced; "none" holds; a missing file or a record that is not one fences.
TEST_F(AgentProcesses, AShimReadsTheLeaseWholeOrFallsBackToTheLastWholeDeadline) {
  const std::string path = dir_ + "/lease";
  auto put = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  const int64_t future = BootTimeNs() + 60 * kNsPerSec, past = BootTimeNs() - kNsPerSec;
  int64_t last_whole = 0;
  put(LeaseRecord(future, "b1"));
  EXPECT_FALSE(LeaseExpired(path.c_str(), &last_whole));
  EXPECT_EQ(last_whole, future);
  // A torn read: the first number is long past, the last one says otherwise.
  std::string torn = LeaseRecord(past, "b1");
  torn.replace(torn.size() - 20, 19, LeaseRecord(future, "b1").substr(0, 19));
  put(torn);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(LeaseExpired(path.c_str(), &last_whole));  // the last whole deadline holds
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(8));
  EXPECT_EQ(last_whole, future);
  int64_t none_yet = 0, ran_out = past;
  EXPECT_TRUE(LeaseExpired(path.c_str(), &none_yet));
  EXPECT_TRUE(LeaseExpired(path.c_str(), &ran_out));
  put(LeaseRecord(past, "b1"));
  EXPECT_TRUE(LeaseExpired(path.c_str(), &last_whole));
  EXPECT_EQ(last_whole, past);
  put("none b1\n");
  last_whole = future;
  EXPECT_FALSE(LeaseExpired(path.c_str(), &last_whole));
  EXPECT_EQ(last_whole, 0);               // no lease: a later one starts afresh
  put(std::to_string(future) + " b1\n");  // an older agent's record
  EXPECT_FALSE(LeaseExpired(path.c_str(), &none_yet));
  put("soon b1 soon\n");
  EXPECT_TRUE(LeaseExpired(path.c_str(), &last_whole));
  std::filesystem::remove(path);
  last_whole = future;
  EXPECT_TRUE(LeaseExpired(path.c_str(), &last_whole));  // removed: fenced, whatever it said
}

}  // namespace
}  // namespace tianshu::agent
