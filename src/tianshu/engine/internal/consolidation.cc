#include "tianshu/engine/internal/consolidation.h"

#include <algorithm>

#include "tianshu/placement/fit.h"

namespace tianshu::engine::internal {

bool Compact(const model::Topology& t, const std::vector<placement::RankSlot>& ranks,
             int64_t need_milli) {
  if (ranks.empty()) return true;
  const placement::Span span = placement::SpanOf(t, ranks);
  size_t leaf_size = 1;
  for (int leaf : span.leaves) {
    if (leaf >= 0) leaf_size = std::max(leaf_size, t.switches[leaf].nodes.size());
  }
  const int64_t per_node = int64_t{t.GpusOn(ranks.front().node)} * model::kMilliPerGpu;
  const int64_t min_nodes = std::max<int64_t>(1, (need_milli + per_node - 1) / per_node);
  const int64_t min_leaves =
      (min_nodes + static_cast<int64_t>(leaf_size) - 1) / static_cast<int64_t>(leaf_size);
  return static_cast<int64_t>(span.nodes.size()) <= min_nodes &&
         static_cast<int64_t>(span.leaves.size()) <= min_leaves;
}

bool CompactMayExist(const model::ClusterState& s, const placement::PlacementRequest& r,
                     std::span<const placement::RankSlot> held) {
  if (r.gpu_milli < model::kMilliPerGpu) return true;
  const model::Topology& t = s.topology();
  // Whole GPUs `held` has on each node it uses (few nodes: a list).
  std::vector<std::pair<int, int>> held_on;
  for (const placement::RankSlot& slot : held) {
    if (slot.gpu < 0) continue;
    auto it = std::find_if(held_on.begin(), held_on.end(),
                           [&](const auto& e) { return e.first == slot.node; });
    if (it == held_on.end()) {
      held_on.emplace_back(slot.node, 1);
    } else {
      ++it->second;
    }
  }
  // Whole GPUs free on a node, with `held` counted free: at least what releasing it would give
  // (the check is monotone in what is free, so an upper bound keeps "false" exact).
  auto free_on = [&](int n) {
    int free = s.FreeWholeGpus(n);
    for (const auto& [node, gpus] : held_on) free += node == n ? gpus : 0;
    return free;
  };
  int max_node = s.SwitchMaxNodeWholeGpus(t.Root());
  for (const auto& [node, gpus] : held_on) max_node = std::max(max_node, free_on(node));
  if (r.ranks <= max_node) return true;
  int per_node = 0;
  for (const auto& type : t.types) per_node = std::max(per_node, type.gpus_per_node);
  if (per_node <= 0 || r.ranks <= per_node) return false;
  const int full = r.ranks / per_node;
  const int rest = r.ranks % per_node;
  for (size_t i = 0; i < t.switches.size(); ++i) {
    const auto& sw = t.switches[i];
    if (sw.nodes.empty()) continue;
    if (static_cast<int>(sw.nodes.size()) * per_node < r.ranks) return true;  // spans leaves
    // The nodes below need `r.ranks` whole GPUs free among them: a leaf with fewer is passed
    // over without looking at its nodes.
    int leaf_free = s.SwitchFreeWholeGpus(static_cast<int>(i));
    for (const auto& [node, gpus] : held_on) {
      leaf_free += t.nodes[node].leaf == static_cast<int>(i) ? gpus : 0;
    }
    if (leaf_free < r.ranks) continue;
    int whole = 0;
    int partial = 0;
    for (int n : sw.nodes) {
      const int free = free_on(n);
      if (free >= t.GpusOn(n) && t.GpusOn(n) == per_node) {
        ++whole;
      } else if (rest > 0 && free >= rest) {
        ++partial;
      }
    }
    if (whole >= full + (rest > 0 ? 1 : 0) || (whole >= full && partial > 0)) return true;
  }
  return false;
}

double ProgressNow(const JobRecord& r, double est, double now_s) {
  return r.progress + (now_s - r.start_s) / (std::max(1.0, r.run_slowdown) * est);
}

bool Consolidation::TooSlowToStart(const JobRecord& job,
                                   const std::vector<placement::RankSlot>& ranks) const {
  if (Compact(*topology_, ranks, int64_t{job.request.ranks} * job.request.gpu_milli)) return false;
  if (!options_->placement_slowdown) return true;
  const double slowdown = options_->placement_slowdown(job.spec, ranks);
  if (slowdown <= 0) return true;  // cannot be priced: judged by its shape alone
  return slowdown > 1 + options_->compact_slowdown_tolerance;
}

double Consolidation::RunSlowdown(const JobRecord& job,
                                  const std::vector<placement::RankSlot>& ranks) const {
  if (!options_->placement_slowdown || job.colocated || ranks.empty()) return 1;
  if (Compact(*topology_, ranks, int64_t{job.request.ranks} * job.request.gpu_milli)) return 1;
  return std::max(1.0, options_->placement_slowdown(job.spec, ranks));  // unknown (<= 0): 1
}

bool Consolidation::WaitsOn() const {
  return options_->compact_wait_ratio > 0 || options_->compact_max_wait_s > 0;
}

bool Consolidation::HeldWithoutSearch(const JobRecord& job) const {
  return job.spread_too_slow || !options_->placement_slowdown;
}

std::optional<double> Consolidation::CompactWaitEnd(const JobRecord& job) const {
  if (!WaitsOn()) return std::nullopt;
  // Without a runtime estimate a job does not wait: the wait is priced against its run time.
  const double est = job.EstimatedDurationS() * std::max(0.0, 1.0 - job.progress);
  if (est <= 0) return std::nullopt;
  double limit = options_->compact_max_wait_s > 0 ? options_->compact_max_wait_s : 1e300;
  if (options_->compact_wait_ratio > 0) {
    limit = std::min(limit, options_->compact_wait_ratio * est);
  }
  if (limit >= 1e300) return std::nullopt;
  return job.pending_since_s + limit;
}

bool Consolidation::InCompactWait(const JobRecord& job, double now_s) const {
  const auto end = CompactWaitEnd(job);
  return end && now_s < *end;
}

bool Consolidation::UpgradesOn() const {
  return options_->placement_slowdown && options_->compact_max_wait_s > 0 &&
         options_->upgrade_tries_per_cycle > 0;
}

}  // namespace tianshu::engine::internal
