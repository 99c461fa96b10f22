// Contract tests every registered strategy passes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/groups.h"
#include "tianshu/placement/internal/testing.h"
#include "tianshu/placement/leaves.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement {
namespace {

using testing::ContiguousDomains;
using testing::FatTree2048;

// A fat tree of `nodes` 8-GPU nodes, `per_leaf` under each leaf.
model::Topology SmallTree(int nodes, int per_leaf) {
  model::FatTreeOptions fo;
  fo.nodes = nodes;
  fo.nodes_per_leaf = per_leaf;
  return *model::GenerateFatTree(fo);
}

// Takes whole GPUs from..from+count-1 of `node`.
void TakeGpus(ClusterState& state, int node, int from, int count) {
  const int first = state.topology().nodes[node].first_gpu;
  for (int i = from; i < from + count; ++i) ASSERT_TRUE(state.TakeGpu(first + i, 1000));
}

class Contract : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Strategy> Make(uint64_t seed = 42) {
    StrategyOptions o;
    o.seed = seed;
    o.genetic.generations = 5;
    o.genetic.population = 8;
    auto s = MakeStrategy(GetParam(), o);
    EXPECT_TRUE(s) << s.error().message;
    return std::move(*s);
  }
};

std::vector<PlacementRequest> Mix() {
  std::vector<PlacementRequest> v;
  int sizes[] = {1, 8, 16, 3, 64, 2, 128, 1, 4, 32};
  for (int i = 0; i < 40; ++i) {
    PlacementRequest r;
    r.name = "job" + std::to_string(i);
    r.ranks = sizes[i % 10];
    if (i % 7 == 3) {
      r.gpu_milli = 300;
      r.ranks = 2;
    }
    r.cpu_milli_per_rank = 4000;
    r.memory_bytes_per_rank = 16'000'000'000;
    v.push_back(r);
  }
  return v;
}

TEST_P(Contract, CapacityNeverExceededAndGangsWhole) {
  model::Topology t = FatTree2048();
  ClusterState state(t);
  auto s = Make();
  std::map<int, int> used;     // GPU -> milli
  std::map<int, int64_t> cpu;  // node -> milli
  int placed = 0;
  for (const PlacementRequest& r : Mix()) {
    Outcome o = s->Place(state, r);
    if (!o.placed()) {
      EXPECT_TRUE(o.ranks.empty());
      EXPECT_FALSE(o.reason.empty());
      continue;
    }
    ++placed;
    ASSERT_EQ(static_cast<int>(o.ranks.size()), r.ranks) << r.name;
    std::set<int> gpus;
    for (const RankSlot& slot : o.ranks) {
      ASSERT_GE(slot.gpu, t.nodes[slot.node].first_gpu);
      ASSERT_LT(slot.gpu, t.nodes[slot.node].first_gpu + t.GpusOn(slot.node));
      EXPECT_TRUE(gpus.insert(slot.gpu).second) << "two ranks of one job on GPU " << slot.gpu;
      used[slot.gpu] += r.gpu_milli;
      cpu[slot.node] += r.cpu_milli_per_rank;
      EXPECT_LE(used[slot.gpu], 1000);
      EXPECT_LE(cpu[slot.node], t.TypeOf(slot.node).cpu_milli);
    }
    EXPECT_TRUE(ContiguousDomains(t, o)) << GetParam() << " " << r.name;
    ASSERT_TRUE(Apply(&state, r, o));
  }
  EXPECT_GT(placed, 20);
}

