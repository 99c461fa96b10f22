#include "tianshu/agent/doctor.h"

#include <gtest/gtest.h>

#include "tianshu/agent/discovery.h"
#include "tianshu/agent/doctor_test_fixtures.h"

// The doctor as a whole (RunDoctor, exit status, text and JSON) and its device, cgroup, disk and
// environment checks, with the real command and disk probes; the network checks are in
// doctor_network_test.cc.
namespace tianshu::agent {
namespace {

using doctor_fixtures::Find;
using doctor_fixtures::HealthyGpu;
using doctor_fixtures::HealthyNode;
using doctor_fixtures::Node;
using doctor_fixtures::NodeBuilder;
using doctor_fixtures::Of;

TEST(Doctor, HealthyNodeIsAllOk) {
  Node s;
  auto f = s.Run();
  for (const auto& x : f) {
    EXPECT_TRUE(x.status == CheckStatus::kOk || x.status == CheckStatus::kAbsent)
        << x.check << " " << x.subject << ": " << x.detail;
    if (x.status == CheckStatus::kOk) {
      EXPECT_EQ(x.fix, "") << x.check;
    }
  }
  EXPECT_EQ(DoctorExitStatus(f), 0);
  const Finding* port = Find(f, "rdma", "mlx5_0 port 1");
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->detail, "State: Active, Physical state: LinkUp, Rate: 200, Link layer: Ethernet");
  auto nics = Of(f, "nic");
  ASSERT_EQ(nics.size(), 2u);  // lo and docker0 are skipped
  EXPECT_EQ(nics[0].subject, "ens1");
  EXPECT_EQ(nics[0].detail, "operstate up, mtu 9000, speed 100 Gb/s, backs mlx5_0 (RoCE)");
  ASSERT_EQ(Of(f, "nvlink").size(), 2u);
  EXPECT_EQ(Of(f, "nvlink")[0].detail, "18/18 up");
  EXPECT_EQ(Of(f, "nvidia")[0].detail, "2 GPU(s) through NVML (2 on PCI)");
  EXPECT_EQ(Of(f, "affinity")[1].detail, "NUMA 1: mlx5_1 (same PCIe switch)");
  EXPECT_EQ(Of(f, "clock")[0].status, CheckStatus::kOk);
  EXPECT_EQ(Of(f, "ascend")[0].status, CheckStatus::kAbsent);
  std::string text = FindingsToText(f);
  EXPECT_NE(text.find("summary: "), std::string::npos);
  EXPECT_NE(text.find(", 0 warn, 0 fail,"), std::string::npos);
}

TEST(Doctor, NvlinkLinksDownFailNamingGpuAndLinks) {
  Node s;
  GpuHealth bad = HealthyGpu(1, "0000:9b:00.0");
  bad.nvlinks_up = {0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  bad.nvlinks_down = {4, 5};
  s.gpus = {HealthyGpu(0, "0000:1b:00.0"), bad};
  auto f = s.Run();
  const Finding* link = Find(f, "nvlink", "GPU 1 (0000:9b:00.0)");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->status, CheckStatus::kFail);
  EXPECT_EQ(link->detail, "link(s) 4,5 down (16/18 up)");
  EXPECT_NE(link->fix.find("nvidia-smi nvlink -s -i 1"), std::string::npos);
  EXPECT_EQ(Find(f, "nvlink", "GPU 0 (0000:1b:00.0)")->status, CheckStatus::kOk);
  EXPECT_EQ(DoctorExitStatus(f), kDoctorExitFailed);
}

TEST(Doctor, EccErrorsFailAndDisabledEccWarns) {
  Node s;
  GpuHealth errors = HealthyGpu(0, "0000:1b:00.0");
  errors.ecc_uncorrected = 3;
  GpuHealth off = HealthyGpu(1, "0000:9b:00.0");
  off.ecc_enabled = false;
  off.ecc_pending = false;
  s.gpus = {errors, off};
  auto f = s.Run();
  const Finding* e = Find(f, "nvidia", "GPU 0 (0000:1b:00.0)");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, CheckStatus::kFail);
  EXPECT_EQ(e->detail, "NVIDIA H100 80GB HBM3: ECC enabled, 3 uncorrected error(s) since boot");
  EXPECT_EQ(Find(f, "nvidia", "GPU 1 (0000:9b:00.0)")->status, CheckStatus::kWarn);
}

