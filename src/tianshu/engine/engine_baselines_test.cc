// The baseline presets' bindings (kube-default, volcano), and 2D-LAS service: charged by the
// caller, at thresholds, and the wake-ups and preemption it drives.
#include "tianshu/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "tianshu/engine/internal/sort_keys.h"
#include "tianshu/engine/policy.h"
#include "tianshu/model/load.h"

#include "tianshu/engine/engine_test_util.h"

namespace tianshu::engine {
namespace {

std::set<int> NodesOf(const JobRecord& r) {
  std::set<int> out;
  for (const auto& s : r.placement) out.insert(s.node);
  return out;
}

// kube-default scores each pod by LeastAllocated: small jobs go to the emptiest nodes; volcano's
// binpack puts them on the fullest node that fits.
TEST(Baselines, KubeDefaultSpreadsAndVolcanoPacks) {
  auto topo = Tree(4);  // 4 nodes of 8 GPUs
  for (std::string preset : {"kube-default", "volcano"}) {
    auto e = Engine::Create(topo, *PresetOptions(preset));
    ASSERT_TRUE(e) << e.error().message;
    for (JobId id = 1; id <= 4; ++id) ASSERT_TRUE((*e)->Apply(SubmitJob{id, Job(2)}, 0));
    CycleResult r = (*e)->Cycle(0);
    EXPECT_EQ(Starts(r), 4) << preset;
    std::set<int> nodes;
    for (JobId id = 1; id <= 4; ++id) {
      EXPECT_EQ(NodesOf(*(*e)->Find(id)).size(), 1u) << preset << ": a pod is on one node";
      nodes.merge(NodesOf(*(*e)->Find(id)));
    }
    EXPECT_EQ(nodes.size(), preset == "kube-default" ? 4u : 1u) << preset;
  }
}

// Without a co-scheduling plugin a job's pods are bound as they fit: the bound ones hold their
// GPUs idle while the job waits, and a job behind it that would fit otherwise waits too; the job
// starts on its held pods plus the rest when they free. Volcano's gang commits all pods or none:
// nothing is held, and the smaller job behind runs.
TEST(Baselines, KubeDefaultHoldsPartialGangsAndVolcanoNeverSplitsOne) {
  auto topo = Tree(2);  // 2 nodes of 8 GPUs
  for (std::string preset : {"kube-default", "volcano"}) {
    const bool kube = preset == "kube-default";
    auto e = Engine::Create(topo, *PresetOptions(preset));
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, 100)}, 0));
    EXPECT_EQ(Starts((*e)->Cycle(0)), 1);
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(16, 100)}, 1));  // two pods of 8
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 100)}, 2));
    CycleResult r = (*e)->Cycle(2);
    EXPECT_EQ((*e)->Find(2)->state, JobState::kPending) << preset;
    EXPECT_EQ((*e)->Find(2)->bound.size(), kube ? 8u : 0u) << preset;
    EXPECT_EQ(r.stats.pods_bound, kube ? 1 : 0) << preset;
    EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 16000) << preset << ": held or running";
    EXPECT_EQ((*e)->Find(3)->state, kube ? JobState::kPending : JobState::kRunning) << preset;
    if (!kube) continue;
    // Job 1 ends: job 2's second pod binds there and it starts on both nodes.
    ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 100));
    r = (*e)->Cycle(100);
    EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
    EXPECT_TRUE((*e)->Find(2)->bound.empty());
    EXPECT_EQ(NodesOf(*(*e)->Find(2)).size(), 2u);
    EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 16000);
    // Cancelling a job that holds pods gives them back.
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(16, 100)}, 101));
    ASSERT_TRUE((*e)->Apply(JobFinished{2, true, ""}, 150));
    ASSERT_TRUE((*e)->Apply(SubmitJob{5, Job(8, 100)}, 150));
    (void)(*e)->Cycle(150);  // job 3 takes a node, job 4 binds a pod on the other
    EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
    EXPECT_EQ((*e)->Find(4)->bound.size(), 8u);
    EXPECT_EQ((*e)->Find(5)->state, JobState::kPending);
    ASSERT_TRUE((*e)->Apply(CancelJob{4}, 160));
    EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 8000);
    (void)(*e)->Cycle(160);
    EXPECT_EQ((*e)->Find(5)->state, JobState::kRunning);
  }
}

