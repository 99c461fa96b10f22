// Weighted fair share across hierarchical queues with quotas, and queue reclaim, on a real
// engine over a small fat tree.
#include "tianshu/policy/queues.h"

#include <gtest/gtest.h>

#include <map>

#include "tianshu/model/load.h"
#include "tianshu/policy/internal/test_util.h"

namespace tianshu::policy {
namespace {

using namespace fixture;  // NOLINT(google-build-using-namespace)
using engine::JobState;
using engine::StartJob;
using engine::StopJob;

// The queue tree of the engines the next QOptions make (the engine configuration's `queues:`).
std::vector<QueueSpec> g_queues;
void UseQueues(std::vector<QueueSpec> queues) { g_queues = std::move(queues); }
template <typename... Args>
engine::EngineOptions QOptions(Args&&... args) {
  engine::EngineOptions o = Options(std::forward<Args>(args)...);
  o.config.queues = g_queues;
  return o;
}

std::map<std::string, int> RunningByQueue(const engine::Engine& e) {
  std::map<std::string, int> n;
  for (engine::JobId id : e.Running()) ++n[e.Find(id)->spec.queue];
  return n;
}

TEST(FairShare, SplitsCapacityByWeight) {
  UseQueues({{.name = "a", .weight = 3}, {.name = "b", .weight = 1}});
  auto topo = Tree(4);  // 32 GPUs: four 8-GPU jobs
  auto e = MakeEngine(topo, QOptions("fair-share"));
  ASSERT_TRUE(e);
  // b submits first: FIFO would give b everything.
  for (int i = 0; i < 4; ++i) Submit(*e, 10 + i, Job(8, 1000, 0, "b"), 0);
  for (int i = 0; i < 4; ++i) Submit(*e, 20 + i, Job(8, 1000, 0, "a"), 1);
  auto r = e->Cycle(1);
  EXPECT_EQ(Count<StartJob>(r), 4);
  auto by = RunningByQueue(*e);
  EXPECT_EQ(by["a"], 3);
  EXPECT_EQ(by["b"], 1);
}

TEST(FairShare, IsHierarchical) {
  // org1 {a, b} and org2 share the root equally; a and b share org1 equally.
  UseQueues({{.name = "org1"},
             {.name = "org2"},
             {.name = "a", .parent = "org1"},
             {.name = "b", .parent = "org1"}});
  auto topo = Tree(4);
  auto e = MakeEngine(topo, QOptions("fair-share"));
  ASSERT_TRUE(e);
  int id = 1;
  for (const char* q : {"a", "a", "a", "a", "b", "b", "b", "b", "org2", "org2", "org2"}) {
    Submit(*e, id, Job(8, 1000, 0, q), id);
    ++id;
  }
  (void)e->Cycle(20);
  auto by = RunningByQueue(*e);
  EXPECT_EQ(by["org2"], 2);
  EXPECT_EQ(by["a"], 1);
  EXPECT_EQ(by["b"], 1);
}

TEST(FairShare, QueueThatMayNotBorrowStopsAtItsQuota) {
  UseQueues({{.name = "capped", .quota_gpus = 8, .borrow = false}});
  auto topo = Tree(4);
  auto e = MakeEngine(topo, QOptions("fair-share"));
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(8, 1000, 0, "capped"), 0);
  Submit(*e, 2, Job(8, 1000, 0, "capped"), 0);
  auto r = e->Cycle(0);
  EXPECT_EQ(Count<StartJob>(r), 1);  // 24 GPUs idle, but the queue is at its quota
  r = e->Cycle(10);
  EXPECT_EQ(Count<StartJob>(r), 0);
  EXPECT_EQ(e->Find(2)->state, JobState::kPending);
  ASSERT_TRUE(e->Apply(engine::JobFinished{.id = 1}, 20));
  r = e->Cycle(20);
  EXPECT_EQ(Count<StartJob>(r), 1);
  EXPECT_EQ(e->Find(2)->state, JobState::kRunning);
}

TEST(QueueReclaim, TakesBackBorrowedQuotaWholeGangsAndNoCycle) {
  UseQueues({{.name = "a", .quota_gpus = 16}, {.name = "b", .quota_gpus = 16}});
  auto topo = Tree(4);
  auto e = MakeEngine(topo, QOptions("fair-share", "queue-reclaim"));
  ASSERT_TRUE(e);
  // a is idle: b borrows its quota and fills the cluster.
  for (int i = 1; i <= 4; ++i) Submit(*e, i, Job(8, 1000, 0, "b"), 0);
  auto r = e->Cycle(0);
  ASSERT_EQ(Count<StartJob>(r), 4);
  // a comes back for its 16 GPUs.
  Submit(*e, 10, Job(16, 1000, 0, "a"), 10);
  r = e->Cycle(10);
  EXPECT_EQ(Count<StopJob>(r), 2);
  for (const auto& d : r.decisions) {
    if (const auto* s = std::get_if<StopJob>(&d)) {
      EXPECT_EQ(e->Find(s->id)->spec.queue, "b");
      EXPECT_EQ(s->reason, engine::StopReason::kPreempted);
      EXPECT_TRUE(s->checkpoint_first);
      EXPECT_TRUE(s->requeued);
    }
  }
  EXPECT_EQ(e->Find(10)->state, JobState::kRunning);
  auto by = RunningByQueue(*e);
  EXPECT_EQ(by["a"], 1);
  EXPECT_EQ(by["b"], 2);  // b keeps exactly its quota
  EXPECT_EQ(e->State().AllocatedGpuMilli(), 32000);
  // The evicted b jobs wait: b is at its quota, so they cannot reclaim from a.
  for (double t : {20.0, 30.0}) {
    r = e->Cycle(t);
    EXPECT_EQ(Count<StopJob>(r), 0);
    EXPECT_EQ(Count<StartJob>(r), 0);
  }
  EXPECT_EQ(e->Find(10)->state, JobState::kRunning);
}

TEST(QueueReclaim, NeverBeyondTheEvictorsQuota) {
  UseQueues({{.name = "a", .quota_gpus = 8}, {.name = "b", .quota_gpus = 8}});
  auto topo = Tree(4);
  auto e = MakeEngine(topo, QOptions("fair-share", "queue-reclaim"));
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(8, 1000, 0, "a"), 0);
  for (int i = 2; i <= 4; ++i) Submit(*e, i, Job(8, 1000, 0, "b"), 0);
  ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 4);
  // a already holds its 8 GPUs: a second job of a would borrow, so it may not reclaim.
  Submit(*e, 5, Job(8, 1000, 0, "a"), 10);
  auto r = e->Cycle(10);
  EXPECT_EQ(Count<StopJob>(r), 0);
  EXPECT_EQ(e->Find(5)->state, JobState::kPending);
}

