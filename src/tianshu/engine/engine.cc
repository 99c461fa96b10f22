#include "tianshu/engine/engine.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "tianshu/engine/internal/consolidation.h"
#include "tianshu/engine/internal/cycle_planner.h"
#include "tianshu/engine/policy.h"
#include "tianshu/placement/fit.h"
#include "tianshu/placement/leaves.h"

namespace tianshu::engine {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "pending";
    case JobState::kRunning:
      return "running";
    case JobState::kCompleted:
      return "completed";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "pending";
}

std::string_view StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kPreempted:
      return "preempted";
    case StopReason::kCancelled:
      return "cancelled";
    case StopReason::kFailed:
      return "failed";
    case StopReason::kDrained:
      return "drained";
  }
  return "preempted";
}

JobId DecisionJob(const Decision& d) {
  return std::visit([](const auto& x) { return x.id; }, d);
}

namespace {

// Marks a withdrawn job's place in order_of_submission_ (no job has this id).
constexpr JobId kNoJob = std::numeric_limits<JobId>::min();

}  // namespace

void Engine::LeaveRunning(const JobRecord& r) {
  auto it = std::find(running_.begin(), running_.end(), r.id);
  if (it == running_.end()) return;
  running_.erase(it);
  auto c = running_classes_.find(r.spec.priority);
  if (--c->second == 0) running_classes_.erase(c);
}

Engine::Engine(const model::Topology& topology, const EngineOptions& options)
    : topology_(&topology),
      options_(options),
      state_(topology),
      overlay_(static_cast<size_t>(topology.NumGpus()), 0),
      idle_(topology) {}

void Engine::Occupy(JobRecord& r, const std::vector<placement::RankSlot>& ranks, bool colocated) {
  r.colocated = colocated;
  if (colocated) {
    for (const auto& s : ranks) {
      if (s.gpu >= 0) overlay_[s.gpu] += r.request.gpu_milli;
    }
    return;
  }
  auto st = placement::Apply(&state_, r.request, placement::PlacedOutcome(ranks));
  assert(st.has_value() && "a start must fit the state it was planned on");
  (void)st;
}

int PodRanks(const placement::PlacementRequest& r, const model::Topology& topology) {
  int biggest = 1;
  for (const auto& n : topology.nodes) biggest = std::max(biggest, topology.GpusOn(n.id));
  return PodRanks(r, biggest);
}

int PodRanks(const placement::PlacementRequest& r, int biggest_node_gpus) {
  if (r.single_node) return r.ranks;
  if (r.gpus_per_node > 0) return std::min(r.gpus_per_node, r.ranks);
  for (int pod = std::min(r.ranks, std::max(1, biggest_node_gpus)); pod > 1; --pod) {
    if (r.ranks % pod == 0) return pod;
  }
  return 1;
}

void Engine::Unbind(JobRecord& r, int node) {
  if (r.bound.empty()) return;
  std::vector<placement::RankSlot> gone, kept;
  for (const auto& s : r.bound) (node < 0 || s.node == node ? gone : kept).push_back(s);
  if (gone.empty()) return;
  placement::PlacementRequest req = r.request;
  req.ranks = static_cast<int>(gone.size());
  auto st = placement::Release(&state_, req, placement::PlacedOutcome(gone));
  (void)st;  // BindPods applied them
  r.bound = std::move(kept);
}

void Engine::Vacate(JobRecord& r) {
  if (r.colocated) {
    for (const auto& s : r.placement) {
      if (s.gpu >= 0) overlay_[s.gpu] = std::max(0, overlay_[s.gpu] - r.request.gpu_milli);
    }
    r.colocated = false;
    return;
  }
  auto st = placement::Release(&state_, r.request, placement::PlacedOutcome(r.placement));
  (void)st;  // the placement was applied by Occupy, so it releases
}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Create(const model::Topology& topology,
                                               const EngineOptions& options) {
  if (auto st = options.Validate(); !st) return std::unexpected(st.error());
  auto policies = Policies::Make(options);
  if (!policies) return std::unexpected(policies.error());
  std::unique_ptr<Engine> e(new Engine(topology, options));
  e->policies_ = std::move(*policies);
  return e;
}