// A gang volcano gives back leaves the capacity its pods took in the trial: a job behind it that
// fits there starts in the same cycle (a pod that failed only beside the gang's own pods is not
// remembered as one that fits nowhere).
TEST(Baselines, VolcanoRollbackLeavesRoomForTheNextJob) {
  auto topo = Tree(2);  // 2 nodes of 8 GPUs
  auto e = Engine::Create(topo, *PresetOptions("volcano"));
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(4, 1000)}, 0));
  EXPECT_EQ(Starts((*e)->Cycle(0)), 1);
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(12, 100)}, 1));  // two pods of 6: only one fits
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(6, 100)}, 2));   // one pod of 6: fits the free node
  CycleResult r = (*e)->Cycle(2);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kPending);
  EXPECT_TRUE((*e)->Find(2)->bound.empty());
  EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 10000);
}

// A pod is never split over nodes: with 2 GPUs free on each of two nodes, volcano does not start
// a 4-GPU job (one pod), where a strategy placing the whole gang splits it.
TEST(Baselines, APodStaysOnOneNode) {
  auto topo = Tree(2);
  auto e = Engine::Create(topo, *PresetOptions("volcano"));
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(6, 100)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(6, 100)}, 0));
  EXPECT_EQ(Starts((*e)->Cycle(0)), 2);
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(4, 100)}, 1));
  EXPECT_EQ(Starts((*e)->Cycle(1)), 0);
  auto whole = PresetOptions("volcano");
  whole->binding = Binding::kJob;
  auto f = Engine::Create(topo, *whole);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->Apply(SubmitJob{1, Job(6, 100)}, 0));
  ASSERT_TRUE((*f)->Apply(SubmitJob{2, Job(6, 100)}, 0));
  (void)(*f)->Cycle(0);
  ASSERT_TRUE((*f)->Apply(SubmitJob{3, Job(4, 100)}, 1));
  EXPECT_EQ(Starts((*f)->Cycle(1)), 1) << "the whole-gang strategy splits it";
  EXPECT_EQ(PodRanks(placement::RequestFromJob(Job(16)), topo), 8);
  EXPECT_EQ(PodRanks(placement::RequestFromJob(Job(12)), topo), 6);
  EXPECT_EQ(PodRanks(placement::RequestFromJob(Job(4)), topo), 4);
  EXPECT_EQ(PodRanks(placement::RequestFromJob(Job(13)), topo), 1);
}

// A caller that keeps its own records (the server builds an engine every cycle) hands back the
// service a job had before: a job restored with an hour of service sits in a lower 2D-LAS queue
// and is preempted for a newcomer; without it the two would tie and nothing would move.
TEST(Engine, AttainedServiceSetByTheCallerOrdersLas) {
  auto topo = Tree(2);  // 16 GPUs
  for (double prior : {0.0, 4000.0}) {
    auto e = Engine::Create(topo, *PresetOptions("tiresias"));
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 1e6)}, 0));
    std::vector<placement::RankSlot> all;
    for (int g = 0; g < 16; ++g) all.push_back({.node = g / 8, .gpu = g});
    ASSERT_TRUE((*e)->Restore(1, all, 100));
    ASSERT_TRUE((*e)->SetAttainedService(1, prior));
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8, 100)}, 100));
    CycleResult r = (*e)->Cycle(101);  // 16 GPU-s of the current run on top of `prior`
    EXPECT_EQ(r.stats.preempted, prior > 0 ? 1 : 0) << "prior service " << prior;
    EXPECT_EQ((*e)->Find(2)->state, prior > 0 ? JobState::kRunning : JobState::kPending);
  }
  auto e = Engine::Create(topo, *PresetOptions("tiresias"));
  ASSERT_TRUE(e);
  EXPECT_FALSE((*e)->SetAttainedService(7, 1));
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(1)}, 0));
  EXPECT_FALSE((*e)->SetAttainedService(1, -1));
}