// Nested gang groups: a 16-rank job whose 8-rank groups must each sit on one node and whose
// whole gang must sit under one leaf. Only leaf 3 (nodes 6 and 7, both idle) can hold it;
// nodes 0-3 have 4 free GPUs each, which a group-blind first fit would take.
TEST_P(Contract, NestedGroupsAreHonoured) {
  model::Topology t = SmallTree(8, 2);
  ClusterState state(t);
  auto take = [&](int node, int count) { TakeGpus(state, node, 0, count); };
  for (int n = 0; n < 4; ++n) take(n, 4);
  take(5, 8);
  PlacementRequest r;
  r.name = "grouped";
  r.ranks = 16;
  r.cpu_milli_per_rank = 1000;
  r.groups = {{.size = 8, .within = model::GroupScope::kNode},
              {.size = 16, .within = model::GroupScope::kLeaf}};
  auto s = Make();
  Outcome o = s->Place(state, r);
  ASSERT_TRUE(o.placed()) << GetParam() << ": " << o.reason;
  EXPECT_TRUE(GroupsHold(t, r.groups, o.ranks)) << GetParam();
  std::set<int> nodes;
  for (const RankSlot& slot : o.ranks) nodes.insert(slot.node);
  EXPECT_EQ(nodes, (std::set<int>{6, 7})) << GetParam();
  EXPECT_TRUE(ContiguousDomains(t, o)) << GetParam();
  if (GetParam() == "first-fit") {  // the case is not trivial: without groups it spreads
    PlacementRequest blind = r;
    blind.groups.clear();
    Outcome b = s->Place(state, blind);
    ASSERT_TRUE(b.placed());
    EXPECT_FALSE(GroupsHold(t, r.groups, b.ranks));
  }
  std::vector<Outcome> batch = s->PlaceBatch(state, std::vector<PlacementRequest>{r});
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_TRUE(batch[0].placed()) << GetParam() << ": " << batch[0].reason;
  EXPECT_TRUE(GroupsHold(t, r.groups, batch[0].ranks)) << GetParam();
  // One GPU of node 7 taken: 39 GPUs are free but no leaf holds two idle nodes.
  take(7, 1);
  Outcome none = s->Place(state, r);
  EXPECT_EQ(none.kind, OutcomeKind::kDoesNotFitNow) << GetParam() << ": " << none.reason;
  EXPECT_FALSE(none.reason.empty());
  // A 16-rank group within one 8-GPU node can never fit.
  PlacementRequest never = r;
  never.groups = {{.size = 16, .within = model::GroupScope::kNode}};
  EXPECT_EQ(s->Place(state, never).kind, OutcomeKind::kCanNeverFit) << GetParam();
}

