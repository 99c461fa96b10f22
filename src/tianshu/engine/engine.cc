#include "tianshu/engine/engine.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <utility>

#include "tianshu/comm/comm_plan.h"
#include "tianshu/engine/policy.h"
#include "tianshu/placement/fit.h"

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

// Progress of a running job at `now_s`: the last known progress plus the run since its start
// at the speed of its placement (as a fraction of its runtime estimate `est` > 0).
double ProgressNow(const JobRecord& r, double est, double now_s) {
  return r.progress + (now_s - r.start_s) / (std::max(1.0, r.run_slowdown) * est);
}

}  // namespace

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

std::optional<std::vector<placement::RankSlot>> Engine::PlaceOverlay(
    const model::ClusterState& work, const JobRecord& job, const std::vector<int>& overlay,
    const std::vector<char>& trained) const {
  const placement::PlacementRequest& rq = job.request;
  if (rq.ranks <= 0 || rq.gpu_milli <= 0) return std::nullopt;
  struct Candidate {
    int load = 0;  // overlay milli already on the chosen GPUs
    int node = 0;
    std::vector<int> gpus;
  };
  std::vector<Candidate> candidates;
  for (const auto& node : topology_->nodes) {
    if (placement::StaticCheck(work, node.id, rq) != placement::Reject::kNone) continue;
    std::vector<std::pair<int, int>> room;  // (overlay milli, gpu)
    const int first = node.first_gpu, count = topology_->GpusOn(node.id);
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
    if (!options_.colocation_fits || options_.colocation_fits(job.spec, ranks)) return ranks;
  }
  return std::nullopt;
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
  for (JobId id : order_of_submission_) out.push_back(&jobs_.at(id));
  return out;
}

void Engine::Accrue(JobRecord& job, double now_s) {
  if (job.state == JobState::kRunning && now_s > job.accrued_to_s) {
    job.attained_gpu_s += (now_s - job.accrued_to_s) * job.Gpus() * job.request.gpu_milli /
                          static_cast<double>(model::kMilliPerGpu);
  }
  job.accrued_to_s = std::max(job.accrued_to_s, now_s);
}

void Engine::RemoveFrom(std::vector<JobId>& v, JobId id) {
  auto it = std::find(v.begin(), v.end(), id);
  if (it != v.end()) v.erase(it);
}

// Pending() stays in submission order (submit time, then id) whatever requeues happen, so
// that order policies can skip sorting when it is already their order.
void Engine::AddPending(JobId id) {
  const JobRecord& r = jobs_.at(id);
  auto before = [&](JobId other) {
    const JobRecord& o = jobs_.at(other);
    return o.submit_s < r.submit_s || (o.submit_s == r.submit_s && o.id < r.id);
  };
  if (pending_.empty() || before(pending_.back())) {
    pending_.push_back(id);
  } else {
    auto it = std::partition_point(pending_.begin(), pending_.end(), before);
    pending_.insert(it, id);
  }
  ++pending_priorities_[r.spec.priority];
}

void Engine::RemovePending(JobId id) {
  auto it = std::find(pending_.begin(), pending_.end(), id);
  if (it == pending_.end()) return;
  pending_.erase(it);
  auto p = pending_priorities_.find(jobs_.at(id).spec.priority);
  if (p != pending_priorities_.end() && --p->second == 0) pending_priorities_.erase(p);
}

void Engine::Requeue(JobRecord& job, double progress, double now_s) {
  job.progress = progress;
  job.pending_since_s = now_s;
  job.state = JobState::kPending;
  job.start_s = -1;
  job.placement.clear();
  AddPending(job.id);
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
    r.pending_since_s = now_s;
    r.accrued_to_s = now_s;
    // "Can never fit" is judged once, on the idle, healthy cluster.
    if (auto never = placement::NeverFits(idle_, r.request)) never_fits_[e->id] = never->reason;
    jobs_.emplace(e->id, std::move(r));
    order_of_submission_.push_back(e->id);
    AddPending(e->id);
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
      RemovePending(r.id);
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
      const double held_gpus =
          r.Gpus() * r.request.gpu_milli / static_cast<double>(model::kMilliPerGpu);
      if (held_gpus > 0) runtimes_.Add(r.spec, r.Gpus(), r.attained_gpu_s / held_gpus);
      Vacate(r);
      RemoveFrom(running_, r.id);
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
  RemovePending(r.id);
  running_.push_back(r.id);
  r.state = JobState::kRunning;
  r.placement = ranks;
  r.start_s = now_s;
  r.accrued_to_s = now_s;
  r.spread_too_slow = false;
  r.run_slowdown = RunSlowdown(r, ranks);
  if (r.first_start_s < 0) r.first_start_s = now_s;
}

