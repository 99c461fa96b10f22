// Elastic scaling on a real engine: grow into idle capacity every scaling interval where the
// cost model predicts a gain, shrink (not below min_nodes) to admit waiting work.
#include "tianshu/policy/elastic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "tianshu/policy/internal/reshape.h"
#include "tianshu/policy/internal/test_util.h"

namespace tianshu::policy {
namespace {

using namespace fixture;  // NOLINT(google-build-using-namespace)
using engine::JobState;
using engine::ResizeJob;
using engine::StartJob;

engine::EngineOptions ElasticEngine(std::string order = "priority") {
  engine::EngineOptions o = Options(std::move(order));
  o.config.elastic_scaling = true;
  o.config.scaling_interval_s = 300;
  o.policies.elastic = "elastic";
  return o;
}

// A 7B LLaMA trained data-parallel on whole 8-GPU nodes, elastic between min and max nodes.
model::JobSpec ElasticJob(int nodes, int min_nodes, int max_nodes, int priority = 0) {
  model::JobSpec j;
  j.model = *model::FindModelProfile("llama2-7b");
  j.nodes = nodes;
  j.gpus_per_node = 8;
  j.elastic = {.enabled = true, .min_nodes = min_nodes, .max_nodes = max_nodes};
  j.priority = priority;
  j.duration_s = 100000;
  return j;
}

int Nodes(const engine::JobRecord& j) {
  std::vector<int> n;
  for (const auto& s : j.placement) {
    if (std::find(n.begin(), n.end(), s.node) == n.end()) n.push_back(s.node);
  }
  return static_cast<int>(n.size());
}

TEST(Elastic, CostModelPredictsAGainFromMoreNodes) {
  auto topo = Tree(4);
  model::JobSpec j = ElasticJob(1, 1, 4);
  std::vector<int> g8(8), g16(16), g32(32);
  std::iota(g8.begin(), g8.end(), 0);
  std::iota(g16.begin(), g16.end(), 0);
  std::iota(g32.begin(), g32.end(), 0);
  const double t8 = internal::PredictThroughput(topo, j, g8, {});
  const double t16 = internal::PredictThroughput(topo, j, g16, {});
  const double t32 = internal::PredictThroughput(topo, j, g32, {});
  EXPECT_GT(t8, 0);
  EXPECT_GT(t16, 1.5 * t8);  // data parallel across nodes: close to linear, never above
  EXPECT_LE(t16, 2.0 * t8 * 1.001);
  EXPECT_GT(t32, t16);
  std::vector<placement::RankSlot> ranks;
  ranks.reserve(g16.size());
  for (int g : g16) ranks.push_back({.node = g / 8, .gpu = g});
  auto plan = ReplanParallelism(topo, j, ranks, {});
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->Gpus(), 16);
  model::JobSpec shapeless;  // no model: assumed linear in GPUs
  EXPECT_DOUBLE_EQ(internal::PredictThroughput(topo, shapeless, g16, {}), 16);
}

// The engine's Cycle returns before the reshape policies when nothing is pending, so this test
// keeps one job pending: a queue that may not borrow, at its quota. Growth leaves that job's
// 8 GPUs unclaimed.
TEST(Elastic, GrowsIntoIdleCapacityEveryIntervalAndLeavesRoomForWaitingWork) {
  engine::EngineOptions o = ElasticEngine("fair-share");
  o.config.queues = {{.name = "capped", .quota_gpus = 8, .borrow = false}};
  auto topo = Tree(6);  // 48 GPUs
  auto e = MakeEngine(topo, o);
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(8, 100000, 0, "capped"), 0);
  Submit(*e, 2, Job(8, 100000, 0, "capped"), 0);  // held back by the quota
  Submit(*e, 3, ElasticJob(1, 1, 8), 0);
  ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 2);
  ASSERT_EQ(e->Find(3)->state, JobState::kRunning);
  EXPECT_EQ(Count<ResizeJob>(e->Cycle(100)), 0);  // before scaling_interval
  auto r = e->Cycle(300);
  ASSERT_EQ(Count<ResizeJob>(r), 1);
  const engine::JobRecord& j = *e->Find(3);
  EXPECT_EQ(Nodes(j), 4);  // 1 + 3 of the 4 idle nodes; one is left for the waiting job
  EXPECT_EQ(j.Gpus(), 32);
  EXPECT_EQ(j.resizes, 1);
  EXPECT_EQ(e->State().AllocatedGpuMilli(), 40000);
  EXPECT_EQ(Count<ResizeJob>(e->Cycle(400)), 0);  // next interval not reached
}

