// For tests and benchmarks that drive the control plane directly, with no agent: a node's
// registration, and the reports an agent sends for an order it carried out at once.
//   auto r = tianshu::testing::A100Node("n0", "agent-0", "leaf-0");
//   batch.reports = tianshu::testing::AcceptedAndStarted(order);
//   cp.Reports("n0", tianshu::testing::AcceptAllWork(cp, "n0", "agent-0"), now_ms);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tianshu/server/control_plane.h"
#include "tianshu/wire/wire.h"

namespace tianshu::testing {

// A node with eight declared A100-80GB GPUs (NUMA 0), 64 CPUs and 512 GiB, under leaf switch
// `leaf`.
inline wire::RegisterRequest A100Node(const std::string& node, const std::string& agent_id,
                                      const std::string& leaf) {
  wire::RegisterRequest r{.node = node, .agent_id = agent_id};
  for (int d = 0; d < 8; ++d) {
    r.hardware.devices.push_back(
        {.index = d, .model = "A100-80GB", .vendor = "nvidia", .numa = 0, .declared = true});
  }
  r.hardware.cpu_milli = 64000;
  r.hardware.memory_bytes = int64_t{512} << 30;
  r.hardware.labels["leaf"] = leaf;
  return r;
}

// The order accepted and, for a launch, each of its ranks started (pid 1000 + rank).
inline std::vector<wire::Report> AcceptedAndStarted(const wire::WorkOrder& order) {
  std::vector<wire::Report> out = {
      {.order_id = order.id, .kind = wire::ReportKind::kAccepted, .job_id = order.job_id}};
  if (!order.launch) return out;
  for (const auto& rank : order.launch->ranks) {
    out.push_back({.order_id = order.id,
                   .kind = wire::ReportKind::kStarted,
                   .job_id = order.job_id,
                   .rank = rank.rank,
                   .pid = 1000 + rank.rank});
  }
  return out;
}

// The orders outstanding for `node` (its agent `agent_id`), fetched without waiting, and the
// batch of reports that accepts them all and starts every launch's ranks: empty when they
// could not be fetched. `launches`, when given, counts the launch orders among them.
inline wire::ReportBatch AcceptAllWork(server::ControlPlane& cp, const std::string& node,
                                       const std::string& agent_id, size_t* launches = nullptr) {
  wire::ReportBatch b{.agent_id = agent_id};
  auto text = cp.Work(node, agent_id, 0);
  if (!text) return b;
  auto work = wire::ParseWorkBatch(*text);
  if (!work) return b;
  for (const auto& order : work->orders) {
    if (launches != nullptr && order.launch) ++*launches;
    for (auto& r : AcceptedAndStarted(order)) b.reports.push_back(std::move(r));
  }
  return b;
}

}  // namespace tianshu::testing
