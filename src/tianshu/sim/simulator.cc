#include "tianshu/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "tianshu/estimate/perf.h"
#include "tianshu/estimate/plan.h"
#include "tianshu/estimate/serving.h"
#include "tianshu/policy/builtin.h"
#include "tianshu/sim/internal/event_queue.h"
#include "tianshu/sim/internal/failure_clock.h"
#include "tianshu/sim/internal/gpu_sharing.h"
#include "tianshu/sim/internal/job_run.h"
#include "tianshu/sim/internal/node_sharing.h"
#include "tianshu/sim/internal/results.h"
#include "tianshu/sim/internal/service_prices.h"
#include "tianshu/sim/internal/usage_meter.h"

namespace tianshu::sim {
namespace {

// The speed and serving models live below both drivers (estimate/).
using estimate::Colocation;
using estimate::ColocationFrom;
using estimate::ContentionSolver;
using estimate::ForecastOverlay;
using estimate::JobPerf;
using estimate::PerfModel;

using engine::Decision;
using engine::JobId;
using internal::Ev;
using internal::EvKind;
using internal::JobRun;

class Sim {
 public:
  Sim(const model::Topology& topo, const Workload& w, const engine::EngineOptions& eo,
      const SimOptions& so)
      : topo_(topo),
        w_(w),
        eo_(eo),
        so_(so),
        pm_(topo, eo.config),
        nodes_(topo.nodes.size()),
        prices_(topo),
        failures_(so.seed),
        gpus_(runs_, meter_, prices_, [this](int j, double t) { Reprice(j, t); }) {}

  Result<SimResult> Run();

 private:
  // Steps of Run.
  void InstallModelHooks();
  void InitRuns();
  Status SubmitArrivals(double t, int* next_arrival, bool* changed);
  Status HandleEvent(const Ev& ev, double t, bool* changed);
  void RunCycle(double t);
  void AskForWakeup(double t);
  void ReportProgress(int* last_report);
  void CloseOpenRuns(double end);

  void Advance(double t);
  void Reprice(int j, double t);
  void RepriceNvmeNeighbours(int j, double t);
  void Leave(int j, double t);
  void Resolve(double t);
  // A running job with uplink traffic joins (or leaves) the contention solved by Resolve.
  void JoinNetwork(int j);
  void LeaveNetwork(int j);
  void StartJob(const engine::StartJob& s, double t);
  void StopJob(int j, double t, bool keep_progress);
  // Checkpoint, leave, restart on `ranks` (a migration, or a resize when the count changes).
  void Move(int j, const std::vector<placement::RankSlot>& ranks, double t);
  void Handle(const std::vector<Decision>& ds, double t);
  void NoteHeat(double t);
  void Sample(double t);
  Status Finish(int j, double t);

