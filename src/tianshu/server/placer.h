// The server's view of its cluster: the topology of the registered agents (a two-tier tree,
// leaves from each node's `leaf` label; one server type per distinct hardware and label set),
// over which the scheduling ledger (one long-lived engine::Engine) decides
// (control_plane_ledger.cc).
//   auto view = BuildClusterView({{"node-0", &hw0}, {"node-1", &hw1}});
//   int node = (*view)->index.at("node-1");
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/cluster_state.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/topology.h"
#include "tianshu/placement/strategy.h"
#include "tianshu/wire/wire.h"

namespace tianshu::server {

struct NodeHardware {
  std::string name;
  const wire::Hardware* hardware = nullptr;
};

// The topology of the registered nodes that have accelerators: one server type per distinct
// (model, count, CPU, memory), node i of the topology is node_names[i]; local GPU k of a node
// is the agent's k-th device in index order (device_index[i][k]).
struct ClusterView {
  model::Topology topology;
  std::vector<std::string> node_names;
  std::map<std::string, int> index;            // name -> topology node
  std::vector<std::vector<int>> device_index;  // per node: local GPU -> agent device index
};
// `leaves` (node -> leaf name) overrides the `leaf` labels: the measured leaves of
// NetworkMap::MeasuredLeaves, so that placement keeps a gang inside a group of nodes that
// reach each other at full speed.
[[nodiscard]] Result<std::unique_ptr<ClusterView>> BuildClusterView(
    const std::vector<NodeHardware>& nodes,
    const std::map<std::string, std::string>* leaves = nullptr);

}  // namespace tianshu::server
