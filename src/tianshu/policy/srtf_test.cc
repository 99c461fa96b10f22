// Shortest remaining time first on a real engine: estimates order the queue, progress counts.
#include "tianshu/policy/srtf.h"

#include <gtest/gtest.h>

#include "tianshu/policy/internal/test_util.h"

namespace tianshu::policy {
namespace {

using namespace fixture;  // NOLINT(google-build-using-namespace)
using engine::JobState;
using engine::StartJob;

engine::JobId Started(const engine::CycleResult& r) {
  for (const auto& d : r.decisions) {
    if (const auto* s = std::get_if<StartJob>(&d)) return s->id;
  }
  return -1;
}

// Each job ends 10 s after it starts. Without learned estimates the job with none goes last;
// with them it gets the 10 s the finished 16-GPU jobs took, and goes next.
TEST(Srtf, ShortestEstimateFirstUnknownLast) {
  for (bool learn : {false, true}) {
    SCOPED_TRACE(learn ? "learning" : "not learning");
    auto topo = Tree(2);  // 16 GPUs: one 16-GPU job at a time
    engine::EngineOptions o = Options("srtf");
    o.learn_runtimes = learn;
    auto e = MakeEngine(topo, o);
    ASSERT_TRUE(e);
    Submit(*e, 1, Job(16, 1000), 0);
    Submit(*e, 2, Job(16, 100), 1);
    Submit(*e, 3, Job(16, 0), 2);  // no estimate
    Submit(*e, 4, Job(16, 500), 3);
    std::vector<engine::JobId> order;
    double t = 3;
    for (int i = 0; i < 4; ++i) {
      engine::JobId id = Started(e->Cycle(t));
      ASSERT_GE(id, 0);
      order.push_back(id);
      t += 10;
      ASSERT_TRUE(e->Apply(engine::JobFinished{.id = id}, t));
    }
    EXPECT_EQ(order, learn ? (std::vector<engine::JobId>{2, 3, 4, 1})
                           : (std::vector<engine::JobId>{2, 4, 1, 3}));
  }
}

// Equal estimates: a batch (engine::SubmitJob::batch) goes smallest first, as in the queue.
TEST(Srtf, EqualEstimatesInABatchGoSmallestFirst) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = MakeEngine(topo, Options("srtf"));
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->Apply(engine::SubmitJob{.id = 1, .spec = Job(16, 100), .batch = true}, 0));
  ASSERT_TRUE(e->Apply(engine::SubmitJob{.id = 2, .spec = Job(8, 100), .batch = true}, 0));
  EXPECT_EQ(Started(e->Cycle(0)), 2);
  EXPECT_EQ(e->Find(1)->state, JobState::kPending);
}

TEST(Srtf, RemainingTimeCountsProgress) {
  auto topo = Tree(2);
  auto e = MakeEngine(topo, Options("srtf", "priority"));
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(16, 1000, 0), 0);
  ASSERT_EQ(Started(e->Cycle(0)), 1);
  ASSERT_TRUE(e->Apply(engine::CheckpointDone{.id = 1, .progress = 0.95}, 950));
  Submit(*e, 2, Job(16, 100, 1), 950);  // outranks job 1 and preempts it
  ASSERT_EQ(Started(e->Cycle(950)), 2);
  ASSERT_EQ(e->Find(1)->state, JobState::kPending);
  Submit(*e, 3, Job(16, 200, 0), 951);  // shorter in total than job 1, longer than what is left
  ASSERT_TRUE(e->Apply(engine::JobFinished{.id = 2}, 1050));
  EXPECT_EQ(Started(e->Cycle(1050)), 1);  // 50 s left beats 200 s
  EXPECT_DOUBLE_EQ(RemainingS(*e->Find(3)), 200);
}

// "srtf" preemption: a job evicts a same-class job only when that one has far more time left
// (more than twice, and 30 minutes more); the victim cannot evict back; a lower class always
// yields.
TEST(Srtf, PreemptsOnlyMuchLongerJobsAndNeverBack) {
  auto topo = Tree(2);  // 16 GPUs
  auto e = MakeEngine(topo, Options("srtf", "srtf"));
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(16, 10000), 0);
  ASSERT_EQ(Started(e->Cycle(0)), 1);
  Submit(*e, 2, Job(16, 6000), 100);  // 9,900 s left vs 6,000: not twice
  auto r = e->Cycle(100);
  EXPECT_EQ(Count<engine::StopJob>(r), 0);
  Submit(*e, 3, Job(16, 600), 200);  // 9,800 s left vs 600: evicts job 1
  r = e->Cycle(200);
  EXPECT_EQ(Count<engine::StopJob>(r), 1);
  EXPECT_EQ(Started(r), 3);
  ASSERT_EQ(e->Find(1)->state, JobState::kPending);
  // Job 1 (9,800 s left) cannot take the GPUs back from job 3.
  r = e->Cycle(300);
  EXPECT_EQ(Count<engine::StopJob>(r), 0);
  EXPECT_EQ(e->Find(3)->state, JobState::kRunning);
  // A higher class evicts whatever its remaining time.
  Submit(*e, 4, Job(16, 100000, 1), 400);
  r = e->Cycle(400);
  EXPECT_EQ(Started(r), 4);
  EXPECT_EQ(e->Find(3)->state, JobState::kPending);
}

}  // namespace
}  // namespace tianshu::policy