  const model::Topology& topo_;
  const Workload& w_;
  engine::EngineOptions eo_;
  SimOptions so_;
  PerfModel pm_;
  std::unique_ptr<engine::Engine> engine_;
  std::vector<JobRun> runs_;
  internal::EventQueue events_;
  internal::NodeSharing nodes_;  // NVMe shares
  // Running jobs with uplink traffic (contention), by id, and each one's demand on the uplinks
  // (fixed while it runs: its perf is evaluated when it starts).
  std::vector<int> networked_;
  std::vector<ContentionSolver::Flow> flows_;
  internal::UsageMeter meter_;
  internal::ServicePrices prices_;
  internal::FailureClock failures_;
  double now_ = 0;
  double wakeup_at_ = -1;
  double reshape_wakeup_at_ = -1;
  double peak_alloc_ = -1;
  SimResult out_;
  internal::GpuSharing gpus_;  // co-location: training and services per GPU
  int terminal_ = 0;
  int64_t handled_ = 0;  // arrivals and events handled (Metrics::events)
  bool contention_dirty_ = false;
};

void Sim::Advance(double t) {
  meter_.Advance(t - now_, engine_ && !engine_->Pending().empty());
  now_ = t;
}

// Recomputes a running job's speed (after its contention or NVMe share changed) and
// reschedules its completion.
void Sim::Reprice(int j, double t) {
  JobRun& r = runs_[j];
  if (!r.running) return;
  if (!r.paused) r.done = std::min(r.need, r.done + r.rate * (t - r.last_t));
  r.last_t = t;
  meter_.Contribute(r, -1);
  if (r.perf.opaque || r.ideal_step <= 0) {
    r.rate = 1 - r.coloc_loss;
    r.comm_frac = 0;
    r.compute_frac = 1;
  } else {
    double step = r.perf.StepSeconds(r.x, r.nvme);
    r.rate = (so_.fixed_durations ? 1.0 : std::min(1.0, r.ideal_step / step)) * (1 - r.coloc_loss);
    r.comm_frac = step > 0 ? r.perf.CommSeconds(r.x) / step : 0;
    r.compute_frac = step > 0 ? std::min(1.0, r.perf.compute_s / step) : 1;
  }
  meter_.Contribute(r, +1);
  ++r.version;
  if (r.paused) {
    events_.Push(r.busy_from, EvKind::kResume, j, r.version);
  } else {
    double left = std::max(0.0, r.need - r.done);
    events_.Push(t + left / std::max(r.rate, 1e-9), EvKind::kCompletion, j, r.version);
  }
}

// The jobs sharing a node with `j` got or lost an NVMe neighbour: reprice those whose share
// changed.
void Sim::RepriceNvmeNeighbours(int j, double t) {
  for (int n : runs_[j].nodes) {
    for (int other : nodes_.JobsOn(n)) {
      if (other == j) continue;
      double k = nodes_.Share(runs_[other].nodes);
      if (k != runs_[other].nvme && !runs_[other].perf.opaque) {
        runs_[other].nvme = k;
        Reprice(other, t);
      }
    }
  }
}

void Sim::Resolve(double t) {
  if (!contention_dirty_) return;
  contention_dirty_ = false;
  std::vector<double> x = ContentionSolver::Solve(flows_, pm_.UplinkCapacity());
  for (size_t i = 0; i < networked_.size(); ++i) {
    JobRun& r = runs_[networked_[i]];
    if (std::abs(r.x - x[i]) > 1e-9) {
      r.x = x[i];
      Reprice(networked_[i], t);
    }
  }
}

void Sim::JoinNetwork(int j) {
  contention_dirty_ = true;
  auto at = std::lower_bound(networked_.begin(), networked_.end(), j);
  if (at != networked_.end() && *at == j) return;
  ContentionSolver::Flow f;
  f.job = j;
  for (const auto& [sw, bytes] : runs_[j].perf.uplink_bytes) {
    f.demand.emplace_back(sw, runs_[j].perf.DemandBytesPerSec(bytes));
  }
  flows_.insert(flows_.begin() + (at - networked_.begin()), std::move(f));
  networked_.insert(at, j);
}

void Sim::LeaveNetwork(int j) {
  auto at = std::lower_bound(networked_.begin(), networked_.end(), j);
  if (at == networked_.end() || *at != j) return;
  flows_.erase(flows_.begin() + (at - networked_.begin()));
  networked_.erase(at);
  contention_dirty_ = true;
}

void Sim::StartJob(const engine::StartJob& s, double t) {
  int j = static_cast<int>(s.id);
  JobRun& r = runs_[j];
  r.running = true;
  r.run_start = t;
  r.last_t = t;
  placement::Span span = placement::SpanOf(topo_, s.ranks);
  r.nodes = std::move(span.nodes);
  r.leaves = static_cast<int>(span.leaves.size());
  r.gpu_ids.clear();
  for (const auto& slot : s.ranks) {
    if (slot.gpu >= 0) r.gpu_ids.push_back(slot.gpu);
  }
  r.colocated = s.colocated;
  r.ever_colocated = r.ever_colocated || s.colocated;
  const auto& acc = topo_.TypeOf(r.nodes.front()).accelerator;
  r.busy_w = acc.busy_watts;
  r.idle_w = acc.idle_watts;
  r.gpus = static_cast<double>(s.ranks.size()) * r.spec.gpu_milli / 1000.0;
  r.perf = pm_.Evaluate(r.spec, s.ranks);
  // scheduler.restart_overhead: re-launch and checkpoint load after a resumed start.
  const auto restart_s = static_cast<double>(eo_.config.restart_overhead_s);
  r.paused = s.restart && restart_s > 0;
  r.busy_from = t + (r.paused ? restart_s : 0);
  r.x = r.networked() ? pm_.AloneFraction(r.perf) : 1;
  r.rate = 0;
  r.comm_frac = 0;
  r.compute_frac = 0;
  r.nvme = nodes_.Join(j, r.nodes);
  meter_.Contribute(r, +1);  // zero rate: the reprice below replaces it
  Reprice(j, t);
  // Jobs sharing its nodes now share their NVMe with one more.
  RepriceNvmeNeighbours(j, t);
  if (r.networked()) JoinNetwork(j);
  gpus_.Join(j, t);
  NoteHeat(t);
}

// The heat map is taken at the busiest moment (most GPU shares allocated).
void Sim::NoteHeat(double t) {
  double milli = static_cast<double>(engine_->State().AllocatedGpuMilli());
  if (milli <= peak_alloc_) return;
  peak_alloc_ = milli;
  out_.heat_time_s = t;
  const auto& st = engine_->State();
  out_.heat.assign(topo_.nodes.size(), 0);
  for (const auto& n : topo_.nodes) {
    int g = topo_.GpusOn(n.id);
    out_.heat[n.id] =
        g > 0 ? static_cast<float>(1.0 - static_cast<double>(st.FreeMilli(n.id)) / (g * 1000.0))
              : 0;
  }
}

void Sim::StopJob(int j, double t, bool keep_progress) {
  JobRun& r = runs_[j];
  if (!r.running) return;
  if (!r.paused) r.done = std::min(r.need, r.done + r.rate * (t - r.last_t));
  if (!keep_progress && r.perf.ckpt_interval_s > 0 && !r.paused) {
    // Back to the last periodic checkpoint of this run.
    double since = std::fmod(t - r.busy_from, r.perf.ckpt_interval_s);
    double lost = std::min(r.done, r.rate * since);
    r.done -= lost;
    r.lost_s += lost;
  }
  Leave(j, t);
  r.paused = false;
}

// A run ends (stopped or finished): its GPU-time is booked, it leaves its nodes, and the jobs
// that shared their NVMe with it are repriced.
void Sim::Leave(int j, double t) {
  JobRun& r = runs_[j];
  gpus_.Leave(j, t);
  meter_.Contribute(r, -1);
  if (!r.colocated) r.allocated_gpu_s += r.gpus * (t - r.run_start);
  r.ran_s += t - r.run_start;
  r.running = false;
  ++r.version;
  nodes_.Leave(j, r.nodes);
  RepriceNvmeNeighbours(j, t);
  LeaveNetwork(j);
}
void Sim::Move(int j, const std::vector<placement::RankSlot>& ranks, double t) {
  JobRun& r = runs_[j];
  StopJob(j, t, /*keep_progress=*/true);
  const int before = r.spec.TotalGpus();
  const int after = static_cast<int>(ranks.size());
  if (after != before && before > 0 && after > 0) {
    // Same total work at the new size: what is left takes ideal-step(new) / ideal-step(old) as
    // long (opaque jobs: linear scaling); need and done scale together, so the fraction done
    // is kept.
    const double old_step = r.ideal_step;
    r.spec.gpus = after;
    if (r.spec.gpus_per_node > 0 && after % r.spec.gpus_per_node == 0) {
      r.spec.nodes = after / r.spec.gpus_per_node;
    }
    r.ideal_step = pm_.IdealStepSeconds(r.spec);
    const double scale = old_step > 0 && r.ideal_step > 0 ? r.ideal_step / old_step
                                                          : static_cast<double>(before) / after;
    r.need *= scale;
    r.done *= scale;
  }
  engine::StartJob s{.id = j, .ranks = ranks, .resume_progress = 0, .restart = true};
  StartJob(s, t);
}

void Sim::Handle(const std::vector<Decision>& ds, double t) {
  if (so_.on_decision) {
    for (const Decision& d : ds) so_.on_decision(t, d);
  }
  // Stops first: the starts were planned on the capacity they free.
  for (const Decision& d : ds) {
    if (const auto* s = std::get_if<engine::StopJob>(&d)) {
      int j = static_cast<int>(s->id);
      bool keep = s->checkpoint_first;
      StopJob(j, t, keep);
      if (s->reason == engine::StopReason::kFailed) ++runs_[j].retries;
      double frac = runs_[j].need > 0 ? runs_[j].done / runs_[j].need : 0;
      auto st = engine_->Apply(engine::CheckpointDone{s->id, frac}, t);
      (void)st;
      if (!s->requeued) ++terminal_;
    }
  }
  for (const Decision& d : ds) {
    if (const auto* s = std::get_if<engine::StartJob>(&d)) {
      StartJob(*s, t);
    } else if (const auto* m = std::get_if<engine::MigrateJob>(&d)) {
      Move(static_cast<int>(m->id), m->ranks, t);
    } else if (const auto* z = std::get_if<engine::ResizeJob>(&d)) {
      Move(static_cast<int>(z->id), z->ranks, t);
    } else if (std::holds_alternative<engine::RejectJob>(d)) {
      ++terminal_;
    }
  }
}

Status Sim::Finish(int j, double t) {
  JobRun& r = runs_[j];
  r.done = r.need;
  r.last_t = t;
  Leave(j, t);
  auto st = engine_->Apply(engine::JobFinished{j, true, ""}, t);
  if (!st) return std::unexpected(st.error());
  ++terminal_;
  return Ok();
}

void Sim::Sample(double t) {
  ::tianshu::sim::Sample s = meter_.SampleAt(t, engine_->Pending().size());
  if (!out_.samples.empty() && out_.samples.back().t == t) {
    out_.samples.back() = s;
  } else {
    out_.samples.push_back(s);
  }
}
// The engine's consolidation test, move price and co-location check ask the same models the run
// is priced with, unless the caller gave its own.
void Sim::InstallModelHooks() {
  if (!eo_.placement_slowdown) {
    eo_.placement_slowdown = [this](const model::JobSpec& spec,
                                    std::span<const placement::RankSlot> ranks) {
      return estimate::PredictedSlowdown(pm_, spec, ranks).value_or(1.0);
    };
  }
  if (!eo_.checkpoint_write_s) {
    eo_.checkpoint_write_s = [this](const model::JobSpec& spec,
                                    std::span<const placement::RankSlot> ranks) {
      return estimate::PredictedCheckpointWriteS(pm_, spec, ranks);
    };
  }
  gpus_.Configure(ColocationFrom(eo_.config.colocation), static_cast<size_t>(topo_.NumGpus()));
  if (gpus_.Mode() != Colocation::kNone && !eo_.colocation_fits) {
    // The engine overlays a service only where this model predicts it keeps its objective
    // (kSloTarget of requests) and costs the training there at most kMaxTrainingLoss.
    eo_.colocation_fits = [this](const model::JobSpec& spec,
                                 std::span<const placement::RankSlot> ranks) {
      std::vector<int> gpus;
      for (const auto& s : ranks) gpus.push_back(s.gpu);
      auto price = prices_.Price(spec, gpus);
      if (!price) return true;  // nothing to price: the overlay budget decides
      return estimate::OverlayAdmits(ForecastOverlay(*price, gpus_.Mode()), gpus,
                                     [this](int g) { return gpus_.GpuLoss(g); });
    };
  }
  if (so_.estimates == Estimates::kNone) eo_.learn_runtimes = false;
}

// Every job's work from the trace, and what the engine is told of it; every node's idle power.
void Sim::InitRuns() {
  const int n = static_cast<int>(w_.jobs.size());
  runs_.resize(n);
  for (const auto& node : topo_.nodes) {
    const auto& acc = topo_.TypeOf(node.id).accelerator;
    meter_.AddBaseWatts(acc.idle_watts * topo_.GpusOn(node.id));
  }
  out_.cluster_gpus = topo_.NumGpus();
  for (int i = 0; i < n; ++i) {
    JobRun& r = runs_[i];
    r.spec = SpecFor(w_.jobs[i]);
    if (so_.max_leaves != 0) r.spec.max_leaves = so_.max_leaves;
    r.ideal_step = pm_.IdealStepSeconds(r.spec);
    r.need = w_.jobs[i].duration_s;
    if (r.need <= 0 && r.spec.iterations > 0 && r.ideal_step > 0) {
      r.need = static_cast<double>(r.spec.iterations) * r.ideal_step;
    }
    if (r.need <= 0) r.need = 1;
    r.need0 = r.need;
    // The engine's runtime estimate (backfill, SRTF, the consolidation wait), when it is given
    // one; a YAML job's own `duration:` is its user's estimate and stays.
    const bool given = w_.jobs[i].spec && w_.jobs[i].spec->duration_s > 0;
    r.spec.duration_s = so_.estimates == Estimates::kTrace || given ? r.need : 0;
  }
}

// Jobs whose submission time has come become SubmitJob events.
Status Sim::SubmitArrivals(double t, int* next_arrival, bool* changed) {
  const int n = static_cast<int>(w_.jobs.size());
  while (*next_arrival < n && w_.jobs[*next_arrival].submit_s <= t) {
    int i = (*next_arrival)++;
    auto st = engine_->Apply(engine::SubmitJob{i, runs_[i].spec}, t);
    if (!st) return Fail("job ", w_.jobs[i].name, ": ", st.error().message);
    *changed = true;
    ++handled_;
  }
  return Ok();
}

// One due event; `changed`: the engine should run a cycle at this instant.
Status Sim::HandleEvent(const Ev& ev, double t, bool* changed) {
  switch (ev.kind) {
    case EvKind::kCompletion: {
      JobRun& r = runs_[ev.job];
      if (!r.running || ev.version != r.version) break;
      if (auto st = Finish(ev.job, t); !st) return std::unexpected(st.error());
      *changed = true;
      break;
    }
    case EvKind::kResume: {
      JobRun& r = runs_[ev.job];
      if (!r.running || ev.version != r.version || !r.paused) break;
      meter_.Contribute(r, -1);
      r.paused = false;
      r.last_t = t;
      meter_.Contribute(r, +1);
      Reprice(ev.job, t);
      break;
    }
    case EvKind::kNodeFail: {
      auto d = engine_->Apply(engine::NodeFailed{ev.job, "simulated failure"}, t);
      if (!d) return std::unexpected(d.error());
      meter_.AddBaseWatts(-(topo_.TypeOf(ev.job).accelerator.idle_watts * topo_.GpusOn(ev.job)));
      Handle(*d, t);
      events_.Push(t + so_.repair_s, EvKind::kNodeRepair, ev.job);
      *changed = true;
      break;
    }
    case EvKind::kNodeRepair: {
      auto d = engine_->Apply(engine::NodeHealthy{ev.job}, t);
      if (!d) return std::unexpected(d.error());
      meter_.AddBaseWatts(topo_.TypeOf(ev.job).accelerator.idle_watts * topo_.GpusOn(ev.job));
      if (so_.node_mtbf_s > 0) {
        events_.Push(t + failures_.NextGap(so_.node_mtbf_s), EvKind::kNodeFail, ev.job);
      }
      *changed = true;
      break;
    }
    case EvKind::kWakeup:
      if (ev.t == wakeup_at_) wakeup_at_ = -1;
      *changed = true;
      break;
  }
  return Ok();
}

// A cycle of the engine at `t`, its decisions carried out.
void Sim::RunCycle(double t) {
  engine::CycleResult cr = engine_->Cycle(t);
  Handle(cr.decisions, t);
  // Moves and resizes make room the waiting job gets in a cycle of its own, at once.
  bool reshaped = std::any_of(cr.decisions.begin(), cr.decisions.end(), [](const auto& d) {
    return std::holds_alternative<engine::MigrateJob>(d) ||
           std::holds_alternative<engine::ResizeJob>(d);
  });
  if (reshaped && t != reshape_wakeup_at_) {  // once per instant: never a loop
    reshape_wakeup_at_ = t;
    events_.Push(t, EvKind::kWakeup, -1);
  }
}

// The engine may decide differently later with no new event (a 2D-LAS threshold, a scaling
// interval): wake up then, the earliest such time only once.
void Sim::AskForWakeup(double t) {
  if (auto wk = engine_->NextWakeup(t)) {
    if (wakeup_at_ < 0 || *wk < wakeup_at_) {
      wakeup_at_ = *wk;
      events_.Push(*wk, EvKind::kWakeup, -1);
    }
  }
}

void Sim::ReportProgress(int* last_report) {
  if (!so_.progress) return;
  const int n = static_cast<int>(w_.jobs.size());
  int pct = static_cast<int>(100.0 * terminal_ / std::max(1, n));
  if (pct != *last_report) {
    *last_report = pct;
    so_.progress(static_cast<double>(terminal_) / std::max(1, n));
  }
}

// Jobs still running (the loop stopped early): close their accounting.
void Sim::CloseOpenRuns(double end) {
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (runs_[i].running && !runs_[i].colocated) {
      runs_[i].allocated_gpu_s += runs_[i].gpus * (end - runs_[i].run_start);
    }
    if (runs_[i].running) gpus_.UpdateService(static_cast<int>(i), end);
  }
}

Result<SimResult> Sim::Run() {
  auto wall0 = std::chrono::steady_clock::now();
  InstallModelHooks();
  auto e = engine::Engine::Create(topo_, eo_);
  if (!e) return std::unexpected(e.error());
  engine_ = std::move(*e);
  InitRuns();
  const int n = static_cast<int>(w_.jobs.size());
  // Node failures: the first failure of every node, from the seed.
  if (so_.node_mtbf_s > 0) {
    for (const auto& node : topo_.nodes) {
      events_.Push(failures_.NextGap(so_.node_mtbf_s), EvKind::kNodeFail, node.id);
    }
  }
  for (const auto& [t, node] : so_.node_failures) {
    if (node < 0 || node >= topo_.NumNodes())
      return Fail("node failure: no node ", std::to_string(node));
    events_.Push(t, EvKind::kNodeFail, node);
  }
  int next_arrival = 0;
  int last_report = -1;
  while (terminal_ < n) {
    events_.Compact([&](const Ev& ev) {  // a run's version only grows
      return ev.kind <= EvKind::kResume && ev.version != runs_[ev.job].version;
    });
    double t_heap = events_.Empty() ? 1e300 : events_.NextTime();
    double t_arr = next_arrival < n ? w_.jobs[next_arrival].submit_s : 1e300;
    double t = std::min(t_heap, t_arr);
    if (t >= 1e300) break;
    // Only failures (or wakeups) left, nothing pending can ever start: stop.
    if (t_arr >= 1e300 && engine_->Running().empty() && meter_.Allocated() == 0 &&
        events_.NextIsFailureOrLater() && engine_->Pending().empty()) {
      break;
    }
    Advance(t);
    bool changed = false;
    if (auto st = SubmitArrivals(t, &next_arrival, &changed); !st) {
      return std::unexpected(st.error());
    }
    while (!events_.Empty() && events_.NextTime() <= t) {
      ++handled_;
      if (events_.PopSupersededUpTo(t)) continue;  // ignored when met, as a stale version is
      Ev ev = events_.Pop();
      if (auto st = HandleEvent(ev, t, &changed); !st) return std::unexpected(st.error());
    }
    if (changed && (!engine_->Pending().empty() || engine_->Reshapes())) RunCycle(t);
    Resolve(t);
    AskForWakeup(t);
    Sample(t);
    ReportProgress(&last_report);
  }
  CloseOpenRuns(now_);
  internal::CollectResults({.engine = engine_.get(),
                            .workload = &w_,
                            .topology = &topo_,
                            .runs = &runs_,
                            .meter = &meter_,
                            .end_s = now_,
                            .events = handled_},
                           &out_);
  out_.peak_allocated_milli = peak_alloc_;
  out_.config = eo_.preset;
  out_.metrics.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (so_.progress) so_.progress(1.0);
  return std::move(out_);
}

}  // namespace

Result<SimResult> Simulate(const model::Topology& topology, const Workload& workload,
                           const engine::EngineOptions& options, const SimOptions& sim) {
  if (auto st = policy::RegisterBuiltinPolicies(); !st) return std::unexpected(st.error());
  Sim s(topology, workload, options, sim);
  return s.Run();
}

}  // namespace tianshu::sim