TEST(Doctor, GpuThatNvmlCannotOpenFails) {
  Node s;
  GpuHealth lost;
  lost.index = 1;
  lost.error = "nvmlDeviceGetHandleByIndex: GPU is lost";
  s.gpus = {HealthyGpu(0, "0000:1b:00.0"), lost};
  auto f = s.Run();
  const Finding* g = Find(f, "nvidia", "GPU 1");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->status, CheckStatus::kFail);
  EXPECT_NE(g->detail.find("GPU is lost"), std::string::npos);
  EXPECT_NE(g->fix.find("xid"), std::string::npos);
  EXPECT_EQ(DoctorExitStatus(f), kDoctorExitFailed);
}

TEST(Doctor, NvmlSeeingFewerGpusThanPciFails) {
  Node s;
  s.gpus = {HealthyGpu(0, "0000:1b:00.0")};
  auto f = s.Run();
  EXPECT_EQ(Of(f, "nvidia")[0].status, CheckStatus::kFail);
  EXPECT_EQ(Of(f, "nvidia")[0].detail, "NVML sees 1 GPU(s), expected 2 (2 on PCI)");
}

TEST(Doctor, BareNodeReportsAbsentNotFailure) {
  Node s;
  s.fs = NodeBuilder().Nic("eth0", "0000:00:03.0", 0, 1500).Build();
  s.nvml_error = "NVML not available: libnvidia-ml.so.1: cannot open";
  s.options.job_id = "";
  s.options.env = {};
  auto f = s.Run();
  for (const char* check :
       {"rdma", "nvidia", "ascend", "rocm", "musa", "affinity", "cgroup", "env"}) {
    auto c = Of(f, check);
    ASSERT_EQ(c.size(), 1u) << check;
    EXPECT_EQ(c[0].status, CheckStatus::kAbsent) << check << ": " << c[0].detail;
  }
  EXPECT_EQ(Of(f, "nvlink").size(), 0u);
  EXPECT_EQ(DoctorExitStatus(f), 0);
}

TEST(Doctor, DeclaredGpusAndRdmaThatAreMissingFail) {
  Node s;
  s.fs = NodeBuilder().Nic("eth0", "0000:00:03.0", 0, 1500).Build();
  s.nvml_error = "NVML not available: libnvidia-ml.so.1: cannot open";
  s.options.declared_devices = "8xH100-80GB";
  s.options.expect_rdma = true;
  auto f = s.Run();
  auto gpus = Of(f, "nvidia");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].status, CheckStatus::kFail);
  EXPECT_EQ(gpus[0].detail,
            "8 NVIDIA GPU(s) expected (0 on PCI, 8 declared), but NVML not available: "
            "libnvidia-ml.so.1: cannot open");
  EXPECT_EQ(Of(f, "rdma")[0].status, CheckStatus::kFail);
  // Declared NVIDIA GPUs make this an NVIDIA node: the NCCL variable is checked.
  EXPECT_EQ(Of(f, "env")[0].subject, "NCCL");
  EXPECT_EQ(DoctorExitStatus(f), kDoctorExitFailed);
}

TEST(Doctor, BadDeclarationIsAnError) {
  Node s;
  s.options.declared_devices = "8xH999";
  auto host = Discover(s.fs, {}, {});
  ASSERT_TRUE(host);
  auto f = RunDoctor(*host, {.fs = &s.fs}, s.options);
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("unknown accelerator"), std::string::npos);
}

