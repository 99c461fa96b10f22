// The cycle through its public interface, on a small generated fat tree.
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

namespace tianshu::engine {
namespace {

model::Topology Tree(int nodes) {
  model::FatTreeOptions o;
  o.nodes = nodes;
  o.nodes_per_leaf = 2;
  return *model::GenerateFatTree(o);
}

model::JobSpec Job(int gpus, double duration_s = 100, int priority = 0) {
  model::JobSpec j;
  j.gpus = gpus;
  j.duration_s = duration_s;
  j.priority = priority;
  return j;
}

int Starts(const CycleResult& r) {
  int n = 0;
  for (const auto& d : r.decisions) n += std::holds_alternative<StartJob>(d);
  return n;
}

// An 8-GPU job of `duration_s` submitted at `at` and running on all of `node`'s GPUs.
void RunOnNode(Engine& e, JobId id, int node, double duration_s, int priority = 0, double at = 0) {
  ASSERT_TRUE(e.Apply(SubmitJob{id, Job(8, duration_s, priority)}, at));
  std::vector<placement::RankSlot> ranks;
  for (int g = 0; g < 8; ++g) ranks.push_back({.node = node, .gpu = node * 8 + g});
  ASSERT_TRUE(e.Restore(id, ranks, at));
}

TEST(Engine, StartsWhatFitsAndHoldsCapacity) {
  auto topo = Tree(4);
  auto e = Engine::Create(topo, *PresetOptions("mainstream"));
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(16)}, 0));
  CycleResult r = (*e)->Cycle(0);
  EXPECT_EQ(Starts(r), 2);
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 24000);
  EXPECT_EQ((*e)->Find(3)->state, JobState::kPending);
  ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 50));
  r = (*e)->Cycle(50);
  EXPECT_EQ(Starts(r), 1);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kCompleted);
  EXPECT_DOUBLE_EQ((*e)->Find(1)->attained_gpu_s, 16 * 50);
}

TEST(Engine, FifoBlocksBehindTheHeadAndBackfillDoesNot) {
  auto topo = Tree(4);  // 32 GPUs
  for (std::string preset : {"mainstream", "slurm"}) {
    auto e = Engine::Create(topo, *PresetOptions(preset));
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(24, 1000)}, 0));
    (void)(*e)->Cycle(0);
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(16, 1000)}, 1));  // head, blocked until 1000
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 500)}, 2));    // ends before: backfills
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(8, 5000)}, 3));   // would delay the head
    (void)(*e)->Cycle(3);
    bool fifo = preset == "mainstream";
    EXPECT_EQ((*e)->Find(3)->state, fifo ? JobState::kPending : JobState::kRunning) << preset;
    EXPECT_EQ((*e)->Find(4)->state, JobState::kPending) << preset;
  }
}

TEST(Engine, LasPreemptsJobsWithMoreService) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("tiresias"));
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 1e6)}, 0));
  (void)(*e)->Cycle(0);
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8, 100)}, 4000));  // job 1 has 64000 GPU-s
  CycleResult r = (*e)->Cycle(4000);
  EXPECT_EQ(r.stats.preempted, 1);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kPending);
  EXPECT_EQ((*e)->Find(1)->preemptions, 1);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
}

// The preemption cost model (scheduler.preemption_cost_model), on the tianshu preset (which
// turns it on). Jobs 1 and 2 hold all 16 GPUs from t=0 and have passed the first
// 2D-LAS limit; job 3, arriving at t=4000, outranks both, and 2D-LAS offers the higher id first.
// Job 4 (16 GPUs, no run time) waits behind it. The cost model evicts a job only when it has more
// left than the newcomer's run plus the 60 s restart, and, while another job waits, spares the job
// ending last (the eviction would delay the drain). It keeps 2D-LAS's choice where a run time is
// unknown, for a victim of a lower class, and when it is off.
TEST(Engine, TheCostModelEvictsOnlyJobsWhoseEvictionPays) {
  auto topo = Tree(2);  // 16 GPUs
  struct Case {
    const char* what;
    double newcomer_s;  // 0: no run time given
    double job1_s = 100000;
    double job2_s = 20000;  // 0: no run time given
    int newcomer_priority = 0;
    bool cost_model = true;
    bool other_waits = true;
    std::set<JobId> evicted = {};
  };
  for (const Case& c : {
           Case{.what = "a short newcomer", .newcomer_s = 100, .evicted = {2}},
           Case{.what = "15,000 s", .newcomer_s = 15000, .evicted = {2}},
           Case{.what = "15,950 s: within the restart of job 2's 16,000 s", .newcomer_s = 15950},
           Case{.what = "16,000 s", .newcomer_s = 16000},
           Case{.what = "the drain",
           .newcomer_s = 100,
           .job1_s = 20000,
           .job2_s = 100000,
           .evicted = {1}},
           Case{.what = "nobody else waiting: the drain rule is moot",
           .newcomer_s = 100,
           .job1_s = 20000,
           .job2_s = 100000,
           .other_waits = false,
           .evicted = {2}},
           Case{.what = "no run time for job 1: the drain unknown",
           .newcomer_s = 100,
           .job1_s = 0,
           .job2_s = 100000,
           .evicted = {2}},
           Case{.what = "both past their run times: the drain unknown",
           .newcomer_s = 100,
           .job1_s = 3000,
           .job2_s = 3500,
           .evicted = {2}},
           Case{.what = "no run time for the newcomer", .newcomer_s = 0, .evicted = {2}},
           Case{.what = "no run time for job 2", .newcomer_s = 100, .job2_s = 0, .evicted = {2}},
           Case{.what = "a lower class",
           .newcomer_s = 50000,
           .newcomer_priority = 1,
           .evicted = {2}},
           Case{.what = "the model off", .newcomer_s = 50000, .cost_model = false, .evicted = {2}},
       }) {
    EngineOptions o = *PresetOptions("tianshu");
    EXPECT_TRUE(o.config.preemption_cost_model);
    o.config.preemption_cost_model = c.cost_model;
    auto e = Engine::Create(topo, o);
    ASSERT_TRUE(e) << e.error().message;
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, c.job1_s)}, 0));
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8, c.job2_s)}, 0));
    ASSERT_EQ(Starts((*e)->Cycle(0)), 2);
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, c.newcomer_s, c.newcomer_priority)}, 4000));
    if (c.other_waits) {
      ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(16, 0)}, 4000));
    }
    CycleResult r = (*e)->Cycle(4000);
    EXPECT_EQ(r.stats.preempted, static_cast<int>(c.evicted.size())) << c.what;
    EXPECT_EQ(r.stats.preemptions_declined, c.evicted.empty() ? 1 : 0) << c.what;
    for (JobId id : {1, 2}) {
      EXPECT_EQ((*e)->Find(id)->state,
                c.evicted.contains(id) ? JobState::kPending : JobState::kRunning)
          << c.what << ", job " << id;
    }
    EXPECT_EQ((*e)->Find(3)->state, c.evicted.empty() ? JobState::kPending : JobState::kRunning)
        << c.what;
  }
}

