// Fixtures of the doctor's unit tests: a node in sysfs built piece by piece (NodeBuilder), a
// healthy two-GPU RoCE node with everything RunDoctor needs (Node), a server's answer with a
// chosen clock offset, and lookups of findings by check and subject.
//   Node s;  s.gpus = {HealthyGpu(0, "0000:1b:00.0")};  // one of its two GPUs is missing
//   std::vector<Finding> f = s.Run();  EXPECT_EQ(Of(f, "nvidia")[0].status, CheckStatus::kFail);
#pragma once

#include <time.h>

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tianshu/agent/discovery.h"
#include "tianshu/agent/doctor.h"

namespace tianshu::agent::doctor_fixtures {

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

inline GpuHealth HealthyGpu(int index, const std::string& addr) {
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
inline NodeBuilder HealthyNode() {
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
inline ServerAnswer Answer(int status, int64_t offset_ms) {
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

inline std::vector<Finding> Of(const std::vector<Finding>& all, const std::string& check) {
  std::vector<Finding> out;
  for (const auto& f : all) {
    if (f.check == check) out.push_back(f);
  }
  return out;
}

inline const Finding* Find(const std::vector<Finding>& all, const std::string& check,
                           const std::string& subject) {
  for (const auto& f : all) {
    if (f.check == check && f.subject == subject) return &f;
  }
  return nullptr;
}

}  // namespace tianshu::agent::doctor_fixtures
