// A job's life in the engine: restores, learned runtimes, failures, withdrawal, inference
// overlays and moves to a compact placement.
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

}  // namespace
}  // namespace tianshu::engine