// 2D-LAS is FIFO inside a queue by the time a job entered it: a job demoted into a queue goes to
// its back. Where restarts are free (the tiresias preset), at that instant the job waiting there
// that entered earlier takes its GPUs (as the Tiresias simulator's dlas-gpu does); once it runs
// on there, nothing of its queue evicts it. Where a restart costs (the default 60 s), the
// demoted job keeps its GPUs: the two are equals and the swap would only cost a restart.
TEST(Engine, LasDemotedJobGoesToTheBackOfItsNewQueue) {
  auto topo = Tree(2);  // 16 GPUs
  for (int64_t restart_s : {0, 60}) {
    auto o = *PresetOptions("tiresias");
    ASSERT_EQ(o.config.las_thresholds_gpu_s, (std::vector<int>{3250, 7200}));
    ASSERT_EQ(o.config.restart_overhead_s, 0);
    o.config.restart_overhead_s = restart_s;
    auto e = Engine::Create(topo, o);
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 1e6)}, 0));
    (void)(*e)->Cycle(0);
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(16, 1e6)}, 100));
    CycleResult r = (*e)->Cycle(100);  // both in queue 0: the runner stays
    EXPECT_EQ(r.stats.preempted, 0);
    const double first = 3250.0 / 16;  // job 1 passes 3,250 GPU-s: queue 1
    r = (*e)->Cycle(first);
    EXPECT_EQ(r.stats.preempted, 1);
    EXPECT_DOUBLE_EQ((*e)->Find(1)->standing_since_s, first) << "the demotion is dated";
    EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
    // Job 2 enters queue 1 after job 1 did: with free restarts job 1, waiting there, takes the
    // GPUs back.
    r = (*e)->Cycle(2 * first);
    const bool yields = restart_s == 0;
    EXPECT_EQ(r.stats.preempted, yields ? 1 : 0) << restart_s;
    EXPECT_EQ((*e)->Find(1)->state, yields ? JobState::kRunning : JobState::kPending);
    EXPECT_EQ((*e)->Find(2)->state, yields ? JobState::kPending : JobState::kRunning);
    EXPECT_DOUBLE_EQ((*e)->Find(2)->standing_since_s, 2 * first);
    // Later, the one running runs on in queue 1: the other, also in queue 1, does not evict it.
    r = (*e)->Cycle(2 * first + 10);
    EXPECT_EQ(r.stats.preempted, 0);
    EXPECT_EQ((*e)->Find(yields ? 1 : 2)->state, JobState::kRunning);
  }
}

// Inside a queue the victim is the job started last (the least work lost), not the one
// submitted last.
// scheduler.las_queue_order: inside a 2D-LAS queue, `entered` waits by the time each job entered
// it and evicts the job that started last; `preempted-first` (Tiresias' simulator) puts a job
// stopped in its queue ahead of those that have not run there, the last stopped first, and
// evicts the job that joined the queue's running jobs last (by its start or its demotion).
TEST(Engine, LasQueueOrderEnteredOrPreemptedFirst) {
  auto topo = Tree(2);
  model::ClusterState state(topo);
  JobTable jobs;
  auto add = [&](JobId id, double submit, double attained, double standing, double pending,
                 double start = -1) {
    JobRecord r;
    r.id = id;
    r.state = start >= 0 ? JobState::kRunning : JobState::kPending;
    r.submit_s = submit;
    r.attained_gpu_s = attained;
    r.standing_since_s = standing;
    r.pending_since_s = pending;
    r.start_s = start;
    r.request.ranks = 4;
    r.request.gpu_milli = model::kMilliPerGpu;
    jobs.emplace(id, std::move(r));
  };
  // Waiting (the peer's queues: 3,250 and 7,200 GPU-seconds).
  add(1, 0, 8000, 900, 1200);    // entered the last queue at 900, stopped there at 1200
  add(2, 50, 8000, 1000, 1100);  // entered it at 1000, stopped there at 1100
  add(3, 10, 8000, 800, 800);    // demoted and stopped at once: has not run there
  add(4, 20, 0, -1, 20);         // never ran
  add(5, 30, 100, -1, 500);      // stopped in the first queue at 500
  // Running in the last queue: 11 started at 100 and entered it at 1000, 12 started at 0 and
  // entered it at 1800.
  add(11, 100, 9000, 1000, 100, 100);
  add(12, 0, 7300, 1800, 0, 0);
  const std::vector<JobId> pending = {1, 3, 4, 5, 2};  // submission order
  const std::vector<JobId> running = {12, 11};         // start order
  for (const auto& [order, want_queue, want_victims] :
       {std::tuple{"entered", std::vector<JobId>{4, 5, 3, 1, 2}, std::vector<JobId>{11, 12}},
        std::tuple{"preempted-first", std::vector<JobId>{5, 4, 1, 2, 3},
                   std::vector<JobId>{12, 11}}}) {
    EngineOptions o = *PresetOptions("tiresias");
    EXPECT_EQ(o.config.las_queue_order, "preempted-first");
    o.config.las_queue_order = order;
    const CycleView v{.now_s = 5000,
                      .previous_cycle_s = 5000,
                      .state = &state,
                      .jobs = &jobs,
                      .pending = pending,
                      .running = running,
                      .options = &o};
    auto las = MakeOrderPolicy("las", o);
    ASSERT_TRUE(las) << las.error().message;
    std::vector<JobId> queue = pending;
    (*las)->Order(v, &queue);
    EXPECT_EQ(queue, want_queue) << order;
    auto evict = MakePreemptionPolicy("las", o);
    ASSERT_TRUE(evict) << evict.error().message;
    EXPECT_EQ((*evict)->Victims(v, jobs.at(4)), want_victims) << order;
  }
}

TEST(Engine, LasEvictsTheMostRecentlyStartedInsideAQueue) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("tiresias"));
  ASSERT_TRUE(e);
  std::vector<placement::RankSlot> node0, node1;
  for (int g = 0; g < 8; ++g) node0.push_back({.node = 0, .gpu = g});
  for (int g = 8; g < 16; ++g) node1.push_back({.node = 1, .gpu = g});
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, 1e6)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8, 1e6)}, 10));
  ASSERT_TRUE((*e)->Restore(1, node0, 50));  // submitted first, started last
  ASSERT_TRUE((*e)->Restore(2, node1, 20));
  ASSERT_TRUE((*e)->SetAttainedService(1, 5000));  // both in queue 1
  ASSERT_TRUE((*e)->SetAttainedService(2, 5000));
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 100)}, 60));
  CycleResult r = (*e)->Cycle(60);
  EXPECT_EQ(r.stats.preempted, 1);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kPending);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
  EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
}

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

// The cycle's sorting helpers give one std::sort's order: keys dealt to their groups keep the
// order met; an insertion sort that gives up past its budget still sorts.
TEST(SortKeys, DealAndMostlySortedGiveOneSortsOrder) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::pair<int, int>> keys;  // (group, value), unique
    const int n = 1 + round * 13;
    for (int i = 0; i < n; ++i) keys.emplace_back(static_cast<int>(rng() % 4), i);
    // Mostly in order inside each group, with a few (more each round) swapped far.
    for (int s = 0; s < round; ++s) {
      std::swap(keys[rng() % keys.size()].second, keys[rng() % keys.size()].second);
    }
    std::vector<std::pair<int, int>> want = keys;
    std::sort(want.begin(), want.end());
    const std::vector<size_t> at =
        internal::DealByGroup(&keys, [](const auto& k) { return k.first; });
    ASSERT_EQ(at.back(), keys.size());
    for (size_t b = 0; b + 1 < at.size(); ++b) {
      for (size_t i = at[b]; i < at[b + 1]; ++i) EXPECT_EQ(keys[i].first, keys[at[b]].first);
      internal::SortMostlySorted(keys, at[b], at[b + 1]);
    }
    EXPECT_EQ(keys, want) << "round " << round;
    std::reverse(keys.begin(), keys.end());  // the worst case: every key far from its place
    internal::SortMostlySorted(keys, 0, keys.size(), std::less<>());
    EXPECT_EQ(keys, want) << "reversed, round " << round;
  }
}

// SmallestK keeps the K smallest of a stream, in the order a min-heap of them all pops them,
// ties included, and says whether it left any value out.
TEST(SortKeys, SmallestKIsWhatAHeapPopsFirst) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const int n = static_cast<int>(rng() % 40);
    std::vector<std::pair<double, int64_t>> all;
    for (int i = 0; i < n; ++i) {  // few distinct values: many ties
      all.emplace_back(static_cast<double>(rng() % 12), static_cast<int64_t>(rng() % 3));
    }
    internal::SmallestK<std::pair<double, int64_t>, 16> first;
    for (const auto& x : all) first.Offer(x);
    std::vector<std::pair<double, int64_t>> want = all;
    std::sort(want.begin(), want.end());
    want.resize(std::min<size_t>(want.size(), 16));
    const auto got = first.Values();
    EXPECT_EQ(std::vector(got.begin(), got.end()), want) << "round " << round;
    EXPECT_EQ(first.HoldsAll(), n <= 16) << "round " << round;
  }
}

