#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/internal/testing.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement {
namespace {

// A fragmented cluster and a batch of jobs of mixed sizes.
std::vector<PlacementRequest> Batch(int jobs, uint64_t seed) {
  internal::Rng rng(seed);
  const int sizes[] = {1, 2, 4, 8, 8, 16, 24, 32, 64};
  std::vector<PlacementRequest> v;
  for (int j = 0; j < jobs; ++j) {
    v.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(9)]});
  }
  return v;
}

void Fragment(ClusterState* s, uint64_t seed, double share) {
  internal::Rng rng(seed);
  for (int g = 0; g < s->topology().NumGpus(); ++g) {
    if (rng.Unit() < share) {
      ASSERT_TRUE(s->TakeGpu(g, 1000));
    }
  }
}

TEST(GeneticStrategy, NeverWorseThanTopologyOnFatTree2048) {
  model::Topology t = testing::FatTree2048();
  auto genetic = *MakeStrategy("genetic");
  auto topology = *MakeStrategy("topology");
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ClusterState state(t);
    Fragment(&state, seed, 0.6);
    auto reqs = Batch(32, seed);
    auto g = genetic->PlaceBatch(state, reqs);
    auto p = topology->PlaceBatch(state, reqs);
    model::ResourceWeight w;
    double cg = EvaluateBatch(state, reqs, g, w).total;
    double cp = EvaluateBatch(state, reqs, p, w).total;
    EXPECT_LE(cg, cp + 1e-9) << "seed " << seed;
  }
}

TEST(GeneticStrategy, NeverWorseThanTopologyOnLingjun) {
  auto t = model::LoadCluster("lingjun:" + testing::LingjunPath());
  ASSERT_TRUE(t) << t.error().message;
  auto genetic = *MakeStrategy("genetic");
  auto topology = *MakeStrategy("topology");
  ClusterState state(*t);
  Fragment(&state, 3, 0.5);
  auto reqs = Batch(24, 3);
  auto g = genetic->PlaceBatch(state, reqs);
  auto p = topology->PlaceBatch(state, reqs);
  model::ResourceWeight w;
  EXPECT_LE(EvaluateBatch(state, reqs, g, w).total, EvaluateBatch(state, reqs, p, w).total + 1e-9);
  for (const Outcome& o : g) EXPECT_TRUE(o.placed()) << o.reason;
}

// The small instances exact solves: 16 nodes of 8 GPUs under leaves of 4, as a 2-tier fabric
// or, oversubscribed 2:1, a 3-tier one (two leaves a spine).
model::Topology SmallFabric(bool three_tiers) {
  return *model::GenerateFatTree({.nodes = 16,
                                  .nodes_per_leaf = 4,
                                  .leaves_per_spine = three_tiers ? 2 : 0,
                                  .oversubscription = three_tiers ? 2.0 : 1.0});
}

// Whether exact's answer is its proven optimum (not topology's, for a MIP too large, nor the
// best found before its limit).
bool Proven(const Outcome& o) {
  return o.reason.find("not proven") == std::string::npos &&
         o.reason.find("too large") == std::string::npos;
}

// NoneCheaper's claim, against the exact strategy's proven optimum: wherever it says no
// placement costs less than topology's, exact finds none cheaper. Single jobs of whole nodes,
// whole leaves and odd sizes on idle, lightly and heavily used fabrics (2 and 3 tiers).
TEST(GeneticStrategy, NoneCheaperHoldsAgainstTheExactOptimum) {
  int claimed = 0, not_claimed = 0;
  for (int i = 0; i < 24; ++i) {
    internal::Rng rng(500 + i);
    model::Topology t = SmallFabric(/*three_tiers=*/i % 2 == 1);
    ClusterState state(t);
    // A third idle, a third with one leaf busy, a third fragmented.
    for (int g = 0; g < t.NumGpus(); ++g) {
      const bool take = i % 3 == 1 ? g < 32 && rng.Unit() < 0.5 : i % 3 == 2 && rng.Unit() < 0.4;
      if (take) {
        ASSERT_TRUE(state.TakeGpu(g, 1000));
      }
    }
    const int sizes[] = {8, 16, 24, 32, 40, 64, 6};
    const std::vector<PlacementRequest> reqs = {{.name = "j", .ranks = sizes[rng.Below(7)]}};
    StrategyOptions o;
    o.seed = 11 + i;
    const Outcome p = (*MakeStrategy("topology", o))->PlaceBatch(state, reqs).front();
    if (!NoneCheaper(state, reqs.front(), p)) {
      ++not_claimed;
      continue;
    }
    ++claimed;
    const std::vector<Outcome> e = (*MakeStrategy("exact", o))->PlaceBatch(state, reqs);
    ASSERT_TRUE(Proven(e.front())) << "instance " << i << ": " << e.front().reason;
    EXPECT_GE(EvaluateBatch(state, reqs, e, o.weights).total,
              EvaluateBatch(state, reqs, std::vector<Outcome>{p}, o.weights).total - 1e-9)
        << "instance " << i << ": " << reqs.front().ranks << " ranks";
  }
  // Both answers came up (an always-false NoneCheaper would pass the loop above).
  EXPECT_GE(claimed, 4);
  EXPECT_GE(not_claimed, 4);
}