// A required leaf bound (a job's topology.leaves). Three leaves of 4 nodes x 8 GPUs: leaf 0
// has 16 GPUs free (4 on each node, which a bound-blind first fit takes), leaf 1 has 24,
// leaf 2 has 28. A 24-rank job asking for the fewest leaves (one) must sit in leaf 1 or 2.
TEST_P(Contract, LeafBoundsAreHonoured) {
  model::Topology t = SmallTree(12, 4);
  ClusterState state(t);
  auto take = [&](int node, int from, int count) { TakeGpus(state, node, from, count); };
  for (int n = 0; n < 4; ++n) take(n, 0, 4);
  take(4, 0, 8);
  take(8, 0, 4);
  auto leaves_of = [&](const Outcome& o) {
    std::set<int> leaves;
    for (const RankSlot& slot : o.ranks) leaves.insert(t.nodes[slot.node].leaf);
    return leaves;
  };
  PlacementRequest r{.name = "bound", .ranks = 24, .max_leaves = model::kFewestLeaves};
  EXPECT_EQ(LeafLimit(state, r), 1);
  auto s = Make();
  Outcome o = s->Place(state, r);
  ASSERT_TRUE(o.placed()) << GetParam() << ": " << o.reason;
  ASSERT_EQ(leaves_of(o).size(), 1u) << GetParam();
  EXPECT_NE(*leaves_of(o).begin(), t.nodes[0].leaf) << GetParam();
  if (GetParam() == "first-fit") {  // the case is not trivial: without the bound it spreads
    PlacementRequest blind = r;
    blind.max_leaves = 0;
    Outcome b = s->Place(state, blind);
    ASSERT_TRUE(b.placed());
    EXPECT_GT(leaves_of(b).size(), 1u);
  }
  std::vector<Outcome> batch = s->PlaceBatch(state, std::vector<PlacementRequest>{r, r});
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_TRUE(batch[0].placed()) << GetParam() << ": " << batch[0].reason;
  EXPECT_EQ(leaves_of(batch[0]).size(), 1u) << GetParam();
  // The second takes the other roomy leaf, or does not fit now; never a spread.
  if (batch[1].placed()) {
    EXPECT_EQ(leaves_of(batch[1]).size(), 1u) << GetParam();
    EXPECT_NE(leaves_of(batch[1]), leaves_of(batch[0])) << GetParam();
  }
  // 40 ranks within two leaves (the fewest: one holds 32), wherever the strategy itself
  // places 40 ranks at all (yarn keeps a gang under one leaf).
  PlacementRequest two{.name = "two", .ranks = 40, .max_leaves = model::kFewestLeaves};
  EXPECT_EQ(LeafLimit(state, two), 2);
  Outcome o2 = s->Place(state, two);
  PlacementRequest two_blind = two;
  two_blind.max_leaves = 0;
  if (s->Place(state, two_blind).placed()) {
    ASSERT_TRUE(o2.placed()) << GetParam() << ": " << o2.reason;
    EXPECT_EQ(leaves_of(o2).size(), 2u) << GetParam();
  } else {  // yarn: no leaf could ever hold 40
    EXPECT_EQ(o2.kind, OutcomeKind::kCanNeverFit) << GetParam();
  }
  // A bound of every leaf bounds nothing.
  EXPECT_EQ(LeafLimit(state, {.name = "all", .ranks = 40, .max_leaves = 3}), 0);
  // 61 GPUs free, but no leaf has 24: does not fit now, and says why.
  take(5, 0, 1);
  take(9, 0, 5);
  Outcome none = s->Place(state, r);
  EXPECT_EQ(none.kind, OutcomeKind::kDoesNotFitNow) << GetParam() << ": " << none.reason;
  EXPECT_FALSE(none.reason.empty()) << GetParam();
  if (GetParam() == "first-fit") {  // it would spread: the bound is what refuses it
    EXPECT_NE(none.reason.find("no leaf switch has room"), std::string::npos) << none.reason;
  }
  // 40 ranks can never sit under one leaf of 32 GPUs.
  Outcome never = s->Place(state, {.name = "never", .ranks = 40, .max_leaves = 1});
  EXPECT_EQ(never.kind, OutcomeKind::kCanNeverFit) << GetParam() << ": " << never.reason;
  EXPECT_NE(never.reason.find("topology.leaves"), std::string::npos) << never.reason;
}

TEST_P(Contract, OutcomesForTooLargeAndFull) {
  model::Topology t = FatTree2048();
  ClusterState state(t);
  auto s = Make();
  Outcome never = s->Place(state, {.name = "huge", .ranks = 4096});
  EXPECT_EQ(never.kind, OutcomeKind::kCanNeverFit);
  EXPECT_TRUE(never.ranks.empty());
  Outcome model = s->Place(state, {.name = "h100", .ranks = 8, .accelerators = {"H100-80GB"}});
  EXPECT_EQ(model.kind, OutcomeKind::kCanNeverFit);
  EXPECT_NE(model.reason.find("GPU model"), std::string::npos) << model.reason;
  // Fill all but 4 GPUs: a gang of 8 does not fit now and takes nothing.
  for (int g = 0; g < t.NumGpus() - 4; ++g) ASSERT_TRUE(state.TakeGpu(g, 1000));
  Outcome now = s->Place(state, {.name = "eight", .ranks = 8});
  EXPECT_EQ(now.kind, OutcomeKind::kDoesNotFitNow);
  EXPECT_TRUE(now.ranks.empty());
  Outcome four = s->Place(state, {.name = "four", .ranks = 4});
  ASSERT_TRUE(four.placed()) << four.reason;
  for (const RankSlot& slot : four.ranks) EXPECT_GE(slot.gpu, t.NumGpus() - 4);
}