// SortedAcrossCalls gives one std::sort's order call after call, while keys come and go, change,
// or carry an id it cannot index (then it sorts the plain way and starts over).
TEST(SortKeys, SortedAcrossCallsIsOneSortsOrder) {
  struct Key {
    int group;
    double at;
    int64_t id;
    auto operator<=>(const Key&) const = default;
  };
  std::mt19937 rng(3);
  internal::SortedAcrossCalls<Key> order;
  std::map<int64_t, Key> live;
  for (int call = 0; call < 300; ++call) {
    // A few arrive, a few leave, a few change; now and then, for one call, an id it cannot
    // index (it sorts the plain way, then starts over), or a large one (its index grows).
    live.erase(-7);
    live.erase(int64_t{1} << 40);
    for (int i = 0; i < 6; ++i) {
      int64_t id = static_cast<int64_t>(rng() % 400);
      if (i == 0 && call % 50 == 49) id = -7;
      if (i == 0 && call % 50 == 24) id = int64_t{1} << 40;
      if (i == 1 && call % 10 == 5) id = 100000 + call;
      live[id] = Key{static_cast<int>(rng() % 3), static_cast<double>(rng() % 100), id};
    }
    for (int i = 0; i < 4; ++i) {
      auto gone = live.lower_bound(static_cast<int64_t>(rng() % 400));
      if (gone != live.end()) live.erase(gone);
    }
    std::vector<Key> keys;
    for (const auto& [id, k] : live) keys.push_back(k);
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<Key> want = keys;
    std::sort(want.begin(), want.end());
    order.Sort(&keys);
    ASSERT_EQ(keys, want) << "call " << call;
  }
  // A key offered twice (not how the engine calls it) is sorted, not lost or doubled.
  std::vector<Key> twice = {{1, 5, 3}, {0, 2, 9}, {1, 5, 3}};
  order.Sort(&twice);
  order.Sort(&twice);
  EXPECT_EQ(twice, (std::vector<Key>{{0, 2, 9}, {1, 5, 3}, {1, 5, 3}}));
}

// EASY backfill's reservation: the head's shadow time is the end at which enough GPUs are
// expected free, whether it takes the first few ends or more than SmallestK keeps.
TEST(Backfill, ShadowTimeIsTheEndThatFreesEnoughGpus) {
  auto topo = Tree(8);  // 64 GPUs
  EngineOptions o = *PresetOptions("slurm");
  auto policy = MakeBackfillPolicy("time", o);
  ASSERT_TRUE(policy) << policy.error().message;
  std::mt19937 rng(5);
  for (int round = 0; round < 60; ++round) {
    JobTable jobs;
    std::vector<JobId> running;
    model::ClusterState working(topo);
    // 1 or 2 GPUs each, at most 60 in all: fewer than 16 running jobs (all kept in one pass)
    // in a quarter of the rounds, more in the others.
    const int n = round % 4 == 0 ? static_cast<int>(rng() % 16) : 20 + static_cast<int>(rng() % 25);
    int64_t used = 0;
    std::vector<std::pair<double, int64_t>> ends;
    for (JobId id = 1; id <= n; ++id) {
      JobRecord r;
      r.id = id;
      r.state = JobState::kRunning;
      r.request.ranks = 1 + static_cast<int>(rng() % 2);
      if (used + r.request.ranks > 60) break;
      r.request.gpu_milli = model::kMilliPerGpu;
      r.start_s = static_cast<double>(rng() % 50);
      // Ties of ends; now and then a job without a run time (expected to end never).
      r.spec.duration_s = rng() % 16 == 0 ? 0 : 100 + static_cast<double>(rng() % 30) * 10;
      r.progress = 0.1 * static_cast<double>(rng() % 5);
      ends.emplace_back(ExpectedEndS(r), r.Gpus());
      used += r.Gpus();
      running.push_back(id);
      jobs.emplace(id, std::move(r));
    }
    // The GPUs the running jobs hold: taken on the working state, node by node.
    int64_t left = used;
    for (const auto& node : topo.nodes) {
      for (int g = 0; g < topo.GpusOn(node.id) && left > 0; ++g, --left) {
        placement::PlacementRequest one;
        one.ranks = 1;
        one.gpu_milli = model::kMilliPerGpu;
        ASSERT_TRUE(placement::Apply(&working, one,
                                     placement::PlacedOutcome({placement::RankSlot{
                                         .node = node.id, .gpu = node.first_gpu + g}})));
      }
    }
    const int64_t free = 64 - used;
    std::sort(ends.begin(), ends.end());
    JobRecord head;
    head.id = 1000;
    // Mostly more than is free (up to more than will ever be); in a fifth of the rounds, what
    // is free now.
    head.request.ranks = round % 5 == 1 ? static_cast<int>(std::max<int64_t>(1, free))
                                        : static_cast<int>(free + 1 + rng() % (used + 8));
    head.request.gpu_milli = model::kMilliPerGpu;
    // The reference: every end in order, until enough is free (now, where it is already).
    double shadow = kNever;
    int64_t at = free;
    for (const auto& [end, gpus] : ends) {
      if (at >= head.Gpus()) break;
      at += gpus;
      shadow = end;
    }
    if (at >= head.Gpus() && shadow == kNever) shadow = 60;
    const CycleView v{
        .now_s = 60, .state = &working, .jobs = &jobs, .running = running, .options = &o};
    const Reservation r = (*policy)->Reserve(v, head, working);
    EXPECT_TRUE(r.active);
    // (Where the head needs more than will ever be free, the last end.)
    EXPECT_EQ(r.shadow_s, shadow) << "round " << round << ", " << head.Gpus() << " GPUs";
    EXPECT_EQ(r.spare_gpus, std::max<int64_t>(0, at - head.Gpus())) << "round " << round;
  }
}

// The job table: records found by id whether ids are small (a flat index) or not (hashed),
// at addresses that stay put while others come and go.
TEST(IdTable, FindsEveryRecordAtAStableAddress) {
  IdTable<int> t;
  std::vector<const int*> at;
  const std::vector<int64_t> ids = {0, 1, 5, 4095, 4096, 1000000000, -3, 77};
  for (int64_t id : ids) {
    auto [e, inserted] = t.emplace(id, static_cast<int>(id % 1000));
    ASSERT_TRUE(inserted) << id;
    at.push_back(&e->second);
  }
  for (int i = 0; i < 20000; ++i) (void)t.emplace(100 + i, i);  // the flat index grows
  EXPECT_EQ(t.size(), ids.size() + 20000 - 2);                  // 4095 and 4096 were there already
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_NE(t.find(ids[i]), t.end()) << ids[i];
    EXPECT_EQ(&t.at(ids[i]), at[i]) << ids[i];
    EXPECT_EQ(t.at(ids[i]), static_cast<int>(ids[i] % 1000));
  }
  EXPECT_FALSE(t.emplace(5, 99).second);
  EXPECT_EQ(t.at(5), 5);
  t.erase(t.find(5));
  t.erase(t.find(1000000000));
  EXPECT_EQ(t.find(5), t.end());
  EXPECT_EQ(t.count(1000000000), 0U);
  EXPECT_THROW((void)t.at(5), std::out_of_range);
  EXPECT_EQ(t.count(4096), 1U);
  ASSERT_TRUE(t.emplace(5, 6).second);
  EXPECT_EQ(t.at(5), 6);
  EXPECT_EQ(t.size(), ids.size() + 20000 - 3);
  // A negative id, and a large one inserted before the flat index reached it: both hashed.
  IdTable<int> u;
  ASSERT_TRUE(u.emplace(-3, 1).second);
  ASSERT_TRUE(u.emplace(9000, 2).second);  // beyond 4,096 slots with one record
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(u.emplace(i, i).second);  // the index grows past it
  ASSERT_NE(u.find(9000), u.end());
  EXPECT_EQ(u.at(9000), 2);
  u.erase(u.find(9000));
  u.erase(u.find(-3));
  EXPECT_EQ(u.count(9000) + u.count(-3), 0U);
  ASSERT_TRUE(u.emplace(9000, 3).second);
  EXPECT_EQ(std::as_const(u).at(9000), 3);
  EXPECT_EQ(u.size(), 2001U);
}