// A running job's service is charged where a 2D-LAS threshold is due, not at every cycle, and
// read in between: with no cycle from its start to a newcomer's arrival long after both its
// crossings (3,250 and 7,200 GPU-s), it is in the last queue when the newcomer comes, and is
// evicted for it with the service it had.
TEST(Engine, ServiceIsChargedWhereAThresholdIsDueWithNoCycleBetween) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("tiresias"));
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 1e6)}, 0));
  ASSERT_EQ(Starts((*e)->Cycle(0)), 1);
  EXPECT_DOUBLE_EQ(ServiceAt(*(*e)->Find(1), 1000), 16000);
  EXPECT_DOUBLE_EQ((*e)->Find(1)->attained_gpu_s, 0);  // read, not charged
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(16, 100)}, 1000));
  CycleResult r = (*e)->Cycle(1000);
  EXPECT_EQ(r.stats.preempted, 1);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
  EXPECT_DOUBLE_EQ((*e)->Find(1)->attained_gpu_s, 16000);
  EXPECT_DOUBLE_EQ((*e)->Find(1)->standing_since_s, 7200.0 / 16);
}

// The tiresias preset with scheduler.preempt_for set to `scope`.
Result<std::unique_ptr<Engine>> TiresiasWith(const model::Topology& topo,
                                             const std::string& scope) {
  EngineOptions o = *PresetOptions("tiresias");
  o.config.preempt_for = scope;
  return Engine::Create(topo, o);
}

// scheduler.preempt_for: with every-job (the tiresias preset), a job behind a blocked head of
// the queue may still preempt running jobs below it; with head, only jobs up to the head may.
// Job 1 (8 GPUs) is in the last 2D-LAS queue, job 2 (8 GPUs) in the first; the head (16 GPUs)
// cannot place even by evicting job 1, and the 4-GPU job behind it can.
TEST(Engine, PreemptForEveryJobLetsAJobBehindABlockedHeadPreempt) {
  for (const std::string scope : {"every-job", "head"}) {
    SCOPED_TRACE(scope);
    auto topo = Tree(2);  // 16 GPUs
    auto e = TiresiasWith(topo, scope);
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, 1e6)}, 0));
    ASSERT_EQ(Starts((*e)->Cycle(0)), 1);
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8, 1e6)}, 950));
    ASSERT_EQ(Starts((*e)->Cycle(950)), 1);
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(16, 100)}, 1000));
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(4, 100)}, 1000));
    CycleResult r = (*e)->Cycle(1000);
    EXPECT_EQ((*e)->Find(3)->state, JobState::kPending);  // blocked either way
    EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);  // its queue is the newcomers'
    const bool every = scope == "every-job";
    EXPECT_EQ((*e)->Find(4)->state, every ? JobState::kRunning : JobState::kPending);
    EXPECT_EQ((*e)->Find(1)->state, every ? JobState::kPending : JobState::kRunning);
    EXPECT_EQ(r.stats.preempted, every ? 1 : 0);
  }
}

