// The filter every strategy shares (health, backend, GPU model, node selector, device memory,
// storage bandwidth, then free capacity), the choice of GPUs inside a node (one NVLink island,
// GPUs beside a NIC, shared GPUs packed), and the rank order of a placement.
//
//   int cap = NodeCapacity(snapshot, node, request);   // ranks the node can take now
//   Outcome o = FinishPlacement(snapshot, request, {{node, 4}});
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tianshu/placement/strategy.h"

namespace tianshu::placement {

// Why a node can never host a rank of a request, whatever is free.
enum class Reject {
  kNone,          // it can, given free resources
  kUnhealthy,     // the node is down
  kBackend,       // wrong software stack
  kModel,         // accelerator model not among those accepted
  kSelector,      // labels do not match the node selector
  kDeviceMemory,  // the device is smaller than one rank needs
  kStorage,       // NVMe write bandwidth below what the job needs
  kTooSmall,      // the node can never hold the ranks asked of it (CPU, memory, GPU count)
};
std::string_view RejectName(Reject r);

// The static part of the filter (independent of what is allocated).
Reject StaticCheck(const ClusterState& state, int node, const PlacementRequest& request);

// Ranks of `request` the node can take now (0 when rejected). With gpus_per_node the result
// is 0 or gpus_per_node; with single_node it is the full count or 0 only when `whole` is set.
int NodeCapacity(const ClusterState& state, int node, const PlacementRequest& request);
// The same on an idle cluster (what the node could ever take).
int NodeCapacityIdle(const ClusterState& state, int node, const PlacementRequest& request);

// "Can never fit" with its reason, or nullopt when an idle cluster could hold the request.
std::optional<Outcome> NeverFits(const ClusterState& state, const PlacementRequest& request);

// The GPUs (global indices) of `count` ranks on a node: one NVLink island if one holds them
// (the fullest such island), GPUs of one PCIe switch next to a NIC, shared GPUs packed onto
// the fullest device. Empty if the node cannot hold them.
std::vector<int> PickGpus(const ClusterState& state, int node, int count, int gpu_milli);

// Turns node counts into a placed Outcome (GPUs picked on each node, ranks ordered so that
// the ranks of one NVLink domain are contiguous, nodes in switch order), or kDoesNotFitNow if
// the counts do not fit.
Outcome FinishPlacement(const ClusterState& state, const PlacementRequest& request,
                        const std::vector<std::pair<int, int>>& node_counts);

// Sorts rank slots by leaf switch, node, NVLink island and GPU.
void OrderRanks(const model::Topology& topology, std::vector<RankSlot>* ranks);

// kDoesNotFitNow with the free capacity it saw.
Outcome NotNow(const PlacementRequest& request, int64_t available);

// Lower-case comparison of accelerator model names.
bool ModelAccepted(const PlacementRequest& request, const std::string& model);

}  // namespace tianshu::placement