// A placement handed in (a restore from the server's records) whose GPU is on another node
// than the slot says is refused, and nothing is taken.
TEST(Engine, ARestoreNamingAGpuOfAnotherNodeIsRefused) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("tiresias"));
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(2, 100)}, 0));
  auto st = (*e)->Restore(1, {{.node = 0, .gpu = 0}, {.node = 0, .gpu = 9}}, 0);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("GPU 9 is not on node"), std::string::npos)
      << st.error().message;
  EXPECT_EQ((*e)->Find(1)->state, JobState::kPending);
  EXPECT_EQ((*e)->State().SwitchFreeWholeGpus(topo.Root()), 16);
}

// A job that gives no duration gets the mean run time of the last two completed jobs like it
// (same queue, model and size; else the same size), and backfill uses it: the learned short
// job fills the hole in front of a blocked head, the learned long one does not.
// Submits jobs that give no duration at time 0, runs them all, and finishes each at its
// time (in the order given): a history of learned runtimes.
struct Ran {
  JobId id;
  int gpus;
  double end_s;
};
void RunWithoutDurations(Engine& e, const std::vector<Ran>& runs) {
  for (const Ran& r : runs) ASSERT_TRUE(e.Apply(SubmitJob{r.id, Job(r.gpus, 0)}, 0));
  (void)e.Cycle(0);
  for (const Ran& r : runs) {
    ASSERT_EQ(e.Find(r.id)->state, JobState::kRunning);
    ASSERT_TRUE(e.Apply(JobFinished{r.id, true, ""}, r.end_s));
  }
}

TEST(Engine, LearnedRuntimesStandInForMissingDurations) {
  RuntimeHistory h;
  model::JobSpec s = Job(8, 0);
  EXPECT_EQ(h.Predict(s, 8), 0);
  h.Add(s, 8, 100);
  h.Add(s, 8, 300);
  h.Add(s, 8, 500);
  EXPECT_DOUBLE_EQ(h.Predict(s, 8), 400);  // the last two
  s.queue = "other";
  EXPECT_DOUBLE_EQ(h.Predict(s, 8), 400);  // same size, another queue: the size's history
  EXPECT_EQ(h.Predict(s, 16), 0);

  for (bool learn : {true, false}) {
    SCOPED_TRACE(learn ? "learning" : "not learning");
    auto topo = Tree(5);  // 40 GPUs
    EngineOptions o = *PresetOptions("slurm");
    o.learn_runtimes = learn;
    auto e = Engine::Create(topo, o);
    ASSERT_TRUE(e);
    // Two 8-GPU jobs that ran 100 s, two 4-GPU jobs that ran 5000 s: nothing given.
    RunWithoutDurations(**e, {{1, 8, 100}, {2, 8, 100}, {3, 4, 5000}, {4, 4, 5000}});
    EXPECT_EQ((*e)->Runtimes().Size(), 4u);
    // A 24-GPU job holds GPUs until 6000 (given); the head needs all 40 and waits for it.
    ASSERT_TRUE((*e)->Apply(SubmitJob{5, Job(24, 1000)}, 5000));
    (void)(*e)->Cycle(5000);
    ASSERT_TRUE((*e)->Apply(SubmitJob{6, Job(40, 1000)}, 5001));
    ASSERT_TRUE((*e)->Apply(SubmitJob{7, Job(8, 0)}, 5002));  // learned 100 s: backfills
    ASSERT_TRUE((*e)->Apply(SubmitJob{8, Job(4, 0)}, 5003));  // learned 5000 s: would delay
    (void)(*e)->Cycle(5003);
    EXPECT_DOUBLE_EQ((*e)->Find(7)->EstimatedDurationS(), learn ? 100 : 0);
    EXPECT_DOUBLE_EQ((*e)->Find(8)->EstimatedDurationS(), learn ? 5000 : 0);
    EXPECT_EQ((*e)->Find(6)->state, JobState::kPending);
    // Without an estimate nothing can be shown not to delay the head.
    EXPECT_EQ((*e)->Find(7)->state, learn ? JobState::kRunning : JobState::kPending);
    EXPECT_EQ((*e)->Find(8)->state, JobState::kPending);
  }
}

// A completion re-predicts the jobs of its own GPU count only (a prediction is keyed by queue,
// model and GPUs), also for a job the caller hands in again and again as the server does.
TEST(Engine, ACompletionRepredictsTheJobsOfItsSize) {
  auto topo = Tree(6);  // 48 GPUs
  EngineOptions o = *PresetOptions("slurm");
  o.learn_runtimes = true;
  auto e = Engine::Create(topo, o);
  ASSERT_TRUE(e);
  RunWithoutDurations(**e, {{1, 8, 100}, {2, 4, 5000}});
  // 40 GPUs held until long after, 8 by a job that gives no duration; two jobs wait.
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(40, 100000)}, 5000));
  ASSERT_TRUE((*e)->Apply(SubmitJob{6, Job(8, 0)}, 5000));
  (void)(*e)->Cycle(5000);
  ASSERT_EQ((*e)->Find(6)->state, JobState::kRunning);
  ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(8, 0)}, 5001));
  ASSERT_TRUE((*e)->Apply(SubmitJob{5, Job(4, 0)}, 5001));
  (void)(*e)->Cycle(5001);
  EXPECT_DOUBLE_EQ((*e)->Find(4)->EstimatedDurationS(), 100);
  EXPECT_DOUBLE_EQ((*e)->Find(5)->EstimatedDurationS(), 5000);
  // 256 hand-ins: the list's upkeep runs on the last one (a job it dropped would keep 100).
  for (int i = 0; i < 256; ++i) {  // handed in again: its listing stays bounded and live
    ASSERT_TRUE((*e)->Withdraw(4));
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(8, 0)}, 5001));
  }
  (void)(*e)->Cycle(5002);
  ASSERT_EQ((*e)->Find(4)->state, JobState::kPending);
  // Job 6 ran 300 s: the 8-GPU prediction becomes the mean of 100 and 300; the 4-GPU one stays.
  ASSERT_TRUE((*e)->Apply(JobFinished{6, true, ""}, 5300));
  (void)(*e)->Cycle(5300);
  EXPECT_DOUBLE_EQ((*e)->Find(4)->EstimatedDurationS(), 200);
  EXPECT_EQ((*e)->Find(4)->state, JobState::kRunning);
  EXPECT_DOUBLE_EQ((*e)->Find(5)->EstimatedDurationS(), 5000);
  // A new history re-predicts everything: the 4-GPU job now has nothing like it.
  (*e)->SetRuntimeHistory(RuntimeHistory{});
  RuntimeHistory h;
  h.Add(Job(4, 0), 4, 60);
  (*e)->SetRuntimeHistory(h);
  (void)(*e)->Cycle(5301);
  EXPECT_DOUBLE_EQ((*e)->Find(5)->EstimatedDurationS(), 60);
}

TEST(Engine, NodeFailureRequeuesFromCheckpointWithinBudget) {
  auto topo = Tree(2);
  EngineOptions o = *PresetOptions("slurm");
  o.config.max_retries = 1;
  auto e = Engine::Create(topo, o);
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8)}, 0));
  (void)(*e)->Cycle(0);
  int node = (*e)->Find(1)->placement.front().node;
  ASSERT_TRUE((*e)->Apply(CheckpointDone{1, 0.25}, 10));
  auto d = (*e)->Apply(NodeFailed{node, "test"}, 20);
  ASSERT_TRUE(d);
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kPending);
  EXPECT_DOUBLE_EQ((*e)->Find(1)->progress, 0.25);
  (void)(*e)->Cycle(20);
  EXPECT_NE((*e)->Find(1)->placement.front().node, node);
  auto d2 = (*e)->Apply(NodeFailed{(*e)->Find(1)->placement.front().node, "again"}, 30);
  ASSERT_TRUE(d2);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kFailed);
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 0);
}

