// Heterogeneous accelerator choice through a real engine: the fastest accepted model that
// fits now, the job's accepted list honoured, one model per job, backends never mixed.
#include "tianshu/policy/speed.h"

#include <gtest/gtest.h>

#include "tianshu/model/load.h"
#include "tianshu/policy/builtin.h"
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

// Plugins are values: the config reader knows no plugin names, so a strategy the policy
// library registers is accepted by YAML, and a misspelt one is refused by the registries with
// the file, line, field and nearest name.
TEST(PluginNames, YamlAcceptsEveryRegisteredStrategyAndNamesTheNearestForATypo) {
  ASSERT_TRUE(RegisterBuiltinPolicies());
  auto good = model::ValidateText("engine.yaml", "scheduler:\n  algorithm: by-speed\n");
  ASSERT_TRUE(good.diagnostics.empty()) << good.diagnostics[0].ToString();
  const auto& config = std::get<model::EngineConfig>(good.document->value);
  EXPECT_EQ(config.algorithm, "by-speed");
  const auto& at = config.plugin_at.at("scheduler.algorithm");
  EXPECT_EQ(at.file, "engine.yaml");
  EXPECT_EQ(at.line, 2);
  EXPECT_EQ(at.column, 14);
  auto options = engine::OptionsFromConfig(config);
  ASSERT_TRUE(options) << options.error().message;
  EXPECT_EQ(options->placement, "by-speed");

  auto typo =
      model::ValidateText("engine.yaml", "scheduler:\n  order: fifo\n  algorithm: by-sped\n");
  ASSERT_TRUE(typo.diagnostics.empty());  // syntactically a name: the registries decide
  auto refused = engine::OptionsFromConfig(std::get<model::EngineConfig>(typo.document->value));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("engine.yaml:3:14: scheduler.algorithm: unknown placement "
                                         "strategy 'by-sped' (did you mean 'by-speed'?)"),
            std::string::npos)
      << refused.error().message;
  auto bad_order = model::EngineConfig{};
  bad_order.order = "lass";
  auto refused_order = engine::OptionsFromConfig(bad_order);
  ASSERT_FALSE(refused_order);
  EXPECT_NE(refused_order.error().message.find("did you mean 'las'"), std::string::npos)
      << refused_order.error().message;
  // Not a name at all: the reader refuses it with its place.
  auto junk = model::ValidateText("engine.yaml", "scheduler:\n  algorithm: \"by speed!\"\n");
  ASSERT_EQ(junk.diagnostics.size(), 1u);
  EXPECT_EQ(junk.diagnostics[0].line, 2);
  EXPECT_EQ(junk.diagnostics[0].path, "scheduler.algorithm");
}

}  // namespace
}  // namespace tianshu::policy
