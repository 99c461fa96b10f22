// The example workloads through the agent, for real: a 2-rank DDP GPT (gloo on CPU) trains
// (loss falls), is stopped with a checkpoint (SIGUSR1 -> marker -> SIGTERM), and a second
// attempt resumes from that checkpoint and completes; the inference service answers requests
// and logs latencies. Needs /usr/bin/python3 with torch; skipped with a message otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <regex>
#include <thread>

#include "testing/processes.h"
#include "tianshu/agent/agent.h"
#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool TickUntil(Agent& a, const std::function<bool()>& done, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    a.Tick(Now());
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int Count(const Agent& a, wire::ReportKind kind, const std::string& order) {
  int n = 0;
  for (const auto& r : a.PendingReports()) n += r.kind == kind && r.order_id == order;
  return n;
}

class Workloads : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "/usr/bin/python3 with torch (python3-torch) is not installed";
    }
    char tmpl[] = "/tmp/tianshu-workload-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    // Real cgroups when this machine allows them, else none: the workload runs either way.
    auto d = DetectCgroupDriver(fs_, {.parent = "tianshu-wl-" + std::to_string(::getpid())});
    if (!d || ::geteuid() != 0) d = DetectCgroupDriver(fs_, {.force_mode = "none"});
    cgroups_ = std::move(*d);
    host_.hostname = "n0";
    host_.cpus = 2;
    host_.accelerators = *ParseDeclaredDevices("2xA100-80GB");
    host_.declared_accelerators = true;
    options_ = {.node = "n0",
                .workdir = dir_ + "/work",
                .checkpoint_root = dir_ + "/ckpt",
                .checkpoint_grace_ns = 60 * kNsPerSec,
                .base_env = {{"PATH", "/usr/bin:/bin"}, {"OMP_NUM_THREADS", "1"}}};
    ASSERT_TRUE(fs_.MakeDirs(options_.workdir));
  }
  void TearDown() override {
    // The job cgroups are gone (the agent removed them); the per-run parent goes too.
    for (const char* ctl :
         {"cpuset", "memory", "cpu", "cpuacct", "blkio", "devices", "pids", "freezer"}) {
      std::string p = cgroups_ ? cgroups_->PathOf(ctl, "x") : "";
      if (!p.empty()) (void)fs_.RemoveDir(Dirname(p));
    }
    if (!dir_.empty()) (void)!std::system(("rm -rf " + dir_).c_str());
  }

  wire::WorkOrder Launch(int attempt, int steps, int port) {
    std::string script = std::string(TIANSHU_SOURCE_DIR) + "/examples/workloads/train_gpt.py";
    wire::WorkOrder o{.id = "gpt.a" + std::to_string(attempt) + ".launch",
                      .kind = wire::OrderKind::kLaunch,
                      .job_id = "gpt",
                      .attempt = attempt};
    o.launch = wire::LaunchOrder{.job_name = "gpt",
                                 .backend = "cuda",
                                 .world_size = 2,
                                 .master_addr = "127.0.0.1",
                                 .master_port = port,
                                 .checkpoint_dir = dir_ + "/ckpt/gpt"};
    for (int r = 0; r < 2; ++r) {
      o.launch->ranks.push_back(
          {.rank = r,
           .local_rank = r,
           .devices = {r},
           .command = {"/usr/bin/python3", script, "--steps", std::to_string(steps),
                       "--checkpoint-every", "20", "--log-every", "10"},
           // CPU only on this machine: hide the declared devices from torch.
           .env = {{"CUDA_VISIBLE_DEVICES", ""}}});
    }
    return o;
  }

  RealSystemFiles fs_;
  std::unique_ptr<CgroupDriver> cgroups_;
  HostInfo host_;
  AgentOptions options_;
  std::string dir_;
};