TEST(Engine, CanNeverFitIsRejected) {
  auto topo = Tree(2);
  auto e = Engine::Create(topo, *PresetOptions("tianshu"));
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(64)}, 0));
  CycleResult r = (*e)->Cycle(0);
  EXPECT_EQ(r.stats.rejected, 1);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kFailed);
}

// A caller that keeps the engine as a long-lived ledger hands a changed job in again: Withdraw
// gives back what it holds and takes it out of the queue and out of never-fits, so the same id
// can be submitted anew.
TEST(Engine, WithdrawForgetsAJobAndFreesWhatItHeld) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("mainstream"));
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(64)}, 0));  // can never fit
  ASSERT_EQ(Starts((*e)->Cycle(0)), 1);                // 2 waits behind 1 (FIFO), 3 unseen
  ASSERT_EQ((*e)->Find(1)->state, JobState::kRunning);
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 16000);
  ASSERT_TRUE((*e)->Withdraw(1));
  EXPECT_EQ((*e)->Find(1), nullptr);
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 0);
  EXPECT_FALSE((*e)->Withdraw(1));  // gone
  ASSERT_TRUE((*e)->Withdraw(2));   // pending: leaves the queue
  ASSERT_EQ((*e)->Pending().size(), 1u);
  EXPECT_EQ((*e)->Pending()[0], 3);
  ASSERT_TRUE((*e)->Withdraw(3));  // and its never-fits verdict with it
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8)}, 5));
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8)}, 5));  // the same id again
  ASSERT_TRUE(
      (*e)->Restore(2, {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}}, 5));
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 8000);
  EXPECT_EQ((*e)->Running().size(), 1u);
  EXPECT_EQ((*e)->NumJobs(), 2u);
  CycleResult r = (*e)->Cycle(5);  // the new 3 fits now: no verdict of the old one is left
  EXPECT_EQ(r.stats.rejected, 0);
  EXPECT_EQ(Starts(r), 1);
  EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 16000);
  // Every job once, in the order it was (last) submitted, across withdrawals and compactions.
  auto ids = [&] {
    std::vector<JobId> out;
    for (const JobRecord* j : (*e)->AllJobs()) out.push_back(j->id);
    return out;
  };
  EXPECT_EQ(ids(), (std::vector<JobId>{3, 2}));
  for (JobId id = 10; id < 20; ++id) ASSERT_TRUE((*e)->Apply(SubmitJob{id, Job(8)}, 6));
  for (JobId id : {3, 11, 12, 13, 14, 15, 16, 17}) ASSERT_TRUE((*e)->Withdraw(id));
  ASSERT_TRUE((*e)->Apply(SubmitJob{11, Job(8)}, 7));
  EXPECT_EQ(ids(), (std::vector<JobId>{2, 10, 18, 19, 11}));
  ASSERT_TRUE((*e)->Withdraw(2));
  EXPECT_EQ(ids(), (std::vector<JobId>{10, 18, 19, 11}));
}

// scheduler.colocation: an inference service overlays the GPUs a training job holds whole
// (an overlay budget of one GPU's worth per GPU, least-loaded GPUs first), takes no free
// share, is never a preemption victim, and gives its overlay back when it ends. With
// colocation none the same service needs a GPU of its own.
TEST(Engine, InferenceOverlaysTrainingGpusWithinTheBudget) {
  auto topo = Tree(1);  // 8 GPUs
  auto service = [](int milli) {
    model::JobSpec j = Job(1);
    j.kind = model::JobKind::kInference;
    j.gpu_milli = milli;
    j.inference = {.request_rate = 1, .latency_slo_ms = 1000};
    return j;
  };
  for (std::string mode : {"none", "priority"}) {
    EngineOptions o = *PresetOptions("slurm");
    o.config.colocation = mode;
    auto e = Engine::Create(topo, o);
    ASSERT_TRUE(e) << e.error().message;
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8, 1000)}, 0));
    (void)(*e)->Cycle(0);
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, service(600)}, 1));
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, service(600)}, 1));
    ASSERT_TRUE((*e)->Apply(SubmitJob{4, service(300)}, 1));
    CycleResult r = (*e)->Cycle(1);
    if (mode == "none") {
      EXPECT_EQ(Starts(r), 0) << "no free share and no overlay";
      EXPECT_EQ((*e)->Find(2)->state, JobState::kPending);
      continue;
    }
    ASSERT_EQ(Starts(r), 3);
    EXPECT_EQ(r.stats.colocated, 3);
    for (const auto& d : r.decisions) {
      ASSERT_TRUE(std::get<StartJob>(d).colocated);
    }
    EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 8000);  // training's only
    const int g2 = (*e)->Find(2)->placement[0].gpu, g3 = (*e)->Find(3)->placement[0].gpu;
    const int g4 = (*e)->Find(4)->placement[0].gpu;
    EXPECT_NE(g2, g3);  // 600 + 600 is over one GPU's worth
    EXPECT_NE(g4, g2);  // the least-loaded GPU first
    EXPECT_NE(g4, g3);
    EXPECT_EQ((*e)->OverlayMilli(g2), 600);
    EXPECT_EQ((*e)->OverlayMilli(g4), 300);
    // A service ends: its overlay is free again; the training job's GPUs never were.
    ASSERT_TRUE((*e)->Apply(JobFinished{2, true, ""}, 10));
    EXPECT_EQ((*e)->OverlayMilli(g2), 0);
    EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 8000);
    // Training ends: the services stay where they are, and the GPUs are free for others.
    ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 20));
    EXPECT_EQ((*e)->State().AllocatedGpuMilli(), 0);
    EXPECT_EQ((*e)->OverlayMilli(g3), 600);
    EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
  }
}

// Topology upgrade: job 3 (8 GPUs, `job3_s` long) has to take a split placement (two half
// nodes, predicted to run at half speed) at t=2; job 1 ends at t=10, and the returned cycle
// may move job 3 to the whole node that frees.
struct SplitStart {
  std::unique_ptr<Engine> engine;
  CycleResult at_10;
};
SplitStart SplitJobThenANodeFrees(const model::Topology& topo, double job3_s,
                                  int64_t restart_s = 60, double checkpoint_s = 0) {
  EngineOptions o = *PresetOptions("slurm");
  o.config.restart_overhead_s = restart_s;
  if (checkpoint_s > 0) {
    o.checkpoint_write_s = [checkpoint_s](const model::JobSpec&,
                                          std::span<const placement::RankSlot>) {
      return checkpoint_s;
    };
  }
  o.placement_small = "spread";  // the two small jobs land on different nodes
  o.small_job_max_gpus = 4;
  o.compact_max_wait_s = 1;  // wait one second for a compact placement, then take a split one
  o.compact_wait_ratio = 0;
  o.placement_slowdown = [&](const model::JobSpec&, std::span<const placement::RankSlot> ranks) {
    return ranks.front().node == ranks.back().node ? 1.0 : 2.0;
  };
  auto e = Engine::Create(topo, o);
  if (!e) {
    ADD_FAILURE() << e.error().message;
    return {};
  }
  auto half = [](double duration_s) {  // one node, four GPUs
    model::JobSpec j = Job(0, duration_s);
    j.nodes = 1;
    j.gpus_per_node = 4;
    return j;
  };
  EXPECT_TRUE((*e)->Apply(SubmitJob{1, half(10)}, 0));
  EXPECT_TRUE((*e)->Apply(SubmitJob{2, half(1000)}, 0));
  EXPECT_EQ(Starts((*e)->Cycle(0)), 2);
  EXPECT_NE((*e)->Find(1)->placement[0].node, (*e)->Find(2)->placement[0].node);
  EXPECT_TRUE((*e)->Apply(SubmitJob{3, Job(8, job3_s)}, 0));
  CycleResult r = (*e)->Cycle(0);
  EXPECT_EQ(r.stats.held_for_compact, 1);  // waits for a whole node first
  EXPECT_EQ(Starts((*e)->Cycle(2)), 1);
  if ((*e)->Find(3) == nullptr || (*e)->Find(3)->state != JobState::kRunning) {
    ADD_FAILURE() << "job 3 did not start split";
    return {};
  }
  EXPECT_DOUBLE_EQ((*e)->Find(3)->run_slowdown, 2.0);
  EXPECT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 10));
  r = (*e)->Cycle(10);
  return {std::move(*e), std::move(r)};
}

