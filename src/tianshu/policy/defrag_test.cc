// Defragmenting migration on a real engine: a 64-node gang on a cluster whose free GPUs are
// scattered over half-used nodes starts after small jobs are moved, and nothing moves when
// the wait it saves is worth less than the checkpoint-restarts.
#include "tianshu/policy/defrag.h"

#include <gtest/gtest.h>

#include "tianshu/policy/internal/test_util.h"

namespace tianshu::policy {
namespace {

using namespace fixture;  // NOLINT(google-build-using-namespace)
using engine::JobState;
using engine::MigrateJob;
using engine::StartJob;

constexpr engine::JobId kBig = 1000;

// 72 nodes x 8 GPUs; 32 four-GPU jobs fill nodes 0-15, then every other one ends, leaving
// 16 half-used nodes: 512 GPUs free, but only 56 whole nodes.
std::unique_ptr<engine::Engine> Fragmented(const model::Topology& topo, double small_duration_s) {
  engine::EngineOptions o = Options("priority");
  o.policies.migration = "defrag";
  auto e = MakeEngine(topo, o);
  if (!e) return nullptr;
  for (int i = 0; i < 32; ++i) Submit(*e, i, Job(4, small_duration_s), 0);
  if (Count<StartJob>(e->Cycle(0)) != 32) return nullptr;
  for (int i = 0; i < 32; i += 2) {
    if (!e->Apply(engine::JobFinished{.id = i}, 1)) return nullptr;
  }
  (void)e->Cycle(1);
  return e;
}

int HalfUsedNodes(const engine::Engine& e) {
  int n = 0;
  for (int i = 0; i < e.Topology().NumNodes(); ++i) n += e.State().FreeWholeGpus(i) == 4;
  return n;
}

model::JobSpec Gang64() {
  model::JobSpec j;
  j.nodes = 64;
  j.gpus_per_node = 8;
  j.duration_s = 10000;
  return j;
}

TEST(Defrag, MovesSmallJobsSoAWaiting64NodeGangStarts) {
  auto topo = Tree(72, 8);
  auto e = Fragmented(topo, 1e6);
  ASSERT_TRUE(e);
  ASSERT_EQ(HalfUsedNodes(*e), 16);
  Submit(*e, kBig, Gang64(), 2);
  auto r = e->Cycle(2);
  EXPECT_EQ(Count<StartJob>(r), 0);
  EXPECT_EQ(Count<MigrateJob>(r), 8);  // half of the half-used nodes empty into the others
  for (const auto& d : r.decisions) {
    if (const auto* m = std::get_if<MigrateJob>(&d)) {
      EXPECT_EQ(m->ranks.size(), 4u);
      EXPECT_EQ(e->Find(m->id)->migrations, 1);
      EXPECT_EQ(e->Find(m->id)->state, JobState::kRunning);
    }
  }
  EXPECT_EQ(HalfUsedNodes(*e), 0);
  r = e->Cycle(3);
  EXPECT_EQ(Count<StartJob>(r), 1);
  EXPECT_EQ(e->Find(kBig)->state, JobState::kRunning);
  EXPECT_EQ(e->State().AllocatedGpuMilli(), e->State().TotalGpuMilli());
  EXPECT_EQ(e->Running().size(), 17u);
}

TEST(Defrag, DoesNotMoveWhenTheWaitSavedIsWorthLessThanTheRestarts) {
  auto topo = Tree(72, 8);
  auto e = Fragmented(topo, 3);  // the small jobs end at t = 3: the gang waits 1 s
  ASSERT_TRUE(e);
  Submit(*e, kBig, Gang64(), 2);
  auto r = e->Cycle(2);
  EXPECT_EQ(Count<MigrateJob>(r), 0);
  EXPECT_EQ(HalfUsedNodes(*e), 16);
  EXPECT_EQ(e->Find(kBig)->state, JobState::kPending);
}

}  // namespace
}  // namespace tianshu::policy
