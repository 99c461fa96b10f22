// Fixtures for the policy tests: small generated fat trees, engine options naming the policies
// under test, job specs, and decision counters. Tests drive a real engine::Engine.
//   auto topo = Tree(4);                       // 4 nodes x 8 A100, 2 nodes per leaf
//   auto e = MakeEngine(topo, Options("fair-share", "queue-reclaim"));
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>

#include "tianshu/engine/engine.h"
#include "tianshu/engine/policy.h"
#include "tianshu/policy/builtin.h"

namespace tianshu::policy::fixture {

inline model::Topology Tree(int nodes, int per_leaf = 2) {
  model::FatTreeOptions o;
  o.nodes = nodes;
  o.nodes_per_leaf = per_leaf;
  return *model::GenerateFatTree(o);
}

inline engine::EngineOptions Options(std::string order, std::string preemption = "none",
                                     std::string backfill = "greedy") {
  engine::EngineOptions o;
  o.placement = "first-fit";
  o.placement_large_queue = "";
  o.policies.order = std::move(order);
  o.policies.preemption = std::move(preemption);
  o.policies.backfill = std::move(backfill);
  return o;
}

inline model::JobSpec Job(int gpus, double duration_s = 1000, int priority = 0,
                          std::string queue = "default") {
  model::JobSpec j;
  j.gpus = gpus;
  j.duration_s = duration_s;
  j.priority = priority;
  j.queue = std::move(queue);
  return j;
}

inline std::unique_ptr<engine::Engine> MakeEngine(const model::Topology& topo,
                                                  const engine::EngineOptions& o) {
  EXPECT_TRUE(RegisterBuiltinPolicies());
  auto e = engine::Engine::Create(topo, o);
  EXPECT_TRUE(e) << (e ? "" : e.error().message);
  return e ? std::move(*e) : nullptr;
}

template <typename T>
int Count(const engine::CycleResult& r) {
  int n = 0;
  for (const auto& d : r.decisions) n += std::holds_alternative<T>(d);
  return n;
}

inline void Submit(engine::Engine& e, engine::JobId id, const model::JobSpec& spec, double t) {
  auto r = e.Apply(engine::SubmitJob{.id = id, .spec = spec}, t);
  ASSERT_TRUE(r) << r.error().message;
}

}  // namespace tianshu::policy::fixture
