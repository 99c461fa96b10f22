// Helpers of the agent's tests (agent_test.cc, agent_lease_test.cc): an agent over a fake
// file system and process table, and the orders they send it.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tianshu/agent/agent.h"

namespace tianshu::agent {

inline constexpr int64_t kSec = kNsPerSec;

// An agent over a fake file system (with fake v1 cgroupfs) and a fake process table.
struct Fixture {
  FakeSystemFiles fs;
  FakeProcessRunner runner;
  std::unique_ptr<CgroupDriver> cgroups;
  HostInfo host;
  AgentOptions options{
      .node = "n0", .workdir = "/w", .checkpoint_root = "/ckpt", .checkpoint_grace_ns = 10 * kSec};

  Fixture() {
    fs.AddFile("/proc/mounts",
               "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
               "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n");
    fs.AddFile("/proc/self/cgroup", "4:memory:/\n3:cpuset:/\n");
    fs.AddFile("/sys/fs/cgroup/cpuset/cpuset.cpus", "0-1");
    fs.AddFile("/sys/fs/cgroup/cpuset/cpuset.mems", "0");
    fs.AutoFiles("/sys/fs/cgroup/memory", {"cgroup.procs", "memory.limit_in_bytes"});
    fs.AutoFiles("/sys/fs/cgroup/cpuset", {"cgroup.procs", "cpuset.cpus", "cpuset.mems"});
    cgroups = std::move(*DetectCgroupDriver(fs, {}));
    host.hostname = "n0";
    host.cpus = 2;
    host.numa_nodes = {{0, {0, 1}, 1 << 30}};
    auto devs = ParseDeclaredDevices("4xA100-80GB");
    host.accelerators = *devs;
    host.declared_accelerators = true;
  }
  Agent Make() { return Agent(options, host, fs, *cgroups, runner); }
  // The machine's boot, as the agent reads it (a new id: the machine restarted).
  void Boot(const std::string& id) { fs.AddFile("/proc/sys/kernel/random/boot_id", id + "\n"); }
};

inline wire::WorkOrder LaunchOrder(const std::string& id, int ranks, std::string backend = "cuda") {
  wire::WorkOrder o;
  o.id = id;
  o.kind = wire::OrderKind::kLaunch;
  o.job_id = "j-1";
  o.attempt = 1;
  wire::LaunchOrder l;
  l.job_name = "ddp";
  l.backend = std::move(backend);
  l.world_size = ranks * 2;
  l.master_addr = "10.0.0.1";
  l.master_port = 29511;
  for (int r = 0; r < ranks; ++r) {
    l.ranks.push_back({.rank = ranks + r,
                       .local_rank = r,
                       .node_rank = 1,
                       .devices = {r},
                       .command = {"/usr/bin/python3", "train.py"},
                       .env = {{"NCCL_ALGO", "Ring"}}});
  }
  l.cgroup.memory_bytes = 1 << 30;
  o.launch = l;
  return o;
}

inline wire::WorkOrder StopOrder(const std::string& id, bool checkpoint_first, int64_t grace_ms) {
  wire::WorkOrder o;
  o.id = id;
  o.kind = wire::OrderKind::kStop;
  o.job_id = "j-1";
  o.attempt = 1;
  o.stop = wire::StopOrder{
      .reason = "preempt", .checkpoint_first = checkpoint_first, .grace_ms = grace_ms};
  return o;
}

inline std::vector<std::string> Kinds(const Agent& a) {
  std::vector<std::string> out;
  for (const auto& r : a.PendingReports()) {
    out.push_back(std::string(wire::ReportKindName(r.kind)) +
                  (r.rank >= 0 ? ":" + std::to_string(r.rank) : ""));
  }
  return out;
}

}  // namespace tianshu::agent
