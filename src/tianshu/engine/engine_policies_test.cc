// Policy plugins by name and from the configuration, the compact-placement wait, leaf-bound
// gangs, and the engine options a configuration gives.
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