// With nothing pending, the cycle still runs the elastic policy, and the engine asks to be
// woken at the next scaling interval.
TEST(Elastic, GrowsIntoAnIdleClusterWithNothingPending) {
  auto topo = Tree(4);
  auto e = MakeEngine(topo, ElasticEngine());
  ASSERT_TRUE(e);
  Submit(*e, 1, ElasticJob(1, 1, 4), 0);
  ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 1);
  ASSERT_TRUE(e->Pending().empty());
  auto wake = e->NextWakeup(0);
  ASSERT_TRUE(wake);
  EXPECT_DOUBLE_EQ(*wake, 300);
  auto r = e->Cycle(300);
  EXPECT_EQ(Count<ResizeJob>(r), 1);
  EXPECT_EQ(Nodes(*e->Find(1)), 4);
  // Its service: 8 GPUs for 300 s, then 32 (the resize charges the run at the old size first).
  EXPECT_DOUBLE_EQ(engine::ServiceAt(*e->Find(1), 400), 8 * 300 + 32 * 100);
}

// A job's leaf bound (topology.leaves) holds for what it grows to: bound to one leaf of two
// nodes, it grows to the other node of its leaf only; unbound, it takes all four.
TEST(Elastic, GrowsOnlyWithinItsLeafBound) {
  auto topo = Tree(4);  // 2 nodes per leaf
  for (int bound : {1, 0}) {
    auto e = MakeEngine(topo, ElasticEngine());
    ASSERT_TRUE(e);
    model::JobSpec j = ElasticJob(1, 1, 4);
    j.max_leaves = bound;
    Submit(*e, 1, j, 0);
    ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 1);
    ASSERT_EQ(Count<ResizeJob>(e->Cycle(300)), 1) << bound;
    EXPECT_EQ(Nodes(*e->Find(1)), bound == 1 ? 2 : 4);
    std::set<int> leaves;
    for (const auto& s : e->Find(1)->placement) leaves.insert(topo.nodes[s.node].leaf);
    EXPECT_EQ(leaves.size(), bound == 1 ? 1u : 2u);
  }
}

TEST(Elastic, NoGrowWithoutPredictedGain) {
  engine::EngineOptions o = ElasticEngine("fair-share");
  o.config.queues = {{.name = "capped", .quota_gpus = 8, .borrow = false}};
  // plugins: {elastic: {min_throughput_gain: 10}}: asks for 11x, more nodes cannot deliver it
  o.config.plugins["elastic"]["min_throughput_gain"] = {.value = "10"};
  auto topo = Tree(6);
  auto e = MakeEngine(topo, o);
  ASSERT_TRUE(e);
  Submit(*e, 1, Job(8, 100000, 0, "capped"), 0);
  Submit(*e, 2, Job(8, 100000, 0, "capped"), 0);
  Submit(*e, 3, ElasticJob(1, 1, 8), 0);
  (void)e->Cycle(0);
  EXPECT_EQ(Count<ResizeJob>(e->Cycle(300)), 0);
}