TEST_P(Contract, LabelsBackendsAndHealthRespected) {
  model::Topology t = testing::MixedBackends();
  ClusterState state(t);
  for (int n = 0; n < t.NumNodes(); n += 3) state.SetLabel(n, "pool", "a");
  state.SetHealthy(0, false);
  auto s = Make();
  Outcome o = s->Place(state, {.name = "sel", .ranks = 16, .node_selector = {{"pool", "a"}}});
  ASSERT_TRUE(o.placed()) << o.reason;
  for (const RankSlot& slot : o.ranks) {
    EXPECT_EQ(slot.node % 3, 0);
    EXPECT_NE(slot.node, 0);
  }
  Outcome a = s->Place(state, {.name = "npu", .ranks = 24, .backend = model::Backend::kAscend});
  ASSERT_TRUE(a.placed()) << a.reason;
  for (const RankSlot& slot : a.ranks) EXPECT_GE(slot.node, 16);
  Outcome big =
      s->Place(state, {.name = "npu-big", .ranks = 256, .backend = model::Backend::kAscend});
  EXPECT_EQ(big.kind, OutcomeKind::kCanNeverFit);
}

TEST_P(Contract, FractionalSharesAndGpusPerNode) {
  model::Topology t = FatTree2048();
  ClusterState state(t);
  auto s = Make();
  PlacementRequest shared{.name = "share", .ranks = 3, .gpu_milli = 400};
  for (int i = 0; i < 5; ++i) {
    Outcome o = s->Place(state, shared);
    ASSERT_TRUE(o.placed()) << o.reason;
    ASSERT_TRUE(Apply(&state, shared, o));
  }
  for (int g = 0; g < t.NumGpus(); ++g) EXPECT_GE(state.GpuFreeMilli(g), 0);
  PlacementRequest per_node{.name = "pn", .ranks = 16, .gpus_per_node = 4};
  Outcome o = s->Place(state, per_node);
  ASSERT_TRUE(o.placed()) << o.reason;
  std::map<int, int> per;
  for (const RankSlot& slot : o.ranks) ++per[slot.node];
  for (auto [n, k] : per) EXPECT_EQ(k, 4);
}

TEST_P(Contract, DeterministicForASeed) {
  model::Topology t = FatTree2048();
  auto run = [&](uint64_t seed) {
    ClusterState state(t);
    auto s = Make(seed);
    std::vector<PlacementRequest> reqs = Mix();
    reqs.resize(12);
    return s->PlaceBatch(state, reqs);
  };
  auto a = run(7), b = run(7);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].kind, b[i].kind);
    EXPECT_EQ(a[i].ranks, b[i].ranks);
  }
}