// A skipped tier: two leaves hang right under the core, so for the spine tier their block is
// the core, which holds more nodes than any spine. Four nodes on those two leaves meet under
// one block at that tier; on two leaves under two spines, under two. NoneCheaper must not take
// the latter for the bound (it counted only the spines' sizes once), and exact agrees.
TEST(GeneticStrategy, NoneCheaperCountsTheBlocksOfASkippedTier) {
  model::Topology t =
      *model::GenerateFatTree({.nodes = 8, .nodes_per_leaf = 2, .leaves_per_spine = 1});
  std::vector<int> leaves;
  for (const auto& sw : t.switches) {
    if (sw.tier == 0) leaves.push_back(sw.id);
  }
  ASSERT_EQ(leaves.size(), 4u);
  ASSERT_EQ(t.tiers.size(), 3u);
  for (int leaf : {leaves[2], leaves[3]}) t.switches[leaf].parent = t.Root();
  ASSERT_TRUE(t.Finalize());
  ClusterState idle(t);
  const std::vector<PlacementRequest> reqs = {{.name = "four-nodes", .ranks = 32}};
  auto on_leaves = [&](int a, int b) {
    Outcome o;
    o.kind = OutcomeKind::kPlaced;
    for (int leaf : {a, b}) {
      for (int n : t.switches[leaf].nodes) {
        for (int g = 0; g < t.GpusOn(n); ++g) {
          o.ranks.push_back({.node = n, .gpu = t.nodes[n].first_gpu + g});
        }
      }
    }
    return o;
  };
  const Outcome under_spines = on_leaves(leaves[0], leaves[1]);
  const Outcome under_core = on_leaves(leaves[2], leaves[3]);
  const model::ResourceWeight w;
  EXPECT_LT(EvaluateBatch(idle, reqs, std::vector<Outcome>{under_core}, w).total,
            EvaluateBatch(idle, reqs, std::vector<Outcome>{under_spines}, w).total);
  EXPECT_FALSE(NoneCheaper(idle, reqs.front(), under_spines));
  EXPECT_TRUE(NoneCheaper(idle, reqs.front(), under_core));
  // exact's proven optimum is cheaper than the spines' placement, and no cheaper than the core's.
  StrategyOptions o;
  const std::vector<Outcome> e = (*MakeStrategy("exact", o))->PlaceBatch(idle, reqs);
  ASSERT_TRUE(Proven(e.front())) << e.front().reason;
  const double best = EvaluateBatch(idle, reqs, e, w).total;
  EXPECT_LT(best, EvaluateBatch(idle, reqs, std::vector<Outcome>{under_spines}, w).total - 1e-9);
  EXPECT_GE(best, EvaluateBatch(idle, reqs, std::vector<Outcome>{under_core}, w).total - 1e-9);
}

