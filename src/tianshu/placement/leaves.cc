#include "tianshu/placement/leaves.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tianshu/placement/fit.h"

namespace tianshu::placement {
namespace {

// Tries of single leaves before a one-leaf bound gives up for now (each copies the state).
constexpr size_t kMaxLeafTries = 8;

// (room, leaf) for every leaf with room for a rank of `r`: the ranks its nodes can take now,
// or on an idle cluster.
std::vector<std::pair<int64_t, int>> LeafRoom(const model::ClusterState& s,
                                              const PlacementRequest& r, bool idle) {
  const model::Topology& t = s.topology();
  PlacementRequest probe = r;
  probe.ranks = 1 << 20;
  probe.single_node = false;
  std::vector<int64_t> room(t.switches.size(), 0);
  for (const auto& n : t.nodes) {
    if (n.leaf < 0) continue;
    room[static_cast<size_t>(n.leaf)] +=
        idle ? NodeCapacityIdle(s, n.id, probe) : NodeCapacity(s, n.id, probe);
  }
  std::vector<std::pair<int64_t, int>> out;
  for (size_t i = 0; i < room.size(); ++i) {
    if (room[i] > 0) out.emplace_back(room[i], static_cast<int>(i));
  }
  return out;
}

void MostRoomFirst(std::vector<std::pair<int64_t, int>>* leaves) {
  std::sort(leaves->begin(), leaves->end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
}

int64_t RoomOfFirst(const std::vector<std::pair<int64_t, int>>& leaves, int count) {
  int64_t sum = 0;
  for (size_t i = 0; i < leaves.size() && i < static_cast<size_t>(count); ++i) {
    sum += leaves[i].first;
  }
  return sum;
}

int LeavesWithNodes(const model::Topology& t) {
  return static_cast<int>(std::count_if(t.switches.begin(), t.switches.end(),
                                        [](const model::Switch& sw) { return !sw.nodes.empty(); }));
}

std::string LeavesText(int limit) {
  return limit == 1 ? "one leaf switch" : std::to_string(limit) + " leaf switches";
}

}  // namespace

int LeafLimit(const model::ClusterState& state, const PlacementRequest& request) {
  if (request.max_leaves == 0 || request.ranks <= 0 || request.single_node) return 0;
  const int leaves = LeavesWithNodes(state.topology());
  if (request.max_leaves > 0) return request.max_leaves >= leaves ? 0 : request.max_leaves;
  auto room = LeafRoom(state, request, /*idle=*/true);
  MostRoomFirst(&room);
  int64_t sum = 0;
  for (size_t i = 0; i < room.size(); ++i) {
    sum += room[i].first;
    if (sum >= request.ranks) {
      const int fewest = static_cast<int>(i) + 1;
      return fewest >= leaves ? 0 : fewest;
    }
  }
  return 0;  // no idle cluster holds it at all: the strategy says why
}

bool WithinLeaves(const model::Topology& topology, int limit, std::span<const RankSlot> ranks) {
  return static_cast<int>(SpanOf(topology, ranks).leaves.size()) <= limit;
}

std::optional<Outcome> NeverWithinLeaves(const model::ClusterState& state,
                                         const PlacementRequest& request) {
  if (request.max_leaves == model::kFewestLeaves) return std::nullopt;  // met when idle
  const int limit = LeafLimit(state, request);
  if (limit <= 0) return std::nullopt;
  auto room = LeafRoom(state, request, /*idle=*/true);
  MostRoomFirst(&room);
  const int64_t most = RoomOfFirst(room, limit);
  if (most >= request.ranks) return std::nullopt;
  return Outcome{.kind = OutcomeKind::kCanNeverFit,
                 .ranks = {},
                 .reason = "topology.leaves asks for at most " + LeavesText(limit) +
                           ", and the roomiest it may use hold " + std::to_string(most) +
                           " of its " + std::to_string(request.ranks) + " ranks"};
}

Outcome PlaceWithinLeaves(const model::ClusterState& state, const PlacementRequest& request,
                          int limit,
                          const std::function<Outcome(const model::ClusterState&)>& place) {
  const model::Topology& t = state.topology();
  auto room = LeafRoom(state, request, /*idle=*/false);
  std::vector<std::vector<int>> tries;
  if (limit == 1) {
    std::sort(room.begin(), room.end());  // tightest first, then by id
    for (const auto& [free, leaf] : room) {
      if (tries.size() == kMaxLeafTries) break;
      if (free >= request.ranks) tries.push_back({leaf});
    }
  } else {
    MostRoomFirst(&room);
    if (RoomOfFirst(room, limit) >= request.ranks) {
      std::vector<int> chosen;
      for (size_t i = 0; i < room.size() && i < static_cast<size_t>(limit); ++i) {
        chosen.push_back(room[i].second);
      }
      tries.push_back(std::move(chosen));
    }
  }
  for (const std::vector<int>& chosen : tries) {
    model::ClusterState only = state;
    for (const auto& n : t.nodes) {
      if (state.Healthy(n.id) && std::find(chosen.begin(), chosen.end(), n.leaf) == chosen.end()) {
        only.SetHealthy(n.id, false);
      }
    }
    Outcome o = place(only);
    if (o.placed() && WithinLeaves(t, limit, o.ranks)) return o;
  }
  return Outcome{
      .kind = OutcomeKind::kDoesNotFitNow,
      .ranks = {},
      .reason =
          (limit == 1 ? std::string("no leaf switch has") : "no " + LeavesText(limit) + " have") +
          " room for all " + std::to_string(request.ranks) + " ranks now (topology.leaves)"};
}

}  // namespace tianshu::placement