// The move pays: the predicted time it saves (its remaining run at half speed) is far above
// the restart.
TEST(Engine, SplitJobMovesToACompactPlacementWhenOneFrees) {
  auto topo = Tree(2);  // 2 nodes x 8 GPUs
  auto [e, r] = SplitJobThenANodeFrees(topo, 100000);
  ASSERT_NE(e, nullptr);
  // Job 1 ends: its node has 8 free GPUs once job 3 leaves its half: job 3 moves there.
  ASSERT_EQ(r.stats.upgraded, 1);
  ASSERT_EQ(r.decisions.size(), 1u);
  const auto* m = std::get_if<MigrateJob>(&r.decisions[0]);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->id, 3);
  ASSERT_EQ(m->ranks.size(), 8u);
  EXPECT_EQ(m->ranks.front().node, m->ranks.back().node);
  // Said as what the move buys (the server shows it), not as room for waiting work.
  EXPECT_NE(m->reason.find("predicted to run 100% slower where it is"), std::string::npos)
      << m->reason;
  EXPECT_NE(m->reason.find("saves 1666 min"), std::string::npos) << m->reason;
  const JobRecord* j3 = e->Find(3);
  EXPECT_EQ(j3->migrations, 1);
  EXPECT_DOUBLE_EQ(j3->run_slowdown, 1.0);
  EXPECT_NEAR(j3->progress, 8.0 / (2 * 100000), 1e-12);  // 8 s at half speed
  EXPECT_EQ(e->State().AllocatedGpuMilli(), 12000);      // jobs 2 and 3, nothing held twice
  // Already compact: nothing more to do.
  EXPECT_EQ(e->Cycle(11).stats.upgraded, 0);
}

// A move is priced against what it costs the job: the checkpoint it writes first
// (EngineOptions::checkpoint_write_s) and the restart pause (scheduler.restart_overhead). At
// t=10 job 3 has done 4 s of its work, so at half speed the move saves its run left, the
// estimate less 4 s: 70 s of a 74 s job beats a 60 s restart but not an 80 s one, nor 60 s
// plus a 20 s checkpoint, but 40 s plus 20 s; 58 s of a 62 s job does not beat 60 s (its whole
// estimate would); any saving beats a free restart with nothing to write.
TEST(Engine, AMoveHappensOnlyWhereItSavesMoreThanTheRestart) {
  auto topo = Tree(2);
  struct Case {
    double job3_s;
    int64_t restart_s;
    double checkpoint_s;
    bool moves;
  };
  for (const Case& c : {Case{74, 60, 0, true}, Case{74, 80, 0, false}, Case{74, 60, 20, false},
                        Case{74, 40, 20, true}, Case{62, 60, 0, false}, Case{54, 60, 0, false},
                        Case{54, 0, 0, true}}) {
    auto [e, r] = SplitJobThenANodeFrees(topo, c.job3_s, c.restart_s, c.checkpoint_s);
    ASSERT_NE(e, nullptr);
    const std::string what = std::to_string(c.job3_s) + " s job, restart " +
                             std::to_string(c.restart_s) + " s, checkpoint " +
                             std::to_string(c.checkpoint_s) + " s";
    EXPECT_EQ(r.stats.upgraded, c.moves ? 1 : 0) << what;
    EXPECT_EQ(r.decisions.size(), c.moves ? 1u : 0u) << what;
    EXPECT_EQ(e->Find(3)->run_slowdown, c.moves ? 1.0 : 2.0) << what;
  }
}

TEST(Policies, NamesNoOneRegisteredAreRefusedListingTheRegisteredOnes) {
  // This test does not link the policy library: the engine knows none of its names, and
  // refuses them, never replacing one by another policy.
  EngineOptions o = *PresetOptions("tianshu");
  o.policies.order = "fair-share";
  auto topo = Tree(2);
  auto e = Engine::Create(topo, o);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("unknown ordering policy 'fair-share'; known: fifo, las, "
                                   "priority"),
            std::string::npos)
      << e.error().message;
  EXPECT_FALSE(PresetOptions("yarn"));
}

TEST(Policies, ConfigKeysNameThePolicies) {
  model::EngineConfig c;
  auto d = OptionsFromConfig(c);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->policies.order, "las");
  EXPECT_EQ(d->policies.preemption, "las");
  EXPECT_EQ(d->policies.elastic, "none");
  EXPECT_DOUBLE_EQ(d->compact_max_wait_s, 12 * 3600);
  c.order = "fifo";
  c.backfill = "greedy";
  c.compact_wait_s = 0;
  auto o = OptionsFromConfig(c);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->policies.order, "fifo");
  EXPECT_EQ(o->policies.preemption, "priority");  // nothing bound to fifo
  EXPECT_EQ(o->policies.backfill, "greedy");
  EXPECT_DOUBLE_EQ(o->compact_max_wait_s, 0);
  EXPECT_DOUBLE_EQ(o->compact_wait_ratio, 0);
  c.preemption = false;
  EXPECT_EQ(OptionsFromConfig(c)->policies.preemption, "none");
}

// The switches turn on what a library bound to them; with nothing bound (this test does not
// link the policy library) they are refused, naming the key; a binding is made once.
TEST(Policies, ConfigSwitchesSelectWhatALibraryBound) {
  model::EngineConfig c;
  c.elastic_scaling = true;
  auto refused = OptionsFromConfig(c);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("task_scheduler.elastic_scaling"), std::string::npos);
  c.elastic_scaling = false;
  c.migration = true;
  ASSERT_FALSE(OptionsFromConfig(c));
  ASSERT_TRUE(BindElasticScaling("test-elastic"));
  ASSERT_TRUE(BindElasticScaling("test-elastic"));  // the same again: a no-op
  EXPECT_FALSE(BindElasticScaling("other"));
  ASSERT_TRUE(BindMigration("test-migration"));
  ASSERT_TRUE(BindPreemptionToOrder("fifo-ish", "test-preemption"));
  EXPECT_FALSE(BindPreemptionToOrder("las", "other"));  // the engine's own pair
  c.elastic_scaling = true;
  c.order = "fifo-ish";  // OptionsFromConfig checks only registered names of orders...
  auto o = OptionsFromConfig(c);
  ASSERT_FALSE(o);  // ...so an unregistered one is refused before the binding is read
  c.order = "fifo";
  o = OptionsFromConfig(c);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->policies.elastic, "test-elastic");
  EXPECT_EQ(o->policies.migration, "test-migration");
  EXPECT_EQ(BoundPreemption("fifo-ish"), "test-preemption");
  EXPECT_EQ(BoundPreemption("fifo"), "priority");
}

// Two nodes half used: an 8-GPU job could only be split 4 + 4. It waits for a whole node
// (nothing starts), takes one as soon as one frees, and after its wait limit takes the split.
TEST(Engine, WaitsForACompactPlacementUpToItsLimit) {
  auto topo = Tree(2);
  for (bool free_a_node : {true, false}) {
    EngineOptions o = *PresetOptions("slurm");
    o.compact_max_wait_s = 600;
    auto e = Engine::Create(topo, o);
    ASSERT_TRUE(e) << e.error().message;
    for (int node : {0, 1}) {  // one 4-GPU job on each node
      ASSERT_TRUE((*e)->Apply(SubmitJob{node + 1, Job(4, 10000)}, 0));
      std::vector<placement::RankSlot> ranks;
      for (int g = 0; g < 4; ++g) ranks.push_back({.node = node, .gpu = node * 8 + g});
      ASSERT_TRUE((*e)->Restore(node + 1, ranks, 0));
    }
    ASSERT_EQ((*e)->State().FreeWholeGpus(0), 4);
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 1000)}, 10));
    CycleResult held = (*e)->Cycle(10);
    EXPECT_EQ(Starts(held), 0);
    EXPECT_EQ(held.stats.held_for_compact, 1);
    EXPECT_EQ((*e)->Find(3)->state, JobState::kPending);
    if (free_a_node) {
      ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 100));
      ASSERT_EQ(Starts((*e)->Cycle(100)), 1);
      const auto& ranks = (*e)->Find(3)->placement;
      ASSERT_EQ(ranks.size(), 8u);
      for (const auto& r : ranks) EXPECT_EQ(r.node, ranks.front().node);
    } else {
      EXPECT_EQ(Starts((*e)->Cycle(300)), 0);
      ASSERT_EQ(Starts((*e)->Cycle(611)), 1);  // 601 s after it was submitted
      EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
    }
  }
}

