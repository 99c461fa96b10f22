// The engine's internals through their interfaces: sort keys, the backfill shadow time and the
// id table.
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

// The cycle's sorting helpers give one std::sort's order: keys dealt to their groups keep the
// order met; an insertion sort that gives up past its budget still sorts.
TEST(SortKeys, DealAndMostlySortedGiveOneSortsOrder) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::pair<int, int>> keys;  // (group, value), unique
    const int n = 1 + round * 13;
    for (int i = 0; i < n; ++i) keys.emplace_back(static_cast<int>(rng() % 4), i);
    // Mostly in order inside each group, with a few (more each round) swapped far.
    for (int s = 0; s < round; ++s) {
      std::swap(keys[rng() % keys.size()].second, keys[rng() % keys.size()].second);
    }
    std::vector<std::pair<int, int>> want = keys;
    std::sort(want.begin(), want.end());
    const std::vector<size_t> at =
        internal::DealByGroup(&keys, [](const auto& k) { return k.first; });
    ASSERT_EQ(at.back(), keys.size());
    for (size_t b = 0; b + 1 < at.size(); ++b) {
      for (size_t i = at[b]; i < at[b + 1]; ++i) EXPECT_EQ(keys[i].first, keys[at[b]].first);
      internal::SortMostlySorted(keys, at[b], at[b + 1]);
    }
    EXPECT_EQ(keys, want) << "round " << round;
    std::reverse(keys.begin(), keys.end());  // the worst case: every key far from its place
    internal::SortMostlySorted(keys, 0, keys.size(), std::less<>());
    EXPECT_EQ(keys, want) << "reversed, round " << round;
  }
}

// SmallestK keeps the K smallest of a stream, in the order a min-heap of them all pops them,
// ties included, and says whether it left any value out.
TEST(SortKeys, SmallestKIsWhatAHeapPopsFirst) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const int n = static_cast<int>(rng() % 40);
    std::vector<std::pair<double, int64_t>> all;
    for (int i = 0; i < n; ++i) {  // few distinct values: many ties
      all.emplace_back(static_cast<double>(rng() % 12), static_cast<int64_t>(rng() % 3));
    }
    internal::SmallestK<std::pair<double, int64_t>, 16> first;
    for (const auto& x : all) first.Offer(x);
    std::vector<std::pair<double, int64_t>> want = all;
    std::sort(want.begin(), want.end());
    want.resize(std::min<size_t>(want.size(), 16));
    const auto got = first.Values();
    EXPECT_EQ(std::vector(got.begin(), got.end()), want) << "round " << round;
    EXPECT_EQ(first.HoldsAll(), n <= 16) << "round " << round;
  }
}

// SortedAcrossCalls gives one std::sort's order call after call, while keys come and go, change,
// or carry an id it cannot index (then it sorts the plain way and starts over).
TEST(SortKeys, SortedAcrossCallsIsOneSortsOrder) {
  struct Key {
    int group;
    double at;
    int64_t id;
    auto operator<=>(const Key&) const = default;
  };
  std::mt19937 rng(3);
  internal::SortedAcrossCalls<Key> order;
  std::map<int64_t, Key> live;
  for (int call = 0; call < 300; ++call) {
    // A few arrive, a few leave, a few change; now and then, for one call, an id it cannot
    // index (it sorts the plain way, then starts over), or a large one (its index grows).
    live.erase(-7);
    live.erase(int64_t{1} << 40);
    for (int i = 0; i < 6; ++i) {
      int64_t id = static_cast<int64_t>(rng() % 400);
      if (i == 0 && call % 50 == 49) id = -7;
      if (i == 0 && call % 50 == 24) id = int64_t{1} << 40;
      if (i == 1 && call % 10 == 5) id = 100000 + call;
      live[id] = Key{static_cast<int>(rng() % 3), static_cast<double>(rng() % 100), id};
    }
    for (int i = 0; i < 4; ++i) {
      auto gone = live.lower_bound(static_cast<int64_t>(rng() % 400));
      if (gone != live.end()) live.erase(gone);
    }
    std::vector<Key> keys;
    for (const auto& [id, k] : live) keys.push_back(k);
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<Key> want = keys;
    std::sort(want.begin(), want.end());
    order.Sort(&keys);
    ASSERT_EQ(keys, want) << "call " << call;
  }
  // A key offered twice (not how the engine calls it) is sorted, not lost or doubled.
  std::vector<Key> twice = {{1, 5, 3}, {0, 2, 9}, {1, 5, 3}};
  order.Sort(&twice);
  order.Sort(&twice);
  EXPECT_EQ(twice, (std::vector<Key>{{0, 2, 9}, {1, 5, 3}, {1, 5, 3}}));
}