// With every-job, a job demoted this instant is a victim of the jobs behind the blocked head
// that entered its queue earlier (restarts free, as in the tiresias preset): jobs 1 and 2 (8 GPUs
// each, from 0) pass the last threshold at 900 s; the head (24 GPUs, in the last queue) cannot
// place even by evicting both (job 3, in the first queue, is not its victim), and the 4-GPU job
// behind it, waiting in the last queue since before, takes one of them. With head it does not.
TEST(Engine, PreemptForEveryJobTakesAJobDemotedThisInstant) {
  for (const std::string scope : {"every-job", "head"}) {
    SCOPED_TRACE(scope);
    auto topo = Tree(3);  // 24 GPUs
    auto e = TiresiasWith(topo, scope);
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, 1e6)}, 0));
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8, 1e6)}, 0));
    ASSERT_EQ(Starts((*e)->Cycle(0)), 2);
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(24, 100)}, 10));
    ASSERT_TRUE((*e)->Apply(SubmitJob{5, Job(4, 100)}, 20));
    ASSERT_TRUE((*e)->SetAttainedService(4, 20000));  // both in the last queue
    ASSERT_TRUE((*e)->SetAttainedService(5, 20000));
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 1e6)}, 600));
    ASSERT_EQ(Starts((*e)->Cycle(600)), 1);  // job 3 takes the free node
    CycleResult r = (*e)->Cycle(900);
    const bool every = scope == "every-job";
    EXPECT_EQ((*e)->Find(4)->state, JobState::kPending);
    EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
    EXPECT_EQ((*e)->Find(5)->state, every ? JobState::kRunning : JobState::kPending);
    EXPECT_EQ(r.stats.preempted, every ? 1 : 0);
  }
}

// The wake-up for a 2D-LAS threshold is the earliest crossing of the jobs still running, kept
// per job (Engine::TrackChange) rather than asked of every job: a stopped job's crossing is
// dropped, service set by the caller moves it, and an accrual that passes it dates the change
// at the crossing. The preset's first threshold is 3,250 GPU-s.
TEST(Engine, LasWakeupIsTheEarliestCrossingOfTheJobsStillRunning) {
  // From 0 as in the simulator, and from an epoch time as in the server, where the slack that
  // counts a crossing a rounding error away as passed (1e-9 of the time) is 1.7 s.
  for (double base : {0.0, 1.7e9}) {
    SCOPED_TRACE(base);
    auto topo = Tree(4);  // 32 GPUs
    auto e = Engine::Create(topo, *PresetOptions("tiresias"));
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, 1e6)}, base));
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(4, 1e6)}, base));
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(2, 1e6)}, base));
    // Waits (a lower class never evicts), so that a wake-up matters.
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(32, 1e6, /*priority=*/-1)}, base));
    ASSERT_EQ(Starts((*e)->Cycle(base)), 3);
    auto wake = (*e)->NextWakeup(base);
    ASSERT_TRUE(wake);
    EXPECT_DOUBLE_EQ(*wake, base + 3250.0 / 8);  // job 1, 8 GPUs
    ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, base + 1));
    wake = (*e)->NextWakeup(base + 1);
    ASSERT_TRUE(wake);
    EXPECT_DOUBLE_EQ(*wake, base + 3250.0 / 4);  // job 2: job 1's crossing went with it
    // Restored service: 40 GPU-s short of the threshold at its last accrual.
    ASSERT_TRUE((*e)->SetAttainedService(2, 3250 - 40));
    wake = (*e)->NextWakeup(base + 1);
    ASSERT_TRUE(wake);
    EXPECT_DOUBLE_EQ(*wake, base + 10);
    // 1.5 s before job 3's first crossing (1,625 s): passed within the slack from an epoch
    // time (its standing dates from now), not from 0. Job 2 passed both its thresholds (10 s
    // and 997.5 s): its standing dates from the second.
    (void)(*e)->Cycle(base + 1623.5);
    EXPECT_DOUBLE_EQ((*e)->Find(3)->standing_since_s, base > 0 ? base + 1623.5 : -1);
    EXPECT_NEAR((*e)->Find(2)->standing_since_s, base + 10 + (7200.0 - 3250) / 4, 1e-5);
    // Its service reaches the threshold only at 1,625 s: the standing dates from there (from
    // an epoch time, again).
    (void)(*e)->Cycle(base + 2000);
    EXPECT_NEAR((*e)->Find(3)->standing_since_s, base + 3250.0 / 2, 1e-5);
    // Next: job 3's second threshold (7,200 GPU-s at 2 GPUs), at 3,600 s either way.
    wake = (*e)->NextWakeup(base + 2000);
    ASSERT_TRUE(wake);
    EXPECT_NEAR(*wake, base + 3250.0 / 2 + (7200.0 - 3250) / 2, 1e-5);
  }
}

}  // namespace
}  // namespace tianshu::engine