// A job's topology.leaves is a requirement: with one node free under each leaf, a 16-GPU job
// asking for the fewest leaves waits (a job without the bound starts spread at once) and
// starts under one leaf once one frees.
TEST(Engine, ALeafBoundJobWaitsInsteadOfSpreading) {
  auto topo = Tree(4);  // leaf 0: nodes 0-1, leaf 1: nodes 2-3
  for (bool bound : {true, false}) {
    auto e = Engine::Create(topo, *PresetOptions("mainstream"));
    ASSERT_TRUE(e) << e.error().message;
    RunOnNode(**e, 1, 0, 100);
    RunOnNode(**e, 2, 2, 1000);
    model::JobSpec job = Job(16, 500);
    if (bound) job.max_leaves = model::kFewestLeaves;
    ASSERT_TRUE((*e)->Apply(SubmitJob{3, job}, 1));
    (void)(*e)->Cycle(1);
    auto leaves = [&] {
      std::set<int> l;
      for (const auto& slot : (*e)->Find(3)->placement) l.insert(topo.nodes[slot.node].leaf);
      return l;
    };
    if (!bound) {
      ASSERT_EQ((*e)->Find(3)->state, JobState::kRunning);
      EXPECT_EQ(leaves().size(), 2u);
      continue;
    }
    EXPECT_EQ((*e)->Find(3)->state, JobState::kPending);
    ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 100));
    (void)(*e)->Cycle(100);
    ASSERT_EQ((*e)->Find(3)->state, JobState::kRunning);
    EXPECT_EQ(leaves(), (std::set<int>{topo.nodes[0].leaf}));
  }
}

// A bound no idle cluster meets is refused at the first cycle, even while the job's count
// does not fit (it would otherwise hold a FIFO queue until GPUs free), and what is behind it
// runs.
TEST(Engine, ALeafBoundNoLeafCanMeetIsRefusedAtOnce) {
  auto topo = Tree(4);  // two leaves of 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("mainstream"));
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 1000)}, 0));
  ASSERT_EQ(Starts((*e)->Cycle(0)), 1);
  model::JobSpec never = Job(24, 100);
  never.max_leaves = 1;
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, never}, 1));
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 100)}, 2));
  CycleResult r = (*e)->Cycle(2);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kFailed);
  EXPECT_NE((*e)->Find(2)->reason.find("topology.leaves"), std::string::npos)
      << (*e)->Find(2)->reason;
  EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
  // The pod modes place pods without the bound, and refuse nothing for it.
  auto pods = Engine::Create(topo, *PresetOptions("kube-default"));
  ASSERT_TRUE(pods) << pods.error().message;
  ASSERT_TRUE((*pods)->Apply(SubmitJob{2, never}, 0));
  (void)(*pods)->Cycle(0);
  EXPECT_EQ((*pods)->Find(2)->state, JobState::kRunning);
}

// Under the fifo preset (yarn: a multi-node gang under one leaf), a gang no leaf could hold is
// refused at submission: it neither waits for ever nor holds the FIFO queue until enough GPUs
// are free (the job behind it starts while a job runs).
TEST(Engine, AGangYarnCouldNeverPlaceIsRefusedAtSubmission) {
  auto topo = Tree(4);  // two leaves of 16 GPUs
  auto e = Engine::Create(topo, *PresetOptions("fifo"));
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 1000)}, 0));
  ASSERT_EQ(Starts((*e)->Cycle(0)), 1);
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(24, 100)}, 1));  // 16 GPUs free, no leaf of 24
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(8, 100)}, 2));
  (void)(*e)->Cycle(2);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kFailed);
  EXPECT_NE((*e)->Find(2)->reason.find("largest holds 16 of its 24 ranks"), std::string::npos)
      << (*e)->Find(2)->reason;
  EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
  // A gang one leaf holds is not refused: it waits for its leaf.
  ASSERT_TRUE((*e)->Apply(SubmitJob{4, Job(16, 100)}, 3));
  (void)(*e)->Cycle(3);
  EXPECT_EQ((*e)->Find(4)->state, JobState::kPending);
}

// Preempting for a job with a leaf bound evicts only the victims whose nodes it takes: the
// first victim frees GPUs under the wrong leaf, the second the leaf it gets, and the first
// keeps running.
TEST(Engine, PreemptionForALeafBoundJobSparesVictimsItDoesNotUse) {
  auto topo = Tree(4);  // leaf 0: nodes 0-1, leaf 1: nodes 2-3
  auto e = Engine::Create(topo, *PresetOptions("tiresias"));
  ASSERT_TRUE(e) << e.error().message;
  RunOnNode(**e, 1, 3, 100000, /*priority=*/5);  // a higher class: never a victim
  RunOnNode(**e, 3, 0, 100000);
  ASSERT_EQ(Starts((*e)->Cycle(0)), 0);
  RunOnNode(**e, 2, 2, 100000, 0, /*at=*/5);  // the most recently started of equals: first victim
  ASSERT_EQ(Starts((*e)->Cycle(5)), 0);
  model::JobSpec bound = Job(16, 100, /*priority=*/1);
  bound.max_leaves = 1;
  ASSERT_TRUE((*e)->Apply(SubmitJob{4, bound}, 10));
  CycleResult r = (*e)->Cycle(10);
  ASSERT_EQ((*e)->Find(4)->state, JobState::kRunning);
  std::set<int> leaves;
  for (const auto& slot : (*e)->Find(4)->placement) leaves.insert(topo.nodes[slot.node].leaf);
  EXPECT_EQ(leaves.size(), 1u);
  EXPECT_EQ(r.stats.preempted, 1);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
  EXPECT_NE((*e)->Find(3)->state, JobState::kRunning);
}

// A blocked head with a leaf bound holds the nodes of the leaf it will get, also when its
// count is free now but split over leaves: job 5 then backfills beside that leaf, and the
// head starts when the leaf frees. (With a count reservation job 5 waited on idle GPUs: the
// count's shadow time is now, and no GPU is spare.)
TEST(Engine, ABlockedLeafBoundHeadHoldsTheLeafItWillGet) {
  auto topo = Tree(4);  // leaf 0: nodes 0-1, leaf 1: nodes 2-3
  auto e = Engine::Create(topo, *PresetOptions("slurm"));
  ASSERT_TRUE(e) << e.error().message;
  RunOnNode(**e, 1, 0, 200);
  RunOnNode(**e, 2, 2, 100);
  RunOnNode(**e, 3, 3, 1000);
  model::JobSpec head = Job(16, 100);
  head.max_leaves = model::kFewestLeaves;
  ASSERT_TRUE((*e)->Apply(SubmitJob{4, head}, 1));
  ASSERT_TRUE((*e)->Apply(SubmitJob{5, Job(8, 5000)}, 2));
  (void)(*e)->Cycle(2);
  EXPECT_EQ((*e)->Find(5)->state, JobState::kPending);  // would end after the head's start
  ASSERT_TRUE((*e)->Apply(JobFinished{2, true, ""}, 100));
  CycleResult r = (*e)->Cycle(100);  // nodes 1 and 2 free: the count, not a leaf
  EXPECT_TRUE(r.stats.head_blocked);
  ASSERT_EQ((*e)->Find(5)->state, JobState::kRunning);
  EXPECT_EQ((*e)->Find(5)->placement.front().node, 2);
  ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 200));
  (void)(*e)->Cycle(200);
  ASSERT_EQ((*e)->Find(4)->state, JobState::kRunning);
  for (const auto& slot : (*e)->Find(4)->placement)
    EXPECT_EQ(topo.nodes[slot.node].leaf, topo.nodes[0].leaf);
}

