// The subtree search behind the topology strategy, shared with genetic's repair: find the
// smallest switch subtree that holds a gang (pruned by the snapshot's per-switch free counts)
// and pick nodes inside it by best-fit descent.
//   auto counts = TopologyChoose(snapshot, request);   // node -> ranks, or nullopt
//   bool ok = FillBelow(snapshot, request, sw, ranks, taken, &counts);
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

using NodeCounts = std::vector<std::pair<int, int>>;

// The node counts of the topology strategy, or nullopt when nothing holds the gang now. With
// `least_loaded`, subtrees of a tier are tried least loaded first (genetic's second seed: the
// objective charges a block's uplink load) instead of most used first.
std::optional<NodeCounts> TopologyChoose(const ClusterState& state, const PlacementRequest& r,
                                         bool least_loaded = false);

// Adds `ranks` more ranks below switch `sw` to `counts` (nodes already in `counts` give what
// they have left), best-fit descent; false (counts unchanged) if the subtree cannot hold them.
bool FillBelow(const ClusterState& state, const PlacementRequest& r, int sw, int ranks,
               NodeCounts* counts);

// Upper bound on the ranks a switch subtree can take, from the per-switch free counts.
int64_t SwitchUpperBound(const ClusterState& state, const PlacementRequest& r, int sw);

}  // namespace tianshu::placement::internal
