// The real cgroup test (issue 8): create a job cgroup on this machine, run a process in it,
// check its cpuset and memory limit from inside the process, show that exceeding the memory
// limit kills only that job, and remove the cgroups afterwards. Needs root and a writable
// cgroup hierarchy; skipped with a message elsewhere.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/discovery.h"
#include "tianshu/agent/process.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/tianshu-cgtest-XXXXXX";
  return ::mkdtemp(tmpl);
}

ProcessExit WaitFor(PosixProcessRunner& runner, int64_t pid, int seconds) {
  for (int i = 0; i < seconds * 100; ++i) {
    if (auto e = runner.Poll(pid)) return *e;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (void)runner.Signal(pid, SIGKILL);
  ADD_FAILURE() << "process " << pid << " did not end within " << seconds << "s";
  return {0, 0, true};
}

class RealCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    auto d = DetectCgroupDriver(fs_, {.parent = "tianshu-test-" + std::to_string(::getpid())});
    if (!d || (*d)->Mode() == "none") {
      GTEST_SKIP() << "no usable cgroup hierarchy: " << (d ? "mode none" : d.error().message);
    }
    driver_ = std::move(*d);
    auto probe = driver_->Create({.name = "probe"});
    if (!probe) GTEST_SKIP() << "cgroups not writable here: " << probe.error().message;
    (void)driver_->Remove("probe");
    dir_ = TempDir();
    // The first CPU and memory node this process may use.
    auto status = fs_.Read("/proc/self/status");
    ASSERT_TRUE(status);
    for (const auto& line : SplitString(*status, '\n')) {
      if (StartsWith(line, "Cpus_allowed_list:")) cpus_ = ParseCpuList(Trim(line.substr(18)));
      if (StartsWith(line, "Mems_allowed_list:")) mems_ = ParseCpuList(Trim(line.substr(18)));
    }
    ASSERT_FALSE(cpus_.empty());
  }
  void TearDown() override {
    if (!driver_) return;
    for (const char* n : {"job-small", "job-big", "job-other"}) (void)driver_->Remove(n);
    // The intermediate directory of this test run goes too.
    for (const char* ctl :
         {"cpuset", "memory", "cpu", "cpuacct", "blkio", "devices", "pids", "freezer"}) {
      std::string p = driver_->PathOf(ctl, "x");
      if (!p.empty()) (void)fs_.RemoveDir(Dirname(p));
    }
    if (driver_->Mode() == "v2") (void)fs_.RemoveDir(Dirname(driver_->PathOf("", "x")));
    if (!dir_.empty()) (void)!std::system(("rm -rf " + dir_).c_str());
  }

  RealSystemFiles fs_;
  std::unique_ptr<CgroupDriver> driver_;
  std::string dir_;
  std::vector<int> cpus_, mems_;
};

TEST_F(RealCgroups, ProcessSeesItsCpusetAndMemoryLimitAndOomKillsOnlyItsJob) {
  const int64_t kLimit = 64 << 20;
  int cpu = cpus_.back();
  int mem = mems_.empty() ? 0 : mems_.front();
  auto made =
      driver_->Create({.name = "job-small", .cpus = {cpu}, .mems = {mem}, .memory_bytes = kLimit});
  ASSERT_TRUE(made) << made.error().message;
  for (const auto& u : made->unsupported) std::cout << "  not applied: " << u << "\n";
  ASSERT_FALSE(made->procs_files.empty());
  std::string cg_dir = driver_->PathOf("memory", "job-small");
  EXPECT_TRUE(fs_.Exists(cg_dir));

  // 1. From inside: the process reads its CPU affinity and its own memory cgroup's limit.
  PosixProcessRunner runner;
  std::string limit_file = driver_->Mode() == "v2" ? "memory.max" : "memory.limit_in_bytes";
  std::string script =
      "grep Cpus_allowed_list /proc/self/status; "
      "cg=$(grep -E '^[0-9]+:(memory|):' /proc/self/cgroup | grep -E ':memory:|^0::' | head -1 | "
      "cut -d: -f3); "
      "root=$(grep -E ' cgroup2? ' /proc/mounts | grep -E 'memory|cgroup2' | head -1 | "
      "cut -d' ' -f2); "
      "echo cgroup=$cg; echo limit=$(cat $root$cg/" +
      limit_file + ")";
  auto pid = runner.Spawn({.argv = {"/bin/sh", "-c", script},
                           .env = {{"PATH", "/usr/bin:/bin"}},
                           .log_path = dir_ + "/inside.log",
                           .exit_path = dir_ + "/inside.exit",
                           .cgroup_procs_files = made->procs_files});
  ASSERT_TRUE(pid) << pid.error().message;
  ProcessExit e = WaitFor(runner, *pid, 30);
  EXPECT_EQ(e.exit_code, 0);
  auto log = fs_.Read(dir_ + "/inside.log");
  ASSERT_TRUE(log);
  std::cout << *log;
  EXPECT_NE(log->find("Cpus_allowed_list:\t" + std::to_string(cpu) + "\n"), std::string::npos)
      << *log;
  EXPECT_NE(log->find("/job-small\n"), std::string::npos) << *log;
  EXPECT_NE(log->find("limit=" + std::to_string(kLimit)), std::string::npos) << *log;

  // 2. A job that exceeds its limit is killed by the OOM killer; a job in another cgroup and
  // this test process are untouched.
  auto big = driver_->Create({.name = "job-big", .memory_bytes = kLimit});
  auto other = driver_->Create({.name = "job-other", .memory_bytes = kLimit});
  ASSERT_TRUE(big && other);
  auto hog = runner.Spawn({.argv = {"/usr/bin/python3", "-c",
                                    "b = bytearray(b'x') * (256 << 20)\nprint('survived', len(b))"},
                           .env = {{"PATH", "/usr/bin:/bin"}},
                           .log_path = dir_ + "/hog.log",
                           .exit_path = dir_ + "/hog.exit",
                           .cgroup_procs_files = big->procs_files});
  auto calm = runner.Spawn({.argv = {"/bin/sh", "-c", "sleep 2; echo calm"},
                            .env = {{"PATH", "/usr/bin:/bin"}},
                            .log_path = dir_ + "/calm.log",
                            .exit_path = dir_ + "/calm.exit",
                            .cgroup_procs_files = other->procs_files});
  ASSERT_TRUE(hog && calm);
  ProcessExit hog_exit = WaitFor(runner, *hog, 60);
  ProcessExit calm_exit = WaitFor(runner, *calm, 60);
  EXPECT_EQ(hog_exit.signal, SIGKILL) << "hog exit code " << hog_exit.exit_code;
  EXPECT_EQ(calm_exit.signal, 0);
  EXPECT_EQ(calm_exit.exit_code, 0);
  auto usage = driver_->Usage("job-big");
  ASSERT_TRUE(usage);
  EXPECT_GE(usage->oom_kills, 1);
  auto other_usage = driver_->Usage("job-other");
  ASSERT_TRUE(other_usage);
  EXPECT_EQ(other_usage->oom_kills, 0);

  // 3. Removed afterwards.
  for (const char* n : {"job-small", "job-big", "job-other"}) {
    Status s = driver_->Remove(n);
    EXPECT_TRUE(s) << s.error().message;
  }
  EXPECT_FALSE(fs_.Exists(cg_dir));
}

}  // namespace
}  // namespace tianshu::agent
