// Nested gang groups (PlacementRequest::groups, from a job's `groups:`): every consecutive
// block of `size` ranks sits inside one domain of its scope (NVLink island, node, leaf
// switch). Every strategy MakeStrategy builds honours them through a wrapper: the strategy's
// own placement is kept when it already holds (or holds after reordering its ranks), else a
// group-aware search places the job, else it does not fit now.
//   if (!GroupsHold(topo, r.groups, outcome.ranks)) ...
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "tianshu/model/cluster_state.h"
#include "tianshu/model/job.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement {

// Whether each group level holds for `ranks` (rank order).
bool GroupsHold(const model::Topology& topology, std::span<const model::RankGroup> groups,
                std::span<const RankSlot> ranks);

// The same slots in a rank order that satisfies the groups, or nullopt when none does.
std::optional<std::vector<RankSlot>> Regroup(const model::Topology& topology,
                                             std::span<const model::RankGroup> groups,
                                             std::span<const RankSlot> ranks);

// A placement that satisfies the groups, found level by level from the outermost: domains
// that can hold whole groups now, the fullest that suffice first. kCanNeverFit when a group
// is larger than any domain of its scope.
Outcome PlaceGrouped(const model::ClusterState& state, const PlacementRequest& request);

// Wraps a strategy so that it honours request.groups and request.max_leaves (leaves.h);
// MakeStrategy does this for all.
std::unique_ptr<Strategy> HonourConstraints(std::unique_ptr<Strategy> inner);

}  // namespace tianshu::placement
