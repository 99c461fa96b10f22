#include "tianshu/agent/cgroup.h"

#include <gtest/gtest.h>

namespace tianshu::agent {
namespace {

constexpr char kOwn[] = "/process_api/abc";

// This machine's layout: v1 controllers, and a cgroup2 mount offering hugetlb only.
FakeSystemFiles V1Host() {
  FakeSystemFiles fs;
  fs.AddFile("/proc/mounts",
             "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
             "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
             "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
             "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
             "cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0\n"
             "cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0\n"
             "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n");
  fs.AddFile("/proc/self/cgroup", std::string("7:blkio:/\n5:devices:/\n4:memory:") + kOwn +
                                      "\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n");
  fs.AddFile("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
  fs.AddFile("/sys/fs/cgroup/cpuset/cpuset.cpus", "0-3\n");
  fs.AddFile("/sys/fs/cgroup/cpuset/cpuset.mems", "0-1\n");
  fs.AddFile("/sys/dev/block/254:0/queue/scheduler", "none [mq-deadline] kyber bfq\n");
  fs.AutoFiles("/sys/fs/cgroup/cpuset", {"cgroup.procs", "cpuset.cpus", "cpuset.mems"});
  fs.AutoFiles("/sys/fs/cgroup/memory", {"cgroup.procs", "memory.limit_in_bytes",
                                         "memory.usage_in_bytes", "memory.oom_control"});
  fs.AutoFiles("/sys/fs/cgroup/blkio",
               {"cgroup.procs", "blkio.bfq.weight", "blkio.throttle.write_bps_device"});
  fs.AutoFiles("/sys/fs/cgroup/devices", {"cgroup.procs", "devices.allow", "devices.deny"});
  fs.AutoFiles("/sys/fs/cgroup/cpu", {"cgroup.procs", "cpu.cfs_quota_us", "cpu.cfs_period_us"});
  fs.AutoFiles("/sys/fs/cgroup/cpuacct", {"cgroup.procs"});
  return fs;
}

TEST(Cgroups, PicksV1WhenTheUnifiedHierarchyLacksControllers) {
  FakeSystemFiles fs = V1Host();
  auto d = DetectCgroupDriver(fs, {});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ((*d)->Mode(), "v1");
  // Job cgroups live below the agent's own cgroup in every hierarchy.
  EXPECT_EQ((*d)->PathOf("memory", "job-1"),
            std::string("/sys/fs/cgroup/memory") + kOwn + "/tianshu/job-1");
  EXPECT_EQ((*d)->PathOf("cpuset", "job-1"), "/sys/fs/cgroup/cpuset/tianshu/job-1");
}

TEST(Cgroups, V1AppliesWhatItCanAndReportsTheRest) {
  FakeSystemFiles fs = V1Host();
  auto d = DetectCgroupDriver(fs, {});
  ASSERT_TRUE(d);
  CgroupSpec spec{.name = "job-1",
                  .cpus = {2, 3},
                  .mems = {1},
                  .cpu_milli = 1500,
                  .memory_bytes = 1 << 30,
                  .io_weight = 500,
                  .io_device = "254:0",
                  .io_write_bps = 200'000'000,
                  .restrict_devices = true,
                  .devices = {{195, 0, "/dev/nvidia0"}}};
  auto out = (*d)->Create(spec);
  ASSERT_TRUE(out) << out.error().message;
  // The intermediate cpuset directory inherits its parent's CPUs before the job's is set.
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/cpuset/tianshu/cpuset.cpus"), "0-3");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/cpuset/tianshu/job-1/cpuset.cpus"), "2-3");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/cpuset/tianshu/job-1/cpuset.mems"), "1");
  std::string mem = std::string("/sys/fs/cgroup/memory") + kOwn + "/tianshu/job-1/";
  EXPECT_EQ(fs.Content(mem + "memory.limit_in_bytes"), "1073741824");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/cpu/tianshu/job-1/cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/blkio/tianshu/job-1/blkio.throttle.write_bps_device"),
            "254:0 200000000");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/devices/tianshu/job-1/devices.deny"), "a");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/devices/tianshu/job-1/devices.allow"), "c 195:0 rwm");
  // mq-deadline has no proportional weight: said, not hidden.
  ASSERT_EQ(out->unsupported.size(), 1u);
  EXPECT_NE(out->unsupported[0].find("needs bfq"), std::string::npos) << out->unsupported[0];
  EXPECT_EQ(out->procs_files.size(), 6u);
  EXPECT_TRUE((*d)->Remove("job-1"));
  EXPECT_FALSE(fs.Exists(mem));
}

