#include "tianshu/agent/doctor.h"

#include <gtest/gtest.h>

#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

// A node in sysfs, built up piece by piece: two NUMA nodes of two CPUs each, then whatever
// GPUs, RDMA adapters, NICs and disks a test adds.
//   FakeSystemFiles fs = NodeBuilder().Gpu("0000:1b:00.0", 0).RdmaNic("mlx5_0", ...).Build();
class NodeBuilder {
 public:
  NodeBuilder() {
    fs_.AddFile("/proc/sys/kernel/hostname", "gpu-7\n");
    fs_.AddFile("/sys/devices/system/cpu/online", "0-3\n");
    fs_.AddFile("/sys/devices/system/node/node0/cpulist", "0-1\n");
    fs_.AddFile("/sys/devices/system/node/node1/cpulist", "2-3\n");
    Pci("0000:00:01.0", "0x8086", "0x060400", 0, "");
    Pci("0000:80:01.0", "0x8086", "0x060400", 1, "");
  }
  // A PCI device behind `bridge` ("" at the root).
  NodeBuilder& Pci(const std::string& addr, const std::string& vendor, const std::string& cls,
                   int numa, const std::string& bridge) {
    std::string b = "/sys/bus/pci/devices/" + addr;
    fs_.AddFile(b + "/vendor", vendor + "\n");
    fs_.AddFile(b + "/device", "0x2330\n");
    fs_.AddFile(b + "/class", cls + "\n");
    fs_.AddFile(b + "/numa_node", std::to_string(numa) + "\n");
    fs_.AddLink(b, Path(addr, bridge));
    return *this;
  }
  // An NVIDIA GPU on NUMA node `numa`, behind that node's root port.
  NodeBuilder& Gpu(const std::string& addr, int numa) {
    return Pci(addr, "0x10de", "0x030200", numa, Bridge(numa));
  }
  NodeBuilder& Npu(const std::string& addr, int numa) {
    return Pci(addr, "0x19e5", "0x120000", numa, Bridge(numa));
  }
  // A physical NIC (its own PCI function) with a netdev.
  NodeBuilder& Nic(const std::string& netdev, const std::string& addr, int numa, int mtu,
                   const std::string& oper = "up", int64_t speed = 100000) {
    Pci(addr, "0x15b3", "0x020000", numa, Bridge(numa));
    std::string b = "/sys/class/net/" + netdev;
    fs_.AddFile(b + "/operstate", oper + "\n");
    fs_.AddFile(b + "/mtu", std::to_string(mtu) + "\n");
    fs_.AddFile(b + "/speed", std::to_string(speed) + "\n");
    fs_.AddLink(b + "/device", "../../../" + addr);
    fs_.AddLink(b, Path(addr, Bridge(numa)) + "/net/" + netdev);
    return *this;
  }
  // An RDMA adapter on the NIC `netdev` (added before), one port.
  NodeBuilder& Rdma(const std::string& dev, const std::string& netdev, const std::string& addr,
                    int numa, const std::string& layer, const std::string& state = "4: ACTIVE",
                    const std::string& phys = "5: LinkUp") {
    std::string b = "/sys/class/infiniband/" + dev;
    fs_.AddLink(b, Path(addr, Bridge(numa)) + "/infiniband/" + dev);
    fs_.AddFile(b + "/ports/1/state", state + "\n");
    fs_.AddFile(b + "/ports/1/phys_state", phys + "\n");
    fs_.AddFile(b + "/ports/1/rate", "200 Gb/sec (4X HDR)\n");
    fs_.AddFile(b + "/ports/1/link_layer", layer + "\n");
    fs_.AddFile(b + "/device/net/" + netdev + "/ifindex", "3\n");
    return *this;
  }
  NodeBuilder& VirtualNic(const std::string& netdev) {
    fs_.AddFile("/sys/class/net/" + netdev + "/mtu", "1500\n");
    fs_.AddLink("/sys/class/net/" + netdev, "../../devices/virtual/net/" + netdev);
    return *this;
  }
  // A cgroup directory with its files ("cgroup.procs" always).
  NodeBuilder& Cgroup(const std::string& dir, const std::map<std::string, std::string>& files) {
    fs_.AddFile(dir + "/cgroup.procs", "");
    for (const auto& [k, v] : files) fs_.AddFile(dir + "/" + k, v + "\n");
    return *this;
  }
  FakeSystemFiles Build() { return fs_; }

