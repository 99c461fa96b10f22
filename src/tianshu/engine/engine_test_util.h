// Helpers of the engine's tests (engine_*_test.cc): a small fat tree, a job spec, the starts
// of a cycle, and a job running on one node.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "tianshu/engine/engine.h"
#include "tianshu/model/load.h"

namespace tianshu::engine {

inline model::Topology Tree(int nodes) {
  model::FatTreeOptions o;
  o.nodes = nodes;
  o.nodes_per_leaf = 2;
  return *model::GenerateFatTree(o);
}

inline model::JobSpec Job(int gpus, double duration_s = 100, int priority = 0) {
  model::JobSpec j;
  j.gpus = gpus;
  j.duration_s = duration_s;
  j.priority = priority;
  return j;
}

inline int Starts(const CycleResult& r) {
  int n = 0;
  for (const auto& d : r.decisions) n += std::holds_alternative<StartJob>(d);
  return n;
}

// An 8-GPU job of `duration_s` submitted at `at` and running on all of `node`'s GPUs.
inline void RunOnNode(Engine& e, JobId id, int node, double duration_s, int priority = 0,
                      double at = 0) {
  ASSERT_TRUE(e.Apply(SubmitJob{id, Job(8, duration_s, priority)}, at));
  std::vector<placement::RankSlot> ranks;
  for (int g = 0; g < 8; ++g) ranks.push_back({.node = node, .gpu = node * 8 + g});
  ASSERT_TRUE(e.Restore(id, ranks, at));
}

}  // namespace tianshu::engine
