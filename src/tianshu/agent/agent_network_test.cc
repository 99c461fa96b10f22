// The agent's part of the network dimension (issue 18) over fakes: the progress file and the
// data interface in every rank's environment, progress read back from the lowest running rank,
// and bandwidth probes from the order to the report of what rank 0 measured.
#include <gtest/gtest.h>

#include "tianshu/agent/agent.h"
#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

constexpr int64_t kT0 = 1'000'000'000;  // placeholders need a start time above 0

struct Fixture {
  FakeSystemFiles fs;
  FakeProcessRunner runner;
  std::unique_ptr<CgroupDriver> cgroups;
  HostInfo host;
  AgentOptions options{.node = "n0",
                       .workdir = "/w",
                       .checkpoint_root = "/ckpt",
                       .base_env = {{"PATH", "/opt/nccl-tests/bin:/usr/bin"}},
                       .probe_script = "/src/probes/gloo_bandwidth.py"};
  Fixture() {
    fs.AddFile("/proc/mounts", "proc /proc proc rw 0 0\n");
    cgroups = std::move(*DetectCgroupDriver(fs, {}));
    host.hostname = "n0";
    host.accelerators = *ParseDeclaredDevices("4xA100-80GB");
    host.declared_accelerators = true;
  }
  Agent Make() { return Agent(options, host, fs, *cgroups, runner); }
  // The spawn of a rank, by its RANK.
  const FakeProcessRunner::Proc* Rank(int rank) const {
    for (const auto& [pid, p] : runner.procs_) {
      if (p.spec.env.at("RANK") == std::to_string(rank)) return &p;
    }
    return nullptr;
  }
  int64_t Pid(int rank) const {
    for (const auto& [pid, p] : runner.procs_) {
      if (p.spec.env.at("RANK") == std::to_string(rank)) return pid;
    }
    return 0;
  }
};

wire::WorkOrder Launch(const std::string& job, int local, int world,
                       std::optional<wire::ProbeSpec> probe = std::nullopt) {
  wire::WorkOrder o{
      .id = job + ".a1.launch", .kind = wire::OrderKind::kLaunch, .job_id = job, .attempt = 1};
  o.launch = wire::LaunchOrder{.job_name = job, .backend = "cuda", .world_size = world};
  for (int r = 0; r < local; ++r) {
    wire::RankLaunch rl{.rank = r, .local_rank = r, .devices = {r}};
    if (!probe) rl.command = {"/usr/bin/python3", "train.py"};
    o.launch->ranks.push_back(rl);
  }
  o.launch->probe = probe;
  return o;
}

const wire::Report* Exited(const Agent& a, int rank) {
  for (const auto& r : a.PendingReports()) {
    if (r.kind == wire::ReportKind::kExited && r.rank == rank) return &r;
  }
  return nullptr;
}

TEST(AgentNetwork, EveryRankGetsItsProgressFileAndTheDataInterface) {
  Fixture f;
  f.options.data_interface = "ens1f1";
  Agent a = f.Make();
  ASSERT_TRUE(a.Recover(kT0));
  wire::WorkOrder o = Launch("j-1", 2, 2);
  o.launch->ranks[1].env["NCCL_SOCKET_IFNAME"] = "=ib0";  // the job's own choice stands
  a.Apply(o, kT0);
  const auto& env0 = f.Rank(0)->spec.env;
  EXPECT_EQ(env0.at("TIANSHU_PROGRESS_FILE"), "/w/jobs/job-j-1-a1/progress-rank-0.jsonl");
  EXPECT_EQ(env0.at("GLOO_SOCKET_IFNAME"), "ens1f1");
  EXPECT_EQ(env0.at("NCCL_SOCKET_IFNAME"), "ens1f1");
  EXPECT_EQ(env0.at("TP_SOCKET_IFNAME"), "ens1f1");
  EXPECT_EQ(env0.count("TIANSHU_PROBE_RESULT"), 0u);
  const auto& env1 = f.Rank(1)->spec.env;
  EXPECT_EQ(env1.at("TIANSHU_PROGRESS_FILE"), "/w/jobs/job-j-1-a1/progress-rank-1.jsonl");
  EXPECT_EQ(env1.at("NCCL_SOCKET_IFNAME"), "=ib0");
  EXPECT_EQ(env1.at("GLOO_SOCKET_IFNAME"), "ens1f1");
  // A run-as job's files are in its owner's directory.
  Fixture g;
  Agent b = g.Make();
  wire::WorkOrder u = Launch("j-2", 1, 1);
  u.launch->run_as = "alice";
  b.Apply(u, kT0);
  EXPECT_EQ(g.Rank(0)->spec.env.at("TIANSHU_PROGRESS_FILE"),
            "/w/jobs/job-j-2-a1/user/progress-rank-0.jsonl");
  EXPECT_EQ(g.Rank(0)->spec.env.count("GLOO_SOCKET_IFNAME"), 0u);  // no data interface
}