const JobRecord* Engine::Find(JobId id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::vector<const JobRecord*> Engine::AllJobs() const {
  std::vector<const JobRecord*> out;
  out.reserve(order_of_submission_.size());
  for (JobId id : order_of_submission_) {
    if (id != kNoJob) out.push_back(&jobs_.at(id));
  }
  return out;
}

void Engine::Accrue(JobRecord& job, double now_s) {
  if (job.state == JobState::kRunning && now_s > job.accrued_to_s) {
    const double rate = job.HeldGpus();
    // A change of standing on the way (a 2D-LAS threshold passed) is dated when it happened;
    // a crossing a rounding error past `now_s` (the wake-up computed for it) counts as now.
    const double slack = CrossingSlack(now_s);
    // While the change kept for it is not due (DueBy), the policy would name that change again
    // (to within rounding, far below a second): nothing to step over.
    bool crossed = false;
    for (int step = 0; step < 64 && policies_ && job.next_change_s <= DueBy(now_s); ++step) {
      auto t = policies_->order->NextChange(job, job.accrued_to_s);
      if (!t || *t > now_s + slack) break;
      const double at = std::clamp(*t, job.accrued_to_s, now_s);
      job.attained_gpu_s += (at - job.accrued_to_s) * rate;
      job.accrued_to_s = at;
      job.standing_since_s = at;
      crossed = true;
    }
    job.attained_gpu_s += (now_s - job.accrued_to_s) * rate;
    job.accrued_to_s = now_s;
    if (crossed) TrackChange(job, now_s);
  }
  job.accrued_to_s = std::max(job.accrued_to_s, now_s);
}

void Engine::TrackChange(JobRecord& r, double now_s) {
  r.next_change_s = std::numeric_limits<double>::infinity();
  if (r.state != JobState::kRunning || !policies_) return;
  if (auto t = policies_->order->NextChange(r, now_s)) r.next_change_s = *t;
  if (r.next_change_s == std::numeric_limits<double>::infinity()) return;
  change_heap_.emplace_back(r.next_change_s, r.id);
  std::push_heap(change_heap_.begin(), change_heap_.end(), std::greater<>());
  // Entries of stopped jobs and older answers are dropped when met; where they pile up (many
  // answers between wake-ups), the heap is rebuilt from the running jobs.
  if (change_heap_.size() > 2 * running_.size() + 64) {
    change_heap_.clear();
    for (JobId id : running_) {
      const JobRecord& j = jobs_.at(id);
      if (j.next_change_s < std::numeric_limits<double>::infinity()) {
        change_heap_.emplace_back(j.next_change_s, id);
      }
    }
    std::make_heap(change_heap_.begin(), change_heap_.end(), std::greater<>());
  }
}

void Engine::AddPending(const JobRecord& job) {
  pending_.Add(job.id, job.submit_s, job.batch_key, job.spec.priority,
               job.request.ranks > 0 && job.request.gpu_milli >= model::kMilliPerGpu);
}

void Engine::Requeue(JobRecord& job, double progress, double now_s) {
  // A resized elastic job waits at the size it asked for (the server hands it in as submitted);
  // the elastic policy grows it again once it runs.
  job.request.ranks = placement::RequestFromJob(job.spec).ranks;
  MarkEstimateStale(job);  // its size may have changed
  job.progress = progress;
  job.pending_since_s = now_s;
  job.state = JobState::kPending;
  job.start_s = -1;
  job.placement.clear();
  AddPending(job);
}

std::vector<Decision> Engine::StopJobsOnNode(int node, StopReason why, double now_s) {
  std::vector<Decision> out;
  std::vector<JobId> hit;
  for (JobId id : running_) {
    const JobRecord& j = jobs_.at(id);
    for (const auto& s : j.placement) {
      if (s.node == node) {
        hit.push_back(id);
        break;
      }
    }
  }
  // Pods bound there to jobs that still wait are lost with it (they are bound again elsewhere).
  for (JobId id : pending_.Ids()) Unbind(jobs_.at(id), node);
  for (JobId id : hit) {
    JobRecord& j = jobs_.at(id);
    Accrue(j, now_s);
    bool requeue = true;
    if (why == StopReason::kFailed) {
      int budget = j.spec.max_retries >= 0 ? j.spec.max_retries : options_.config.max_retries;
      ++j.retries;
      if (j.retries > budget) requeue = false;
    }
    StopJob stop{.id = id,
                 .reason = why,
                 .checkpoint_first = why == StopReason::kDrained,
                 .requeued = requeue};
    out.emplace_back(std::in_place_type<StopJob>, stop);
    Commit(out.back(), now_s);
  }
  return out;
}

Result<std::vector<Decision>> Engine::Apply(const Event& event, double now_s) {
  wake_.valid = false;  // a record may change
  std::vector<Decision> out;
  auto job_of = [&](JobId id) -> Result<JobRecord*> {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Fail("unknown job ", std::to_string(id));
    return &it->second;
  };
  auto check_node = [&](int node) -> Status {
    if (node < 0 || node >= topology_->NumNodes())
      return Fail("unknown node ", std::to_string(node));
    return Ok();
  };
  if (const auto* e = std::get_if<SubmitJob>(&event)) {
    if (jobs_.count(e->id)) return Fail("job ", std::to_string(e->id), " is already submitted");
    JobRecord r;
    r.id = e->id;
    r.spec = e->spec;
    r.request = placement::RequestFromJob(e->spec);
    if (r.request.name.empty()) r.request.name = "job-" + std::to_string(e->id);
    if (r.request.ranks <= 0) return Fail("job ", std::to_string(e->id), " asks for no GPUs");
    r.submit_s = now_s;
    r.batch_key = e->batch ? r.HeldGpus() : 0;
    r.pending_since_s = now_s;
    r.accrued_to_s = now_s;
    // "Can never fit" is judged once, on the idle, healthy cluster, leaf bound and the
    // strategies' own rules included (the pod modes place pods without them).
    auto never = placement::NeverFits(idle_, r.request);
    if (!never && options_.binding == Binding::kJob) {
      never = placement::NeverWithinLeaves(idle_, r.request);
      if (!never && policies_) never = policies_->NeverPlaced(idle_, r.request, options_);
    }
    if (never) never_fits_[e->id] = never->reason;
    jobs_.emplace(e->id, std::move(r));
    MarkEstimateStale(jobs_.at(e->id));  // once it is a record (the list's upkeep reads them)
    submission_slot_[e->id] = order_of_submission_.size();
    order_of_submission_.push_back(e->id);
    AddPending(jobs_.at(e->id));
    return out;
  }
  if (const auto* e = std::get_if<CancelJob>(&event)) {
    auto j = job_of(e->id);
    if (!j) return std::unexpected(j.error());
    JobRecord& r = **j;
    if (IsTerminal(r.state)) return out;
    if (r.state == JobState::kRunning) {
      StopJob stop{.id = r.id,
                   .reason = StopReason::kCancelled,
                   .checkpoint_first = false,
                   .requeued = false};
      Accrue(r, now_s);
      out.emplace_back(std::in_place_type<StopJob>, stop);
      Commit(out.back(), now_s);
    } else {
      pending_.Remove(r.id);
      Unbind(r);
      r.state = JobState::kCancelled;
      r.end_s = now_s;
    }
    r.reason = "cancelled";
    return out;
  }
  if (const auto* e = std::get_if<RankFailed>(&event)) {
    auto j = job_of(e->id);
    if (!j) return std::unexpected(j.error());
    JobRecord& r = **j;
    if (r.state != JobState::kRunning) return out;
    Accrue(r, now_s);
    int budget = r.spec.max_retries >= 0 ? r.spec.max_retries : options_.config.max_retries;
    ++r.retries;
    r.reason = "rank " + std::to_string(e->rank) + " failed: " + e->reason;
    StopJob stop{.id = r.id,
                 .reason = StopReason::kFailed,
                 .checkpoint_first = false,
                 .requeued = r.retries <= budget};
    out.emplace_back(std::in_place_type<StopJob>, stop);
    Commit(out.back(), now_s);
    return out;
  }
  if (const auto* e = std::get_if<NodeFailed>(&event)) {
    if (auto st = check_node(e->node); !st) return std::unexpected(st.error());
    state_.SetHealthy(e->node, false);
    return StopJobsOnNode(e->node, StopReason::kFailed, now_s);
  }
  if (const auto* e = std::get_if<NodeRemoved>(&event)) {
    if (auto st = check_node(e->node); !st) return std::unexpected(st.error());
    state_.SetHealthy(e->node, false);
    return StopJobsOnNode(e->node, StopReason::kDrained, now_s);
  }
  if (const auto* e = std::get_if<NodeAdded>(&event)) {
    if (auto st = check_node(e->node); !st) return std::unexpected(st.error());
    state_.SetHealthy(e->node, true);
    return out;
  }
  if (const auto* e = std::get_if<NodeHealthy>(&event)) {
    if (auto st = check_node(e->node); !st) return std::unexpected(st.error());
    state_.SetHealthy(e->node, true);
    return out;
  }
  if (const auto* e = std::get_if<CheckpointDone>(&event)) {
    auto j = job_of(e->id);
    if (!j) return std::unexpected(j.error());
    (*j)->checkpoint_progress = std::max((*j)->checkpoint_progress, e->progress);
    (*j)->progress = std::max((*j)->progress, e->progress);
    return out;
  }
  if (const auto* e = std::get_if<ProgressReport>(&event)) {
    auto j = job_of(e->id);
    if (!j) return std::unexpected(j.error());
    (*j)->progress = e->progress;
    return out;
  }
  if (const auto* e = std::get_if<JobFinished>(&event)) {
    auto j = job_of(e->id);
    if (!j) return std::unexpected(j.error());
    JobRecord& r = **j;
    if (IsTerminal(r.state)) return out;
    if (r.state != JobState::kRunning) {
      return Fail("job ", std::to_string(e->id), " finished but is not running");
    }
    Accrue(r, now_s);
    if (e->success) {
      const double held_gpus = r.HeldGpus();
      if (held_gpus > 0) {
        runtimes_.Add(r.spec, r.Gpus(), r.attained_gpu_s / held_gpus);
        if (options_.learn_runtimes) stale_sizes_.push_back(r.Gpus());
      }
      Vacate(r);
      LeaveRunning(r);
      r.placement.clear();
      r.state = JobState::kCompleted;
      r.progress = 1;
      r.end_s = now_s;
      r.start_s = -1;
      return out;
    }
    int budget = r.spec.max_retries >= 0 ? r.spec.max_retries : options_.config.max_retries;
    ++r.retries;
    r.reason = e->reason;
    StopJob stop{.id = r.id,
                 .reason = StopReason::kFailed,
                 .checkpoint_first = false,
                 .requeued = r.retries <= budget};
    Commit(Decision(std::in_place_type<StopJob>, stop), now_s);
    return out;  // the job is gone already: nothing for the caller to stop
  }
  return out;
}

void Engine::MarkRunning(JobRecord& r, const std::vector<placement::RankSlot>& ranks,
                         double now_s) {
  pending_.Remove(r.id);
  running_.push_back(r.id);
  ++running_classes_[r.spec.priority];
  r.state = JobState::kRunning;
  r.placement = ranks;
  r.start_s = now_s;
  r.accrued_to_s = now_s;
  r.spread_too_slow = false;
  r.run_slowdown = RunSlowdown(r, ranks);
  if (r.first_start_s < 0) r.first_start_s = now_s;
  TrackChange(r, now_s);
}

Status Engine::Withdraw(JobId id) {
  wake_.valid = false;  // a record may change
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail("withdraw: no job ", std::to_string(id));
  JobRecord& r = it->second;
  if (r.state == JobState::kRunning) {
    Vacate(r);
    LeaveRunning(r);
  } else if (r.state == JobState::kPending) {
    pending_.Remove(id);
    Unbind(r);
  }
  never_fits_.erase(id);
  jobs_.erase(it);
  // The entry is marked, not erased (a linear erase made each hand-in O(jobs)); the list is
  // compacted once marks are half of it.
  auto slot = submission_slot_.find(id);
  order_of_submission_[slot->second] = kNoJob;
  submission_slot_.erase(slot);
  if (++withdrawn_slots_ * 2 > order_of_submission_.size()) {
    std::erase(order_of_submission_, kNoJob);
    for (size_t i = 0; i < order_of_submission_.size(); ++i) {
      submission_slot_[order_of_submission_[i]] = i;
    }
    withdrawn_slots_ = 0;
  }
  return Ok();
}

void Engine::Commit(const Decision& d, double now_s) {
  if (const auto* s = std::get_if<StartJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    Unbind(r);  // its bound pods are among the ranks it starts on
    Occupy(r, s->ranks, s->colocated);
    MarkRunning(r, s->ranks, now_s);
    return;
  }
  if (const auto* s = std::get_if<StopJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    if (r.state != JobState::kRunning) return;
    Vacate(r);
    LeaveRunning(r);
    if (s->reason == StopReason::kPreempted) ++r.preemptions;
    if (s->requeued) {
      // A checkpoint taken on the way out keeps the progress; otherwise the job resumes from
      // its last periodic checkpoint.
      Requeue(r, s->checkpoint_first ? r.progress : r.checkpoint_progress, now_s);
    } else {
      r.placement.clear();
      r.start_s = -1;
      r.state = s->reason == StopReason::kCancelled ? JobState::kCancelled : JobState::kFailed;
      r.end_s = now_s;
      if (r.state == JobState::kFailed && r.reason.empty()) r.reason = "out of retries";
    }
    return;
  }
  if (const auto* s = std::get_if<BindPods>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    placement::PlacementRequest req = r.request;
    req.ranks = static_cast<int>(s->ranks.size());
    auto st = placement::Apply(&state_, req, placement::PlacedOutcome(s->ranks));
    assert(st.has_value() && "a pod must fit the state it was planned on");
    (void)st;
    r.bound.insert(r.bound.end(), s->ranks.begin(), s->ranks.end());
    return;
  }
  if (const auto* s = std::get_if<RejectJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    pending_.Remove(r.id);
    Unbind(r);
    r.state = JobState::kFailed;
    r.reason = s->reason;
    r.end_s = now_s;
    return;
  }
  if (const auto* s = std::get_if<ResizeJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    Accrue(r, now_s);  // at its old rate up to now
    auto st = placement::Release(&state_, r.request, placement::PlacedOutcome(r.placement));
    (void)st;
    r.request.ranks = static_cast<int>(s->ranks.size());
    MarkEstimateStale(r);
    st = placement::Apply(&state_, r.request, placement::PlacedOutcome(s->ranks));
    (void)st;
    r.placement = s->ranks;
    ++r.resizes;
    TrackChange(r, now_s);  // its service now grows at another rate
    return;
  }
  if (const auto* s = std::get_if<MigrateJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    auto st = placement::Release(&state_, r.request, placement::PlacedOutcome(r.placement));
    (void)st;
    st = placement::Apply(&state_, r.request, placement::PlacedOutcome(s->ranks));
    (void)st;
    // The run so far, at its old speed, counts as progress; the new run starts now.
    const double est = r.EstimatedDurationS();
    if (est > 0 && r.start_s >= 0) r.progress = std::min(1.0, internal::ProgressNow(r, est, now_s));
    r.start_s = now_s;
    r.placement = s->ranks;
    r.run_slowdown = RunSlowdown(r, s->ranks);
    ++r.migrations;
    return;
  }
  // CheckpointJob: nothing changes until CheckpointDone arrives.
}

bool Engine::ElasticOn() const {
  return policies_->elastic && policies_->elastic->Name() != "none";
}

bool Engine::Reshapes() const {
  return ElasticOn() || internal::Consolidation(*topology_, options_).UpgradesOn() ||
         (policies_->migration && policies_->migration->Name() != "none");
}

double Engine::RunSlowdown(const JobRecord& job,
                           const std::vector<placement::RankSlot>& ranks) const {
  return internal::Consolidation(*topology_, options_).RunSlowdown(job, ranks);
}

// One cycle, in the steps below: a snapshot read by the policies, decisions planned on a
// working copy of it (internal::CyclePlanner), then applied here in one place.
CycleResult Engine::Cycle(double now_s) {
  wake_.valid = false;  // a record may change
  ++cycles_;
  // A fresh engine has no previous cycle: nothing changed standing "since" it.
  const double previous_s = cycles_ > 1 ? last_cycle_s_ : now_s;
  last_cycle_s_ = now_s;
  // A change of standing due by now is charged first: 2D-LAS orders by it.
  AccrueDue(now_s);
  // Nothing waits and nothing reshapes: no decision is possible.
  if (pending_.Empty() && !Reshapes()) return CycleResult{};
  RefreshLearnedEstimates();
  const CycleView view{.now_s = now_s,
                       .previous_cycle_s = previous_s,
                       .state = &state_,
                       .jobs = &jobs_,
                       .pending = pending_.Ids(),
                       .running = running_,
                       .running_priority = running_classes_.size() == 1
                                               ? std::optional(running_classes_.begin()->first)
                                               : std::nullopt,
                       .options = &options_,
                       .uniform_priority = pending_.UniformPriority(),
                       .cycle = cycles_};
  const std::vector<JobId> queue = OrderedQueue(view);
  internal::CyclePlanner planner(internal::CycleInputs{.view = &view,
                                                       .policies = policies_.get(),
                                                       .topology = topology_,
                                                       .jobs = &jobs_,
                                                       .held_spread = &held_spread_,
                                                       .never_fits = &never_fits_,
                                                       .overlay = &overlay_,
                                                       .elastic_on = ElasticOn(),
                                                       .all_whole_gpus = pending_.AllWholeGpus()},
                                 queue.size());
  planner.Admit(queue);
  planner.UpgradeSpreadJobs();
  planner.AddReshapes();
  CycleResult result = std::move(planner).Finish();
  ApplyDecisions(result.decisions, now_s);
  return result;
}

// The queue in the order the order policy wants it served (most urgent first).
std::vector<JobId> Engine::OrderedQueue(const CycleView& view) const {
  std::vector<JobId> queue(view.pending.begin(), view.pending.end());
  policies_->order->Order(view, &queue);
  return queue;
}

// Applies a cycle's decisions in one place: stops first (they free what the starts were
// planned on).
void Engine::ApplyDecisions(const std::vector<Decision>& decisions, double now_s) {
  for (const Decision& d : decisions) {
    if (std::holds_alternative<StopJob>(d)) {
      JobRecord& r = jobs_.at(DecisionJob(d));
      Accrue(r, now_s);
      Commit(d, now_s);
    }
  }
  for (const Decision& d : decisions) {
    if (!std::holds_alternative<StopJob>(d)) Commit(d, now_s);
  }
}

}  // namespace tianshu::engine
