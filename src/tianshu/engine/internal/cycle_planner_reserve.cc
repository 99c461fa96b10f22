// The blocked head's node reservation (EASY backfill on nodes, as Slurm's backfill plans the
// head): which nodes it will get and from when, and the state jobs behind it are placed on.
#include <algorithm>
#include <utility>

#include "tianshu/engine/internal/cycle_planner.h"

namespace tianshu::engine::internal {

void CyclePlanner::ReserveNodes(const JobRecord& head) {
  // Gangs of one node keep the count reservation: measured on Philly at load 0.9, holding
  // their nodes too lengthened the average JCT (slurm preset 19.2 h -> 25.5 h).
  if (!reservation_.active || reservation_.shadow_s >= kNever ||
      head.request.ranks <= options_.small_job_max_gpus) {
    return;
  }
  // The working state once every running job expected to end by the shadow time has ended.
  model::ClusterState then = work_;
  std::vector<std::pair<double, JobId>> later;  // jobs expected to end after it, by end
  for (JobId id : view_.running) {
    const JobRecord& r = jobs_.at(id);
    if (std::find(evicted_.begin(), evicted_.end(), id) != evicted_.end()) continue;
    const double end = ExpectedEndS(r);
    if (end >= kNever) continue;
    if (end > reservation_.shadow_s) {
      later.emplace_back(end, id);
      continue;
    }
    (void)placement::Release(&then, r.request, placement::PlacedOutcome(r.placement));
  }
  const placement::Strategy* use =
      policies_.placement_large_queue ? policies_.placement_large_queue.get() : strategy_;
  ++result_.stats.placement_calls;
  placement::Outcome o = use->Place(then, head.request);  // a gang: never the small-job one
  // A head whose shape the count misses (a leaf bound, nested groups) may need GPUs that free
  // after the count's shadow time (which is now where its count is free, split over leaves).
  if (!o.placed() && head.request.Shaped()) {
    o = PlaceAtLaterEnd(head, use, std::move(then), std::move(later));
  }
  if (!o.placed()) return;
  reserved_work_ = work_;
  for (const auto& slot : o.ranks) reserved_work_.SetHealthy(slot.node, false);
  nodes_reserved_ = true;
}

placement::Outcome CyclePlanner::PlaceAtLaterEnd(const JobRecord& head,
                                                 const placement::Strategy* use,
                                                 model::ClusterState then,
                                                 std::vector<std::pair<double, JobId>> later) {
  // The later ends are added 1, 2, 4, ... at a time until the head is placed (at most
  // kMaxSteps searches), then the fewest of the last batch that place it are found by
  // bisection, and the shadow time moves to the last end taken: jobs ending by then may use
  // the reserved nodes, so it must not overshoot.
  constexpr int kMaxSteps = 10;
  std::sort(later.begin(), later.end());
  auto release = [&](model::ClusterState* s, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const JobRecord& r = jobs_.at(later[i].second);
      (void)placement::Release(s, r.request, placement::PlacedOutcome(r.placement));
    }
  };
  auto place = [&](const model::ClusterState& s) {
    ++result_.stats.placement_calls;
    return use->Place(s, head.request);
  };
  size_t failed = 0;  // ends taken where it still did not fit
  size_t step = 1;
  for (int steps = 0; failed < later.size() && steps < kMaxSteps; ++steps, step *= 2) {
    const size_t upto = std::min(later.size(), failed + step);
    model::ClusterState more = then;
    release(&more, failed, upto);
    placement::Outcome o = place(more);
    if (!o.placed()) {
      then = std::move(more);
      failed = upto;
      continue;
    }
    size_t fits = upto;  // fits with later[0, fits), not with later[0, failed)
    while (fits - failed > 1) {
      const size_t mid = failed + (fits - failed) / 2;
      model::ClusterState part = then;
      release(&part, failed, mid);
      placement::Outcome p = place(part);
      if (p.placed()) {
        fits = mid;
        o = std::move(p);
      } else {
        then = std::move(part);
        failed = mid;
      }
    }
    reservation_.shadow_s = later[fits - 1].first;
    return o;
  }
  return {};
}

const model::ClusterState& CyclePlanner::StateFor(const JobRecord& job) const {
  if (!nodes_reserved_) return work_;  // set only once the queue is blocked
  const double left = RemainingEstimateS(job);
  return left >= 0 && view_.now_s + left <= reservation_.shadow_s ? work_ : reserved_work_;
}

}  // namespace tianshu::engine::internal
