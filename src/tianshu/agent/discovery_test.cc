#include "tianshu/agent/discovery.h"

#include <gtest/gtest.h>

#include "tianshu/agent/isolation.h"

namespace tianshu::agent {
namespace {

// A two-socket machine in sysfs: 4 CPUs on 2 NUMA nodes, an NVIDIA GPU on node 1 behind a
// PCIe switch, a ConnectX NIC with its RDMA device, an NVMe drive, a loop device.
FakeSystemFiles FakeHost() {
  FakeSystemFiles fs;
  fs.AddFile("/proc/sys/kernel/hostname", "gpu-7\n");
  fs.AddFile("/proc/sys/kernel/osrelease", "6.1.0\n");
  fs.AddFile("/proc/meminfo", "MemTotal:       16384000 kB\nMemFree: 1 kB\n");
  fs.AddFile("/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU 9000\n");
  fs.AddFile("/sys/devices/system/cpu/online", "0-3\n");
  for (int c = 0; c < 4; ++c) {
    std::string b = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    fs.AddFile(b + "physical_package_id", std::to_string(c / 2));
    fs.AddFile(b + "core_id", std::to_string(c % 2));
  }
  fs.AddFile("/sys/devices/system/node/node0/cpulist", "0-1\n");
  fs.AddFile("/sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:  8192000 kB\n");
  fs.AddFile("/sys/devices/system/node/node1/cpulist", "2-3\n");
  fs.AddFile("/sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:  8192000 kB\n");
  auto pci = [&](const std::string& addr, const std::string& vendor, const std::string& cls,
                 int numa, const std::string& link) {
    std::string b = "/sys/bus/pci/devices/" + addr;
    fs.AddFile(b + "/vendor", vendor + "\n");
    fs.AddFile(b + "/device", "0x1234\n");
    fs.AddFile(b + "/class", cls + "\n");
    fs.AddFile(b + "/numa_node", std::to_string(numa) + "\n");
    fs.AddLink(b, link);
  };
  pci("0000:80:01.0", "0x8086", "0x060400", 1, "../../../devices/pci0000:80/0000:80:01.0");
  pci("0000:81:00.0", "0x10de", "0x030200", 1,
      "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0");
  pci("0000:82:00.0", "0x15b3", "0x020000", 1,
      "../../../devices/pci0000:80/0000:80:01.0/0000:82:00.0");
  pci("0000:01:00.0", "0x144d", "0x010802", 0, "../../../devices/pci0000:00/0000:01:00.0");
  fs.AddFile("/sys/class/net/lo/address", "00:00:00:00:00:00\n");
  fs.AddLink("/sys/class/net/lo", "../../devices/virtual/net/lo");
  fs.AddFile("/sys/class/net/ens1/speed", "200000\n");
  fs.AddFile("/sys/class/net/ens1/address", "aa:bb:cc:dd:ee:ff\n");
  fs.AddLink("/sys/class/net/ens1/device", "../../../0000:82:00.0");
  fs.AddLink("/sys/class/net/ens1", "../../devices/pci0000:80/0000:80:01.0/0000:82:00.0/net/ens1");
  fs.AddLink("/sys/class/infiniband/mlx5_0",
             "../../devices/pci0000:80/0000:80:01.0/0000:82:00.0/infiniband/mlx5_0");
  fs.AddFile("/sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n");
  fs.AddFile("/sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  fs.AddFile("/sys/class/infiniband/mlx5_0/device/net/ens1/ifindex", "3\n");
  fs.AddFile("/sys/block/nvme0n1/dev", "259:0\n");
  fs.AddFile("/sys/block/nvme0n1/size", "7814037168\n");
  fs.AddFile("/sys/block/nvme0n1/queue/rotational", "0\n");
  fs.AddFile("/sys/block/nvme0n1/device/model", "SAMSUNG MZQL27T6\n");
  fs.AddLink("/sys/block/nvme0n1", "../devices/pci0000:00/0000:01:00.0/nvme/nvme0/nvme0n1");
  fs.AddFile("/sys/block/loop0/dev", "7:0\n");
  fs.AddFile("/proc/mounts", "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n");
  return fs;
}

TEST(Discovery, ReadsTheHostFromSysfs) {
  FakeSystemFiles fs = FakeHost();
  auto h = Discover(fs, {}, {});
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(h->hostname, "gpu-7");
  EXPECT_EQ(h->cpus, 4);
  EXPECT_EQ(h->cores, 4);
  EXPECT_EQ(h->sockets, 2);
  EXPECT_EQ(h->cpu_model, "Test CPU 9000");
  EXPECT_EQ(h->memory_bytes, int64_t{16384000} * 1024);
  ASSERT_EQ(h->numa_nodes.size(), 2u);
  EXPECT_EQ(h->numa_nodes[1].cpus, (std::vector<int>{2, 3}));
  ASSERT_EQ(h->nics.size(), 2u);
  EXPECT_EQ(h->nics[0].name, "ens1");
  EXPECT_EQ(h->nics[0].pci_address, "0000:82:00.0");
  EXPECT_EQ(h->nics[0].speed_mbps, 200000);
  EXPECT_EQ(h->nics[0].numa, 1);
  EXPECT_TRUE(h->nics[1].is_virtual);
  ASSERT_EQ(h->rdma.size(), 1u);
  EXPECT_EQ(h->rdma[0].rate_gbps, 200);
  EXPECT_EQ(h->rdma[0].netdevs, (std::vector<std::string>{"ens1"}));
  ASSERT_EQ(h->block_devices.size(), 1u);  // loop0 skipped
  EXPECT_TRUE(h->block_devices[0].nvme);
  EXPECT_EQ(h->block_devices[0].dev, "259:0");
  // The GPU from its PCI ids (no vendor library), under its bridge, on NUMA node 1.
  ASSERT_EQ(h->accelerators.size(), 1u);
  EXPECT_EQ(h->accelerators[0].source, "pci");
  EXPECT_EQ(h->accelerators[0].numa, 1);
  EXPECT_FALSE(h->accelerators[0].declared);
  auto gpu = std::find_if(h->pci.begin(), h->pci.end(),
                          [](const PciDevice& d) { return d.kind == "gpu"; });
  ASSERT_NE(gpu, h->pci.end());
  EXPECT_EQ(gpu->parent_bridge, "0000:80:01.0");
  EXPECT_EQ(h->cgroup_mode, "v1");
}

TEST(Discovery, PrefersTheVendorLibrary) {
  FakeSystemFiles fs = FakeHost();
  Accelerator a;
  a.index = 0;
  a.name = "NVIDIA H200";
  a.model = "H200-141GB";
  a.memory_bytes = int64_t{141} << 30;
  a.pci_address = "0000:81:00.0";
  a.mig_enabled = false;
  a.source = "nvml";
  FakeGpuLibrary nvml(std::vector<Accelerator>{a});
  auto h = Discover(fs, {.nvml = &nvml}, {});
  ASSERT_TRUE(h);
  ASSERT_EQ(h->accelerators.size(), 1u);
  EXPECT_EQ(h->accelerators[0].source, "nvml");
  EXPECT_EQ(h->accelerators[0].numa, 1);  // filled in from the PCI tree
  auto j = HostToJson(*h);
  EXPECT_EQ(j["accelerators"][0]["mig_enabled"], false);
}

TEST(Discovery, AbsentLibraryIsANoteNotAFailure) {
  FakeSystemFiles fs = FakeHost();
  FakeGpuLibrary nvml(Fail("NVML not available: libnvidia-ml.so.1: cannot open"));
  auto h = Discover(fs, {.nvml = &nvml}, {});
  ASSERT_TRUE(h);
  bool noted = false;
  for (const auto& n : h->notes) noted = noted || n.find("NVML not available") != n.npos;
  EXPECT_TRUE(noted);
}

TEST(Discovery, DeclaredDevicesAreDeclaredNeverFound) {
  FakeSystemFiles fs = FakeHost();
  auto h = Discover(fs, {}, {.declared_devices = "8xA100-80GB"});
  ASSERT_TRUE(h);
  ASSERT_EQ(h->accelerators.size(), 8u);
  EXPECT_TRUE(h->declared_accelerators);
  for (const auto& a : h->accelerators) {
    EXPECT_TRUE(a.declared);
    EXPECT_EQ(a.source, "declared");
    EXPECT_EQ(a.memory_bytes, int64_t{80} << 30);
  }
  auto j = HostToJson(*h);
  EXPECT_EQ(j["declared_accelerators"], true);
  EXPECT_EQ(j["accelerators"][7]["declared"], true);
}

TEST(Discovery, BadDeclarationsSayWhatIsWrong) {
  auto bad = ParseDeclaredDevices("8xA100-80G");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("did you mean 'A100-80GB'"), std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(ParseDeclaredDevices("eightxA100-80GB"));
  EXPECT_FALSE(ParseDeclaredDevices("0xA100-80GB"));
  auto mixed = ParseDeclaredDevices("2xH100-80GB, 2xAscend-910B");
  ASSERT_TRUE(mixed);
  EXPECT_EQ((*mixed)[3].vendor, model::Vendor::kHuawei);
  EXPECT_EQ((*mixed)[3].index, 3);
}

TEST(Discovery, CpuListsAndCatalogueNames) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(FormatCpuList({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(MatchCatalogueModel("NVIDIA H200", int64_t{141} << 30), "H200-141GB");
  EXPECT_EQ(MatchCatalogueModel("NVIDIA A100-SXM4-40GB", int64_t{40} << 30), "A100-40GB");
  EXPECT_EQ(MatchCatalogueModel("NVIDIA A100-SXM4-80GB", int64_t{80} << 30), "A100-80GB");
  EXPECT_EQ(MatchCatalogueModel("Mystery Card", 0), "");
}

TEST(Isolation, MigProfilesFollowTheSliceTable) {
  EXPECT_EQ(MigProfile(int64_t{80} << 30, 143), "1g.10gb");
  EXPECT_EQ(MigProfile(int64_t{80} << 30, 286), "2g.20gb");
  EXPECT_EQ(MigProfile(int64_t{80} << 30, 400), "3g.40gb");
  EXPECT_EQ(MigProfile(int64_t{141} << 30, 143), "1g.18gb");
  EXPECT_EQ(MigProfile(int64_t{80} << 30, 1000), "");
}

TEST(Isolation, PlansFromTheHostAndReportsWhatItCannotDo) {
  FakeSystemFiles fs = FakeHost();
  Accelerator a;
  a.index = 0;
  a.model = "A100-80GB";
  a.name = "NVIDIA A100";
  a.memory_bytes = int64_t{80} << 30;
  a.numa = 1;
  a.device_node = "/dev/nvidia0";
  a.mig_enabled = false;
  FakeGpuLibrary nvml(std::vector<Accelerator>{a});
  auto h = Discover(fs, {.nvml = &nvml}, {});
  ASSERT_TRUE(h);
  wire::LaunchOrder l;
  l.backend = "cuda";
  l.ranks.push_back({.rank = 0, .devices = {0}, .gpu_milli = 143, .command = {"x"}});
  l.cgroup.memory_bytes = 1 << 30;
  l.cgroup.io_write_bps = 100'000'000;
  l.cgroup.traffic_class = 106;
  IsolationPlan p = PlanIsolation(*h, l, "job-1-a1", "/ckpt", fs, {});
  EXPECT_EQ(p.cgroup.mems, (std::vector<int>{1}));  // the GPU's NUMA node
  EXPECT_EQ(p.cgroup.cpus, (std::vector<int>{2, 3}));
  EXPECT_TRUE(p.cgroup.restrict_devices);
  ASSERT_FALSE(p.cgroup.devices.empty());
  EXPECT_EQ(p.cgroup.devices[0].major, 195);
  EXPECT_EQ(p.cgroup.io_device, "254:0");
  EXPECT_EQ(p.env.at("NCCL_IB_TC"), "106");
  ASSERT_GE(p.partition_commands.size(), 2u);
  EXPECT_EQ(p.partition_commands[1], "nvidia-smi mig -i 0 -cgi 1g.10gb -C");
  EXPECT_FALSE(p.apply_partitions);  // shown only unless enabled
  std::string text = DescribeIsolation(p, {});
  EXPECT_NE(text.find("planned: nvidia-smi -i 0 -mig 1"), std::string::npos) << text;
  EXPECT_NE(text.find("nvme create-ns"), std::string::npos) << text;
}

// scheduler.colocation: priority on CUDA makes every GPU rank a client of the node's MPS
// control daemon (started when not running; run only with --apply-partitions and real devices);
// time slicing, or another backend, needs no daemon and says so.
TEST(Isolation, InferenceFirstSharingUsesTheMpsDaemonOnCudaOnly) {
  FakeSystemFiles fs = FakeHost();
  Accelerator a;
  a.index = 0;
  a.model = "A100-80GB";
  a.memory_bytes = int64_t{80} << 30;
  a.numa = 1;
  a.device_node = "/dev/nvidia0";
  FakeGpuLibrary nvml(std::vector<Accelerator>{a});
  auto h = Discover(fs, {.nvml = &nvml}, {});
  ASSERT_TRUE(h);
  auto launch = [](const std::string& backend, const std::string& mode) {
    wire::LaunchOrder l;
    l.backend = backend;
    l.ranks.push_back({.rank = 0, .devices = {0}, .gpu_milli = 1000, .command = {"x"}});
    if (!mode.empty()) l.ranks[0].env["TIANSHU_COLOCATION"] = mode;
    return l;
  };
  IsolationPlan mps = PlanIsolation(*h, launch("cuda", "priority"), "job-1-a1", "/ckpt", fs,
                                    {.apply_partitions = true});
  ASSERT_EQ(mps.partition_commands.size(), 1u);
  EXPECT_NE(mps.partition_commands[0].find("nvidia-cuda-mps-control -d"), std::string::npos);
  EXPECT_EQ(mps.env.at("CUDA_MPS_PIPE_DIRECTORY"), "/tmp/nvidia-mps");
  EXPECT_TRUE(mps.apply_partitions);  // a real device and --apply-partitions
  for (const auto& [backend, mode] : std::vector<std::pair<std::string, std::string>>{
           {"cuda", "time-slice"}, {"rocm", "priority"}, {"cuda", ""}}) {
    IsolationPlan p = PlanIsolation(*h, launch(backend, mode), "job-1-a1", "/ckpt", fs, {});
    EXPECT_TRUE(p.partition_commands.empty()) << backend << " " << mode;
    EXPECT_FALSE(p.env.contains("CUDA_MPS_PIPE_DIRECTORY")) << backend << " " << mode;
    const std::string text = DescribeIsolation(p, {});
    EXPECT_EQ(text.find("time-shared by the driver") != std::string::npos, !mode.empty())
        << backend << " " << mode << ": " << text;
  }
}

}  // namespace
}  // namespace tianshu::agent
