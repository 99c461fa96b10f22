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

// Probes every pair NextProbe proposes, with the fabric's figures, until none is due.
NetworkMap ProbeAll(const model::NetworkConfig& c, int64_t now) {
  NetworkMap m;
  for (int i = 0; i < 20; ++i) {
    auto next = m.NextProbe(FourNodes(), c, now);
    if (!next) break;
    m.Record({.a = next->first,
              .b = next->second,
              .busbw_gbps = SameHalf(next->first, next->second) ? 1.0 : 0.03,
              .method = "gloo",
              .measured_ms = now});
  }
  return m;
}

TEST(NetworkMap, SmallLeavesAreProbedPairByPairAndTheSlowOnesAreExactlyTheCrossPairs) {
  model::NetworkConfig c;
  NetworkMap m = ProbeAll(c, 1'000'000);
  EXPECT_EQ(m.size(), 6u);
  int slow = 0;
  for (const PairView& v : m.View({"n1", "n2", "n3", "n4"}, Flat, c, 1'000'000)) {
    EXPECT_EQ(v.slow, !SameHalf(v.measured.a, v.measured.b)) << v.measured.a << v.measured.b;
    EXPECT_DOUBLE_EQ(v.class_best_gbps, 1.0);
    // The scheduler's figure: the nominal one scaled by the share of the class best reached.
    EXPECT_DOUBLE_EQ(v.effective_gbps,
                     Flat(v.measured.a, v.measured.b).gbps * v.measured.busbw_gbps / 1.0);
    slow += v.slow;
  }
  EXPECT_EQ(slow, 4);
  auto leaves = m.MeasuredLeaves(FourNodes(), Flat, c, 1'000'000);
  EXPECT_EQ(leaves.at("n1"), leaves.at("n3"));
  EXPECT_EQ(leaves.at("n2"), leaves.at("n4"));
  EXPECT_NE(leaves.at("n1"), leaves.at("n2"));
  EXPECT_EQ(leaves.at("n1"), "leaf0~1");
}

TEST(NetworkMap, NothingIsDueUntilTheIntervalOrANodeChanges) {
  model::NetworkConfig c;
  c.probe_interval_s = 60;
  NetworkMap m = ProbeAll(c, 1'000'000);
  EXPECT_FALSE(m.NextProbe(FourNodes(), c, 1'000'000 + 59'000));
  auto nodes = FourNodes();
  nodes[2].changed_ms = 1'000'500;  // n3 re-registered after its pairs were measured
  auto next = m.NextProbe(nodes, c, 1'001'000);
  ASSERT_TRUE(next);
  EXPECT_TRUE(next->first == "n3" || next->second == "n3");
  EXPECT_TRUE(m.NextProbe(FourNodes(), c, 1'000'000 + 61'000));
  EXPECT_FALSE(m.NextProbe(FourNodes(/*idle=*/false), c, 5'000'000)) << "busy nodes are spared";
}

TEST(NetworkMap, StaleFiguresAreShownButNeitherJudgedNorGrouped) {
  model::NetworkConfig c;
  c.measured_ttl_s = 100;
  NetworkMap m = ProbeAll(c, 1'000'000);
  const int64_t later = 1'000'000 + 101'000;
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
    auto next = m.NextProbe(FourNodes(), c, 0);
    ASSERT_TRUE(next);
    m.RecordFailure(next->first, next->second, 0);
    failed.insert(*next);
  }
  EXPECT_EQ(failed.size(), 6u);
  EXPECT_FALSE(m.NextProbe(FourNodes(), c, 9'000));
  EXPECT_TRUE(m.NextProbe(FourNodes(), c, 10'000));
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
  for (const auto& v : m.View({"n1", "n2", "n3", "n4"}, Flat, c, 1'000'000)) {
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
}

}  // namespace
}  // namespace tianshu::server