 private:
  static std::string Bridge(int numa) { return numa == 0 ? "0000:00:01.0" : "0000:80:01.0"; }
  static std::string Path(const std::string& addr, const std::string& bridge) {
    std::string root =
        addr.substr(0, 7) == "0000:00" || bridge == "0000:00:01.0" ? "pci0000:00" : "pci0000:80";
    return "../../../devices/" + root + "/" + (bridge.empty() ? "" : bridge + "/") + addr;
  }
  FakeSystemFiles fs_;
};

GpuHealth HealthyGpu(int index, const std::string& addr) {
  GpuHealth g;
  g.index = index;
  g.name = "NVIDIA H100 80GB HBM3";
  g.pci_address = addr;
  g.ecc_enabled = true;
  g.ecc_pending = true;
  g.ecc_uncorrected = 0;
  for (int l = 0; l < 18; ++l) g.nvlinks_up.push_back(l);
  return g;
}

// Two GPUs, each with a RoCE adapter on its NUMA node; one job's v2 cgroup with limits.
NodeBuilder HealthyNode() {
  NodeBuilder b;
  b.Gpu("0000:1b:00.0", 0)
      .Gpu("0000:9b:00.0", 1)
      .Nic("ens1", "0000:1c:00.0", 0, 9000)
      .Rdma("mlx5_0", "ens1", "0000:1c:00.0", 0, "Ethernet")
      .Nic("ens2", "0000:9c:00.0", 1, 4200)
      .Rdma("mlx5_1", "ens2", "0000:9c:00.0", 1, "Ethernet")
      .VirtualNic("docker0")
      .VirtualNic("lo")
      .Cgroup("/cg/tianshu/gpu-7/job-j-42-a1", {{"cgroup.controllers", "cpuset memory"},
                                                {"cpuset.cpus", "0-1"},
                                                {"cpuset.mems", "0"},
                                                {"memory.max", "1073741824"}});
  return b;
}

// The answer of a server whose clock runs `offset_ms` ahead, 10 ms away.
ServerAnswer Answer(int status, int64_t offset_ms) {
  ServerAnswer a;
  a.status = status;
  a.sent_ms = 1'700'000'000'000;  // 2023-11-14 22:13:20 UTC
  a.received_ms = a.sent_ms + 10;
  a.body = "[]";
  time_t t = static_cast<time_t>((a.sent_ms + 5 + offset_ms) / 1000);
  char buf[64];
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  a.headers["Date"] = buf;
  return a;
}

// Everything RunDoctor needs, healthy unless a test changes a part.
struct Node {
  FakeSystemFiles fs = HealthyNode().Build();
  std::vector<GpuHealth> gpus{HealthyGpu(0, "0000:1b:00.0"), HealthyGpu(1, "0000:9b:00.0")};
  std::string nvml_error;  // not empty: NVML fails with this
  FakeCommandRunner commands;
  FakeDiskSpaceProbe disk{
      DiskSpace{.free_bytes = 3'000'000'000'000, .total_bytes = 3'840'000'000'000}};
  FakeServerProbe server{Answer(200, 0)};
  DoctorOptions options{.job_id = "j-42",
                        .cgroup_root = "/cg",
                        .workdir = "/var/lib/tianshu/agent",
                        .env = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"PATH", "/bin"}}};

  std::vector<Finding> Run() {
    fs.AddFile("/var/lib/tianshu/agent/journal", "");
    auto host = Discover(fs, {}, {});
    EXPECT_TRUE(host) << host.error().message;
    FakeGpuHealthLibrary nvml(nvml_error.empty()
                                  ? Result<std::vector<GpuHealth>>(gpus)
                                  : Result<std::vector<GpuHealth>>(Fail(nvml_error)));
    auto f = RunDoctor(
        *host, {.fs = &fs, .gpus = &nvml, .commands = &commands, .disk = &disk, .server = &server},
        options);
    EXPECT_TRUE(f) << f.error().message;
    return f ? *f : std::vector<Finding>{};
  }
};

