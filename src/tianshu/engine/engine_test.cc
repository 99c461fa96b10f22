// The cycle through its public interface, on a small generated fat tree.
#include "tianshu/engine/engine.h"

#include <gtest/gtest.h>

#include "tianshu/engine/policy.h"

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

TEST(Policies, PlannedNamesAreRefusedByName) {
  EngineOptions o = *PresetOptions("tianshu");
  o.policies.order = "fair-share";
  auto topo = Tree(2);
  auto e = Engine::Create(topo, o);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("'fair-share' is not built yet"), std::string::npos);
  model::EngineConfig c;
  c.elastic_scaling = true;
  auto oc = OptionsFromConfig(c);
  ASSERT_FALSE(oc);
  EXPECT_NE(oc.error().message.find("not built yet"), std::string::npos);
  EXPECT_FALSE(PresetOptions("yarn"));
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

}  // namespace
}  // namespace tianshu::engine
