// Where an inference service may overlay GPUs that training holds whole (scheduler.colocation):
// one node, the least-loaded of its trained GPUs with overlay budget left, checked against the
// caller's latency objective. A pure search: it reads the budget, the caller takes it. Private
// to engine/.
//   auto ranks = internal::PlaceOverlay(topology, work, job, overlay, trained, fits);
//   if (ranks) for (const auto& s : *ranks) overlay[s.gpu] += job.request.gpu_milli;
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "tianshu/engine/engine.h"

namespace tianshu::engine::internal {

// Whether the service `job` keeps its objective on `ranks` (EngineOptions::colocation_fits).
using ColocationFits =
    std::function<bool(const model::JobSpec& job, std::span<const placement::RankSlot> ranks)>;

// An overlay placement for inference `job` on GPUs training holds (`trained`, per GPU), with
// room in `overlay` (per GPU milli already overlaid); nullopt when none fits. Empty `fits`:
// any overlay with room is taken.
std::optional<std::vector<placement::RankSlot>> PlaceOverlay(
    const model::Topology& topology, const model::ClusterState& work, const JobRecord& job,
    const std::vector<int>& overlay, const std::vector<char>& trained, const ColocationFits& fits);

}  // namespace tianshu::engine::internal
