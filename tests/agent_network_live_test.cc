// The agent's live network data for real (issue 18). The gloo bandwidth probe
// (probes/gloo_bandwidth.py) on 127.0.0.1: two /usr/bin/python3 ranks as a two-node probe would
// start them, their result file read with the agent's strict parser; then the same probe ordered
// to a real agent, which builds the ranks' command itself and reports what rank 0 measured. And
// examples/workloads/train_gpt.py's progress file, read back by the agent while it trains.
// Needs /usr/bin/python3 with torch; skipped with a message otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "testing/processes.h"
#include "tianshu/agent/agent.h"
#include "tianshu/agent/bandwidth_probe.h"
#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

const std::string kScript = std::string(TIANSHU_SOURCE_DIR) + "/probes/gloo_bandwidth.py";

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class GlooProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "/usr/bin/python3 with torch (python3-torch) is not installed";
    }
    char tmpl[] = "/tmp/tianshu-probe-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    if (!dir_.empty()) (void)!std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
};

TEST_F(GlooProbe, TwoRanksOnLoopbackMeasureABandwidth) {
  const int port = tianshu::testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string result = dir_ + "/result.json";
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(tianshu::testing::SpawnLogged(
        {"/usr/bin/env", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
         "WORLD_SIZE=2", "RANK=" + std::to_string(rank), "OMP_NUM_THREADS=1",
         "TIANSHU_PROBE_RESULT=" + result, "/usr/bin/python3", kScript, "--bytes", "1048576",
         "--seconds", "1"},
        dir_ + "/rank-" + std::to_string(rank) + ".log"));
  }
  std::vector<int> codes(2, -1);
  const bool ended = tianshu::testing::WaitForSeconds(
      [&] {
        for (size_t i = 0; i < pids.size(); ++i) {
          int status = 0;
          if (codes[i] < 0 && ::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
            codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          }
        }
        return codes[0] >= 0 && codes[1] >= 0;
      },
      120);
  if (!ended) {
    for (pid_t& p : pids) tianshu::testing::Terminate(p);
  }
  const std::string log0 = tianshu::testing::Slurp(dir_ + "/rank-0.log");
  ASSERT_TRUE(ended) << log0;
  EXPECT_EQ(codes[0], 0) << log0;
  EXPECT_EQ(codes[1], 0) << tianshu::testing::Slurp(dir_ + "/rank-1.log");
  std::cout << log0;
  auto r = ParseGlooProbeResult(tianshu::testing::Slurp(result));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->method, "gloo");
  EXPECT_EQ(r->bytes, 1048576);
  EXPECT_GT(r->iterations, 0);
  EXPECT_GT(r->algbw_gbps, 0);
  EXPECT_GT(r->busbw_gbps, 0);
  EXPECT_DOUBLE_EQ(r->busbw_gbps, r->algbw_gbps);  // 2(n-1)/n = 1 for two ranks
  EXPECT_GT(r->forward_gbps, 0);
  EXPECT_GT(r->backward_gbps, 0);
  EXPECT_FALSE(RealSystemFiles().Exists(result + ".tmp"));  // written by rename
}