TEST(AgentNetwork, ProgressIsReadFromTheLowestRunningRank) {
  Fixture f;
  Agent a = f.Make();
  wire::WorkOrder o = Launch("j-1", 2, 4);
  o.launch->ranks[0].rank = 2;  // this node holds ranks 2 and 3
  o.launch->ranks[1].rank = 3;
  a.Apply(o, kT0);
  EXPECT_TRUE(a.Progress().empty());  // no file yet
  f.fs.AddFile("/w/jobs/job-j-1-a1/progress-rank-3.jsonl", R"({"step": 9, "step_time_s": 2.0})"
                                                           "\n");
  const std::string p2 = "/w/jobs/job-j-1-a1/progress-rank-2.jsonl";
  f.fs.AddFile(p2, R"({"step": 10, "step_time_s": 0.5})"
                   "\n"
                   R"({"step": 11, "step_time_s": 0.7})"
                   "\nnonsense\n");
  f.fs.SetMtime(p2, 1'700'000'000'000'000'000);
  std::vector<wire::JobProgress> p = a.Progress();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].job_id, "j-1");
  EXPECT_EQ(p[0].attempt, 1);
  EXPECT_EQ(p[0].rank, 2);
  EXPECT_EQ(p[0].step, 11);
  EXPECT_DOUBLE_EQ(p[0].step_time_s, 0.6);
  EXPECT_EQ(p[0].samples, 2);
  EXPECT_EQ(p[0].updated_ms, 1'700'000'000'000);
  // Rank 2 ends: rank 3 speaks for the job.
  f.runner.Exit(f.Pid(2), {.exit_code = 1});
  a.Tick(kT0 + 1);
  p = a.Progress();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rank, 3);
  EXPECT_EQ(p[0].step, 9);
}

TEST(AgentNetwork, AGlooProbeRunsTheScriptAndReportsWhatRankZeroMeasured) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(Launch("p-1", 2, 2, wire::ProbeSpec{.method = "auto", .bytes = 1 << 20, .seconds = 1}),
          kT0);
  ASSERT_EQ(f.runner.procs_.size(), 2u);
  const SpawnSpec& s = f.Rank(0)->spec;
  EXPECT_EQ(s.argv, (std::vector<std::string>{"/usr/bin/python3", "/src/probes/gloo_bandwidth.py",
                                              "--bytes", "1048576", "--seconds", "1"}));
  const std::string result = "/w/jobs/job-p-1-a1/rank-0.probe.json";
  EXPECT_EQ(s.env.at("TIANSHU_PROBE_RESULT"), result);
  f.fs.AddFile(result, R"({"method":"gloo","bytes":1048576,"iterations":12,"busbw_gbps":1.5,)"
                       R"("algbw_gbps":1.5,"forward_gbps":2,"backward_gbps":1.75})");
  f.runner.Exit(f.Pid(0), {.exit_code = 0});
  f.runner.Exit(f.Pid(1), {.exit_code = 0});
  a.Tick(kT0 + 1);
  const wire::Report* r0 = Exited(a, 0);
  ASSERT_NE(r0, nullptr);
  ASSERT_TRUE(r0->probe) << r0->message;
  EXPECT_EQ(r0->probe->iterations, 12);
  EXPECT_DOUBLE_EQ(r0->probe->busbw_gbps, 1.5);
  EXPECT_DOUBLE_EQ(r0->probe->backward_gbps, 1.75);
  ASSERT_NE(Exited(a, 1), nullptr);
  EXPECT_FALSE(Exited(a, 1)->probe);                         // only rank 0 reports one
  EXPECT_TRUE(wire::ParseReport(wire::ToJson(*r0).dump()));  // and it is valid on the wire
}