// Options are values of each engine's configuration, not of the process: two engines built
// side by side, one asking an impossible gain, decide differently on the same cluster and jobs.
TEST(Elastic, EachEngineKeepsItsOwnPluginOptions) {
  auto topo = Tree(6);
  std::vector<std::unique_ptr<engine::Engine>> engines;
  for (const char* gain : {"0.05", "10"}) {
    engine::EngineOptions o = ElasticEngine("fair-share");
    o.config.queues = {{.name = "capped", .quota_gpus = 8, .borrow = false}};
    o.config.plugins["elastic"]["min_throughput_gain"] = {.value = gain};
    engines.push_back(MakeEngine(topo, o));
    ASSERT_TRUE(engines.back());
  }
  std::vector<int> resizes;
  for (auto& e : engines) {
    Submit(*e, 1, Job(8, 100000, 0, "capped"), 0);
    Submit(*e, 2, Job(8, 100000, 0, "capped"), 0);
    Submit(*e, 3, ElasticJob(1, 1, 8), 0);
    (void)e->Cycle(0);
    resizes.push_back(Count<ResizeJob>(e->Cycle(300)));
  }
  EXPECT_EQ(resizes, (std::vector<int>{1, 0}));
}

TEST(Elastic, ShrinksToAdmitAHigherPriorityArrival) {
  auto topo = Tree(4);  // 32 GPUs
  auto e = MakeEngine(topo, ElasticEngine());
  ASSERT_TRUE(e);
  Submit(*e, 1, ElasticJob(3, 1, 4), 0);
  ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 1);
  Submit(*e, 2, Job(16, 1000, 1), 10);  // 8 GPUs free: does not fit
  auto r = e->Cycle(10);
  ASSERT_EQ(Count<ResizeJob>(r), 1);
  EXPECT_EQ(Nodes(*e->Find(1)), 2);  // gave back one node, no more
  r = e->Cycle(11);
  EXPECT_EQ(Count<StartJob>(r), 1);
  EXPECT_EQ(e->Find(2)->state, JobState::kRunning);
  EXPECT_EQ(e->State().AllocatedGpuMilli(), 32000);
}

// With priority preemption on, a higher-priority arrival that a shrink admits takes the
// shrink: the elastic job gives back one node and keeps running, nothing is evicted whole.
// Where no shrink can admit it (the elastic job is at its minimum), preemption evicts.
TEST(Elastic, ShrinksRatherThanPreemptsWhenAShrinkAdmits) {
  auto topo = Tree(4);  // 32 GPUs
  for (int min_nodes : {1, 3}) {
    engine::EngineOptions o = ElasticEngine();
    o.policies.preemption = "priority";
    o.config.preemption = true;
    auto e = MakeEngine(topo, o);
    ASSERT_TRUE(e);
    Submit(*e, 1, ElasticJob(3, min_nodes, 4), 0);
    ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 1);
    Submit(*e, 2, Job(16, 1000, 1), 10);
    auto r = e->Cycle(10);
    if (min_nodes == 1) {
      EXPECT_EQ(Count<ResizeJob>(r), 1);
      EXPECT_EQ(r.stats.preempted, 0);
      EXPECT_EQ(e->Find(1)->state, JobState::kRunning);
      EXPECT_EQ(Nodes(*e->Find(1)), 2);
      EXPECT_EQ(Count<StartJob>(e->Cycle(11)), 1);
      EXPECT_EQ(e->Find(2)->state, JobState::kRunning);
    } else {
      EXPECT_EQ(Count<ResizeJob>(r), 0);
      EXPECT_EQ(r.stats.preempted, 1);
      EXPECT_EQ(e->Find(1)->state, JobState::kPending);
      EXPECT_EQ(e->Find(2)->state, JobState::kRunning);
    }
  }
}

TEST(Elastic, NeverBelowMinNodesNorForLowerPriority) {
  auto topo = Tree(4);
  auto e = MakeEngine(topo, ElasticEngine());
  ASSERT_TRUE(e);
  Submit(*e, 1, ElasticJob(3, 3, 4), 0);  // min_nodes = 3
  Submit(*e, 2, ElasticJob(1, 1, 1, 5), 0);
  ASSERT_EQ(Count<StartJob>(e->Cycle(0)), 2);
  Submit(*e, 3, Job(16, 1000, 1), 10);
  EXPECT_EQ(Count<ResizeJob>(e->Cycle(10)), 0);  // job 1 is at its minimum, job 2 outranks
  EXPECT_EQ(e->Find(3)->state, JobState::kPending);
  EXPECT_EQ(Nodes(*e->Find(1)), 3);
}

}  // namespace
}  // namespace tianshu::policy
