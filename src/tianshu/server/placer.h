// Placement for the server: the cluster view built from registered agents (a two-tier tree,
// leaves from each node's `leaf` label) and a thin adapter over placement::Strategy.
//
// Why not engine::Engine: it takes a fixed topology when created and has no event that
// restores a running job's placement, and the server needs both (dynamic discovery changes
// the node set; a restarted server rebuilds running jobs from its store). Until the engine
// grows them, the server orders its queue itself (priority, then submission) and places each
// job with the strategy `scheduler.algorithm` names.
//   auto view = BuildClusterView({{"node-0", hw0}, {"node-1", hw1}});
//   auto placer = Placer::Create("topology", config);
//   placement::Outcome o = (*placer)->Place(state, request, /*queue_length=*/3);
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
[[nodiscard]] Result<std::unique_ptr<ClusterView>> BuildClusterView(
    const std::vector<NodeHardware>& nodes);

class Placer {
 public:
  // `name` is a strategy (placement::StrategyNames()); the network weight is 0 when the
  // config says topology_aware: false.
  [[nodiscard]] static Result<std::unique_ptr<Placer>> Create(const std::string& name,
                                                              const model::EngineConfig& config);
  // Places one job; with a long queue (> 64 pending) a cheap strategy ("topology") is used so
  // that a cycle stays short under load, as the engine does.
  placement::Outcome Place(const model::ClusterState& snapshot,
                           const placement::PlacementRequest& request, size_t queue_length) const;
  std::string Name() const;

 private:
  std::unique_ptr<placement::Strategy> main_, fast_;
};

}  // namespace tianshu::server
