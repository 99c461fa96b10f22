// Fixtures shared by the placement tests: the 2048-GPU fat tree, the Lingjun topology, a
// mixed-backend cluster, and checks every placement must pass.
//   model::Topology t = FatTree2048();
//   ExpectValid(state, request, outcome);
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tianshu/model/load.h"
#include "tianshu/model/topology.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement::testing {

inline model::Topology FatTree2048() {
  return *model::GenerateFatTree({.nodes = 256, .nodes_per_leaf = 16});
}

inline std::string LingjunPath() { return std::string(TIANSHU_DATA_DIR) + "/lingjun/topo.csv"; }

// The first half of the nodes CUDA A100, the second half Ascend 910B, for backend tests.
inline model::Topology MixedBackends() {
  model::Topology t = *model::GenerateFatTree({.nodes = 32, .nodes_per_leaf = 8});
  auto ascend = model::DefaultServerType("Ascend-910B", 8, 8, Bandwidth::FromGbps(200));
  t.types.push_back(*ascend);
  for (int n = 16; n < 32; ++n) t.nodes[n].type = 1;
  EXPECT_TRUE(t.Finalize());
  return t;
}

// Ranks of one NVLink domain (node, island) form one contiguous run.
inline bool ContiguousDomains(const model::Topology& t, const Outcome& o) {
  std::set<std::pair<int, int>> closed;
  std::pair<int, int> current{-1, -1};
  for (const RankSlot& s : o.ranks) {
    int island = s.gpu < 0 ? -1 : t.TypeOf(s.node).NvlinkIsland(s.gpu - t.nodes[s.node].first_gpu);
    std::pair<int, int> d{s.node, island};
    if (d == current) continue;
    if (closed.count(d)) return false;
    if (current.first >= 0) closed.insert(current);
    current = d;
  }
  return true;
}

}  // namespace tianshu::placement::testing