TEST(Doctor, VendorToolsRunWhenPresent) {
  auto fs = NodeBuilder().Npu("0000:1b:00.0", 0).Npu("0000:9b:00.0", 1).Build();
  auto host = Discover(fs, {}, {});
  ASSERT_TRUE(host);
  FakeCommandRunner runner;
  std::map<std::string, std::string> env{{"PATH", "/usr/local/bin"}};
  // Devices on PCI but no npu-smi: the driver stack is missing.
  auto missing = CheckVendorTools(*host, &runner, {}, env, 1000);
  ASSERT_EQ(missing.size(), 3u);
  EXPECT_EQ(missing[0].check, "ascend");
  EXPECT_EQ(missing[0].status, CheckStatus::kFail);
  EXPECT_EQ(missing[0].detail, "2 Huawei Ascend device(s) (2 on PCI), but npu-smi is not on PATH");
  EXPECT_EQ(missing[1].status, CheckStatus::kAbsent);  // rocm
  EXPECT_EQ(missing[2].status, CheckStatus::kAbsent);  // musa

  runner.Add("npu-smi", {0, "+---+\n| npu-smi 23.0.0 |\n"});
  auto ok = CheckVendorTools(*host, &runner, {}, env, 1000);
  EXPECT_EQ(ok[0].status, CheckStatus::kOk);
  EXPECT_EQ(ok[0].detail, "`npu-smi info` exited 0 (2 on PCI)");
  ASSERT_EQ(runner.ran().size(), 1u);
  EXPECT_EQ(runner.ran()[0], (std::vector<std::string>{"/usr/local/bin/npu-smi", "info"}));

  runner.Add("npu-smi", {8, "dcmi module initialize failed. ret is -8005\n"});
  auto bad = CheckVendorTools(*host, &runner, {}, env, 1000);
  EXPECT_EQ(bad[0].status, CheckStatus::kFail);
  EXPECT_EQ(bad[0].detail,
            "`npu-smi info` exited 8: dcmi module initialize failed. ret is -8005 (2 on PCI)");

  // A leftover rocm-smi on a node without AMD/Hygon devices only warns when it fails.
  runner.Add("rocm-smi", {1, "ERROR: no GPU\n"});
  EXPECT_EQ(CheckVendorTools(*host, &runner, {}, env, 1000)[1].status, CheckStatus::kWarn);

  // A long line of three-byte characters is cut between characters, never inside one, so the
  // JSON stays valid UTF-8.
  std::string wide;
  for (int i = 0; i < 100; ++i) wide += "\xe5\xa4\xa9";
  runner.Add("npu-smi", {1, wide + "\n"});
  std::string detail = CheckVendorTools(*host, &runner, {}, env, 1000)[0].detail;
  size_t start = detail.find("\xe5"), end = detail.find("...");
  ASSERT_NE(start, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ((end - start) % 3, 0u) << detail;
  EXPECT_NO_THROW((void)nlohmann::json(detail).dump());
}

TEST(Doctor, CollectiveEnvironment) {
  auto warn = CheckCollectiveEnv(true, false, {});
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_EQ(warn[0].status, CheckStatus::kWarn);
  EXPECT_NE(warn[0].fix.find("TORCH_NCCL_ASYNC_ERROR_HANDLING=1"), std::string::npos);
  EXPECT_EQ(CheckCollectiveEnv(true, false, {{"NCCL_ASYNC_ERROR_HANDLING", "1"}})[0].status,
            CheckStatus::kOk);
  EXPECT_EQ(CheckCollectiveEnv(true, false, {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}})[0].status,
            CheckStatus::kWarn);
  auto hccl = CheckCollectiveEnv(false, true, {{"HCCL_CONNECT_TIMEOUT", "60"}});
  EXPECT_EQ(hccl[0].status, CheckStatus::kWarn);
  EXPECT_EQ(hccl[0].detail, "HCCL_CONNECT_TIMEOUT=60 (below 120 s)");
  EXPECT_EQ(CheckCollectiveEnv(false, true, {})[0].detail, "HCCL_CONNECT_TIMEOUT is unset");
  EXPECT_EQ(CheckCollectiveEnv(false, true, {{"HCCL_CONNECT_TIMEOUT", "1200"}})[0].status,
            CheckStatus::kOk);
  EXPECT_EQ(CheckCollectiveEnv(false, false, {})[0].status, CheckStatus::kAbsent);
}

TEST(Doctor, JobCgroupV2ShowsCpusetAndMemory) {
  Node s;
  s.fs = HealthyNode()
             .Cgroup("/cg/tianshu/gpu-7/job-j-42-a0", {{"cgroup.controllers", "cpuset memory"}})
             .Build();
  auto f = CheckJobCgroup(s.fs, "/cg", "j-42");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].subject, "job j-42 attempt 1");
  EXPECT_EQ(f[0].status, CheckStatus::kOk);
  EXPECT_EQ(f[0].detail,
            "cpuset.cpus: 0-1; cpuset.mems: 0; memory.max: 1073741824 (1.0 GiB) "
            "(/cg/tianshu/gpu-7/job-j-42-a1)");
  // The earlier attempt's cgroup is still there.
  EXPECT_EQ(f[1].status, CheckStatus::kWarn);
  EXPECT_NE(f[1].fix.find("rmdir /cg/tianshu/gpu-7/job-j-42-a0"), std::string::npos);
}

TEST(Doctor, JobCgroupV1MergesControllers) {
  auto fs =
      NodeBuilder()
          .Cgroup("/cg/cpuset", {{"cpuset.cpus", "0-3"}, {"cpuset.mems", "0-1"}})
          .Cgroup("/cg/cpuset/tianshu", {{"cpuset.cpus", "0-3"}, {"cpuset.mems", "0-1"}})
          .Cgroup("/cg/cpuset/tianshu/job-j-7-a2", {{"cpuset.cpus", "2-3"}, {"cpuset.mems", "1"}})
          .Cgroup("/cg/memory/tianshu/job-j-7-a2",
                  {{"memory.limit_in_bytes", "9223372036854771712"}})
          .Build();
  auto f = CheckJobCgroup(fs, "/cg", "j-7");
  ASSERT_EQ(f.size(), 1u);
  // Narrower CPUs than the parent, but no memory limit.
  EXPECT_EQ(f[0].status, CheckStatus::kWarn);
  EXPECT_EQ(f[0].detail,
            "cpuset.cpus: 2-3; cpuset.mems: 1; memory.limit_in_bytes: 9223372036854771712 (no "
            "limit) (/cg/cpuset/tianshu/job-j-7-a2, /cg/memory/tianshu/job-j-7-a2)");
}

