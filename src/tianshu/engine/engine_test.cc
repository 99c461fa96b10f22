// The cycle through its public interface, on a small generated fat tree: what starts, the
// queue order (FIFO, batches, 2D-LAS) and LAS preemption. Helpers: engine_test_util.h.
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

// A batch (one array, one release) is queued smallest first; jobs handed in alone keep the
// order of their ids at the same instant, and an earlier submission stays ahead of any batch.
TEST(Engine, ABatchIsQueuedSmallestFirstBehindEarlierSubmissions) {
  auto topo = Tree(4);  // 32 GPUs
  for (std::string preset : {"mainstream", "slurm", "tiresias", "tianshu"}) {
    auto e = Engine::Create(topo, *PresetOptions(preset));
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(32, 100)}, 0));
    (void)(*e)->Cycle(0);                                     // the cluster is full until 100
    ASSERT_TRUE((*e)->Apply(SubmitJob{2, Job(16, 100)}, 5));  // earlier than the batch
    for (auto [id, gpus] : {std::pair{3, 32}, {4, 8}, {5, 16}, {6, 8}}) {
      ASSERT_TRUE((*e)->Apply(SubmitJob{.id = id, .spec = Job(gpus, 100), .batch = true}, 10));
    }
    ASSERT_TRUE((*e)->Apply(SubmitJob{7, Job(32, 100)}, 10));  // alone, at the same instant
    ASSERT_TRUE((*e)->Apply(SubmitJob{8, Job(24, 100)}, 10));
    std::vector<JobId> want = {2, 7, 8, 4, 6, 5, 3};
    EXPECT_EQ(std::vector<JobId>((*e)->Pending().begin(), (*e)->Pending().end()), want) << preset;
    // Who starts when the cluster frees: 2 (16), then 7 does not fit and, in FIFO, blocks.
    ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 100));
    (void)(*e)->Cycle(100);
    EXPECT_EQ((*e)->Find(2)->state, JobState::kRunning) << preset;
  }
  // The order policies that sort keep the batch's order among equals.
  for (std::string order : {"priority", "las"}) {  // srtf: policy/srtf_test.cc
    model::EngineConfig c;
    c.order = order;
    auto o = OptionsFromConfig(c);
    ASSERT_TRUE(o) << o.error().message;
    auto e = Engine::Create(topo, *o);
    ASSERT_TRUE(e);
    ASSERT_TRUE((*e)->Apply(SubmitJob{1, Job(32, 100)}, 0));
    (void)(*e)->Cycle(0);
    for (auto [id, gpus] : {std::pair{3, 32}, {4, 16}, {5, 8}}) {
      ASSERT_TRUE((*e)->Apply(SubmitJob{.id = id, .spec = Job(gpus, 1000), .batch = true}, 10));
    }
    // A higher class alone (so the classes differ and the orders sort): first whatever the batch.
    ASSERT_TRUE((*e)->Apply(SubmitJob{6, Job(8, 100, /*priority=*/1)}, 10));
    ASSERT_TRUE((*e)->Apply(JobFinished{1, true, ""}, 100));
    // 6 (8), then 5 (8) and 4 (16) fill the cluster; 3 (32) waits. By id, 3 would be the
    // blocked head and 4 and 5, longer than its wait, would not pass it.
    (void)(*e)->Cycle(100);
    for (JobId id : {6, 5, 4}) EXPECT_EQ((*e)->Find(id)->state, JobState::kRunning) << order;
    EXPECT_EQ((*e)->Find(3)->state, JobState::kPending) << order;
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

}  // namespace
}  // namespace tianshu::engine