TEST(QueueReclaim, ReclaimsAcrossTheHierarchy) {
  // org1 (quota 16 = a 8 + b 8) and org2 (quota 16); org2 borrows org1's idle quota.
  UseQueues({{.name = "org1"},
             {.name = "a", .parent = "org1", .quota_gpus = 8},
             {.name = "b", .parent = "org1", .quota_gpus = 8},
             {.name = "org2", .quota_gpus = 16}});
  auto topo = Tree(4);
  auto e = MakeEngine(topo, QOptions("fair-share", "queue-reclaim"));
  ASSERT_TRUE(e);
  for (int i = 1; i <= 4; ++i) Submit(*e, i, Job(8, 1000, 0, "org2"), 0);
  ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 4);
  Submit(*e, 10, Job(8, 1000, 0, "a"), 10);
  auto r = e->Cycle(10);
  EXPECT_EQ(Count<StopJob>(r), 1);
  EXPECT_EQ(e->Find(10)->state, JobState::kRunning);
  Submit(*e, 11, Job(8, 1000, 0, "b"), 20);
  r = e->Cycle(20);
  EXPECT_EQ(Count<StopJob>(r), 1);
  EXPECT_EQ(e->Find(11)->state, JobState::kRunning);
  EXPECT_EQ(RunningByQueue(*e)["org2"], 2);
}

