#include "tianshu/agent/bandwidth_probe.h"

#include <gtest/gtest.h>

#include <set>

namespace tianshu::agent {
namespace {

// A probe's launch: `local` ranks on this node of `world`, each with one device.
wire::LaunchOrder Probe(const std::string& method, int local, int world,
                        const std::string& backend = "cuda") {
  wire::LaunchOrder l{.job_name = "probe", .backend = backend, .world_size = world};
  for (int r = 0; r < local; ++r) {
    l.ranks.push_back({.rank = r, .local_rank = r, .devices = {r}});
  }
  l.probe = wire::ProbeSpec{.method = method, .bytes = 16 << 20, .seconds = 2};
  return l;
}

ProbeTools Tools(std::set<std::string> files) {
  ProbeTools t{.script = "/usr/share/tianshu/probes/gloo_bandwidth.py",
               .path = {"/usr/local/bin", "relative", "/usr/bin"}};
  t.exists = [files = std::move(files)](const std::string& p) { return files.count(p) > 0; };
  return t;
}

TEST(BandwidthProbe, AutoPicksTheVendorTestOnlyWhereItCanRun) {
  const ProbeTools none = Tools({});
  const ProbeTools nccl = Tools({"/usr/bin/all_reduce_perf"});
  const ProbeTools hccl = Tools({"/usr/bin/all_reduce_test", "/usr/local/bin/mpirun"});
  EXPECT_EQ(*ProbeMethod(Probe("auto", 2, 2), none), "gloo");
  EXPECT_EQ(*ProbeMethod(Probe("auto", 2, 2), nccl), "nccl-tests");
  EXPECT_EQ(*ProbeMethod(Probe("auto", 2, 2, "rocm"), nccl), "rccl-tests");
  EXPECT_EQ(*ProbeMethod(Probe("auto", 2, 2, "ascend"), hccl), "hccl-test");
  EXPECT_EQ(*ProbeMethod(Probe("auto", 2, 2, "ascend"), nccl), "gloo");  // no mpirun
  EXPECT_EQ(*ProbeMethod(Probe("auto", 1, 2), nccl), "gloo");            // a rank on another node
  EXPECT_EQ(*ProbeMethod(Probe("gloo", 2, 2), nccl), "gloo");
  EXPECT_EQ(*ProbeMethod(Probe("nccl-tests", 2, 2), nccl), "nccl-tests");
  auto missing = ProbeMethod(Probe("nccl-tests", 2, 2), none);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "nccl-tests: all_reduce_perf is not on the PATH");
  auto remote = ProbeMethod(Probe("nccl-tests", 1, 2), nccl);
  ASSERT_FALSE(remote);
  EXPECT_NE(remote.error().message.find("only under MPI"), std::string::npos);
  // A relative PATH entry is never searched.
  EXPECT_EQ(*ProbeMethod(Probe("auto", 2, 2), Tools({"relative/all_reduce_perf"})), "gloo");
}

TEST(BandwidthProbe, GlooRanksRunTheScript) {
  wire::LaunchOrder l = Probe("auto", 1, 2);
  l.probe->seconds = 0.5;
  auto run = PlanProbeRank(l, l.ranks[0], Tools({}), "/w/jobs/job-p-a1/rank-0.probe.json");
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->method, "gloo");
  EXPECT_EQ(run->argv, (std::vector<std::string>{"/usr/bin/python3",
                                                 "/usr/share/tianshu/probes/gloo_bandwidth.py",
                                                 "--bytes", "16777216", "--seconds", "0.5"}));
  EXPECT_EQ(run->env.at("TIANSHU_PROBE_RESULT"), "/w/jobs/job-p-a1/rank-0.probe.json");
  ProbeTools no_script = Tools({});
  no_script.script.clear();
  auto none = PlanProbeRank(l, l.ranks[0], no_script, "/r");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("--probe-script"), std::string::npos);
}

