// A required bound on the leaf switches a job spans (PlacementRequest::max_leaves, from a
// job's `topology: {leaves: minimum | N}`): Slurm's --switches=N without a time limit,
// Kueue's podset-required-topology, Volcano's hard network-topology mode. Every strategy
// MakeStrategy builds honours it through the same wrapper as nested gang groups: the
// strategy's own placement is kept when it spans few enough leaves, else the strategy runs
// again on the nodes of the leaves with the most room (the best-fitting leaf for a one-leaf
// bound), else the job does not fit now; a bound no idle cluster could meet can never fit.
//   const int limit = LeafLimit(state, request);  // 0: no bound
//   if (limit > 0 && !WithinLeaves(topo, limit, outcome.ranks)) ...
#pragma once

#include <functional>
#include <optional>
#include <span>

#include "tianshu/model/cluster_state.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement {

// The most leaf switches `request` may span here: request.max_leaves, or for
// kFewestLeaves the fewest leaves whose nodes (those its filters accept) could hold it on an
// idle cluster. 0 when nothing bounds it (no bound asked, or a fabric without leaves).
int LeafLimit(const model::ClusterState& state, const PlacementRequest& request);

// Whether `ranks` use at most `limit` leaf switches.
bool WithinLeaves(const model::Topology& topology, int limit, std::span<const RankSlot> ranks);

// "Can never fit" with its reason when even an idle cluster holds the request on no N leaves
// of its bound of N, else nullopt (always for no bound, or the fewest leaves that hold it).
std::optional<Outcome> NeverWithinLeaves(const model::ClusterState& state,
                                         const PlacementRequest& request);

// Places `request` within `limit` leaves by running `place` on copies of `state` that keep
// only the nodes of chosen leaves: for one leaf, each leaf with room for it, the tightest
// first (best fit keeps roomy leaves whole); for more, the `limit` leaves with the most room.
// kDoesNotFitNow when none of them holds it now.
Outcome PlaceWithinLeaves(const model::ClusterState& state, const PlacementRequest& request,
                          int limit,
                          const std::function<Outcome(const model::ClusterState&)>& place);

}  // namespace tianshu::placement