// The head's start is the earliest end that frees a leaf for it, not the last end of the batch
// the search took: leaf 0 frees at 200 (job 3), the batch that found it also held job 4's end
// at 5000, and job 7 (4,000 s, ending before 5000) must not take leaf 0.
TEST(Engine, ALeafBoundHeadsStartIsTheEarliestEndThatFreesALeaf) {
  auto topo = Tree(6);  // leaves: nodes 0-1, 2-3, 4-5
  auto e = Engine::Create(topo, *PresetOptions("slurm"));
  ASSERT_TRUE(e) << e.error().message;
  RunOnNode(**e, 1, 2, 110);
  RunOnNode(**e, 2, 4, 160);
  RunOnNode(**e, 3, 1, 200);
  RunOnNode(**e, 4, 3, 5000);
  RunOnNode(**e, 5, 5, 6000);  // node 0 is free
  model::JobSpec head = Job(16, 100);
  head.max_leaves = model::kFewestLeaves;
  ASSERT_TRUE((*e)->Apply(SubmitJob{6, head}, 1));
  ASSERT_TRUE((*e)->Apply(SubmitJob{7, Job(8, 4000)}, 2));
  (void)(*e)->Cycle(2);
  EXPECT_EQ((*e)->Find(7)->state, JobState::kPending);
  for (auto [id, at] : {std::pair{1, 110.0}, std::pair{2, 160.0}, std::pair{3, 200.0}}) {
    ASSERT_TRUE((*e)->Apply(JobFinished{id, true, ""}, at));
    (void)(*e)->Cycle(at);
  }
  ASSERT_EQ((*e)->Find(6)->state, JobState::kRunning);
  for (const auto& slot : (*e)->Find(6)->placement) {
    EXPECT_EQ(topo.nodes[slot.node].leaf, topo.nodes[0].leaf);
  }
}

// EASY backfill plans a blocked gang on the nodes it will get (as Slurm's backfill does), not
// on a count: a long job behind it goes beside those nodes, so the gang starts on one leaf at
// its shadow time. With a count reservation the long job took a node of that leaf and the gang
// had to spread over both.
TEST(Engine, BackfillKeepsOffTheNodesPlannedForABlockedGang) {
  model::FatTreeOptions tree;
  tree.nodes = 8;
  tree.nodes_per_leaf = 4;  // leaf 0: nodes 0-3, leaf 1: nodes 4-7
  auto topo = *model::GenerateFatTree(tree);
  auto e = Engine::Create(topo, *PresetOptions("slurm"));
  ASSERT_TRUE(e) << e.error().message;
  auto restore = [&](JobId id, std::vector<int> nodes, double duration_s) {
    ASSERT_TRUE((*e)->Apply(SubmitJob{id, Job(static_cast<int>(nodes.size()) * 8, duration_s)}, 0));
    std::vector<placement::RankSlot> ranks;
    for (int n : nodes) {
      for (int g = 0; g < 8; ++g) ranks.push_back({.node = n, .gpu = n * 8 + g});
    }
    ASSERT_TRUE((*e)->Restore(id, ranks, 0));
  };
  restore(1, {0, 1, 2}, 100);  // leaf 0 frees at 100 but for node 3, free now
  restore(2, {4}, 1000);
  restore(3, {5}, 1000);
  restore(4, {6}, 1000);                                     // free now: nodes 3 and 7
  ASSERT_TRUE((*e)->Apply(SubmitJob{5, Job(32, 1000)}, 1));  // head: 4 nodes, blocked until 100
  ASSERT_TRUE((*e)->Apply(SubmitJob{6, Job(8, 5000)}, 2));   // runs past 100: backfills beside
  CycleResult r = (*e)->Cycle(2);
  EXPECT_TRUE(r.stats.head_blocked);
  ASSERT_EQ((*e)->Find(6)->state, JobState::kRunning);
  EXPECT_EQ((*e)->Find(6)->placement.front().node, 7);
  ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 100));
  (void)(*e)->Cycle(100);
  ASSERT_EQ((*e)->Find(5)->state, JobState::kRunning);
  std::set<int> leaves;
  for (const auto& slot : (*e)->Find(5)->placement) leaves.insert(topo.nodes[slot.node].leaf);
  EXPECT_EQ(leaves.size(), 1u);
}

// 2D-LAS honours priority classes: a pending job never evicts a running job of a higher class
// however much service that job has had, and evicts a lower class whatever its service.
TEST(Policies, LasPreemptionRespectsPriorityClasses) {
  auto topo = Tree(2);  // 16 GPUs
  EngineOptions o = *PresetOptions("tiresias");
  auto e = Engine::Create(topo, o);
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(16, 100000, /*priority=*/5)}, 0));
  ASSERT_EQ(Starts((*e)->Cycle(0)), 1);
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(16, 100)}, 20000));  // 16 x 20000 GPU-s attained
  CycleResult r = (*e)->Cycle(20000);
  EXPECT_EQ(r.stats.preempted, 0);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kRunning);
  ASSERT_TRUE((*e)->Apply(CancelJob{1}, 20001));
  ASSERT_EQ(Starts((*e)->Cycle(20001)), 1);  // job 2 runs, no service to speak of
  ASSERT_TRUE((*e)->Apply(SubmitJob{3, Job(16, 100, /*priority=*/1)}, 20002));
  r = (*e)->Cycle(20002);
  EXPECT_EQ(r.stats.preempted, 1);
  EXPECT_EQ((*e)->Find(3)->state, JobState::kRunning);
}

TEST(Policies, RegisteredPluginIsUsed) {
  class Reverse final : public OrderPolicy {
   public:
    std::string_view Name() const override { return "reverse"; }
    void Order(const CycleView&, std::vector<JobId>* q) const override {
      std::sort(q->begin(), q->end(), std::greater<>());
    }
  };
  ASSERT_TRUE(RegisterOrderPolicy("reverse", [](const EngineOptions&) {
    return Result<std::unique_ptr<OrderPolicy>>(std::make_unique<Reverse>());
  }));
  EngineOptions o = *PresetOptions("mainstream");
  o.policies.order = "reverse";
  auto topo = Tree(1);
  auto e = Engine::Create(topo, o);
  ASSERT_TRUE(e);
  ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(8)}, 0));
  ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(8)}, 0));
  (void)(*e)->Cycle(0);
  EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning);
  EXPECT_EQ((*e)->Find(1)->state, JobState::kPending);
}

// The keys map to the engine's options; a strategy name is checked against the registry, with
// its place, and `same` and `auto` mean what the docs say.
TEST(EngineOptions, BindingAndStrategiesBySizeFromTheConfiguration) {
  auto v = model::ValidateText("k.yaml",
                               "scheduler:\n  algorithm: genetic\n  binding: pod-each\n"
                               "  small_job_algorithm: same\n  long_queue_length: 10\n");
  ASSERT_TRUE(v.diagnostics.empty());
  auto o = OptionsFromConfig(std::get<model::EngineConfig>(v.document->value));
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->binding, Binding::kPodEach);
  EXPECT_EQ(o->placement_small, "");                // same: scheduler.algorithm
  EXPECT_EQ(o->placement_large_queue, "topology");  // auto, under a batch search
  EXPECT_EQ(o->large_queue_threshold, 10);
  auto defaults = OptionsFromConfig(model::EngineConfig{});
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->binding, Binding::kJob);
  EXPECT_EQ(defaults->placement_small, "topology");
  auto typo = model::ValidateText("t.yaml", "scheduler:\n  small_job_algorithm: best-fitt\n");
  ASSERT_TRUE(typo.diagnostics.empty());
  auto refused = OptionsFromConfig(std::get<model::EngineConfig>(typo.document->value));
  ASSERT_FALSE(refused);
  EXPECT_NE(
      refused.error().message.find("t.yaml:2:24: scheduler.small_job_algorithm: unknown "
                                   "placement strategy 'best-fitt' (did you mean 'best-fit'?)"),
      std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace tianshu::engine
