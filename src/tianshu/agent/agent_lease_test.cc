// The agent over a fake file system and process table: where a restarted job resumes, the
// checkpoint it may promote, the lease file, and registration's hardware.
#include "tianshu/agent/agent.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>

#include "tianshu/agent/agent_test_util.h"
#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

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