TEST_F(Workloads, DdpGptTrainsIsPreemptedWithACheckpointAndResumes) {
  PosixProcessRunner runner;
  Agent a(options_, host_, fs_, *cgroups_, runner);
  ASSERT_TRUE(a.Recover(Now()));
  int port = 20000 + ::getpid() % 20000;
  a.Apply(Launch(1, 100000, port), Now());
  std::string marker = options_.workdir + "/jobs/job-gpt-a1/rank-0.ckpt";
  // Let it train past its first periodic checkpoint (step 20), then preempt it.
  ASSERT_TRUE(TickUntil(
      a, [&] { return fs_.Exists(marker); }, 400))
      << fs_.Read(a.LogPath("gpt", 0)).value_or("no log");
  wire::WorkOrder stop{
      .id = "gpt.a1.stop", .kind = wire::OrderKind::kStop, .job_id = "gpt", .attempt = 1};
  stop.stop = wire::StopOrder{.reason = "preempt", .checkpoint_first = true, .grace_ms = 10000};
  a.Apply(stop, Now());
  ASSERT_TRUE(TickUntil(
      a, [&] { return Count(a, wire::ReportKind::kStopped, stop.id) == 1; }, 200));
  ASSERT_EQ(Count(a, wire::ReportKind::kCheckpointed, stop.id), 2);
  int64_t ckpt_step = -1;
  for (const auto& r : a.PendingReports()) {
    if (r.kind == wire::ReportKind::kCheckpointed) ckpt_step = r.step;
    if (r.kind == wire::ReportKind::kExited) {
      EXPECT_EQ(r.signal, SIGTERM) << r.message;
    }
  }
  ASSERT_GT(ckpt_step, 20);  // a checkpoint taken on request, after the periodic one
  std::string log1 = *fs_.Read(a.LogPath("gpt", 0));
  std::cout << "attempt 1 checkpointed at step " << ckpt_step << "\n";

  // Attempt 2 resumes from that checkpoint and runs to step ckpt_step + 40.
  int64_t total = ckpt_step + 40;
  a.Apply(Launch(2, static_cast<int>(total), port + 1), Now());
  ASSERT_TRUE(TickUntil(
      a, [&] { return Count(a, wire::ReportKind::kExited, "gpt.a2.launch") == 2; }, 400));
  for (const auto& r : a.PendingReports()) {
    if (r.kind == wire::ReportKind::kExited && r.order_id == "gpt.a2.launch") {
      EXPECT_EQ(r.exit_code, 0) << r.message;
      EXPECT_EQ(r.signal, 0);
      EXPECT_EQ(r.step, total);
    }
  }
  std::string log2 = *fs_.Read(a.LogPath("gpt", 0));
  std::cout << log2;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log2, m, std::regex(R"(\[rank 0\] resumed from step (\d+))")));
  EXPECT_GE(std::stoll(m[1]), ckpt_step);  // from the checkpoint, not from zero
  EXPECT_EQ(log2.find("starting from step 0"), std::string::npos);
  EXPECT_NE(log2.find("done at step " + std::to_string(total)), std::string::npos);
  // The loss falls over the whole run (both attempts).
  std::vector<double> losses = tianshu::testing::RankZeroLosses(log1);
  for (double l : tianshu::testing::RankZeroLosses(log2)) losses.push_back(l);
  ASSERT_GE(losses.size(), 4u);
  std::cout << "loss first " << losses.front() << " last " << losses.back() << "\n";
  EXPECT_LT(losses.back(), losses.front() * 0.8);
}

TEST_F(Workloads, InferenceServiceServesAndLogsLatency) {
  PosixProcessRunner runner;
  Agent a(options_, host_, fs_, *cgroups_, runner);
  std::string script = std::string(TIANSHU_SOURCE_DIR) + "/examples/workloads/infer_service.py";
  wire::WorkOrder o{
      .id = "svc.a1.launch", .kind = wire::OrderKind::kLaunch, .job_id = "svc", .attempt = 1};
  o.launch = wire::LaunchOrder{.job_name = "svc", .backend = "cuda", .world_size = 1};
  o.launch->ranks.push_back({.rank = 0,
                             .command = {"/usr/bin/python3", script, "--rate", "5", "--duration",
                                         "6", "--report-every", "2"}});
  a.Apply(o, Now());
  ASSERT_TRUE(TickUntil(
      a, [&] { return Count(a, wire::ReportKind::kExited, o.id) == 1; }, 300));
  std::string log = *fs_.Read(a.LogPath("svc", 0));
  std::cout << log;
  EXPECT_NE(log.find("done: requests "), std::string::npos);
  auto lat = fs_.Read(options_.workdir + "/jobs/job-svc-a1/latency-rank0.log");
  ASSERT_TRUE(lat);
  EXPECT_GT(std::count(lat->begin(), lat->end(), '\n'), 5);
}

}  // namespace
}  // namespace tianshu::agent