std::vector<Finding> Of(const std::vector<Finding>& all, const std::string& check) {
  std::vector<Finding> out;
  for (const auto& f : all) {
    if (f.check == check) out.push_back(f);
  }
  return out;
}

const Finding* Find(const std::vector<Finding>& all, const std::string& check,
                    const std::string& subject) {
  for (const auto& f : all) {
    if (f.check == check && f.subject == subject) return &f;
  }
  return nullptr;
}

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

TEST(Doctor, RdmaPortDownFailsAndNamesThePort) {
  Node s;
  s.fs.AddFile("/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  s.fs.AddFile("/sys/class/infiniband/mlx5_1/ports/1/phys_state", "2: Polling\n");
  auto f = s.Run();
  const Finding* port = Find(f, "rdma", "mlx5_1 port 1");
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->status, CheckStatus::kFail);
  EXPECT_EQ(port->detail, "State: Down, Physical state: Polling, Rate: 200, Link layer: Ethernet");
  EXPECT_NE(port->fix.find("cable"), std::string::npos);
  EXPECT_EQ(Find(f, "rdma", "mlx5_0 port 1")->status, CheckStatus::kOk);
  EXPECT_EQ(DoctorExitStatus(f), kDoctorExitFailed);
  EXPECT_NE(FindingsToText(f).find("fail   rdma"), std::string::npos);
}

TEST(Doctor, InfinibandPortWithoutSubnetManager) {
  auto fs = NodeBuilder()
                .Nic("ib0", "0000:1c:00.0", 0, 2044)
                .Rdma("mlx5_0", "ib0", "0000:1c:00.0", 0, "InfiniBand", "2: INIT")
                .Build();
  auto f = CheckRdmaPorts(fs, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, CheckStatus::kFail);
  EXPECT_EQ(f[0].detail,
            "State: Initializing, Physical state: LinkUp, Rate: 200, Link layer: InfiniBand");
  EXPECT_NE(f[0].fix.find("subnet manager"), std::string::npos);
  // IPoIB's small MTU is not a RoCE problem.
  auto nics = CheckNics(fs);
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_EQ(nics[0].status, CheckStatus::kOk);
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

TEST(Doctor, NicLinkAndMtu) {
  auto fs = NodeBuilder()
                .Nic("ens1", "0000:1c:00.0", 0, 1500)  // RoCE with a small MTU
                .Rdma("mlx5_0", "ens1", "0000:1c:00.0", 0, "Ethernet")
                .Nic("ens2", "0000:9c:00.0", 1, 9000, "down", -1)  // backs RDMA, down
                .Rdma("mlx5_1", "ens2", "0000:9c:00.0", 1, "Ethernet")
                .Nic("eth0", "0000:00:03.0", 0, 1400)              // plain NIC below 1500
                .Nic("eth1", "0000:00:04.0", 0, 1500, "down", -1)  // unused port
                .Build();
  auto f = CheckNics(fs);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(Find(f, "nic", "ens1")->status, CheckStatus::kWarn);
  EXPECT_NE(Find(f, "nic", "ens1")->fix.find("mtu 4200"), std::string::npos);
  EXPECT_EQ(Find(f, "nic", "ens2")->status, CheckStatus::kFail);
  EXPECT_EQ(Find(f, "nic", "ens2")->detail,
            "operstate down, mtu 9000, speed unknown, backs mlx5_1 (RoCE)");
  EXPECT_EQ(Find(f, "nic", "eth0")->status, CheckStatus::kWarn);
  EXPECT_EQ(Find(f, "nic", "eth1")->status, CheckStatus::kOk);
  EXPECT_NE(Find(f, "nic", "eth1")->detail.find("not used for RDMA"), std::string::npos);
}

TEST(Doctor, AffinityWarnsForAGpuWithoutALocalRdmaNic) {
  auto fs = NodeBuilder()
                .Gpu("0000:1b:00.0", 0)
                .Gpu("0000:9b:00.0", 1)
                .Nic("ens1", "0000:1c:00.0", 0, 9000)
                .Rdma("mlx5_0", "ens1", "0000:1c:00.0", 0, "Ethernet")
                .Build();
  auto host = Discover(fs, {}, {});
  ASSERT_TRUE(host);
  auto f = CheckAffinity(*host);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].status, CheckStatus::kOk);
  EXPECT_EQ(f[1].subject, "accelerator 1 (0000:9b:00.0)");
  EXPECT_EQ(f[1].status, CheckStatus::kWarn);
  EXPECT_EQ(f[1].detail, "NUMA 1: no RDMA NIC on this NUMA node (mlx5_0 elsewhere)");
}