TEST(Doctor, MissingOrUnlimitedJobCgroupFails) {
  Node s;
  auto missing = CheckJobCgroup(s.fs, "/cg", "j-43");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].status, CheckStatus::kFail);
  EXPECT_EQ(missing[0].detail, "no cgroup named job-j-43-a<attempt> under /cg");
  auto fs = NodeBuilder()
                .Cgroup("/cg/tianshu/n/job-j-42-a1", {{"cgroup.controllers", "cpuset memory"},
                                                      {"cpuset.cpus", ""},
                                                      {"cpuset.cpus.effective", "0-3"},
                                                      {"cpuset.mems", ""},
                                                      {"memory.max", "max"}})
                .Build();
  auto unlimited = CheckJobCgroup(fs, "/cg", "j-42");
  ASSERT_EQ(unlimited.size(), 1u);
  EXPECT_EQ(unlimited[0].status, CheckStatus::kFail);
  EXPECT_NE(unlimited[0].detail.find("cpuset.cpus: (none; effective 0-3)"), std::string::npos);
}

TEST(Doctor, LowFreeSpaceWarnsAndNamesTheDevice) {
  Node s;
  s.fs.device_of = "259:1";
  s.fs.AddFile("/sys/dev/block/259:1/uevent", "MAJOR=259\nMINOR=1\nDEVNAME=nvme0n1p1\n");
  s.disk = FakeDiskSpaceProbe(
      DiskSpace{.free_bytes = 500'000'000'000, .total_bytes = 3'840'000'000'000});
  auto f = s.Run();
  auto d = Of(f, "disk");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].status, CheckStatus::kWarn);
  EXPECT_EQ(d[0].detail,
            "/var/lib/tianshu/agent: 500.0 GB free of 3.84 TB on nvme0n1p1 (259:1); below "
            "2.00 TB");
  EXPECT_EQ(DoctorExitStatus(f), 0);  // a warning is not a failure
}

TEST(Doctor, FreeSpaceOfAWorkdirNotCreatedYet) {
  FakeSystemFiles fs;
  fs.AddFile("/var/other", "");
  FakeDiskSpaceProbe disk(
      DiskSpace{.free_bytes = 3'000'000'000'000, .total_bytes = 4'000'000'000'000});
  auto f = CheckFreeSpace(fs, HostInfo{}, disk, "/var/lib/tianshu/agent", 2'000'000'000'000);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, CheckStatus::kOk);
  EXPECT_NE(f[0].detail.find("(not created yet; measured /var)"), std::string::npos);
  EXPECT_NE(f[0].detail.find("not a block device"), std::string::npos);
}

TEST(Doctor, JsonHasOneObjectPerFinding) {
  std::vector<Finding> f = {
      {"rdma", "mlx5_0 port 1", CheckStatus::kFail, "State: Down", "check the cable"},
      {"nvidia", "GPUs", CheckStatus::kAbsent, "no NVIDIA GPU", ""}};
  auto j = FindingsToJson(f);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["check"], "rdma");
  EXPECT_EQ(j[0]["subject"], "mlx5_0 port 1");
  EXPECT_EQ(j[0]["status"], "fail");
  EXPECT_EQ(j[0]["detail"], "State: Down");
  EXPECT_EQ(j[0]["fix"], "check the cable");
  EXPECT_EQ(j[1]["status"], "absent");
}

// The real probes, on this machine.
TEST(DoctorProbes, PosixCommandRunnerRunsAndTimesOut) {
  PosixCommandRunner r;
  std::string sh = r.Which("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_FALSE(sh.empty());
  EXPECT_EQ(r.Which("no-such-tool-xyz", "/bin:/usr/bin"), "");
  auto out = r.Run({sh, "-c", "echo hello; echo oops >&2; exit 3"}, 5000);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->exit_status, 3);
  EXPECT_EQ(out->output, "hello\noops\n");
  auto slow = r.Run({sh, "-c", "sleep 10"}, 200);
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->exit_status, 124);
}

TEST(DoctorProbes, StatvfsOfTheRootFileSystem) {
  StatvfsProbe p;
  auto s = p.Stat("/");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_GT(s->total_bytes, 0);
  EXPECT_LE(s->free_bytes, s->total_bytes);
  EXPECT_FALSE(p.Stat("/no/such/dir"));
}

}  // namespace
}  // namespace tianshu::agent
