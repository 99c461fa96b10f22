// Heterogeneous accelerator choice through a real engine: the fastest accepted model that
// fits now, the job's accepted list honoured, one model per job, backends never mixed.
#include "tianshu/policy/speed.h"

#include <gtest/gtest.h>

#include "tianshu/policy/internal/test_util.h"

namespace tianshu::policy {
namespace {

using namespace fixture;  // NOLINT(google-build-using-namespace)
using engine::JobState;
using engine::RejectJob;
using engine::StartJob;

// Nodes 0-1: A100-80GB; nodes 2-3: H100-80GB; nodes 4-5: Ascend-910B.
model::Topology Mixed() {
  model::Topology t = Tree(6);
  auto h100 = model::DefaultServerType("H100-80GB", 8, 8, Bandwidth::FromGbps(400));
  auto ascend = model::DefaultServerType("Ascend-910B", 8, 8, Bandwidth::FromGbps(200));
  EXPECT_TRUE(h100 && ascend);
  t.types.push_back(*h100);
  t.types.push_back(*ascend);
  t.nodes[2].type = t.nodes[3].type = 1;
  t.nodes[4].type = t.nodes[5].type = 2;
  EXPECT_TRUE(t.Finalize());
  return t;
}

std::string ModelOf(const engine::Engine& e, engine::JobId id) {
  const engine::JobRecord* j = e.Find(id);
  if (j == nullptr || j->placement.empty()) return "";
  std::string m = e.Topology().TypeOf(j->placement.front().node).accelerator.model;
  for (const auto& s : j->placement) {
    if (e.Topology().TypeOf(s.node).accelerator.model != m) return "mixed";
  }
  return m;
}

engine::EngineOptions SpeedOptions() {
  engine::EngineOptions o = Options("fifo");
  o.placement = "by-speed";
  return o;
}

TEST(BySpeed, FastestAcceptedModelThatFitsNow) {
  auto topo = Mixed();
  auto e = MakeEngine(topo, SpeedOptions());
  ASSERT_TRUE(e);
  model::JobSpec cuda = Job(16);
  cuda.backend = model::Backend::kCuda;
  Submit(*e, 1, cuda, 0);
  Submit(*e, 2, cuda, 1);  // the H100s are taken: A100s now rather than waiting
  model::JobSpec a100_only = Job(8);
  a100_only.accelerators = {"A100-80GB"};
  Submit(*e, 3, a100_only, 2);
  (void)e->Cycle(2);
  EXPECT_EQ(ModelOf(*e, 1), "H100-80GB");
  EXPECT_EQ(ModelOf(*e, 2), "A100-80GB");
  EXPECT_EQ(e->Find(3)->state, JobState::kPending);  // only A100s accepted, all busy
}

TEST(BySpeed, NeverSpansBackends) {
  auto topo = Mixed();
  auto e = MakeEngine(topo, SpeedOptions());
  ASSERT_TRUE(e);
  Submit(*e, 2, Job(48), 0);  // would need both backends: can never fit
  Submit(*e, 1, Job(24), 1);  // 3 nodes: no model has them; CUDA models mixed do
  auto r = e->Cycle(1);
  EXPECT_EQ(Count<StartJob>(r), 1);
  EXPECT_EQ(ModelOf(*e, 1), "mixed");
  for (const auto& s : e->Find(1)->placement) {
    EXPECT_EQ(e->Topology().TypeOf(s.node).backend, model::Backend::kCuda);
  }
  EXPECT_EQ(Count<RejectJob>(r), 1);
  EXPECT_EQ(e->Find(2)->state, JobState::kFailed);
}

}  // namespace
}  // namespace tianshu::policy