TEST(AgentNetwork, AProbeWithoutAResultSaysWhy) {
  Fixture f;
  Agent a = f.Make();
  a.Apply(Launch("p-1", 1, 1, wire::ProbeSpec{.method = "gloo"}), kT0);
  f.fs.AddFile("/w/jobs/job-p-1-a1/rank-0.probe.json", R"({"method":"gloo","busbw_gbps":-4})");
  f.runner.Exit(f.Pid(0), {.exit_code = 0});
  a.Tick(kT0 + 1);
  const wire::Report* r0 = Exited(a, 0);
  ASSERT_NE(r0, nullptr);
  EXPECT_FALSE(r0->probe);
  EXPECT_NE(r0->message.find("busbw_gbps: expected a finite number >= 0"), std::string::npos)
      << r0->message;
  // A failed probe reports its exit and nothing else.
  Fixture g;
  Agent b = g.Make();
  b.Apply(Launch("p-2", 1, 1, wire::ProbeSpec{.method = "gloo"}), kT0);
  g.runner.Exit(g.Pid(0), {.exit_code = 1});
  b.Tick(kT0 + 1);
  ASSERT_NE(Exited(b, 0), nullptr);
  EXPECT_FALSE(Exited(b, 0)->probe);
  EXPECT_EQ(Exited(b, 0)->message, "exited with code 1");
}

TEST(AgentNetwork, AProbeThatCannotRunFailsItsRanks) {
  Fixture f;
  f.options.probe_script.clear();
  Agent a = f.Make();
  a.Apply(Launch("p-1", 1, 2, wire::ProbeSpec{}), kT0);
  EXPECT_TRUE(f.runner.procs_.empty());
  const wire::Report* r0 = Exited(a, 0);
  ASSERT_NE(r0, nullptr);
  EXPECT_EQ(r0->exit_code, 127);
  EXPECT_NE(r0->message.find("probe: no probe script"), std::string::npos) << r0->message;
  Fixture g;
  Agent b = g.Make();
  b.Apply(Launch("p-2", 1, 2, wire::ProbeSpec{.method = "nccl-tests"}), kT0);
  ASSERT_NE(Exited(b, 0), nullptr);
  EXPECT_NE(Exited(b, 0)->message.find("only under MPI"), std::string::npos);
}

// nccl-tests on this node: untested on hardware; here its command and its log, as documented.
TEST(AgentNetwork, ASingleNodeProbeUsesTheVendorTestWhenInstalled) {
  Fixture f;
  f.fs.AddFile("/opt/nccl-tests/bin/all_reduce_perf", "");
  Agent a = f.Make();
  a.Apply(Launch("p-1", 2, 2, wire::ProbeSpec{.bytes = 1 << 20}), kT0);
  ASSERT_EQ(f.runner.procs_.size(), 1u);  // rank 1 holds its device and ends at once
  const SpawnSpec& s = f.Rank(0)->spec;
  EXPECT_EQ(s.argv[0], "/opt/nccl-tests/bin/all_reduce_perf");
  EXPECT_EQ(s.env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  a.Tick(kT0 + 1);
  ASSERT_NE(Exited(a, 1), nullptr);
  EXPECT_EQ(Exited(a, 1)->exit_code, 0);
  f.fs.AddFile(s.log_path,
               "#       size         count      type   redop    root     time   algbw   busbw\n"
               "     1048576        262144     float     sum      -1    30.1   34.84   34.84"
               "      0    29.9   35.07   35.07      0\n"
               "# Avg bus bandwidth    : 34.955\n");
  f.runner.Exit(f.Pid(0), {.exit_code = 0});
  a.Tick(kT0 + 2);
  ASSERT_NE(Exited(a, 0), nullptr);
  ASSERT_TRUE(Exited(a, 0)->probe) << Exited(a, 0)->message;
  EXPECT_EQ(Exited(a, 0)->probe->method, "nccl-tests");
  EXPECT_DOUBLE_EQ(Exited(a, 0)->probe->busbw_gbps, 34.84);
}

}  // namespace
}  // namespace tianshu::agent