// EASY backfill's reservation: the head's shadow time is the end at which enough GPUs are
// expected free, whether it takes the first few ends or more than SmallestK keeps.
TEST(Backfill, ShadowTimeIsTheEndThatFreesEnoughGpus) {
  auto topo = Tree(8);  // 64 GPUs
  EngineOptions o = *PresetOptions("slurm");
  auto policy = MakeBackfillPolicy("time", o);
  ASSERT_TRUE(policy) << policy.error().message;
  std::mt19937 rng(5);
  for (int round = 0; round < 60; ++round) {
    JobTable jobs;
    std::vector<JobId> running;
    model::ClusterState working(topo);
    // 1 or 2 GPUs each, at most 60 in all: fewer than 16 running jobs (all kept in one pass)
    // in a quarter of the rounds, more in the others.
    const int n = round % 4 == 0 ? static_cast<int>(rng() % 16) : 20 + static_cast<int>(rng() % 25);
    int64_t used = 0;
    std::vector<std::pair<double, int64_t>> ends;
    for (JobId id = 1; id <= n; ++id) {
      JobRecord r;
      r.id = id;
      r.state = JobState::kRunning;
      r.request.ranks = 1 + static_cast<int>(rng() % 2);
      if (used + r.request.ranks > 60) break;
      r.request.gpu_milli = model::kMilliPerGpu;
      r.start_s = static_cast<double>(rng() % 50);
      // Ties of ends; now and then a job without a run time (expected to end never).
      r.spec.duration_s = rng() % 16 == 0 ? 0 : 100 + static_cast<double>(rng() % 30) * 10;
      r.progress = 0.1 * static_cast<double>(rng() % 5);
      ends.emplace_back(ExpectedEndS(r), r.Gpus());
      used += r.Gpus();
      running.push_back(id);
      jobs.emplace(id, std::move(r));
    }
    // The GPUs the running jobs hold: taken on the working state, node by node.
    int64_t left = used;
    for (const auto& node : topo.nodes) {
      for (int g = 0; g < topo.GpusOn(node.id) && left > 0; ++g, --left) {
        placement::PlacementRequest one;
        one.ranks = 1;
        one.gpu_milli = model::kMilliPerGpu;
        ASSERT_TRUE(placement::Apply(&working, one,
                                     placement::PlacedOutcome({placement::RankSlot{
                                         .node = node.id, .gpu = node.first_gpu + g}})));
      }
    }
    const int64_t free = 64 - used;
    std::sort(ends.begin(), ends.end());
    JobRecord head;
    head.id = 1000;
    // Mostly more than is free (up to more than will ever be); in a fifth of the rounds, what
    // is free now.
    head.request.ranks = round % 5 == 1 ? static_cast<int>(std::max<int64_t>(1, free))
                                        : static_cast<int>(free + 1 + rng() % (used + 8));
    head.request.gpu_milli = model::kMilliPerGpu;
    // The reference: every end in order, until enough is free (now, where it is already).
    double shadow = kNever;
    int64_t at = free;
    for (const auto& [end, gpus] : ends) {
      if (at >= head.Gpus()) break;
      at += gpus;
      shadow = end;
    }
    if (at >= head.Gpus() && shadow == kNever) shadow = 60;
    const CycleView v{
        .now_s = 60, .state = &working, .jobs = &jobs, .running = running, .options = &o};
    const Reservation r = (*policy)->Reserve(v, head, working);
    EXPECT_TRUE(r.active);
    // (Where the head needs more than will ever be free, the last end.)
    EXPECT_EQ(r.shadow_s, shadow) << "round " << round << ", " << head.Gpus() << " GPUs";
    EXPECT_EQ(r.spare_gpus, std::max<int64_t>(0, at - head.Gpus())) << "round " << round;
  }
}

// The job table: records found by id whether ids are small (a flat index) or not (hashed),
// at addresses that stay put while others come and go.
TEST(IdTable, FindsEveryRecordAtAStableAddress) {
  IdTable<int> t;
  std::vector<const int*> at;
  const std::vector<int64_t> ids = {0, 1, 5, 4095, 4096, 1000000000, -3, 77};
  for (int64_t id : ids) {
    auto [e, inserted] = t.emplace(id, static_cast<int>(id % 1000));
    ASSERT_TRUE(inserted) << id;
    at.push_back(&e->second);
  }
  for (int i = 0; i < 20000; ++i) (void)t.emplace(100 + i, i);  // the flat index grows
  EXPECT_EQ(t.size(), ids.size() + 20000 - 2);                  // 4095 and 4096 were there already
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_NE(t.find(ids[i]), t.end()) << ids[i];
    EXPECT_EQ(&t.at(ids[i]), at[i]) << ids[i];
    EXPECT_EQ(t.at(ids[i]), static_cast<int>(ids[i] % 1000));
  }
  EXPECT_FALSE(t.emplace(5, 99).second);
  EXPECT_EQ(t.at(5), 5);
  t.erase(t.find(5));
  t.erase(t.find(1000000000));
  EXPECT_EQ(t.find(5), t.end());
  EXPECT_EQ(t.count(1000000000), 0U);
  EXPECT_THROW((void)t.at(5), std::out_of_range);
  EXPECT_EQ(t.count(4096), 1U);
  ASSERT_TRUE(t.emplace(5, 6).second);
  EXPECT_EQ(t.at(5), 6);
  EXPECT_EQ(t.size(), ids.size() + 20000 - 3);
  // A negative id, and a large one inserted before the flat index reached it: both hashed.
  IdTable<int> u;
  ASSERT_TRUE(u.emplace(-3, 1).second);
  ASSERT_TRUE(u.emplace(9000, 2).second);  // beyond 4,096 slots with one record
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(u.emplace(i, i).second);  // the index grows past it
  ASSERT_NE(u.find(9000), u.end());
  EXPECT_EQ(u.at(9000), 2);
  u.erase(u.find(9000));
  u.erase(u.find(-3));
  EXPECT_EQ(u.count(9000) + u.count(-3), 0U);
  ASSERT_TRUE(u.emplace(9000, 3).second);
  EXPECT_EQ(std::as_const(u).at(9000), 3);
  EXPECT_EQ(u.size(), 2001U);
}

}  // namespace
}  // namespace tianshu::engine