Status Engine::Restore(JobId id, const std::vector<placement::RankSlot>& ranks, double start_s,
                       bool colocated) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail("restore: no job ", std::to_string(id));
  JobRecord& r = it->second;
  if (r.state != JobState::kPending)
    return Fail("restore: job ", std::to_string(id), " is not pending");
  // An elastic job may hold another number of ranks than it asked for.
  placement::PlacementRequest held = r.request;
  held.ranks = static_cast<int>(ranks.size());
  if (colocated) {
    for (const auto& s : ranks) {
      if (s.gpu < 0 || s.gpu >= static_cast<int>(overlay_.size()) ||
          overlay_[s.gpu] + held.gpu_milli > model::kMilliPerGpu) {
        return Fail("restore: job ", std::to_string(id), ": no overlay room on GPU ",
                    std::to_string(s.gpu));
      }
    }
  } else if (auto st = placement::Apply(&state_, held, placement::PlacedOutcome(ranks)); !st) {
    return Fail("restore: job ", std::to_string(id), ": ", st.error().message);
  }
  r.request = held;
  r.colocated = false;
  if (colocated) Occupy(r, ranks, /*colocated=*/true);  // the share was taken just above
  MarkRunning(r, ranks, start_s);
  return Ok();
}

Status Engine::SetAttainedService(JobId id, double gpu_s) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail("attained service: no job ", std::to_string(id));
  if (!(gpu_s >= 0)) return Fail("attained service: job ", std::to_string(id), ": negative");
  it->second.attained_gpu_s = gpu_s;
  return Ok();
}

