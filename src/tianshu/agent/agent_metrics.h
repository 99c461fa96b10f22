// The agent's own /metrics (served beside the rank logs, log_server.h): its devices and what
// NVML measured of them, the jobs, cgroups and ranks it holds, the orders it carried out, and its
// conversation with the server (registrations, heartbeats, reports and their failures), in the
// Prometheus text format. The agent's loop publishes a snapshot; the HTTP thread renders it.
//   AgentMetrics metrics;
//   metrics.Publish({.node = "n0", .held = agent.Held(), .session = session.stats()});
//   std::string text = metrics.Render();   // any thread
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tianshu/agent/agent.h"
#include "tianshu/agent/session.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

struct AgentFigures {
  std::string node;
  std::string cgroup_mode;               // "v2", "v1", "none"
  std::vector<wire::Device> devices;     // as registered (HardwareReport)
  bool measuring = false;                // a DeviceMonitor (NVML) reads the devices
  std::vector<wire::DeviceUsage> usage;  // its last reading
  Agent::Holdings held;
  SessionStats session;
  int64_t registrations = 0;
  bool registered = false;
  int64_t reports_pending = 0;
  int64_t lease_remaining_ns = -1;  // -1: no lease in force
};

// The exposition of `f`, with the process and build families.
std::string RenderAgentMetrics(const AgentFigures& f);

// The latest figures, published by the agent's loop and rendered by the HTTP thread.
// Thread-safe.
class AgentMetrics {
 public:
  void Publish(AgentFigures f);
  std::string Render() const;

 private:
  mutable std::mutex mu_;
  AgentFigures figures_;
};

}  // namespace tianshu::agent