TEST(BandwidthProbe, AVendorTestRunsOnceOverEveryLocalDevice) {
  wire::LaunchOrder l = Probe("auto", 4, 4);
  l.ranks[2].devices = {6};  // devices need not be contiguous
  const ProbeTools nccl = Tools({"/usr/local/bin/all_reduce_perf"});
  auto first = PlanProbeRank(l, l.ranks[0], nccl, "/r");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->method, "nccl-tests");
  EXPECT_EQ(first->argv, (std::vector<std::string>{"/usr/local/bin/all_reduce_perf", "-b",
                                                   "16777216", "-e", "16777216", "-f", "2", "-g",
                                                   "4", "-w", "5", "-n", "1192", "-c", "0"}));
  EXPECT_EQ(first->env.at("CUDA_VISIBLE_DEVICES"), "0,1,6,3");
  auto other = PlanProbeRank(l, l.ranks[1], nccl, "/r");
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->argv.empty());  // ends at once
  EXPECT_EQ(other->env.at("TIANSHU_DURATION_S"), "0");

  wire::LaunchOrder a = Probe("hccl-test", 2, 2, "ascend");
  auto hccl =
      PlanProbeRank(a, a.ranks[0], Tools({"/usr/bin/all_reduce_test", "/usr/bin/mpirun"}), "/r");
  ASSERT_TRUE(hccl) << hccl.error().message;
  EXPECT_EQ(hccl->argv[0], "/usr/bin/mpirun");
  EXPECT_EQ(hccl->argv[3], "/usr/bin/all_reduce_test");
  EXPECT_EQ(hccl->env.at("ASCEND_RT_VISIBLE_DEVICES"), "0,1");
}

TEST(BandwidthProbe, GlooResultsAreParsedStrictly) {
  auto ok =
      ParseGlooProbeResult(R"({"method":"gloo","bytes":16777216,"iterations":42,"busbw_gbps":1.25,)"
                           R"("algbw_gbps":1.25,"forward_gbps":2.5,"backward_gbps":2.25})");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->method, "gloo");
  EXPECT_EQ(ok->bytes, 16777216);
  EXPECT_EQ(ok->iterations, 42);
  EXPECT_DOUBLE_EQ(ok->busbw_gbps, 1.25);
  EXPECT_DOUBLE_EQ(ok->forward_gbps, 2.5);
  EXPECT_DOUBLE_EQ(ok->backward_gbps, 2.25);
  auto why = [](const std::string& text) {
    auto r = ParseGlooProbeResult(text);
    return r ? std::string("accepted") : r.error().message;
  };
  EXPECT_EQ(why(R"({"method":"gloo","busbw_gbps":-1})"),
            "probe result: busbw_gbps: expected a finite number >= 0");
  EXPECT_EQ(why(R"({"method":"gloo","busbw_gbps":"fast"})"),
            "probe result: busbw_gbps: expected a finite number >= 0");
  EXPECT_EQ(why(R"({"method":"gloo","iterations":1.5})"),
            "probe result: iterations: expected an integer >= 0");
  EXPECT_EQ(why(R"({"method":"nccl"})"), "probe result: method: expected \"gloo\"");
  EXPECT_EQ(why(R"({"busbw_gbps":1})"), "probe result: method: is required");
  EXPECT_EQ(why(R"({"method":"gloo","extra":1})"), "probe result: extra: unknown field");
  EXPECT_EQ(why("[1]"), "probe result: not a JSON object");
  EXPECT_EQ(why("{"), "probe result: not a JSON object");
  EXPECT_NE(why(std::string(5000, ' ') + "{}").find("larger than"), std::string::npos);
}