TEST_F(GlooProbe, AnAgentRunsAProbeOrderAndReportsTheResult) {
  RealSystemFiles fs;
  auto cgroups = DetectCgroupDriver(fs, {.force_mode = "none"});
  ASSERT_TRUE(cgroups);
  HostInfo host{.hostname = "n0", .cpus = 2};
  AgentOptions options{.node = "n0",
                       .workdir = dir_ + "/work",
                       .checkpoint_root = dir_ + "/ckpt",
                       .base_env = {{"PATH", "/usr/bin:/bin"}, {"OMP_NUM_THREADS", "1"}},
                       .probe_script = kScript};
  ASSERT_TRUE(fs.MakeDirs(options.workdir));
  PosixProcessRunner runner;
  Agent a(options, host, fs, **cgroups, runner);
  ASSERT_TRUE(a.Recover(Now()));
  wire::WorkOrder o{
      .id = "probe.a1.launch", .kind = wire::OrderKind::kLaunch, .job_id = "probe", .attempt = 1};
  o.launch = wire::LaunchOrder{.job_name = "probe",
                               .backend = "cuda",
                               .world_size = 2,
                               .master_addr = "127.0.0.1",
                               .master_port = tianshu::testing::FreeLoopbackPort()};
  o.launch->ranks = {{.rank = 0, .local_rank = 0}, {.rank = 1, .local_rank = 1}};
  o.launch->probe = wire::ProbeSpec{.method = "auto", .bytes = 1 << 20, .seconds = 1};
  a.Apply(o, Now());
  auto exited = [&](int rank) -> const wire::Report* {
    for (const auto& r : a.PendingReports()) {
      if (r.kind == wire::ReportKind::kExited && r.rank == rank) return &r;
    }
    return nullptr;
  };
  const bool ended = tianshu::testing::WaitForSeconds(
      [&] {
        a.Tick(Now());
        return exited(0) && exited(1);
      },
      120);
  ASSERT_TRUE(ended) << fs.Read(a.LogPath("probe", 0)).value_or("no log");
  const wire::Report* r0 = exited(0);
  EXPECT_EQ(r0->exit_code, 0) << fs.Read(a.LogPath("probe", 0)).value_or("no log");
  ASSERT_TRUE(r0->probe) << r0->message;
  EXPECT_EQ(r0->probe->method, "gloo");
  EXPECT_GT(r0->probe->busbw_gbps, 0);
  EXPECT_GT(r0->probe->forward_gbps, 0);
  EXPECT_FALSE(exited(1)->probe);
  std::cout << wire::ToJson(*r0).dump() << "\n";
}

TEST_F(GlooProbe, ATrainingJobsProgressIsReadWhileItRuns) {
  RealSystemFiles fs;
  auto cgroups = DetectCgroupDriver(fs, {.force_mode = "none"});
  ASSERT_TRUE(cgroups);
  HostInfo host{.hostname = "n0", .cpus = 2};
  AgentOptions options{.node = "n0",
                       .workdir = dir_ + "/work",
                       .checkpoint_root = dir_ + "/ckpt",
                       .base_env = {{"PATH", "/usr/bin:/bin"}, {"OMP_NUM_THREADS", "1"}}};
  ASSERT_TRUE(fs.MakeDirs(options.workdir));
  PosixProcessRunner runner;
  Agent a(options, host, fs, **cgroups, runner);
  ASSERT_TRUE(a.Recover(Now()));
  wire::WorkOrder o{
      .id = "gpt.a1.launch", .kind = wire::OrderKind::kLaunch, .job_id = "gpt", .attempt = 1};
  o.launch = wire::LaunchOrder{.job_name = "gpt", .backend = "cuda", .world_size = 1};
  o.launch->ranks.push_back(
      {.rank = 0,
       .command = {"/usr/bin/python3",
                   std::string(TIANSHU_SOURCE_DIR) + "/examples/workloads/train_gpt.py", "--steps",
                   "400", "--step-sleep", "0.05", "--checkpoint-every", "0"},
       .env = {{"CUDA_VISIBLE_DEVICES", ""}}});
  a.Apply(o, Now());
  std::vector<wire::JobProgress> seen;
  const bool progressed = tianshu::testing::WaitForSeconds(
      [&] {
        a.Tick(Now());
        seen = a.Progress();
        return !seen.empty() && seen[0].samples >= 10;
      },
      120);
  ASSERT_TRUE(progressed) << fs.Read(a.LogPath("gpt", 0)).value_or("no log");
  EXPECT_EQ(seen[0].job_id, "gpt");
  EXPECT_EQ(seen[0].rank, 0);
  EXPECT_GE(seen[0].step, 10);
  EXPECT_GE(seen[0].step_time_s, 0.05);  // each step sleeps that long
  EXPECT_LT(seen[0].step_time_s, 5.0);
  EXPECT_GT(seen[0].updated_ms, 1'600'000'000'000);
  std::cout << "progress: step " << seen[0].step << ", median step " << seen[0].step_time_s
            << " s over " << seen[0].samples << " line(s)\n";
  wire::WorkOrder stop{
      .id = "gpt.a1.stop", .kind = wire::OrderKind::kStop, .job_id = "gpt", .attempt = 1};
  stop.stop = wire::StopOrder{.reason = "cancel", .grace_ms = 5000};
  a.Apply(stop, Now());
  EXPECT_TRUE(tianshu::testing::WaitForSeconds(
      [&] {
        a.Tick(Now());
        return !a.Busy();
      },
      60));
  EXPECT_TRUE(a.Progress().empty());  // nothing runs any more
}

}  // namespace
}  // namespace tianshu::agent