void Engine::Commit(const Decision& d, double now_s) {
  if (const auto* s = std::get_if<StartJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    Occupy(r, s->ranks, s->colocated);
    MarkRunning(r, s->ranks, now_s);
    return;
  }
  if (const auto* s = std::get_if<StopJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    if (r.state != JobState::kRunning) return;
    Vacate(r);
    RemoveFrom(running_, r.id);
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
  if (const auto* s = std::get_if<RejectJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    RemovePending(r.id);
    r.state = JobState::kFailed;
    r.reason = s->reason;
    r.end_s = now_s;
    return;
  }
  if (const auto* s = std::get_if<ResizeJob>(&d)) {
    JobRecord& r = jobs_.at(s->id);
    auto st = placement::Release(&state_, r.request, placement::PlacedOutcome(r.placement));
    (void)st;
    r.request.ranks = static_cast<int>(s->ranks.size());
    st = placement::Apply(&state_, r.request, placement::PlacedOutcome(s->ranks));
    (void)st;
    r.placement = s->ranks;
    ++r.resizes;
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
    if (est > 0 && r.start_s >= 0) r.progress = std::min(1.0, ProgressNow(r, est, now_s));
    r.start_s = now_s;
    r.placement = s->ranks;
    r.run_slowdown = RunSlowdown(r, s->ranks);
    ++r.migrations;
    return;
  }
  // CheckpointJob: nothing changes until CheckpointDone arrives.
}

std::map<std::string, std::string> Engine::CommEnv(
    const JobRecord& job, const std::vector<placement::RankSlot>& ranks) const {
  if (!options_.plan_communicators) return {};
  std::vector<int> gpus;
  gpus.reserve(ranks.size());
  for (const auto& s : ranks) {
    if (s.gpu >= 0) gpus.push_back(s.gpu);
  }
  if (gpus.empty()) return {};
  comm::Layout layout;
  const model::Parallelism& p = job.spec.parallelism;
  int n = static_cast<int>(gpus.size());
  if (!p.automatic && p.tp * p.pp > 0 && n % (p.tp * p.pp) == 0) {
    layout.tp = p.tp;
    layout.pp = p.pp;
    layout.dp = n / (p.tp * p.pp);
    layout.ep = p.ep > 0 && layout.dp % p.ep == 0 ? p.ep : 1;
  } else {
    layout.dp = n;
  }
  model::Backend backend = job.spec.backend.value_or(topology_->TypeOf(ranks.front().node).backend);
  comm::CommOptions co = comm::CommOptionsFrom(options_.config, backend, job.spec.priority);
  co.order = comm::RankOrder::kAsGiven;
  auto plan = comm::PlanCommunicators(*topology_, gpus, layout, co);
  if (!plan) return {};
  return plan->env;
}

bool Engine::ElasticOn() const {
  return policies_->elastic && policies_->elastic->Name() != "none";
}

bool Engine::UpgradesOn() const {
  return options_.placement_slowdown && options_.compact_max_wait_s > 0 &&
         options_.upgrade_tries_per_cycle > 0;
}

bool Engine::Reshapes() const {
  return ElasticOn() || UpgradesOn() ||
         (policies_->migration && policies_->migration->Name() != "none");
}

std::optional<double> Engine::NextWakeup(double now_s) const {
  std::optional<double> best;
  auto take = [&](double t) {
    if (t > now_s && (!best || t < *best)) best = t;
  };
  if (!pending_.empty()) {
    for (JobId id : running_) {
      if (auto t = policies_->order->NextChange(jobs_.at(id), now_s)) take(*t);
    }
  }
  // Elastic jobs may grow into idle capacity every scaling interval, with nothing pending.
  if (ElasticOn()) {
    const double interval = static_cast<double>(options_.config.scaling_interval_s);
    for (JobId id : running_) {
      if (jobs_.at(id).spec.elastic.enabled && interval > 0) {
        take(now_s + interval);
        break;
      }
    }
  }
  return best;
}

namespace {

int64_t FreeWholeGpus(const model::ClusterState& s) {
  return s.SwitchFreeWholeGpus(s.topology().Root());
}

// GPUs a request needs, in whole devices, for the quick count check.
int64_t WholeNeed(const placement::PlacementRequest& r) {
  return r.gpu_milli >= model::kMilliPerGpu ? r.ranks : 0;
}

// Whether `ranks` use the fewest nodes and leaf switches a job of `need_milli` GPU thousandths
// could use on nodes like its first one.
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

// Whether a compact placement of whole-GPU `r` could exist in `s` (a quick necessary check, so
// that a job waiting for one costs no placement search while none can exist).
bool CompactMayExist(const model::ClusterState& s, const placement::PlacementRequest& r) {
  if (r.gpu_milli < model::kMilliPerGpu) return true;
  const model::Topology& t = s.topology();
  if (r.ranks <= s.SwitchMaxNodeWholeGpus(t.Root())) return true;
  int per_node = 0;
  for (const auto& type : t.types) per_node = std::max(per_node, type.gpus_per_node);
  if (per_node <= 0 || r.ranks <= per_node) return false;
  const int full = r.ranks / per_node;
  const int rest = r.ranks % per_node;
  for (const auto& sw : t.switches) {
    if (sw.nodes.empty()) continue;
    if (static_cast<int>(sw.nodes.size()) * per_node < r.ranks) return true;  // spans leaves
    int whole = 0;
    int partial = 0;
    for (int n : sw.nodes) {
      const int free = s.FreeWholeGpus(n);
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

}  // namespace

bool Engine::TooSlowToStart(const JobRecord& job,
                            const std::vector<placement::RankSlot>& ranks) const {
  if (Compact(*topology_, ranks, int64_t{job.request.ranks} * job.request.gpu_milli)) return false;
  if (!options_.placement_slowdown) return true;
  return options_.placement_slowdown(job.spec, ranks) > 1 + options_.compact_slowdown_tolerance;
}

double Engine::RunSlowdown(const JobRecord& job,
                           const std::vector<placement::RankSlot>& ranks) const {
  if (!options_.placement_slowdown || job.colocated || ranks.empty()) return 1;
  if (Compact(*topology_, ranks, int64_t{job.request.ranks} * job.request.gpu_milli)) return 1;
  return std::max(1.0, options_.placement_slowdown(job.spec, ranks));
}

bool Engine::InCompactWait(const JobRecord& job, double now_s) const {
  if (options_.compact_wait_ratio <= 0 && options_.compact_max_wait_s <= 0) return false;
  // Without a runtime estimate a job does not wait: the wait is priced against its run time.
  const double est = job.EstimatedDurationS() * std::max(0.0, 1.0 - job.progress);
  if (est <= 0) return false;
  double limit = options_.compact_max_wait_s > 0 ? options_.compact_max_wait_s : 1e300;
  if (options_.compact_wait_ratio > 0) limit = std::min(limit, options_.compact_wait_ratio * est);
  return limit < 1e300 && now_s - job.pending_since_s < limit;
}

CycleResult Engine::Cycle(double now_s) {
  ++cycles_;
  CycleResult result;
  for (JobId id : running_) Accrue(jobs_.at(id), now_s);
  if (pending_.empty() && !Reshapes()) return result;
  if (options_.learn_runtimes && runtimes_.Size() > 0) {
    for (const auto* ids : {&pending_, &running_}) {
      for (JobId id : *ids) {
        JobRecord& r = jobs_.at(id);
        if (r.spec.duration_s <= 0) r.learned_estimate_s = runtimes_.Predict(r.spec, r.Gpus());
      }
    }
  }

  CycleView view{.now_s = now_s,
                 .state = &state_,
                 .jobs = &jobs_,
                 .pending = pending_,
                 .running = running_,
                 .options = &options_,
                 .uniform_priority = pending_priorities_.size() <= 1};
  std::vector<JobId> queue(pending_.begin(), pending_.end());
  policies_->order->Order(view, &queue);
  result.stats.pending_seen = static_cast<int>(queue.size());

  const placement::Strategy* strategy = policies_->placement.get();
  if (policies_->placement_large_queue && options_.large_queue_threshold > 0 &&
      static_cast<int>(queue.size()) > options_.large_queue_threshold) {
    strategy = policies_->placement_large_queue.get();
  }

  // Jobs that fit on one node take the small-job strategy, the others `otherwise`.
  auto strategy_for = [&](const JobRecord& j, const placement::Strategy* otherwise) {
    return policies_->placement_small && j.request.ranks <= options_.small_job_max_gpus
               ? policies_->placement_small.get()
               : otherwise;
  };
  model::ClusterState work = state_;  // the cycle's working copy; state_ is the snapshot
  std::vector<JobId> evicted;         // victims of this cycle (not restarted in it)
  Reservation reservation;
  bool blocked = false;
  int scanned_behind = 0;
  int64_t free_whole = FreeWholeGpus(work);
  int64_t free_milli = work.TotalGpuMilli() - work.AllocatedGpuMilli();
  const bool can_preempt = policies_->preemption && policies_->preemption->Name() != "none";
  // Co-location: GPUs held whole by training (running or started in this cycle), and the
  // overlay budget as this cycle changes it.
  const bool colocate = options_.config.colocation != "none";
  std::vector<char> trained;
  std::vector<int> overlay_work;
  auto mark_trained = [&](const JobRecord& r, const std::vector<placement::RankSlot>& ranks) {
    if (r.spec.kind != model::JobKind::kTraining || r.request.gpu_milli < model::kMilliPerGpu) {
      return;
    }
    for (const auto& s : ranks) {
      if (s.gpu >= 0) trained[s.gpu] = 1;
    }
  };
  if (colocate) {
    trained.assign(overlay_.size(), 0);
    overlay_work = overlay_;
    for (JobId id : running_) mark_trained(jobs_.at(id), jobs_.at(id).placement);
  }

  auto start = [&](JobRecord& job, placement::Outcome& o, bool backfilled) {
    auto st = placement::Apply(&work, job.request, o);
    if (!st) return false;
    StartJob s{.id = job.id,
               .ranks = std::move(o.ranks),
               .env = {},
               .resume_progress = job.progress,
               .restart = job.first_start_s >= 0};
    s.env = CommEnv(job, s.ranks);
    if (colocate) mark_trained(job, s.ranks);
    result.decisions.emplace_back(std::in_place_type<StartJob>, std::move(s));
    ++result.stats.started;
    if (backfilled) ++result.stats.backfilled;
    free_whole = FreeWholeGpus(work);
    free_milli = work.TotalGpuMilli() - work.AllocatedGpuMilli();
    return true;
  };

  for (JobId id : queue) {
    if (options_.max_placements_per_cycle > 0 &&
        result.stats.started >= options_.max_placements_per_cycle) {
      break;
    }
    if (blocked && options_.max_queue_scan > 0 && ++scanned_behind > options_.max_queue_scan) {
      break;
    }
    JobRecord& job = jobs_.at(id);
    if (auto nf = never_fits_.find(id); nf != never_fits_.end()) {
      result.decisions.emplace_back(std::in_place_type<RejectJob>,
                                    RejectJob{.id = id, .reason = nf->second});
      never_fits_.erase(nf);
      ++result.stats.rejected;
      continue;
    }
    // An inference service first tries to overlay training's GPUs (no free share needed).
    if (colocate && job.spec.kind == model::JobKind::kInference) {
      if (auto ranks = PlaceOverlay(work, job, overlay_work, trained)) {
        for (const auto& slot : *ranks) overlay_work[slot.gpu] += job.request.gpu_milli;
        StartJob s{.id = job.id,
                   .ranks = std::move(*ranks),
                   .env = {},
                   .resume_progress = job.progress,
                   .restart = job.first_start_s >= 0,
                   .colocated = true};
        s.env = CommEnv(job, s.ranks);
        s.env["TIANSHU_COLOCATION"] = options_.config.colocation;
        result.decisions.emplace_back(std::in_place_type<StartJob>, std::move(s));
        ++result.stats.started;
        ++result.stats.colocated;
        continue;
      }
    }
    const int64_t need_milli = int64_t{job.request.ranks} * job.request.gpu_milli;
    bool count_fits = WholeNeed(job.request) <= free_whole && need_milli <= free_milli;
    // Behind a blocked head, ask the backfill policy first (on a copy of the reservation, kept
    // only if the job is placed): a job it refuses costs no placement search.
    Reservation trial_reservation = reservation;
    if (blocked && count_fits && !policies_->backfill->MayStart(view, job, &trial_reservation)) {
      continue;
    }
    placement::Outcome o;
    const placement::Strategy* use = strategy_for(job, strategy);
    const bool compact_wait = InCompactWait(job, now_s);
    if (count_fits && compact_wait && (job.spread_too_slow || !options_.placement_slowdown) &&
        !CompactMayExist(work, job.request)) {
      ++result.stats.held_for_compact;
      continue;
    }
    if (count_fits) {
      ++result.stats.placement_calls;
      o = use->Place(work, job.request);
      if (o.kind == placement::OutcomeKind::kCanNeverFit) {
        result.decisions.emplace_back(std::in_place_type<RejectJob>,
                                      RejectJob{.id = id, .reason = o.reason});
        ++result.stats.rejected;
        continue;
      }
    } else {
      o.kind = placement::OutcomeKind::kDoesNotFitNow;
    }
    if (o.placed() && compact_wait && TooSlowToStart(job, o.ranks)) {
      job.spread_too_slow = true;
      ++result.stats.held_for_compact;
      continue;
    }
    if (o.placed()) {
      if (blocked) reservation = trial_reservation;
      start(job, o, blocked);
      continue;
    }
    // Does not fit now: preempt, or block/skip. Elastic jobs giving back nodes cost less than
    // evicting whole gangs: where a shrink admits the job, the elastic policy proposes it
    // (in a cycle that changes nothing else) and nothing is preempted for it.
    const bool shrink_instead = can_preempt && !blocked && ElasticOn() &&
                                policies_->elastic->AdmitsByShrinking(view, work, job.id);
    if (can_preempt && !blocked && !shrink_instead) {
      std::vector<JobId> victims = policies_->preemption->Victims(view, job);
      // Victims of this cycle are already gone; starts of this cycle are never victims.
      // Co-located services free no GPU share: never victims.
      std::erase_if(victims, [&](JobId v) {
        return jobs_.at(v).colocated ||
               std::find(evicted.begin(), evicted.end(), v) != evicted.end();
      });
      if (!victims.empty()) {
        // Take victims until the count fits, then simulate the eviction and place.
        model::ClusterState trial = work;
        std::vector<JobId> taken;
        bool placed = false;
        for (JobId v : victims) {
          const JobRecord& vr = jobs_.at(v);
          auto st = placement::Release(&trial, vr.request, placement::PlacedOutcome(vr.placement));
          if (!st) continue;
          taken.push_back(v);
          if (WholeNeed(job.request) > FreeWholeGpus(trial)) continue;
          ++result.stats.placement_calls;
          placement::Outcome po = use->Place(trial, job.request);
          // A job that would still wait for a compact placement evicts only for one.
          if (po.placed() && !(compact_wait && TooSlowToStart(job, po.ranks))) {
            o = std::move(po);
            placed = true;
            break;
          }
        }
        if (placed) {
          for (JobId v : taken) {
            const JobRecord& vr = jobs_.at(v);
            auto st = placement::Release(&work, vr.request, placement::PlacedOutcome(vr.placement));
            (void)st;
            result.decisions.emplace_back(std::in_place_type<StopJob>,
                                          StopJob{.id = v,
                                                  .reason = StopReason::kPreempted,
                                                  .checkpoint_first = true,
                                                  .requeued = true});
            evicted.push_back(v);
            ++result.stats.preempted;
          }
          start(job, o, false);
          continue;
        }
      }
    }
    if (!blocked) {
      blocked = true;
      result.stats.head_blocked = true;
      if (policies_->backfill->StopAtBlockedHead()) break;
      reservation = policies_->backfill->Reserve(view, job, work);
    }
    if (free_whole == 0 && free_milli == 0) break;
  }

  // Topology upgrades: a job running on a placement predicted too slow moves to a compact one
  // of the free capacity when the time it saves outweighs the restart.
  auto decided = [&](JobId id) {
    return std::any_of(result.decisions.begin(), result.decisions.end(),
                       [&](const Decision& d) { return DecisionJob(d) == id; });
  };
  if (UpgradesOn() && !result.stats.head_blocked) {
    int tries = 0;
    for (JobId id : running_) {
      if (tries >= options_.upgrade_tries_per_cycle) break;
      JobRecord& r = jobs_.at(id);
      if (r.run_slowdown <= 1 + options_.compact_slowdown_tolerance || r.colocated || decided(id)) {
        continue;
      }
      const double est = r.EstimatedDurationS();
      const double remaining = est > 0 ? est * (1 - ProgressNow(r, est, now_s)) : 0;
      if (est <= 0 || remaining * (r.run_slowdown - 1) < options_.upgrade_min_saving_s) continue;
      model::ClusterState trial = work;
      if (!placement::Release(&trial, r.request, placement::PlacedOutcome(r.placement))) continue;
      if (!CompactMayExist(trial, r.request)) continue;
      ++tries;
      const placement::Strategy* use = strategy_for(r, policies_->placement.get());
      ++result.stats.placement_calls;
      placement::Outcome po = use->Place(trial, r.request);
      if (!po.placed() || TooSlowToStart(r, po.ranks)) continue;
      const double saved = remaining * (r.run_slowdown - RunSlowdown(r, po.ranks));
      if (saved < options_.upgrade_min_saving_s) continue;
      if (!placement::Apply(&trial, r.request, po)) continue;
      work = std::move(trial);
      result.decisions.emplace_back(std::in_place_type<MigrateJob>,
                                    MigrateJob{.id = id, .ranks = std::move(po.ranks)});
      ++result.stats.upgraded;
    }
  }

  // Resizes and moves are for jobs that hold GPU shares (co-located services hold none).
  auto reshape = [&](std::vector<Decision> proposed) {
    for (auto& d : proposed) {
      const JobId id = DecisionJob(d);
      if (!jobs_.at(id).colocated && !decided(id)) result.decisions.push_back(std::move(d));
    }
  };
  if (policies_->elastic) reshape(policies_->elastic->Propose(view, work));
  if (policies_->migration) reshape(policies_->migration->Propose(view, work));

  // Apply in one place: stops first (they free what the starts were planned on).
  for (const Decision& d : result.decisions) {
    if (std::holds_alternative<StopJob>(d)) {
      JobRecord& r = jobs_.at(DecisionJob(d));
      Accrue(r, now_s);
      Commit(d, now_s);
    }
  }
  for (const Decision& d : result.decisions) {
    if (!std::holds_alternative<StopJob>(d)) Commit(d, now_s);
  }
  return result;
}

}  // namespace tianshu::engine