// all_reduce_perf's output as nccl-tests documents it (README.md, doc/PERFORMANCE.md): written
// from that format, not captured on a GPU.
constexpr const char* kAllReducePerf =
    R"(# nThread 1 nGpus 4 minBytes 16777216 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 1192 agg iters: 1 validation: 0 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41234 on     node-3 device  0 [0x17] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41234 on     node-3 device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  41234 on     node-3 device  2 [0x3d] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  41234 on     node-3 device  3 [0x63] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
    16777216       4194304     float     sum      -1    120.5  139.23  208.85    N/A    119.8  140.04  210.06    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 209.455
#
)";

TEST(BandwidthProbe, AllReducePerfOutputIsParsed) {
  auto r = ParseAllReducePerf(std::string("some log line before\n") + kAllReducePerf, "nccl-tests",
                              16 << 20);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->method, "nccl-tests");
  EXPECT_EQ(r->bytes, 16 << 20);
  EXPECT_EQ(r->iterations, 1192);
  EXPECT_DOUBLE_EQ(r->algbw_gbps, 139.23);
  EXPECT_DOUBLE_EQ(r->busbw_gbps, 208.85);  // out-of-place, the row of the probe's size
  // Only the summary line: its bus bandwidth.
  auto avg = ParseAllReducePerf("#  Avg bus bandwidth    : 12.34\n", "rccl-tests", 1024);
  ASSERT_TRUE(avg) << avg.error().message;
  EXPECT_DOUBLE_EQ(avg->busbw_gbps, 12.34);
  EXPECT_EQ(avg->algbw_gbps, 0);
  EXPECT_FALSE(ParseAllReducePerf("Segmentation fault\n", "nccl-tests", 1024));
  EXPECT_FALSE(ParseAllReducePerf("# Avg bus bandwidth : nan\n", "nccl-tests", 1024));
}

// HCCL's all_reduce_test table, as its documentation shows it (not captured on an NPU).
TEST(BandwidthProbe, HcclTestOutputIsParsed) {
  const std::string out =
      "the minbytes is 16777216, maxbytes is 16777216, iters is 1192, warmup_iters is 5\n"
      "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:\n"
      "16777216           | 520.31         | 32.24500             | success\n";
  auto r = ParseHcclTest(out, 16 << 20, 8);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->method, "hccl-test");
  EXPECT_EQ(r->iterations, 1192);
  EXPECT_DOUBLE_EQ(r->algbw_gbps, 32.245);
  EXPECT_DOUBLE_EQ(r->busbw_gbps, 32.245 * 2 * 7 / 8);
  EXPECT_FALSE(ParseHcclTest("mpirun: command failed\n", 1024, 8));
}

TEST(BandwidthProbe, ResultsAreCollectedFromTheFileOrTheLog) {
  FakeSystemFiles fs;
  wire::LaunchOrder l = Probe("auto", 2, 2);
  fs.AddFile("/w/rank-0.probe.json", R"({"method":"gloo","bytes":1024,"busbw_gbps":3})");
  auto gloo = CollectProbeResult(fs, "gloo", l, "/w/rank-0.probe.json", "/w/rank-0.log");
  ASSERT_TRUE(gloo) << gloo.error().message;
  EXPECT_DOUBLE_EQ(gloo->busbw_gbps, 3);
  auto none = CollectProbeResult(fs, "gloo", l, "/w/nothing.json", "/w/rank-0.log");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no probe result"), std::string::npos);
  fs.AddFile("/w/big.json", std::string(kProbeResultBytes + 10, ' '));
  EXPECT_FALSE(CollectProbeResult(fs, "gloo", l, "/w/big.json", ""));
  fs.AddFile("/w/rank-0.log", std::string(200000, 'x') + "\n" + kAllReducePerf);
  auto nccl = CollectProbeResult(fs, "nccl-tests", l, "", "/w/rank-0.log");
  ASSERT_TRUE(nccl) << nccl.error().message;
  EXPECT_DOUBLE_EQ(nccl->busbw_gbps, 208.85);
}

}  // namespace
}  // namespace tianshu::agent
