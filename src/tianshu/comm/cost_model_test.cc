#include "tianshu/comm/cost_model.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tianshu/comm/bandwidth_matrix.h"

namespace tianshu::comm {
namespace {

model::Topology FatTree(int nodes, const std::string& gpu = "A100-80GB", int per_leaf = 16,
                        double oversub = 1, int leaves_per_spine = 0) {
  auto t = model::GenerateFatTree({.nodes = nodes,
                                   .gpu = gpu,
                                   .nodes_per_leaf = per_leaf,
                                   .leaves_per_spine = leaves_per_spine,
                                   .oversubscription = oversub});
  EXPECT_TRUE(t.has_value());
  return *t;
}

std::vector<int> Iota(int n, int from = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// nccl-tests reports bus bandwidth at its largest sizes; 8 GiB makes latency negligible.
constexpr int64_t kLarge = int64_t{8} << 30;
constexpr CostOptions kAlone{.contended = false};  // a benchmark has the fabric to itself

double BusGBps(const model::Topology& t, std::span<const int> gpus, Algorithm a) {
  auto c = CostCollective(t, gpus, Collective::kAllReduce, kLarge, a, kAlone);
  return BusBandwidth(Collective::kAllReduce, static_cast<int>(gpus.size()), kLarge, c.seconds) /
         1e9;
}

// Published nccl-tests bus bandwidths (all_reduce_perf, largest sizes):
//  - 8xA100 SXM4 NVSwitch (DGX A100): ~230 GB/s (NVIDIA DGX A100 user guide, nccl-tests
//    results published with NCCL 2.7+).
//  - 8xH100 SXM5 ring: ~370 GB/s (NVIDIA NCCL 2.18 performance figures, NCCL_ALGO=Ring).
//  - multi-node DGX A100, 8x HDR 200 Gb/s per node: ~190 GB/s (NVIDIA DGX SuperPOD reference
//    architecture, nccl-tests across nodes).
TEST(CostModelPublished, NcclTestsA100NvSwitchAllReduce) {
  auto t = FatTree(1);
  auto gpus = Iota(8);
  EXPECT_NEAR(BusGBps(t, gpus, Algorithm::kAuto), 230.0, 230.0 * 0.15);
}

TEST(CostModelPublished, NcclTestsH100RingAllReduce) {
  auto t = FatTree(1, "H100-80GB");
  auto gpus = Iota(8);
  EXPECT_NEAR(BusGBps(t, gpus, Algorithm::kRing), 370.0, 370.0 * 0.15);
  // NVLS, where the hardware has it, beats the ring (~480 GB/s published).
  EXPECT_GT(BusGBps(t, gpus, Algorithm::kAuto), BusGBps(t, gpus, Algorithm::kRing));
  EXPECT_EQ(CostCollective(t, gpus, Collective::kAllReduce, kLarge).algorithm, Algorithm::kNvls);
}

TEST(CostModelPublished, NcclTestsMultiNodeDgxA100) {
  for (int nodes : {2, 4, 16, 64}) {
    auto t = FatTree(nodes);
    auto gpus = Iota(8 * nodes);
    EXPECT_NEAR(BusGBps(t, gpus, Algorithm::kRing), 190.0, 190.0 * 0.15) << nodes << " nodes";
  }
}

// Tree beats ring for small messages on many nodes; ring wins large ones on few; the size at
// which they cross grows with the node count (ring latency is linear in ranks, tree's
// logarithmic; Jeaugey 2019, "Massively scale your deep learning training with NCCL 2.4").
TEST(CostModelPublished, TreeRingCrossoverMovesWithNodeCount) {
  auto cost = [](const model::Topology& t, std::span<const int> g, int64_t bytes, Algorithm a) {
    return CostCollective(t, g, Collective::kAllReduce, bytes, a, kAlone).seconds;
  };
  {
    auto t = FatTree(128);
    auto g = Iota(8 * 128);
    EXPECT_LT(cost(t, g, 64 << 10, Algorithm::kTree), cost(t, g, 64 << 10, Algorithm::kRing));
  }
  {
    auto t = FatTree(2);
    auto g = Iota(16);
    EXPECT_LT(cost(t, g, int64_t{1} << 30, Algorithm::kRing),
              cost(t, g, int64_t{1} << 30, Algorithm::kTree));
  }
  double previous = 0, first = 0;
  for (int nodes : {2, 4, 8, 16, 32, 64, 128}) {
    auto t = FatTree(nodes);
    auto g = Iota(8 * nodes);
    // Largest power-of-two size at which tree is still faster.
    int64_t cross = 0;
    for (int64_t b = 1024; b <= (int64_t{1} << 34); b *= 2) {
      if (cost(t, g, b, Algorithm::kTree) < cost(t, g, b, Algorithm::kRing)) cross = b;
    }
    EXPECT_GT(cross, 0) << nodes;
    EXPECT_GE(static_cast<double>(cross), previous) << nodes << " nodes";
    previous = static_cast<double>(cross);
    if (first == 0) first = previous;
  }
  // The model: 8 MiB on 2 nodes, hundreds of MiB and more on 128 (ring latency grows with
  // 2(n-1) steps, tree's with 2·log2(nodes)).
  EXPECT_LE(first, 16.0 * (1 << 20));
  EXPECT_GE(previous, 16 * first);
}

TEST(CostModel, LinkClassesAreOrdered) {
  auto t = FatTree(64, "A100-80GB", 8, 1, 4);  // 8 leaves, 2 spines, a core
  EXPECT_EQ(ClassBetween(t, 0, 0), LinkClass::kSameDevice);
  EXPECT_EQ(ClassBetween(t, 0, 1), LinkClass::kNvLink);
  EXPECT_EQ(ClassBetween(t, 0, 8), LinkClass::kNicLeaf);
  EXPECT_EQ(ClassBetween(t, 0, 8 * 8), LinkClass::kLeafSpine);
  EXPECT_EQ(ClassBetween(t, 0, 8 * 32), LinkClass::kSpineCore);
  EXPECT_LT(LinkClass::kNvLink, LinkClass::kNicLeaf);
}

TEST(CostModel, PcieServersClassifyByPcieSwitch) {
  auto t = FatTree(1, "L40S-48GB");
  EXPECT_EQ(ClassBetween(t, 0, 1), LinkClass::kPcieSwitch);
  EXPECT_EQ(ClassBetween(t, 0, 2), LinkClass::kPcieHost);
  LinkClass b;
  double same_switch = BottleneckBandwidth(t, std::vector<int>{0, 1}, {}, &b);
  EXPECT_EQ(b, LinkClass::kPcieSwitch);
  double across = BottleneckBandwidth(t, std::vector<int>{0, 7}, {}, &b);
  EXPECT_EQ(b, LinkClass::kPcieHost);
  EXPECT_LT(across, same_switch);
}

TEST(CostModel, TensorParallelAcrossLeavesIsSeveralTimesSlower) {
  auto t = FatTree(32);  // two leaves of 16 nodes
  std::vector<int> inside = Iota(8);
  // Eight ranks, one on each of 4 nodes of leaf 0 and 4 nodes of leaf 1.
  std::vector<int> spread;
  for (int i = 0; i < 4; ++i) spread.push_back(8 * i);
  for (int i = 0; i < 4; ++i) spread.push_back(8 * (16 + i));
  int64_t bytes = 2 * 2048 * 12288;  // one Megatron TP all-reduce of a 175B layer
  auto a = CostCollective(t, inside, Collective::kAllReduce, bytes);
  auto b = CostCollective(t, spread, Collective::kAllReduce, bytes);
  EXPECT_EQ(a.bottleneck, LinkClass::kNvLink);
  EXPECT_EQ(a.span, LinkClass::kNvLink);
  EXPECT_GE(b.bottleneck, LinkClass::kNicLeaf);
  EXPECT_EQ(b.span, LinkClass::kLeafSpine);
  EXPECT_GT(b.seconds, 5 * a.seconds);
}

TEST(CostModel, OversubscriptionSlowsAllToAllAcrossLeaves) {
  auto flat = FatTree(32, "A100-80GB", 8, 1);
  auto over = FatTree(32, "A100-80GB", 8, 4);
  auto g = Iota(256);
  int64_t bytes = 256 << 20;
  double a = CollectiveSeconds(flat, g, Collective::kAllToAll, bytes);
  double b = CollectiveSeconds(over, g, Collective::kAllToAll, bytes);
  EXPECT_GT(b, 2.5 * a);
  // Inside one leaf, oversubscription does not matter.
  auto leaf = Iota(64);
  EXPECT_DOUBLE_EQ(CollectiveSeconds(flat, leaf, Collective::kAllToAll, bytes),
                   CollectiveSeconds(over, leaf, Collective::kAllToAll, bytes));
}

TEST(CostModel, EveryCollectiveIsPricedAndMonotoneInBytes) {
  auto t = FatTree(16);
  auto g = Iota(64);
  for (Collective op : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                        Collective::kAllToAll, Collective::kBroadcast, Collective::kSendRecv}) {
    double small = CollectiveSeconds(t, g, op, 1 << 10);
    double big = CollectiveSeconds(t, g, op, 1 << 28);
    EXPECT_GT(small, 0) << CollectiveName(op);
    EXPECT_GT(big, small) << CollectiveName(op);
  }
  EXPECT_EQ(CollectiveSeconds(t, std::vector<int>{3}, Collective::kAllReduce, 1 << 20), 0.0);
  EXPECT_EQ(CollectiveSeconds(t, {}, Collective::kAllReduce, 1 << 20), 0.0);
}

TEST(CostModel, ExplicitAlgorithmIsHonouredOrFallsBack) {
  auto t = FatTree(4);
  auto g = Iota(32);
  EXPECT_EQ(CostCollective(t, g, Collective::kAllReduce, 1 << 20, Algorithm::kTree).algorithm,
            Algorithm::kTree);
  EXPECT_EQ(
      CostCollective(t, g, Collective::kAllReduce, 1 << 20, Algorithm::kHierarchical).algorithm,
      Algorithm::kHierarchical);
  // A100 has no NVLS: the request falls back to what the group can run.
  EXPECT_NE(CostCollective(t, g, Collective::kAllReduce, 1 << 20, Algorithm::kNvls).algorithm,
            Algorithm::kNvls);
}

TEST(CostModel, SmallMessagesUseLowLatencyProtocols) {
  auto t = FatTree(8);
  auto g = Iota(64);
  EXPECT_EQ(CostCollective(t, g, Collective::kAllReduce, 4096).protocol, Protocol::kLL);
  EXPECT_EQ(CostCollective(t, g, Collective::kAllReduce, int64_t{1} << 30).protocol,
            Protocol::kSimple);
}

TEST(BandwidthMatrix, MeasuredFiguresReplaceNominal) {
  auto t = FatTree(2);
  auto m = ParseBandwidthMatrix("probe.csv",
                                "# measured\n"
                                "a,b,gbps\n"
                                "node-0,node-1,50   # a degraded cable\n"
                                "node-0:0,node-0:1,100\n",
                                t);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_DOUBLE_EQ(*m->NodePair(1, 0), 50e9);
  EXPECT_DOUBLE_EQ(*m->GpuPair(1, 0), 100e9);
  auto g = Iota(16);
  CostOptions with{.measured = &*m, .contended = false};
  double nominal = BottleneckBandwidth(t, g, kAlone);
  double measured = BottleneckBandwidth(t, g, with);
  EXPECT_NEAR(measured, 50e9, 1e6);
  EXPECT_GT(nominal, 3 * measured);
}

TEST(BandwidthMatrix, ErrorsNameTheLine) {
  auto t = FatTree(2);
  auto m = ParseBandwidthMatrix("probe.csv", "node-0,node-9,20\n", t);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().message, "probe.csv:1: unknown node 'node-9'");
  auto bad = ParseBandwidthMatrix("p.csv", "node-0,node-1,20\nnode-0:9,node-1:0,4\n", t);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "p.csv:2: node 'node-0' has no GPU 9");
  auto neg = ParseBandwidthMatrix("p.csv", "node-0,node-1,-3\n", t);
  ASSERT_FALSE(neg.has_value());
}

TEST(BandwidthMatrix, UncoveredPairsKeepNominalFigures) {
  auto t = FatTree(4);
  // One pair measured faster than nominal: the ring still meets nominal NICs elsewhere.
  auto m = ParseBandwidthMatrix("probe.csv", "node-0,node-1,400\n", t);
  ASSERT_TRUE(m.has_value());
  auto g = Iota(32);
  CostOptions with{.measured = &*m, .contended = false};
  EXPECT_DOUBLE_EQ(BottleneckBandwidth(t, g, with), BottleneckBandwidth(t, g, kAlone));
}

}  // namespace
}  // namespace tianshu::comm
