#include "tianshu/server/network_map.h"

#include <gtest/gtest.h>

#include <set>

namespace tianshu::server {
namespace {

// Four nodes the nominal topology puts under one leaf; the real fabric joins n1 with n3 and
// n2 with n4, and the link between the two halves is slow.
std::vector<ProbeNode> FourNodes(bool idle = true) {
  std::vector<ProbeNode> out;
  for (const char* n : {"n1", "n2", "n3", "n4"}) out.push_back({n, "leaf0", 0, idle});
  return out;
}

NominalPair Flat(const std::string&, const std::string&) { return {12.5, "same-leaf 12.5"}; }

bool SameHalf(const std::string& a, const std::string& b) {
  auto half = [](const std::string& n) { return (n.back() - '0') % 2; };
  return half(a) == half(b);
}

// Probes every pair NextProbe proposes, with the fabric's figures, until none is due, at `now`
// and again once the slow pairs are due for their second figure.
NetworkMap ProbeAll(const model::NetworkConfig& c, int64_t now) {
  NetworkMap m;
  for (int64_t at : {now, now + NetworkMap::kRecheckMs}) {
    for (int i = 0; i < 20; ++i) {
      auto next = m.NextProbe(FourNodes(), Flat, c, at);
      if (!next) break;
      m.Record({.a = next->first,
                .b = next->second,
                .busbw_gbps = SameHalf(next->first, next->second) ? 1.0 : 0.03,
                .method = "gloo",
                .measured_ms = at});
    }
  }
  return m;
}

TEST(NetworkMap, SmallLeavesAreProbedPairByPairAndTheSlowOnesAreExactlyTheCrossPairs) {
  model::NetworkConfig c;
  NetworkMap m = ProbeAll(c, 1'000'000);
  EXPECT_EQ(m.size(), 6u);
  int slow = 0;
  for (const PairView& v : m.View({"n1", "n2", "n3", "n4"}, Flat, c, 1'005'000)) {
    EXPECT_EQ(v.slow, !SameHalf(v.measured.a, v.measured.b)) << v.measured.a << v.measured.b;
    EXPECT_EQ(v.confirmed, v.slow) << "measured twice";
    EXPECT_DOUBLE_EQ(v.class_best_gbps, 1.0);
    // The scheduler's figure: the nominal one scaled by the share of the class best reached.
    EXPECT_DOUBLE_EQ(v.effective_gbps,
                     Flat(v.measured.a, v.measured.b).gbps * v.measured.busbw_gbps / 1.0);
    slow += v.slow;
  }
  EXPECT_EQ(slow, 4);
  auto leaves = m.MeasuredLeaves(FourNodes(), Flat, c, 1'005'000);
  EXPECT_EQ(leaves.at("n1"), leaves.at("n3"));
  EXPECT_EQ(leaves.at("n2"), leaves.at("n4"));
  EXPECT_NE(leaves.at("n1"), leaves.at("n2"));
  EXPECT_EQ(leaves.at("n1"), "leaf0~1");
}

TEST(NetworkMap, NothingIsDueUntilTheIntervalOrANodeChanges) {
  model::NetworkConfig c;
  c.probe_interval_s = 60;
  NetworkMap m = ProbeAll(c, 1'000'000);
  EXPECT_FALSE(m.NextProbe(FourNodes(), Flat, c, 1'000'000 + 59'000));
  auto nodes = FourNodes();
  nodes[2].changed_ms = 1'005'500;  // n3 re-registered after its pairs were measured
  auto next = m.NextProbe(nodes, Flat, c, 1'006'000);
  ASSERT_TRUE(next);
  EXPECT_TRUE(next->first == "n3" || next->second == "n3");
  EXPECT_TRUE(m.NextProbe(FourNodes(), Flat, c, 1'000'000 + 61'000));
  EXPECT_FALSE(m.NextProbe(FourNodes(/*idle=*/false), Flat, c, 5'000'000))
      << "busy nodes are spared";
}

TEST(NetworkMap, StaleFiguresAreShownButNeitherJudgedNorGrouped) {
  model::NetworkConfig c;
  c.measured_ttl_s = 100;
  NetworkMap m = ProbeAll(c, 1'000'000);
  const int64_t later = 1'005'000 + 101'000;
  for (const PairView& v : m.View({"n1", "n2", "n3", "n4"}, Flat, c, later)) {
    EXPECT_TRUE(v.stale);
    EXPECT_FALSE(v.slow);
    EXPECT_EQ(v.effective_gbps, 0);  // used nowhere
  }
  for (const auto& [node, leaf] : m.MeasuredLeaves(FourNodes(), Flat, c, later)) {
    EXPECT_EQ(leaf, "leaf0") << node;
  }
}

TEST(NetworkMap, FailedPairsBackOffAndSuccessClearsTheCount) {
  model::NetworkConfig c;
  c.probe_interval_s = 10;
  NetworkMap m;
  std::set<std::pair<std::string, std::string>> failed;
  for (int i = 0; i < 6; ++i) {
    auto next = m.NextProbe(FourNodes(), Flat, c, 0);
    ASSERT_TRUE(next);
    m.RecordFailure(next->first, next->second, 0);
    failed.insert(*next);
  }
  EXPECT_EQ(failed.size(), 6u);
  EXPECT_FALSE(m.NextProbe(FourNodes(), Flat, c, 9'000));
  EXPECT_TRUE(m.NextProbe(FourNodes(), Flat, c, 10'000));
  m.Record({.a = "n2", .b = "n1", .busbw_gbps = 1, .method = "gloo", .measured_ms = 10'000});
  ASSERT_NE(m.Find("n1", "n2"), nullptr);
  EXPECT_EQ(m.Find("n1", "n2")->failures, 0);
}

TEST(NetworkMap, LargeLeavesGetARingAndAChordNotEveryPair) {
  std::vector<ProbeNode> nodes;
  for (int i = 0; i < 40; ++i) {
    nodes.push_back({"n" + std::to_string(100 + i), i < 20 ? "a" : "b", 0, true});
  }
  auto pairs = NetworkMap::CoverPairs(nodes, 8, 0);
  // 2 leaves x 20 nodes x (ring + chord) + 1 cross pair, against 780 pairs in all.
  EXPECT_EQ(pairs.size(), 2u * 20 * 2 + 1);
  std::map<std::string, int> degree;
  for (const auto& [a, b] : pairs) ++degree[a], ++degree[b];
  for (const auto& n : nodes) EXPECT_GE(degree[n.name], 3) << n.name;
  EXPECT_NE(NetworkMap::CoverPairs(nodes, 8, 0), NetworkMap::CoverPairs(nodes, 8, 1));
}

TEST(NetworkMap, PersistsOneRowPerPairAndSkipsRowsItCannotRead) {
  model::NetworkConfig c;
  NetworkMap m = ProbeAll(c, 1'000'000);
  std::map<std::string, std::string> meta;
  for (const auto& v : m.View({"n1", "n2", "n3", "n4"}, Flat, c, 1'005'000)) {
    meta[NetworkMap::MetaKey(v.measured.b, v.measured.a)] = m.MetaValue(v.measured.a, v.measured.b);
  }
  meta["net/pair/n1|n9"] = R"({"busbw_gbps": -1})";
  meta["net/pair/bad"] = "{}";
  meta["user/x"] = "{}";
  NetworkMap back;
  auto skipped = back.Load(meta);
  EXPECT_EQ(skipped.size(), 2u);
  EXPECT_EQ(back.size(), 6u);
  ASSERT_NE(back.Find("n3", "n1"), nullptr);
  EXPECT_DOUBLE_EQ(back.Find("n3", "n1")->busbw_gbps, 1.0);
  EXPECT_EQ(back.Find("n3", "n1")->method, "gloo");
  ASSERT_NE(back.Find("n1", "n2"), nullptr);  // slow, measured twice
  EXPECT_DOUBLE_EQ(back.Find("n1", "n2")->previous_gbps, 0.03);
  // A row from before previous_gbps existed reads as one figure; a bad one is skipped.
  NetworkMap old;
  EXPECT_TRUE(old.Load({{"net/pair/n1|n2", R"({"busbw_gbps": 0.5, "forward_gbps": 0,
      "backward_gbps": 0, "method": "gloo", "measured_ms": 5, "failures": 0, "failed_ms": 0})"},
                        {"net/pair/n1|n3", R"({"busbw_gbps": 0.5, "forward_gbps": 0,
      "backward_gbps": 0, "method": "gloo", "measured_ms": 5, "failures": 0, "failed_ms": 0,
      "previous_gbps": "fast"})"}})
                  .size() == 1);
  ASSERT_NE(old.Find("n1", "n2"), nullptr);
  EXPECT_EQ(old.Find("n1", "n2")->previous_gbps, MeasuredPair::kNoFigure);
}

// One disturbed probe (a loaded node, a burst of other traffic) does not split a leaf: a pair
// slow on one figure is shown slow, probed again kRecheckMs later, and splits the leaf only if
// that figure is slow too. Before, one slow figure split a leaf of 16 nodes into 14 and 2 on a
// loaded machine, and gangs that needed whole leaves then ran one at a time.
TEST(NetworkMap, OneSlowFigureIsCheckedAgainBeforeTheLeafSplits) {
  model::NetworkConfig c;
  c.probe_interval_s = 3600;
  NetworkMap m;  // one figure for every pair: the four crossing the halves slow
  auto measure = [&](const std::string& a, const std::string& b, int64_t at) {
    m.Record({.a = a,
              .b = b,
              .busbw_gbps = SameHalf(a, b) ? 1.0 : 0.03,
              .method = "gloo",
              .measured_ms = at});
  };
  for (const auto& [a, b] : NetworkMap::CoverPairs(FourNodes(), 8, 0)) measure(a, b, 1000);
  ASSERT_EQ(m.size(), 6u);
  auto view = [&](int64_t now) {
    std::map<std::pair<std::string, std::string>, PairView> out;
    for (const PairView& v : m.View({"n1", "n2", "n3", "n4"}, Flat, c, now)) {
      out[{v.measured.a, v.measured.b}] = v;
    }
    return out;
  };
  for (const auto& [k, v] : view(2000)) {
    EXPECT_EQ(v.slow, !SameHalf(k.first, k.second)) << k.first << k.second;
    EXPECT_FALSE(v.confirmed) << k.first << k.second;
  }
  for (const auto& [node, leaf] : m.MeasuredLeaves(FourNodes(), Flat, c, 2000)) {
    EXPECT_EQ(leaf, "leaf0") << node << ": one figure splits nothing";
  }
  // The slow pairs are due again after kRecheckMs, not after the hour; the fast ones are not.
  EXPECT_FALSE(m.NextProbe(FourNodes(), Flat, c, 1000 + NetworkMap::kRecheckMs - 1));
  const int64_t again = 1000 + NetworkMap::kRecheckMs;
  std::set<std::pair<std::string, std::string>> rechecked;
  for (int i = 0; i < 10; ++i) {
    auto next = m.NextProbe(FourNodes(), Flat, c, again);
    if (!next) break;
    rechecked.insert(*next);
    if (*next == std::make_pair(std::string("n1"), std::string("n2"))) {
      m.Record({.a = "n1", .b = "n2", .busbw_gbps = 0.95, .method = "gloo", .measured_ms = again});
    } else {
      measure(next->first, next->second, again);
    }
  }
  EXPECT_EQ(rechecked.size(), 4u);
  for (const auto& [a, b] : rechecked) EXPECT_FALSE(SameHalf(a, b)) << a << b;
  // Slow twice: confirmed, and the leaf splits into the halves. n1-n2 was fine the second
  // time: not slow, and it joins nothing the other fast pairs do not.
  auto v = view(again + 1000);
  EXPECT_FALSE(v.at({"n1", "n2"}).slow);
  EXPECT_TRUE(v.at({"n1", "n4"}).confirmed);
  EXPECT_TRUE(v.at({"n2", "n3"}).confirmed);
  EXPECT_TRUE(v.at({"n3", "n4"}).confirmed);
  auto leaves = m.MeasuredLeaves(FourNodes(), Flat, c, again + 1000);
  EXPECT_EQ(leaves.at("n1"), leaves.at("n3"));
  EXPECT_EQ(leaves.at("n1"), leaves.at("n2")) << "n1-n2 measured fast joins the halves";
  EXPECT_FALSE(m.NextProbe(FourNodes(), Flat, c, again + NetworkMap::kRecheckMs))
      << "confirmed or fine: nothing to check again";
}

// Six nodes under one leaf: n1-n2 and n3-n4 fast, n1-n5 slow twice, n5-n6 slow once. The fast
// groups join (nothing measured between them), n5 stays apart from n1's group, and n6, whose one
// pair is slow on one figure only, joins the largest group: a single figure joins nothing and
// splits nothing.
TEST(NetworkMap, GroupsJoinUnlessAConfirmedSlowPairLiesBetween) {
  model::NetworkConfig c;
  std::vector<ProbeNode> six;
  for (const char* n : {"n1", "n2", "n3", "n4", "n5", "n6"}) six.push_back({n, "leaf0", 0, true});
  NetworkMap m;
  auto record = [&](const char* a, const char* b, double gbps, int64_t at) {
    m.Record({.a = a, .b = b, .busbw_gbps = gbps, .method = "gloo", .measured_ms = at});
  };
  record("n1", "n2", 1.0, 1000);
  record("n3", "n4", 1.0, 1000);
  record("n1", "n5", 0.0, 1000);  // a collapsed link: 0 is a figure, and confirms the next
  record("n1", "n5", 0.1, 7000);
  record("n5", "n6", 0.1, 7000);
  auto leaves = m.MeasuredLeaves(six, Flat, c, 8000);
  EXPECT_EQ(leaves.at("n1"), "leaf0~1");
  EXPECT_EQ(leaves.at("n2"), "leaf0~1");
  EXPECT_EQ(leaves.at("n3"), "leaf0~1");
  EXPECT_EQ(leaves.at("n4"), "leaf0~1");
  EXPECT_EQ(leaves.at("n6"), "leaf0~1");
  EXPECT_EQ(leaves.at("n5"), "leaf0~2");
  // Only the pair slow once is due again soon: n1-n5 (confirmed) is not re-probed every few
  // seconds.
  std::vector<ProbeNode> busy = six;
  for (auto& n : busy) n.idle = n.name == "n5" || n.name == "n6" || n.name == "n1";
  std::set<std::pair<std::string, std::string>> probed;  // among n1, n5, n6: two are due
  for (int i = 0; i < 4; ++i) {
    auto next = m.NextProbe(busy, Flat, c, 7000 + NetworkMap::kRecheckMs);
    if (!next) break;
    probed.insert(*next);
    record(next->first.c_str(), next->second.c_str(), 1.0, 7000 + NetworkMap::kRecheckMs);
  }
  EXPECT_EQ(probed, (std::set<std::pair<std::string, std::string>>{{"n1", "n6"}, {"n5", "n6"}}));
}

// Two groups that nothing measured lies between are one: only a confirmed slow pair splits a
// leaf. Before, two fast pairs probed first in one leaf of 16 (n1-n2, n3-n4) split it 14 + 2,
// and gangs that needed whole leaves ran one at a time (the burst harness's 1,024-GPU jobs).
TEST(NetworkMap, FastPairsProbedApartDoNotSplitALeaf) {
  model::NetworkConfig c;
  NetworkMap m;
  m.Record({.a = "n1", .b = "n2", .busbw_gbps = 1.0, .method = "gloo", .measured_ms = 1000});
  m.Record({.a = "n3", .b = "n4", .busbw_gbps = 0.9, .method = "gloo", .measured_ms = 1000});
  for (const auto& [node, leaf] : m.MeasuredLeaves(FourNodes(), Flat, c, 2000)) {
    EXPECT_EQ(leaf, "leaf0") << node;
  }
}

}  // namespace
}  // namespace tianshu::server