TEST(QueueOptions, RejectsBadTrees) {
  auto bad = [](std::vector<QueueSpec> q) {
    QueueOptions o;
    o.queues = std::move(q);
    return !o.Validate().has_value();
  };
  EXPECT_TRUE(bad({{.name = "a", .parent = "nowhere"}}));
  EXPECT_TRUE(bad({{.name = "a", .parent = "b"}, {.name = "b", .parent = "a"}}));
  EXPECT_TRUE(bad({{.name = "a"}, {.name = "a"}}));
  EXPECT_TRUE(bad({{.name = "a", .weight = 0}}));
  EXPECT_TRUE(
      bad({{.name = "p", .quota_gpus = 8}, {.name = "c", .parent = "p", .quota_gpus = 16}}));
  EXPECT_TRUE(bad({{.name = "a", .borrow = false}}));
  EXPECT_FALSE(
      bad({{.name = "p", .quota_gpus = 16}, {.name = "c", .parent = "p", .quota_gpus = 8}}));
  EXPECT_TRUE(bad({{.name = ""}}));
}

TEST(QueueTree, UnknownQueuesGoToDefaultAndParentsSumChildQuotas) {
  auto t = QueueTree::Make({.queues = {{.name = "org"},
                                       {.name = "a", .parent = "org", .quota_gpus = 8},
                                       {.name = "b", .parent = "org", .quota_gpus = 4}}});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->Spec(t->Find("nope")).name, "default");
  EXPECT_EQ(t->QuotaMilli(t->Find("org")), 12000);
  EXPECT_EQ(t->Path(t->Find("a")).size(), 2u);
}

// The engine configuration's `queues:` section drives fair share and reclaim: a YAML file,
// through OptionsFromConfig, to an engine.
TEST(FairShare, QueuesComeFromTheEngineConfiguration) {
  ASSERT_TRUE(RegisterBuiltinPolicies());  // "fair-share" is a name of this library
  auto v = model::ValidateText("engine.yaml",
                               "kind: engine\n"
                               "scheduler: {order: fair-share, algorithm: first-fit}\n"
                               "queues:\n"
                               "  - {name: capped, quota: 8, borrow: false}\n"
                               "  - {name: open}\n");
  ASSERT_TRUE(v.document) << (v.diagnostics.empty() ? "" : v.diagnostics[0].message);
  const auto& config = std::get<model::EngineConfig>(v.document->value);
  ASSERT_EQ(config.queues.size(), 2u);
  auto o = engine::OptionsFromConfig(config);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->policies.preemption, "queue-reclaim");
  auto topo = Tree(4);
  auto e = MakeEngine(topo, *o);
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(8, 1000, 0, "capped"), 0);
  Submit(*e, 2, Job(8, 1000, 0, "capped"), 0);
  Submit(*e, 3, Job(8, 1000, 0, "open"), 0);
  auto r = e->Cycle(0);
  EXPECT_EQ(Count<StartJob>(r), 2);  // capped stops at its 8 GPUs, open borrows
  EXPECT_EQ(e->Find(2)->state, JobState::kPending);
  EXPECT_EQ(e->Find(3)->state, JobState::kRunning);
}

TEST(Builtin, RegistersOnceAndNamesResolve) {
  ASSERT_TRUE(RegisterBuiltinPolicies());
  ASSERT_TRUE(RegisterBuiltinPolicies());
  engine::EngineOptions o;
  EXPECT_TRUE(engine::MakeOrderPolicy("fair-share", o));
  EXPECT_TRUE(engine::MakeOrderPolicy("srtf", o));
  EXPECT_TRUE(engine::MakePreemptionPolicy("srtf", o));
  EXPECT_TRUE(engine::MakePreemptionPolicy("queue-reclaim", o));
  EXPECT_TRUE(engine::MakeElasticPolicy("elastic", o));
  EXPECT_TRUE(engine::MakeMigrationPolicy("defrag", o));
}

// The configuration's switches select what this library bound to them (the engine names none
// of its plugins).
TEST(Builtin, TheConfigSwitchesSelectThePoliciesThisLibraryBound) {
  ASSERT_TRUE(RegisterBuiltinPolicies());
  model::EngineConfig c;
  c.elastic_scaling = true;
  c.migration = true;
  c.order = "srtf";
  auto o = engine::OptionsFromConfig(c);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->policies.elastic, "elastic");
  EXPECT_EQ(o->policies.migration, "defrag");
  EXPECT_EQ(o->policies.preemption, "srtf");
  c.order = "fair-share";
  EXPECT_EQ(engine::OptionsFromConfig(c)->policies.preemption, "queue-reclaim");
}

}  // namespace
}  // namespace tianshu::policy
