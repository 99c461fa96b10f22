#include "tianshu/engine/internal/overlay_search.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "tianshu/placement/fit.h"

namespace tianshu::engine::internal {

std::optional<std::vector<placement::RankSlot>> PlaceOverlay(
    const model::Topology& topology, const model::ClusterState& work, const JobRecord& job,
    const std::vector<int>& overlay, const std::vector<char>& trained, const ColocationFits& fits) {
  const placement::PlacementRequest& rq = job.request;
  if (rq.ranks <= 0 || rq.gpu_milli <= 0) return std::nullopt;
  struct Candidate {
    int load = 0;  // overlay milli already on the chosen GPUs
    int node = 0;
    std::vector<int> gpus;
  };
  std::vector<Candidate> candidates;
  for (const auto& node : topology.nodes) {
    if (placement::StaticCheck(work, node.id, rq) != placement::Reject::kNone) continue;
    std::vector<std::pair<int, int>> room;  // (overlay milli, gpu)
    const int first = node.first_gpu, count = topology.GpusOn(node.id);
    for (int g = first; g < first + count; ++g) {
      if (trained[g] && overlay[g] + rq.gpu_milli <= model::kMilliPerGpu) {
        room.emplace_back(overlay[g], g);
      }
    }
    if (static_cast<int>(room.size()) < rq.ranks) continue;
    // The least-loaded GPUs of the node: the interference is spread over its training GPUs.
    std::sort(room.begin(), room.end());
    Candidate c{.load = 0, .node = node.id, .gpus = {}};
    for (int i = 0; i < rq.ranks; ++i) {
      c.load += room[i].first;
      c.gpus.push_back(room[i].second);
    }
    std::sort(c.gpus.begin(), c.gpus.end());
    candidates.push_back(std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.load, a.node) < std::tie(b.load, b.node);
  });
  constexpr size_t kMaxTried = 32;  // candidates the objective check sees per cycle and job
  for (size_t i = 0; i < candidates.size() && i < kMaxTried; ++i) {
    std::vector<placement::RankSlot> ranks;
    for (int g : candidates[i].gpus) ranks.push_back({.node = candidates[i].node, .gpu = g});
    if (!fits || fits(job.spec, ranks)) return ranks;
  }
  return std::nullopt;
}

}  // namespace tianshu::engine::internal
