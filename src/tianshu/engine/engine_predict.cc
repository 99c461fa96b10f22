// What the engine predicts from its records between cycles: when a cycle could next decide
// differently with no new event (NextWakeup), and the learned runtimes of jobs that give none
// (RefreshLearnedEstimates), each redone only for what changed.
#include <algorithm>
#include <cmath>

#include "tianshu/engine/engine.h"
#include "tianshu/engine/internal/consolidation.h"
#include "tianshu/engine/policy.h"

namespace tianshu::engine {

std::optional<double> Engine::NextWakeup(double now_s) const {
  // The times below come from the records alone: while no record changed, the earliest one
  // still ahead stays the answer (a simulator asks after every event).
  if (!wake_.valid || (wake_.at && *wake_.at <= now_s)) {
    wake_ = {.valid = true, .at = RecordWakeup(now_s)};
    wake_.elastic_running = false;
    for (JobId id : ElasticOn() ? running_ : std::span<const JobId>{}) {
      if (jobs_.at(id).spec.elastic.enabled) {
        wake_.elastic_running = true;
        break;
      }
    }
  }
  std::optional<double> best = wake_.at;
  // Elastic jobs may grow into idle capacity every scaling interval, with nothing pending.
  const double interval = static_cast<double>(options_.config.scaling_interval_s);
  if (wake_.elastic_running && interval > 0 && (!best || now_s + interval < *best)) {
    best = now_s + interval;
  }
  return best;
}

void Engine::AccrueDue(double now_s) {
  const double due_by = DueBy(now_s);  // Accrue's own test
  std::vector<JobId> due;
  while (!change_heap_.empty() && change_heap_.front().first <= due_by) {
    const auto [t, id] = change_heap_.front();
    std::pop_heap(change_heap_.begin(), change_heap_.end(), std::greater<>());
    change_heap_.pop_back();
    auto it = jobs_.find(id);
    if (it != jobs_.end() && it->second.state == JobState::kRunning &&
        it->second.next_change_s == t) {
      due.push_back(id);  // (not stopped, nor asked again since)
    }
  }
  std::sort(due.begin(), due.end());
  due.erase(std::unique(due.begin(), due.end()), due.end());
  for (JobId id : due) {
    JobRecord& r = jobs_.at(id);
    const double kept = r.next_change_s;
    Accrue(r, now_s);
    if (r.next_change_s == kept) {  // not passed yet: kept for a later cycle
      change_heap_.emplace_back(kept, id);
      std::push_heap(change_heap_.begin(), change_heap_.end(), std::greater<>());
    }
  }
}

std::optional<double> Engine::RecordWakeup(double now_s) const {
  std::optional<double> best;
  auto take = [&](double t) {
    if (t > now_s && (!best || t < *best)) best = t;
  };
  if (!pending_.Empty()) {
    // The running jobs' next changes as kept (Engine::TrackChange), earliest first. A kept
    // time differs from what the policy says now by rounding only, unless the change is near
    // or passed since the job's last accrual: the policy is asked again, now, for those and for
    // every job kept within a millionth of the first one more than a second ahead; the jobs
    // kept later cannot come first. The same answer as asking every running job.
    std::vector<std::pair<double, JobId>> asked;
    auto& heap = change_heap_;
    std::optional<double> far;  // the first kept time more than a second ahead
    while (!heap.empty()) {
      const auto [t, id] = heap.front();
      if (far && t > *far + 1e-6 * std::max(1.0, std::abs(*far))) break;
      auto it = jobs_.find(id);
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.pop_back();
      if (it == jobs_.end() || it->second.state != JobState::kRunning ||
          it->second.next_change_s != t) {
        continue;  // stopped, or asked again since
      }
      asked.emplace_back(t, id);
      if (!far && t > now_s + 1) far = t;
      if (auto fresh = policies_->order->NextChange(it->second, now_s)) take(*fresh);
    }
    for (const auto& entry : asked) {
      heap.push_back(entry);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
    // A job held for a compact placement takes what fits once its wait ends. Where spread
    // placements are priced, only jobs found too slow spread are held (listed in held_spread_
    // when noted; those since started or gone are dropped here), otherwise every pending job.
    const internal::Consolidation consolidation(*topology_, options_);
    if (consolidation.WaitsOn() && options_.placement_slowdown) {
      std::erase_if(held_spread_, [&](JobId id) {
        auto it = jobs_.find(id);
        return it == jobs_.end() || it->second.state != JobState::kPending ||
               !consolidation.HeldWithoutSearch(it->second);
      });
    }
    const std::span<const JobId> held = !consolidation.WaitsOn() ? std::span<const JobId>{}
                                        : options_.placement_slowdown
                                            ? std::span<const JobId>(held_spread_)
                                            : pending_.Ids();
    for (JobId id : held) {
      const JobRecord& j = jobs_.at(id);
      if (!consolidation.HeldWithoutSearch(j)) continue;  // placed spread when it may be
      if (auto t = consolidation.CompactWaitEnd(j)) take(*t);
    }
  }
  return best;
}

void Engine::MarkEstimateStale(const JobRecord& r) {
  if (r.spec.duration_s > 0 || !options_.learn_runtimes) return;
  stale_jobs_.push_back(r.id);
  LearnList& list = learn_by_size_[r.Gpus()];
  // A long-lived ledger hands the same jobs in again and again: keep the list near its live
  // size (before adding `r`, which the upkeep keeps only if it is a live record already).
  if (list.ids.size() + 1 >= 2 * list.live + 64) DropStale(r.Gpus(), list, /*refresh=*/false);
  list.ids.push_back(r.id);
}

void Engine::DropStale(int gpus, LearnList& list, bool refresh) {
  std::sort(list.ids.begin(), list.ids.end());
  list.ids.erase(std::unique(list.ids.begin(), list.ids.end()), list.ids.end());
  std::erase_if(list.ids, [&](JobId id) {
    auto j = jobs_.find(id);
    if (j == jobs_.end() || IsTerminal(j->second.state) || j->second.Gpus() != gpus) return true;
    JobRecord& r = j->second;
    if (refresh && r.spec.duration_s <= 0) {
      r.learned_estimate_s = runtimes_.Predict(r.spec, r.Gpus());
    }
    return false;
  });
  list.live = list.ids.size();
}

// Backfill, SRTF and the consolidation wait need a runtime for jobs that gave none: the
// learned one is refreshed from the completions seen so far.
void Engine::RefreshLearnedEstimates() {
  // Only what the history's growth, or a job's arrival or change of size, can have changed.
  if (!options_.learn_runtimes) return;
  if (runtimes_.Size() == 0) {  // nothing to predict from: all of them once there is
    all_estimates_stale_ = true;
    stale_sizes_.clear();
    stale_jobs_.clear();
    return;
  }
  auto refresh = [&](JobRecord& r) {
    if (r.spec.duration_s <= 0) r.learned_estimate_s = runtimes_.Predict(r.spec, r.Gpus());
  };
  if (all_estimates_stale_) {
    for (const std::span<const JobId> ids : {pending_.Ids(), std::span<const JobId>(running_)}) {
      for (JobId id : ids) refresh(jobs_.at(id));
    }
  } else {
    // Every pending or running job without a duration is listed under its GPU count.
    std::sort(stale_sizes_.begin(), stale_sizes_.end());
    stale_sizes_.erase(std::unique(stale_sizes_.begin(), stale_sizes_.end()), stale_sizes_.end());
    for (int gpus : stale_sizes_) {
      auto it = learn_by_size_.find(gpus);
      if (it != learn_by_size_.end()) DropStale(gpus, it->second, /*refresh=*/true);
    }
    for (JobId id : stale_jobs_) {
      auto j = jobs_.find(id);
      if (j != jobs_.end() && !IsTerminal(j->second.state)) refresh(j->second);
    }
  }
  all_estimates_stale_ = false;
  stale_sizes_.clear();
  stale_jobs_.clear();
}

}  // namespace tianshu::engine