TEST_P(Contract, BatchOutcomesFitTogether) {
  model::Topology t = FatTree2048();
  ClusterState state(t);
  for (int g = 0; g < 1500; ++g) ASSERT_TRUE(state.TakeGpu(g, 1000));
  auto s = Make();
  std::vector<PlacementRequest> reqs = Mix();
  reqs.resize(16);
  std::vector<Outcome> out = s->PlaceBatch(state, reqs);
  ASSERT_EQ(out.size(), reqs.size());
  ClusterState check = state;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].placed()) {
      EXPECT_TRUE(Apply(&check, reqs[i], out[i])) << GetParam() << " " << reqs[i].name;
      EXPECT_TRUE(ContiguousDomains(t, out[i]));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, Contract, ::testing::ValuesIn(StrategyNames()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// Takes `count` GPUs of `node`, from its GPU 0 up.
void Take(const model::Topology& t, ClusterState* state, int node, int count) {
  for (int g = 0; g < count; ++g) ASSERT_TRUE(state->TakeGpu(t.nodes[node].first_gpu + g, 1000));
}

std::map<int, int> RanksPerNode(const Outcome& o) {
  std::map<int, int> per;
  for (const RankSlot& slot : o.ranks) ++per[slot.node];
  return per;
}

// YARN consolidation: a gang that fits one node waits for one node, where first-fit splits it
// over the leftovers of two.
TEST(Yarn, AGangThatFitsOneNodeWaitsForOneNode) {
  model::Topology t = *model::GenerateFatTree({.nodes = 4, .nodes_per_leaf = 4});
  ASSERT_EQ(t.GpusOn(0), 8);
  ClusterState state(t);
  Take(t, &state, 0, 5);
  Take(t, &state, 1, 5);
  Take(t, &state, 2, 8);
  Take(t, &state, 3, 8);
  const PlacementRequest four{.name = "four", .ranks = 4};
  Outcome split = (*MakeStrategy("first-fit"))->Place(state, four);
  ASSERT_TRUE(split.placed());
  EXPECT_EQ(RanksPerNode(split), (std::map<int, int>{{0, 3}, {1, 1}}));
  auto yarn = *MakeStrategy("yarn");
  Outcome wait = yarn->Place(state, four);
  EXPECT_EQ(wait.kind, OutcomeKind::kDoesNotFitNow);
  EXPECT_TRUE(wait.ranks.empty());
  for (int g = 4; g < 8; ++g) ASSERT_TRUE(state.ReturnGpu(t.nodes[3].first_gpu + g, 1000));
  Outcome one = yarn->Place(state, four);
  ASSERT_TRUE(one.placed()) << one.reason;
  EXPECT_EQ(RanksPerNode(one), (std::map<int, int>{{3, 4}}));
}

// A larger gang: whole idle nodes for all but its remainder, and the first other node with room
// for the rest; it waits when too few nodes are idle, however many GPUs are free.
TEST(Yarn, ALargerGangTakesWholeIdleNodesAndOneNodeForTheRest) {
  model::Topology t = *model::GenerateFatTree({.nodes = 4, .nodes_per_leaf = 4});
  ClusterState state(t);
  Take(t, &state, 0, 1);
  auto yarn = *MakeStrategy("yarn");
  Outcome o = yarn->Place(state, {.name = "twelve", .ranks = 12});
  ASSERT_TRUE(o.placed()) << o.reason;
  EXPECT_EQ(RanksPerNode(o), (std::map<int, int>{{0, 4}, {1, 8}}));
  Take(t, &state, 1, 1);
  Take(t, &state, 2, 1);
  Take(t, &state, 3, 1);
  // 28 GPUs free, no node idle: a 9-GPU gang waits.
  Outcome wait = yarn->Place(state, {.name = "nine", .ranks = 9});
  EXPECT_EQ(wait.kind, OutcomeKind::kDoesNotFitNow);
}

// A gang larger than any leaf switch could ever hold can never fit under yarn (which keeps a
// multi-node gang under one leaf): refused with the reason, where it used to wait for ever and,
// in FIFO order, hold every job behind it (the fifo preset on a 2,048-GPU burst finished one job
// of 2,000). One leaf's worth still waits for its idle nodes.
TEST(Yarn, AGangNoLeafCouldHoldCanNeverFit) {
  model::Topology t = *model::GenerateFatTree({.nodes = 8, .nodes_per_leaf = 4});
  ClusterState state(t);
  auto yarn = *MakeStrategy("yarn");
  Outcome never = yarn->Place(state, {.name = "forty", .ranks = 40});
  EXPECT_EQ(never.kind, OutcomeKind::kCanNeverFit);
  EXPECT_NE(never.reason.find("the largest holds 32 of its 40 ranks"), std::string::npos)
      << never.reason;
  Take(t, &state, 0, 1);
  EXPECT_TRUE(yarn->Place(state, {.name = "leaf", .ranks = 32}).placed());  // the other leaf
  Take(t, &state, 4, 1);
  EXPECT_EQ(yarn->Place(state, {.name = "leaf", .ranks = 32}).kind, OutcomeKind::kDoesNotFitNow);
}

TEST(Registry, NamesAndErrors) {
  std::vector<std::string> names = StrategyNames();
  for (const char* n : {"genetic", "topology", "first-fit", "random", "spread", "best-fit", "fgd",
                        "exact", "yarn"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  auto bad = MakeStrategy("topolgy");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("did you mean 'topology'"), std::string::npos);
  StrategyOptions o;
  o.genetic.population = 1;
  EXPECT_FALSE(MakeStrategy("genetic", o));
}

}  // namespace
}  // namespace tianshu::placement