TEST(Doctor, ServerReachabilityTokenAndClock) {
  EXPECT_EQ(CheckServer(nullptr)[0].status, CheckStatus::kAbsent);
  FakeServerProbe down(Fail("cannot reach http://server:7070 (Connection)"));
  auto d = CheckServer(&down);
  EXPECT_EQ(d[0].status, CheckStatus::kFail);
  EXPECT_EQ(d[0].detail, "unreachable: cannot reach http://server:7070 (Connection)");
  FakeServerProbe refused(Answer(401, 0));
  EXPECT_EQ(CheckServer(&refused)[0].status, CheckStatus::kFail);
  EXPECT_EQ(CheckServer(&refused)[0].detail, "token refused: GET /v1/queues 401 in 10 ms");
  // A node's join token is known to the server but may not list queues: reachable, accepted.
  FakeServerProbe joiner(Answer(403, 0));
  EXPECT_EQ(CheckServer(&joiner)[0].status, CheckStatus::kOk);

  FakeServerProbe ahead(Answer(200, 3000));
  auto a = CheckServer(&ahead);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].status, CheckStatus::kOk);
  EXPECT_EQ(a[1].check, "clock");
  EXPECT_EQ(a[1].status, CheckStatus::kWarn);
  EXPECT_EQ(a[1].detail, "offset 3495 ms ±505 ms (server minus this node, from the Date header)");
  FakeServerProbe far(Answer(200, -10000));
  EXPECT_EQ(CheckServer(&far)[1].status, CheckStatus::kFail);
  // A 1 s Date cannot tell 800 ms from 0: no warning.
  FakeServerProbe close(Answer(200, 800));
  EXPECT_EQ(CheckServer(&close)[1].status, CheckStatus::kOk);

  ServerAnswer ms = Answer(200, 0);
  ms.headers.clear();
  ms.body = R"({"server_time_ms": 1700000001505})";
  FakeServerProbe precise(ms);
  EXPECT_EQ(CheckServer(&precise)[1].detail,
            "offset 1500 ms ±5 ms (server minus this node, from the server_time_ms)");
  EXPECT_EQ(CheckServer(&precise)[1].status, CheckStatus::kWarn);

  ServerAnswer none = Answer(200, 0);
  none.headers.clear();
  FakeServerProbe timeless(none);
  EXPECT_EQ(CheckServer(&timeless)[1].status, CheckStatus::kAbsent);
}

TEST(Doctor, ParsesHttpDates) {
  EXPECT_EQ(ParseHttpDateMs("Sun, 06 Nov 1994 08:49:37 GMT"), int64_t{784111777} * 1000);
  EXPECT_FALSE(ParseHttpDateMs("yesterday"));
  EXPECT_FALSE(ParseHttpDateMs(""));
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

TEST(DoctorProbes, HttpProbeReportsAnUnreachableServer) {
  HttpServerProbe p("http://127.0.0.1:1", "");
  auto a = p.Get("/v1/queues");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("cannot reach"), std::string::npos);
}

}  // namespace
}  // namespace tianshu::agent
