#include "tianshu/agent/agent_metrics.h"

#include "tianshu/base/exposition.h"

namespace tianshu::agent {

std::string RenderAgentMetrics(const AgentFigures& f) {
  Exposition out;
  AppendBuildInfo(out, "tianshu_build_info",
                  "1, with the version of the tianshu agent and the compiler that built it.");
  out.Family("tianshu_agent_info", "gauge", "1, with the node this agent runs and its cgroups.")
      .Sample({{"node", f.node}, {"cgroup_mode", f.cgroup_mode}}, 1);
  out.Family("tianshu_agent_registered", "gauge",
             "1 while the agent is registered with the server, else 0.")
      .Sample(f.registered ? 1 : 0);
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const std::pair<const char*, std::pair<const char*, int64_t>> counters[] = {
      {"tianshu_agent_registrations_total",
       {"Registrations the server accepted.", f.registrations}},
      {"tianshu_agent_register_failures_total",
       {"Registrations that failed (server unreachable or refusing).",
        f.session.register_failures}},
      {"tianshu_agent_heartbeats_total", {"Heartbeats the server answered.", f.session.heartbeats}},
      {"tianshu_agent_heartbeat_failures_total",
       {"Heartbeats that failed (server unreachable or erring).", f.session.heartbeat_failures}},
      {"tianshu_agent_report_batches_total",
       {"Batches of reports the server acknowledged.", f.session.report_batches}},
      {"tianshu_agent_report_failures_total",
       {"Batches of reports that failed to reach the server (sent again later).",
        f.session.report_failures}},
      {"tianshu_agent_work_fetch_failures_total",
       {"Fetches of outstanding work orders that failed.", f.session.work_failures}},
  };
  for (const auto& [name, rest] : counters) {
    out.Family(name, "counter", rest.first).Sample(d(rest.second));
  }
  out.Family("tianshu_agent_reports_pending", "gauge",
             "Reports waiting to be acknowledged by the server.")
      .Sample(d(f.reports_pending));
  out.Family("tianshu_agent_orders_total", "counter",
             "Work orders carried out, by kind (\"rejected\": invalid ones); repeats of an order "
             "are not counted.");
  for (const char* kind : {"launch", "checkpoint", "stop", "rejected"}) {
    auto it = f.held.orders.find(kind);
    out.Sample({{"kind", kind}}, d(it == f.held.orders.end() ? 0 : it->second));
  }
  out.Family("tianshu_agent_jobs", "gauge", "Job attempts the agent holds on this node.")
      .Sample(d(f.held.jobs));
  out.Family("tianshu_agent_cgroups", "gauge", "Job cgroups the agent made and still holds.")
      .Sample(d(f.held.cgroups));
  out.Family("tianshu_agent_ranks_running", "gauge", "Ranks running on this node.")
      .Sample(d(f.held.ranks_running));
  if (f.lease_remaining_ns >= 0) {
    out.Family("tianshu_agent_lease_remaining_seconds", "gauge",
               "Seconds until the node lease runs out and the ranks are killed (fencing), "
               "unless a heartbeat is answered first.")
        .Sample(static_cast<double>(f.lease_remaining_ns) / 1e9);
  }
  out.Family("tianshu_agent_gpus", "gauge", "Accelerators the agent registered.")
      .Sample(d(static_cast<int64_t>(f.devices.size())));
  out.Family("tianshu_agent_gpu_info", "gauge",
             "1 for every accelerator: its model, UUID and whether it was declared (--devices) "
             "rather than found.");
  for (const auto& dev : f.devices) {
    out.Sample({{"gpu", std::to_string(dev.index)},
                {"model", dev.model},
                {"uuid", dev.uuid},
                {"declared", dev.declared ? "true" : "false"}},
               1);
  }
  out.Family("tianshu_agent_gpu_measured", "gauge",
             "1 when NVML measures the accelerators' usage on this node, else 0 (declared "
             "devices, no NVIDIA driver, or --no-nvml): then no utilisation is exported.")
      .Sample(f.measuring ? 1 : 0);
  out.Family("tianshu_agent_gpu_healthy", "gauge",
             "0 for an accelerator NVML reports lost, else 1 (measured devices only).");
  for (const auto& u : f.usage) out.Sample({{"gpu", std::to_string(u.index)}}, u.healthy ? 1 : 0);
  out.Family("tianshu_agent_gpu_utilization_ratio", "gauge",
             "Compute busy fraction (0-1) of an accelerator over NVML's last sample period.");
  for (const auto& u : f.usage) {
    if (u.healthy) out.Sample({{"gpu", std::to_string(u.index)}}, u.utilization);
  }
  out.Family("tianshu_agent_gpu_memory_used_bytes", "gauge",
             "Device memory in use as NVML measured it.");
  for (const auto& u : f.usage) {
    if (u.healthy) out.Sample({{"gpu", std::to_string(u.index)}}, d(u.memory_used_bytes));
  }
  AppendProcessMetrics(out);
  return out.Take();
}

void AgentMetrics::Publish(AgentFigures f) {
  std::lock_guard l(mu_);
  figures_ = std::move(f);
}

std::string AgentMetrics::Render() const {
  AgentFigures f;
  {
    std::lock_guard l(mu_);
    f = figures_;
  }
  return RenderAgentMetrics(f);
}

}  // namespace tianshu::agent