// What NoneCheaper claims and refuses, on the 2,048-GPU fat tree (16 nodes of 8 GPUs a leaf).
TEST(GeneticStrategy, NoneCheaperOnlyAtTheBound) {
  const model::Topology t = testing::FatTree2048();
  auto topology = *MakeStrategy("topology");
  const PlacementRequest gang{.name = "gang", .ranks = 1024};  // 8 whole leaves
  {
    ClusterState idle(t);
    const Outcome p = topology->Place(idle, gang);
    ASSERT_TRUE(p.placed());
    EXPECT_TRUE(NoneCheaper(idle, gang, p));
    // The same GPUs' count on 9 leaves: one node of the first leaf moved to the ninth.
    Outcome spread = p;
    std::set<int> leaves;
    for (const RankSlot& r : p.ranks) leaves.insert(t.nodes[r.node].leaf);
    int outside = -1;
    for (const auto& n : t.nodes) {
      if (!leaves.contains(n.leaf)) outside = n.id;
    }
    ASSERT_GE(outside, 0);
    const int moved = spread.ranks.front().node;
    int k = 0;
    for (RankSlot& r : spread.ranks) {
      if (r.node == moved) r = {.node = outside, .gpu = t.nodes[outside].first_gpu + k++};
    }
    EXPECT_FALSE(NoneCheaper(idle, gang, spread));
    // Fractional ranks are never claimed (several share a GPU: the node bound differs).
    PlacementRequest half = gang;
    half.gpu_milli = 500;
    EXPECT_FALSE(NoneCheaper(idle, half, p));
    // Types that differ only in labels (the server makes one per leaf label) change nothing
    // priced; a second type with another accelerator memory does, for a job that names the
    // device memory it needs.
    model::Topology labelled = t;
    labelled.types.push_back(labelled.types.front());
    labelled.types.back().labels["leaf"] = "b";
    for (auto& n : labelled.nodes) n.type = n.id % 2;
    ASSERT_TRUE(labelled.Finalize());
    ClusterState idle_labelled(labelled);
    EXPECT_TRUE(NoneCheaper(idle_labelled, gang, p));
    labelled.types.back().accelerator.memory_bytes /= 2;
    ClusterState idle_mixed(labelled);
    PlacementRequest sized = gang;
    sized.device_memory_bytes = int64_t{20} << 30;
    EXPECT_GT(EvaluateBatch(idle_mixed, std::vector<PlacementRequest>{sized},
                            std::vector<Outcome>{p}, model::ResourceWeight{})
                  .memory,
              EvaluateBatch(idle, std::vector<PlacementRequest>{sized}, std::vector<Outcome>{p},
                            model::ResourceWeight{})
                  .memory);
    EXPECT_FALSE(NoneCheaper(idle_mixed, sized, p));
  }
  {
    // One GPU busy under every leaf: no leaf is unloaded, so no placement is at the bound.
    ClusterState busy(t);
    for (const auto& sw : t.switches) {
      if (!sw.nodes.empty()) {
        ASSERT_TRUE(busy.TakeGpu(t.nodes[sw.nodes.front()].first_gpu, 1000));
      }
    }
    const Outcome p = topology->Place(busy, gang);
    ASSERT_TRUE(p.placed());
    EXPECT_FALSE(NoneCheaper(busy, gang, p));
    // ... unless the job takes every GPU left: then every placement takes the same ones.
    const PlacementRequest all{.name = "all", .ranks = t.NumGpus() - 16};
    const Outcome q = topology->Place(busy, all);
    ASSERT_TRUE(q.placed());
    EXPECT_TRUE(NoneCheaper(busy, all, q));
  }
}

// The quality benchmark's instances (bench_placement BM_QualityGap), a few of them: genetic
// within 2% of exact's optimum on average, never worse than topology.
TEST(GeneticStrategy, CloseToExactOnSmallInstances) {
  double gap_sum = 0;
  int instances = 0;
  for (int i = 0; i < 8; ++i) {
    internal::Rng rng(1000 + i);
    model::Topology t = SmallFabric(/*three_tiers=*/i % 2 == 1);
    ClusterState state(t);
    const double share = 0.3 + 0.4 * rng.Unit();
    for (int g = 0; g < t.NumGpus(); ++g) {
      if (rng.Unit() < share) {
        ASSERT_TRUE(state.TakeGpu(g, 1000));
      }
    }
    std::vector<PlacementRequest> reqs;
    const int jobs = 4 + rng.Below(3);
    const int sizes[] = {1, 2, 4, 6, 8, 12, 16};
    for (int j = 0; j < jobs; ++j)
      reqs.push_back({.name = "j" + std::to_string(j), .ranks = sizes[rng.Below(7)]});
    StrategyOptions o;
    o.seed = 7 + i;
    std::vector<Outcome> e = (*MakeStrategy("exact", o))->PlaceBatch(state, reqs);
    bool proven = true;
    for (const Outcome& x : e) proven = proven && x.reason.find("not proven") == std::string::npos;
    if (!proven) continue;
    const double ce = EvaluateBatch(state, reqs, e, o.weights).total;
    const double cg =
        EvaluateBatch(state, reqs, (*MakeStrategy("genetic", o))->PlaceBatch(state, reqs),
                      o.weights)
            .total;
    const double cp =
        EvaluateBatch(state, reqs, (*MakeStrategy("topology", o))->PlaceBatch(state, reqs),
                      o.weights)
            .total;
    EXPECT_LE(cg, cp + 1e-9) << "instance " << i;
    gap_sum += (cg - ce) / std::max(std::abs(ce), 1e-9);
    ++instances;
  }
  ASSERT_GT(instances, 4);
  EXPECT_LE(gap_sum / instances, 0.02);
}

}  // namespace
}  // namespace tianshu::placement
