#include "tianshu/engine/internal/cycle_planner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tianshu/engine/internal/overlay_search.h"
#include "tianshu/placement/fit.h"

namespace tianshu::engine::internal {
namespace {

int64_t FreeWholeGpus(const model::ClusterState& s) {
  return s.SwitchFreeWholeGpus(s.topology().Root());
}

// GPUs a request needs, in whole devices, for the quick count check.
int64_t WholeNeed(const placement::PlacementRequest& r) {
  return r.gpu_milli >= model::kMilliPerGpu ? r.ranks : 0;
}

// The start of `job` on `ranks`, resuming from its progress.
StartJob StartOf(const JobRecord& job, std::vector<placement::RankSlot> ranks,
                 bool colocated = false) {
  return {.id = job.id,
          .ranks = std::move(ranks),
          .resume_progress = job.progress,
          .restart = job.first_start_s >= 0,
          .colocated = colocated};
}

}  // namespace

CyclePlanner::CyclePlanner(const CycleInputs& in, size_t queue_size)
    : view_(*in.view),
      policies_(*in.policies),
      options_(*in.view->options),
      topology_(*in.topology),
      jobs_(*in.jobs),
      held_spread_(in.held_spread),
      never_fits_(*in.never_fits),
      consolidation_(*in.topology, *in.view->options),
      elastic_on_(in.elastic_on),
      can_preempt_(in.policies->preemption && in.policies->preemption->Name() != "none"),
      preempt_behind_(can_preempt_ && in.view->options->config.preempt_for == "every-job"),
      colocate_(in.view->options->config.colocation != "none"),
      all_whole_gpus_(in.all_whole_gpus),
      strategy_(in.policies->placement.get()),
      work_(*in.view->state) {
  result_.stats.pending_seen = static_cast<int>(queue_size);
  if (options_.binding != Binding::kJob) {
    for (const auto& n : topology_.nodes) {
      biggest_node_gpus_ = std::max(biggest_node_gpus_, topology_.GpusOn(n.id));
    }
  }
  if (policies_.placement_large_queue && options_.large_queue_threshold > 0 &&
      static_cast<int>(queue_size) > options_.large_queue_threshold) {
    strategy_ = policies_.placement_large_queue.get();
  }
  RefreshFree();
  overlay_in_ = in.overlay;
}

void CyclePlanner::PrepareOverlay() {
  if (overlay_ready_) return;
  overlay_ready_ = true;
  trained_.assign(overlay_in_->size(), 0);
  overlay_work_ = *overlay_in_;
  for (JobId id : view_.running) MarkTrained(jobs_.at(id), jobs_.at(id).placement);
  for (size_t i : unmarked_starts_) {
    const auto& s = std::get<StartJob>(result_.decisions[i]);
    MarkTrained(jobs_.at(s.id), s.ranks);
  }
  unmarked_starts_.clear();
}

void CyclePlanner::RefreshFree() {
  ++free_version_;
  free_whole_ = FreeWholeGpus(work_);
  free_milli_ = work_.TotalGpuMilli() - work_.AllocatedGpuMilli();
}

void CyclePlanner::MarkTrained(const JobRecord& r, const std::vector<placement::RankSlot>& ranks) {
  if (r.spec.kind != model::JobKind::kTraining || r.request.gpu_milli < model::kMilliPerGpu) {
    return;
  }
  for (const auto& s : ranks) {
    if (s.gpu >= 0) trained_[s.gpu] = 1;
  }
}

const placement::Strategy* CyclePlanner::StrategyFor(const JobRecord& j,
                                                     const placement::Strategy* otherwise) const {
  const placement::Strategy* small = policies_.SmallJobStrategy(j.request.ranks, options_);
  return small != nullptr ? small : otherwise;
}

bool CyclePlanner::Decided(JobId id) const {
  return std::any_of(result_.decisions.begin(), result_.decisions.end(),
                     [&](const Decision& d) { return DecisionJob(d) == id; });
}

bool CyclePlanner::Start(JobRecord& job, placement::Outcome& o, bool backfilled) {
  auto st = placement::Apply(&work_, job.request, o);
  if (!st) return false;
  // The reserved view follows (taking GPUs ignores health, so a job ending before the head
  // starts may use reserved nodes and the view stays exact).
  if (nodes_reserved_) (void)placement::Apply(&reserved_work_, job.request, o);
  StartJob s = StartOf(job, std::move(o.ranks));
  if (colocate_ && overlay_ready_) {
    MarkTrained(job, s.ranks);
  } else if (colocate_) {
    unmarked_starts_.push_back(result_.decisions.size());  // marked if a service is tried
  }
  result_.decisions.emplace_back(std::in_place_type<StartJob>, std::move(s));
  ++result_.stats.started;
  if (backfilled) ++result_.stats.backfilled;
  RefreshFree();
  return true;
}

void CyclePlanner::Admit(std::span<const JobId> queue) {
  for (JobId id : queue) {
    if (ScanLimitReached() || NothingMoreCanBind()) break;
    JobRecord& job = jobs_.at(id);
    if (RejectIfNeverFits(id)) continue;
    if (colocate_ && job.spec.kind == model::JobKind::kInference && StartOverlaid(job)) continue;
    if (AdmitOne(job) == Next::kStop) break;
  }
}

bool CyclePlanner::ScanLimitReached() {
  if (options_.max_placements_per_cycle > 0 &&
      result_.stats.started >= options_.max_placements_per_cycle) {
    return true;
  }
  return blocked_ && options_.max_queue_scan > 0 && ++scanned_behind_ > options_.max_queue_scan;
}

bool CyclePlanner::NothingMoreCanBind() const {
  // Pods of whole GPUs with no whole GPU free: each job behind would find no node for a pod
  // and be passed over (AdmitPods), and capacity only shrinks in a cycle. What could still
  // happen is a never-fits rejection or an overlaid service; with neither, the walk is done
  // (a full cluster under a long queue is most of a baseline's cycles).
  return options_.binding != Binding::kJob && free_whole_ == 0 && all_whole_gpus_ &&
         never_fits_.empty() && !colocate_;
}

bool CyclePlanner::RejectIfNeverFits(JobId id) {
  auto nf = never_fits_.find(id);
  if (nf == never_fits_.end()) return false;
  result_.decisions.emplace_back(std::in_place_type<RejectJob>,
                                 RejectJob{.id = id, .reason = nf->second});
  never_fits_.erase(nf);
  ++result_.stats.rejected;
  return true;
}

bool CyclePlanner::StartOverlaid(JobRecord& job) {
  PrepareOverlay();
  auto ranks =
      PlaceOverlay(topology_, work_, job, overlay_work_, trained_, options_.colocation_fits);
  if (!ranks) return false;
  for (const auto& slot : *ranks) overlay_work_[slot.gpu] += job.request.gpu_milli;
  result_.decisions.emplace_back(std::in_place_type<StartJob>,
                                 StartOf(job, std::move(*ranks), /*colocated=*/true));
  ++result_.stats.started;
  ++result_.stats.colocated;
  return true;
}

bool CyclePlanner::HoldForCompact(const JobRecord& job, bool compact_wait) const {
  return compact_wait && consolidation_.HeldWithoutSearch(job) &&
         !CompactMayExist(work_, job.request);
}

bool CyclePlanner::PodCannotFit(const placement::PlacementRequest& job, int pod_ranks) const {
  return std::any_of(failed_pods_.begin(), failed_pods_.end(), [&](const auto& f) {
    return pod_ranks >= f.ranks && job.gpu_milli >= f.gpu_milli &&
           job.cpu_milli_per_rank >= f.cpu_milli_per_rank &&
           job.memory_bytes_per_rank >= f.memory_bytes_per_rank &&
           job.device_memory_bytes >= f.device_memory_bytes && job.backend == f.backend &&
           job.accelerators == f.accelerators && job.node_selector == f.node_selector;
  });
}

int CyclePlanner::PodsThatFit(int pod_ranks) {
  if (pod_fit_version_ != free_version_) {
    pod_fit_.clear();
    pod_fit_version_ = free_version_;
  }
  auto [it, fresh] = pod_fit_.try_emplace(pod_ranks, 0);
  if (fresh) {
    for (const auto& n : topology_.nodes) it->second += work_.FreeWholeGpus(n.id) / pod_ranks;
  }
  return it->second;
}

CyclePlanner::Next CyclePlanner::AdmitPods(JobRecord& job) {
  // The default Kubernetes scheduler takes one pod at a time off its queue and binds it to the
  // best-scored node that fits it; a pod that fits nowhere waits, and the next pod is tried.
  // Volcano places a job's tasks one at a time too, and commits them only all together.
  // Pods are cut to the biggest node the job may use: its filters can rule the biggest out.
  int biggest = biggest_node_gpus_;
  if (job.request.backend || !job.request.accelerators.empty() ||
      !job.request.node_selector.empty()) {
    biggest = 1;
    for (const auto& n : topology_.nodes) {
      const placement::Reject why = placement::StaticCheck(work_, n.id, job.request);
      if (why == placement::Reject::kNone || why == placement::Reject::kUnhealthy) {
        biggest = std::max(biggest, topology_.GpusOn(n.id));
      }
    }
  }
  const int pod_ranks = PodRanks(job.request, biggest);
  if ((job.request.gpu_milli >= model::kMilliPerGpu && pod_ranks > free_whole_) ||
      PodCannotFit(job.request, pod_ranks)) {
    return Next::kContinue;  // no node has room for one pod
  }
  const int left_at_start = job.request.ranks - static_cast<int>(job.bound.size());
  if (options_.binding == Binding::kPodGang && job.request.gpu_milli >= model::kMilliPerGpu &&
      PodsThatFit(pod_ranks) < left_at_start / pod_ranks) {
    return Next::kContinue;  // not enough nodes with room for a pod each: all or none is none
  }
  placement::PlacementRequest pod = job.request;
  pod.ranks = pod_ranks;
  pod.single_node = true;
  pod.gpus_per_node = 0;
  // The Kubernetes schedulers modelled here know no nested gang groups or leaf bounds, and a
  // pod's node need not sustain a whole job's checkpoint bandwidth (a node's share is charged
  // per Apply, pods apply one by one): none is asked of a pod.
  pod.groups.clear();
  pod.max_leaves = 0;
  pod.storage_bps_per_node = 0;
  const placement::Strategy* use = StrategyFor(job, strategy_);
  std::vector<placement::RankSlot> got;
  int left = left_at_start;
  while (left >= pod.ranks) {
    if (WholeNeed(pod) > FreeWholeGpus(work_) || PodCannotFit(job.request, pod.ranks)) break;
    ++result_.stats.placement_calls;
    placement::Outcome o = use->Place(work_, pod);
    if (!o.placed() || !placement::Apply(&work_, pod, o)) {
      // Remembered only if what it failed against stays: not when this job's own pods, given
      // back below, took part of it.
      if (got.empty() || options_.binding == Binding::kPodEach) failed_pods_.push_back(pod);
      break;
    }
    got.insert(got.end(), o.ranks.begin(), o.ranks.end());
    left -= pod.ranks;
  }
  if (got.empty()) return Next::kContinue;
  if (left > 0 && options_.binding == Binding::kPodGang) {
    pod.ranks = static_cast<int>(got.size());
    (void)placement::Release(&work_, pod, placement::PlacedOutcome(std::move(got)));
    return Next::kContinue;
  }
  RefreshFree();
  if (left > 0) {
    result_.stats.pods_bound += static_cast<int>(got.size()) / pod.ranks;
    result_.decisions.emplace_back(std::in_place_type<BindPods>,
                                   BindPods{.id = job.id, .ranks = std::move(got)});
    return Next::kContinue;
  }
  std::vector<placement::RankSlot> all = job.bound;
  all.insert(all.end(), got.begin(), got.end());
  result_.decisions.emplace_back(std::in_place_type<StartJob>, StartOf(job, std::move(all)));
  ++result_.stats.started;
  return Next::kContinue;
}

CyclePlanner::Next CyclePlanner::AdmitOne(JobRecord& job) {
  if (options_.binding != Binding::kJob) return AdmitPods(job);
  const int64_t need_milli = int64_t{job.request.ranks} * job.request.gpu_milli;
  const model::ClusterState& state = StateFor(job);
  // (The state's free whole GPUs are free_whole_, less any nodes held for a blocked head.)
  const bool count_fits =
      WholeNeed(job.request) <= FreeWholeGpus(state) && need_milli <= free_milli_;
  // Behind a blocked head, ask the backfill policy first (on a copy of the reservation, kept
  // only if the job is placed): a job it refuses costs no placement search. Where the head
  // holds nodes, the nodes decide instead: what fits beside them cannot delay it.
  Reservation trial_reservation = reservation_;
  if (blocked_ && count_fits && !nodes_reserved_ &&
      !policies_.backfill->MayStart(view_, job, &trial_reservation)) {
    return Next::kContinue;
  }
  placement::Outcome o;
  const placement::Strategy* use = StrategyFor(job, strategy_);
  // Asked only where it is used: a job that fits by count, or one that may preempt (a blocked
  // queue's job that does not fit goes straight to Block).
  const bool compact_wait = (count_fits || (can_preempt_ && (!blocked_ || preempt_behind_))) &&
                            consolidation_.InCompactWait(job, view_.now_s);
  if (count_fits && HoldForCompact(job, compact_wait)) {
    ++result_.stats.held_for_compact;
    return Next::kContinue;
  }
  if (count_fits) {
    ++result_.stats.placement_calls;
    o = use->Place(state, job.request);
    if (o.kind == placement::OutcomeKind::kCanNeverFit) {
      result_.decisions.emplace_back(std::in_place_type<RejectJob>,
                                     RejectJob{.id = job.id, .reason = o.reason});
      ++result_.stats.rejected;
      return Next::kContinue;
    }
  } else {
    o.kind = placement::OutcomeKind::kDoesNotFitNow;
  }
  if (o.placed() && compact_wait && consolidation_.TooSlowToStart(job, o.ranks)) {
    // Listed where the wake-up walks the list (spread placements priced), never only kept.
    if (!job.spread_too_slow && held_spread_ && options_.placement_slowdown) {
      held_spread_->push_back(job.id);
    }
    job.spread_too_slow = true;
    ++result_.stats.held_for_compact;
    return Next::kContinue;
  }
  if (o.placed()) {
    if (blocked_) reservation_ = trial_reservation;
    Start(job, o, blocked_);
    return Next::kContinue;
  }
  if (PreemptFor(job, use, compact_wait)) return Next::kContinue;
  return Block(job);
}

bool CyclePlanner::PreemptFor(JobRecord& job, const placement::Strategy* use, bool compact_wait) {
  if (!can_preempt_ || (blocked_ && (!preempt_behind_ || awaiting_shrink_))) return false;
  if (blocked_) {
    // Behind the head most jobs have nothing below them to take: asked of the policy, not of
    // each running job.
    const int64_t below = policies_.preemption->VictimGpusBound(view_, job);
    if (below != PreemptionPolicy::kAnyGpus &&
        WholeNeed(job.request) > FreeWholeGpus(work_) + below) {
      return false;
    }
  }
  // Elastic jobs giving back nodes cost less than evicting whole gangs: where a shrink admits
  // the job, the elastic policy proposes it (in a cycle that changes nothing else) and nothing
  // is preempted for it.
  // (The shrink is proposed only by a cycle that changes nothing else: no job behind may
  // preempt in this one.)
  if (elastic_on_ && policies_.elastic->AdmitsByShrinking(view_, work_, job.id)) {
    awaiting_shrink_ = true;
    return false;
  }
  std::vector<JobId> victims = policies_.preemption->Victims(view_, job);
  // Victims of this cycle are already gone; starts of this cycle are never victims.
  // Co-located services free no GPU share: never victims.
  std::erase_if(victims, [&](JobId v) {
    return jobs_.at(v).colocated ||
           std::find(evicted_.begin(), evicted_.end(), v) != evicted_.end();
  });
  const size_t offered = victims.size();
  if (options_.config.preemption_cost_model) {
    KeepVictimsThatPay(view_, job, static_cast<double>(options_.config.restart_overhead_s),
                       evicted_, &victims);
  }
  if (victims.empty()) {
    if (offered > 0) ++result_.stats.preemptions_declined;  // the cost model spared them all
    return false;
  }
  // All of them would not free enough: no copy of the state, no placement.
  int64_t could_free = FreeWholeGpus(work_);
  for (JobId v : victims) could_free += static_cast<int64_t>(jobs_.at(v).placement.size());
  if (WholeNeed(job.request) > could_free) return false;
  // Take victims until the count fits, then simulate the eviction and place.
  model::ClusterState trial = work_;
  std::vector<JobId> taken;
  placement::Outcome o;
  bool placed = false;
  for (JobId v : victims) {
    const JobRecord& vr = jobs_.at(v);
    auto st = placement::Release(&trial, vr.request, placement::PlacedOutcome(vr.placement));
    if (!st) continue;
    taken.push_back(v);
    if (WholeNeed(job.request) > FreeWholeGpus(trial)) continue;
    ++result_.stats.placement_calls;
    placement::Outcome po = use->Place(trial, job.request);
    // A job that would still wait for a compact placement evicts only for one.
    if (po.placed() && !(compact_wait && consolidation_.TooSlowToStart(job, po.ranks))) {
      o = std::move(po);
      placed = true;
      break;
    }
  }
  if (!placed) return false;
  if (job.request.Shaped()) {
    // A shape the count misses (a leaf bound, nested groups) may have needed victims taken
    // in order whose nodes the placement then does not use: those keep running.
    const std::vector<int> used = placement::SpanOf(topology_, o.ranks).nodes;
    std::erase_if(taken, [&](JobId v) {
      return std::ranges::none_of(
          placement::SpanOf(topology_, jobs_.at(v).placement).nodes,
          [&](int n) { return std::find(used.begin(), used.end(), n) != used.end(); });
    });
  }
  for (JobId v : taken) {
    const JobRecord& vr = jobs_.at(v);
    auto st = placement::Release(&work_, vr.request, placement::PlacedOutcome(vr.placement));
    (void)st;
    result_.decisions.emplace_back(
        std::in_place_type<StopJob>,
        StopJob{
            .id = v, .reason = StopReason::kPreempted, .checkpoint_first = true, .requeued = true});
    evicted_.push_back(v);
    policies_.preemption->Evicted(view_, vr);
    ++result_.stats.preempted;
  }
  Start(job, o, false);
  return true;
}

CyclePlanner::Next CyclePlanner::Block(const JobRecord& job) {
  if (!blocked_) {
    blocked_ = true;
    result_.stats.head_blocked = true;
    if (policies_.backfill->StopAtBlockedHead()) return Next::kStop;
    reservation_ = policies_.backfill->Reserve(view_, job, work_);
    ReserveNodes(job);
  }
  // Nothing free: a job behind could only preempt (scheduler.preempt_for: every-job), and
  // none can where the jobs below this one hold nothing (the policy's bound only falls down
  // the queue).
  if (free_whole_ == 0 && free_milli_ == 0 &&
      (!preempt_behind_ || awaiting_shrink_ ||
       policies_.preemption->VictimGpusBound(view_, job) == 0)) {
    return Next::kStop;
  }
  return Next::kContinue;
}

void CyclePlanner::UpgradeSpreadJobs() {
  if (!consolidation_.UpgradesOn() || result_.stats.head_blocked) return;
  int tries = 0;
  for (JobId id : view_.running) {
    if (tries >= options_.upgrade_tries_per_cycle) break;
    JobRecord& r = jobs_.at(id);
    if (r.run_slowdown <= 1 + options_.compact_slowdown_tolerance || r.colocated || Decided(id)) {
      continue;
    }
    const double est = r.EstimatedDurationS();
    const double remaining = est > 0 ? est * (1 - ProgressNow(r, est, view_.now_s)) : 0;
    // The most a move could save (to a placement at full speed), first against the restart
    // alone, then, once a compact placement may exist, against the whole move's cost (the
    // checkpoint's price asks the speed model).
    const double most_saved = remaining * (r.run_slowdown - 1);
    if (est <= 0 || most_saved <= static_cast<double>(options_.config.restart_overhead_s)) {
      continue;
    }
    // Where no compact placement could exist even on its own GPUs, nothing is tried (and the
    // state is not touched).
    if (!CompactMayExist(work_, r.request, r.placement)) continue;
    const double cost = MoveCostS(r);
    if (most_saved <= cost) continue;
    // Tried in place (no copy of the state per job): the job's own GPUs count as free while it
    // is tried, and it takes them back unless it moves.
    const placement::Outcome held = placement::PlacedOutcome(r.placement);
    if (!placement::Release(&work_, r.request, held)) continue;
    double saved = 0;
    placement::Outcome po = TryCompact(r, remaining, cost, &tries, &saved);
    if (!po.placed() || !placement::Apply(&work_, r.request, po)) {
      (void)placement::Apply(&work_, r.request, held);  // exactly as it was
      continue;
    }
    const int slower_pct = static_cast<int>(std::lround((r.run_slowdown - 1) * 100));
    const std::string saves = saved < 120
                                  ? std::to_string(std::lround(saved)) + " s"
                                  : std::to_string(static_cast<int64_t>(saved / 60)) + " min";
    std::string reason = "a compact placement is free: predicted to run " +
                         std::to_string(slower_pct) + "% slower where it is, the move saves " +
                         saves + " of its run for " + std::to_string(std::lround(cost)) +
                         " s of checkpoint and restart";
    result_.decisions.emplace_back(
        std::in_place_type<MigrateJob>,
        MigrateJob{.id = id, .ranks = std::move(po.ranks), .reason = std::move(reason)});
    ++result_.stats.upgraded;
  }
}

double CyclePlanner::MoveCostS(const JobRecord& r) const {
  const double write_s =
      options_.checkpoint_write_s ? options_.checkpoint_write_s(r.spec, r.placement) : 0;
  return std::max(0.0, write_s) + static_cast<double>(options_.config.restart_overhead_s);
}

placement::Outcome CyclePlanner::TryCompact(const JobRecord& r, double remaining, double cost,
                                            int* tries, double* saved) {
  if (!CompactMayExist(work_, r.request)) return {};
  ++*tries;
  const placement::Strategy* use = StrategyFor(r, policies_.placement.get());
  ++result_.stats.placement_calls;
  placement::Outcome po = use->Place(work_, r.request);
  if (!po.placed() || consolidation_.TooSlowToStart(r, po.ranks)) return {};
  *saved = remaining * (r.run_slowdown - consolidation_.RunSlowdown(r, po.ranks));
  if (*saved <= cost) return {};
  return po;
}

void CyclePlanner::AddReshapes() {
  // Resizes and moves are for jobs that hold GPU shares (co-located services hold none).
  auto take = [&](std::vector<Decision> proposed) {
    for (auto& d : proposed) {
      const JobId id = DecisionJob(d);
      if (!jobs_.at(id).colocated && !Decided(id)) result_.decisions.push_back(std::move(d));
    }
  };
  if (policies_.elastic) take(policies_.elastic->Propose(view_, work_));
  if (policies_.migration) take(policies_.migration->Propose(view_, work_));
}

}  // namespace tianshu::engine::internal