TEST(Cgroups, V1RefusedSettingIsReportedAndTheRestStillApplies) {
  FakeSystemFiles fs = V1Host();
  auto d = DetectCgroupDriver(fs, {});
  ASSERT_TRUE(d);
  fs.FailWrites("/sys/fs/cgroup/cpuset/tianshu/job-2/cpuset.mems");
  auto out = (*d)->Create({.name = "job-2", .mems = {7}, .memory_bytes = 4096});
  ASSERT_TRUE(out);
  ASSERT_EQ(out->unsupported.size(), 1u);
  EXPECT_NE(out->unsupported[0].find("cpuset.mems 7"), std::string::npos);
  EXPECT_EQ(fs.Content(std::string("/sys/fs/cgroup/memory") + kOwn +
                       "/tianshu/job-2/memory.limit_in_bytes"),
            "4096");
}

TEST(Cgroups, V2WhenTheUnifiedHierarchyHasTheControllers) {
  FakeSystemFiles fs;
  fs.AddFile("/proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n");
  fs.AddFile("/proc/self/cgroup", "0::/system.slice/tianshu-agent.service\n");
  fs.AddFile("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids\n");
  fs.AutoFiles("/sys/fs/cgroup/system.slice", {"cgroup.procs", "cgroup.subtree_control"});
  ASSERT_TRUE(fs.MakeDirs("/sys/fs/cgroup/system.slice/tianshu-agent.service"));
  auto d = DetectCgroupDriver(fs, {});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ((*d)->Mode(), "v2");
  auto out = (*d)->Create({.name = "job-3",
                           .cpus = {0, 1},
                           .mems = {0},
                           .cpu_milli = 2000,
                           .memory_bytes = 1 << 20,
                           .io_weight = 200,
                           .io_device = "259:0",
                           .io_write_bps = 1000,
                           .restrict_devices = true});
  ASSERT_TRUE(out) << out.error().message;
  std::string dir = "/sys/fs/cgroup/system.slice/tianshu-agent.service/tianshu/job-3/";
  EXPECT_EQ(fs.Content(dir + "memory.max"), "1048576");
  EXPECT_EQ(fs.Content(dir + "memory.oom.group"), "1");
  EXPECT_EQ(fs.Content(dir + "cpu.max"), "200000 100000");
  EXPECT_EQ(fs.Content(dir + "io.max"), "259:0 wbps=1000");
  EXPECT_EQ(fs.Content(dir + "io.weight"), "default 200");
  EXPECT_EQ(fs.Content(dir + "cpuset.cpus"), "0-1");
  EXPECT_EQ(fs.Content("/sys/fs/cgroup/system.slice/tianshu-agent.service/cgroup.subtree_control"),
            "+cpuset +cpu +io +memory +pids");
  ASSERT_EQ(out->unsupported.size(), 1u);  // device access needs BPF on v2
  EXPECT_NE(out->unsupported[0].find("BPF"), std::string::npos);
  EXPECT_EQ((*d)->ProcsFiles("job-3"), std::vector<std::string>{dir + "cgroup.procs"});
}

TEST(Cgroups, NoneReportsEverythingAsUnsupported) {
  FakeSystemFiles fs;
  fs.AddFile("/proc/mounts", "proc /proc proc rw 0 0\n");
  auto d = DetectCgroupDriver(fs, {});
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)->Mode(), "none");
  auto out = (*d)->Create({.name = "job-4", .memory_bytes = 1});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->unsupported.size(), 1u);
  EXPECT_TRUE(out->procs_files.empty());
}

TEST(Cgroups, NamesAreSafePathComponents) {
  EXPECT_EQ(CgroupNameFor("j-000012", 2), "job-j-000012-a2");
  EXPECT_EQ(CgroupNameFor("../etc/x y", 1), "job-.._etc_x_y-a1");
}

}  // namespace
}  // namespace tianshu::agent
