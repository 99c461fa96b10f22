#include "tianshu/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "tianshu/comm/cost_model.h"
#include "tianshu/estimate/perf.h"
#include "tianshu/estimate/plan.h"
#include "tianshu/estimate/serving.h"
#include "tianshu/policy/builtin.h"

namespace tianshu::sim {
namespace {

// The speed and serving models live below both drivers (estimate/).
using estimate::Colocation;
using estimate::ColocationFrom;
using estimate::ContentionSolver;
using estimate::CostOfService;
using estimate::ForecastOverlay;
using estimate::Interference;
using estimate::InterferenceOf;
using estimate::JobPerf;
using estimate::Latency;
using estimate::MmcLatency;
using estimate::PerfModel;
using estimate::ServiceCost;
using estimate::SplitBusy;
using estimate::TrainingLoss;

using engine::Decision;
using engine::JobId;

enum class EvKind : int {
  kCompletion = 0,  // first: capacity freed at an instant is visible to that instant's cycle
  kResume = 1,
  kNodeFail = 2,
  kNodeRepair = 3,
  kWakeup = 4,
};

struct Ev {
  double t;
  EvKind kind;
  int64_t seq;
  int job;  // or node
  int64_t version;
  bool operator>(const Ev& o) const {
    if (t != o.t) return t > o.t;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

struct Run {
  model::JobSpec spec;
  double need = 0;   // ideal seconds of work (at its current size)
  double need0 = 0;  // ideal seconds of work at its submitted size (for the metrics)
  double done = 0;   // ideal seconds completed
  double ideal_step = 0;
  bool running = false;
  bool paused = false;  // restarting: holds its GPUs, makes no progress
  double busy_from = 0;
  double last_t = 0;
  double rate = 0;  // ideal seconds per second while not paused
  double x = 1;     // network fraction from contention
  double nvme = 1;  // jobs sharing its busiest NVMe
  double comm_frac = 0, compute_frac = 1;
  JobPerf perf;
  std::vector<int> nodes;
  double gpus = 0;  // GPU-equivalents held
  int64_t version = 0;
  double run_start = 0;           // start of the current placement
  double allocated_gpu_s = 0;     // GPU shares held (none while overlaid on training's GPUs)
  double ran_s = 0;               // time placed
  double busy_w = 0, idle_w = 0;  // board power per GPU of its type
  int leaves = 0;
  int retries = 0;
  double lost_s = 0;         // ideal seconds redone after failures
  std::vector<int> gpu_ids;  // GPUs of the current placement
  // Training: share of the device lost to co-located inference (its rate is scaled by 1 - it).
  double coloc_loss = 0;
  // Inference (serving.h): one request alone on its GPUs, per phase; its queue now.
  bool serving = false;
  bool colocated = false;
  bool ever_colocated = false;
  double pre_s = 0, dec_s = 0;
  int servers = 1, replicas = 1;
  double lambda = 0, slo_s = 0;
  Latency lat;
  double busy_pre = 0, busy_dec = 0;  // busy share of its GPUs in each phase
  double served_to = 0;               // requests are counted up to this time
  double req_total = 0, req_ok = 0, p99_sum = 0;
  bool networked() const { return !perf.uplink_bytes.empty(); }
};

// The queue of a service priced so (sim/serving.h).
void ApplyCost(const ServiceCost& c, struct Run* r) {
  r->pre_s = c.pre_s;
  r->dec_s = c.dec_s;
  r->servers = c.servers;
  r->replicas = c.replicas;
  r->lambda = c.lambda;
  r->slo_s = c.slo_s;
}

class Sim {
 public:
  Sim(const model::Topology& topo, const Workload& w, const engine::EngineOptions& eo,
      const SimOptions& so)
      : topo_(topo), w_(w), eo_(eo), so_(so), pm_(topo, eo.config) {}

  Result<SimResult> Run();

 private:
  void Push(double t, EvKind k, int job, int64_t version = 0) {
    heap_.push(Ev{t, k, seq_++, job, version});
  }
  void Advance(double t);
  void Contribute(struct Run& r, double sign);
  void Reprice(int j, double t);
  void Leave(int j, double t);
  void Resolve(double t);
  void StartJob(const engine::StartJob& s, double t);
  void StopJob(int j, double t, bool keep_progress);
  // Checkpoint, leave, restart on `ranks` (a migration, or a resize when the count changes).
  void Move(int j, const std::vector<placement::RankSlot>& ranks, double t);
  void Handle(const std::vector<Decision>& ds, double t);
  void Sample(double t);
  Status Finish(int j, double t);
  // Co-location (serving.h).
  std::optional<ServiceCost> Price(const model::JobSpec& spec, std::span<const int> gpus);
  Latency ServiceLatency(const struct Run& r, bool contended, double* pre, double* dec) const;
  bool Contended(const struct Run& r) const;
  void UpdateService(int j, double t);
  // Share of the device training loses next to a service busy this much in each phase.
  double ServiceLoss(double busy_pre, double busy_dec) const {
    return TrainingLoss(interference_, busy_pre, busy_dec);
  }
  double GpuLoss(int g) const;
  void UpdateTrainingLoss(int j, double t);
  void SetColocLoss(struct Run& r, double loss);
  std::set<int> TrainersOn(const std::vector<int>& gpus) const;
  void JoinGpus(int j, double t);
  void LeaveGpus(int j, double t);

  const model::Topology& topo_;
  const Workload& w_;
  engine::EngineOptions eo_;
  SimOptions so_;
  PerfModel pm_;
  std::unique_ptr<engine::Engine> engine_;
  std::vector<struct Run> runs_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> heap_;
  int64_t seq_ = 0;
  std::vector<std::vector<int>> node_jobs_;
  std::set<int> networked_;
  double now_ = 0;
  double wakeup_at_ = -1;
  double reshape_wakeup_at_ = -1;
  // Piecewise-constant sums and their integrals.
  double alloc_ = 0, eff_ = 0, comm_ = 0, extra_w_ = 0, base_w_ = 0;
  double alloc_int_ = 0, eff_int_ = 0, comm_int_ = 0, energy_j_ = 0;
  double wait_t_ = 0, wait_eff_int_ = 0;  // while some job waits (the queue is not empty)
  double peak_alloc_ = -1;
  SimResult out_;
  // Co-location: per GPU the training job holding it whole (-1) and the services on it.
  Colocation mode_ = Colocation::kNone;
  Interference interference_;
  std::vector<int> gpu_train_;
  std::vector<std::vector<int>> gpu_inf_;
  std::unordered_map<std::string, std::optional<ServiceCost>> price_cache_;
  double coloc_gpus_ = 0, coloc_loss_ = 0, coloc_gpu_int_ = 0, coloc_loss_int_ = 0;
  int terminal_ = 0;
  bool contention_dirty_ = false;
};

void Sim::Advance(double t) {
  double dt = t - now_;
  if (dt > 0) {
    alloc_int_ += alloc_ * dt;
    eff_int_ += eff_ * dt;
    comm_int_ += comm_ * dt;
    energy_j_ += (base_w_ + extra_w_) * dt;
    coloc_gpu_int_ += coloc_gpus_ * dt;
    coloc_loss_int_ += coloc_loss_ * dt;
    if (engine_ && !engine_->Pending().empty()) {
      wait_t_ += dt;
      wait_eff_int_ += eff_ * dt;
    }
  }
  now_ = t;
}

void Sim::Contribute(struct Run& r, double sign) {
  if (r.colocated) return;  // an overlaid service holds no GPU share: training's count
  double g = r.gpus;
  alloc_ += sign * g;
  if (!r.paused) {
    eff_ += sign * g * r.rate;
    comm_ += sign * g * r.comm_frac;
    extra_w_ += sign * g * (r.busy_w - r.idle_w) * r.compute_frac;
  }
}

// Recomputes a running job's speed (after its contention or NVMe share changed) and
// reschedules its completion.
void Sim::Reprice(int j, double t) {
  struct Run& r = runs_[j];
  if (!r.running) return;
  if (!r.paused) r.done = std::min(r.need, r.done + r.rate * (t - r.last_t));
  r.last_t = t;
  Contribute(r, -1);
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
  Contribute(r, +1);
  ++r.version;
  if (r.paused) {
    Push(r.busy_from, EvKind::kResume, j, r.version);
  } else {
    double left = std::max(0.0, r.need - r.done);
    Push(t + left / std::max(r.rate, 1e-9), EvKind::kCompletion, j, r.version);
  }
}

void Sim::Resolve(double t) {
  if (!contention_dirty_) return;
  contention_dirty_ = false;
  std::vector<ContentionSolver::Flow> flows;
  std::vector<int> ids;
  for (int j : networked_) {
    ContentionSolver::Flow f;
    f.job = j;
    for (const auto& [sw, bytes] : runs_[j].perf.uplink_bytes) {
      f.demand.emplace_back(sw, runs_[j].perf.DemandBytesPerSec(bytes));
    }
    flows.push_back(std::move(f));
    ids.push_back(j);
  }
  std::vector<double> x = ContentionSolver::Solve(flows, pm_.UplinkCapacity());
  for (size_t i = 0; i < ids.size(); ++i) {
    struct Run& r = runs_[ids[i]];
    if (std::abs(r.x - x[i]) > 1e-9) {
      r.x = x[i];
      Reprice(ids[i], t);
    }
  }
}

void Sim::StartJob(const engine::StartJob& s, double t) {
  int j = static_cast<int>(s.id);
  struct Run& r = runs_[j];
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
  r.paused = s.restart && so_.restart_overhead_s > 0;
  r.busy_from = t + (r.paused ? so_.restart_overhead_s : 0);
  r.x = r.networked() ? pm_.AloneFraction(r.perf) : 1;
  r.rate = 0;
  r.comm_frac = 0;
  r.compute_frac = 0;
  r.nvme = 1;
  for (int n : r.nodes) {
    node_jobs_[n].push_back(j);
    r.nvme = std::max(r.nvme, static_cast<double>(node_jobs_[n].size()));
  }
  Contribute(r, +1);  // zero rate: the reprice below replaces it
  Reprice(j, t);
  // Jobs sharing its nodes now share their NVMe with one more.
  for (int n : r.nodes) {
    for (int other : node_jobs_[n]) {
      if (other == j) continue;
      double k = 1;
      for (int m : runs_[other].nodes) k = std::max(k, static_cast<double>(node_jobs_[m].size()));
      if (k != runs_[other].nvme && !runs_[other].perf.opaque) {
        runs_[other].nvme = k;
        Reprice(other, t);
      }
    }
  }
  if (r.networked()) {
    networked_.insert(j);
    contention_dirty_ = true;
  }
  JoinGpus(j, t);
  double milli = static_cast<double>(engine_->State().AllocatedGpuMilli());
  if (milli > peak_alloc_) {
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
}

void Sim::StopJob(int j, double t, bool keep_progress) {
  struct Run& r = runs_[j];
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
  struct Run& r = runs_[j];
  LeaveGpus(j, t);
  Contribute(r, -1);
  if (!r.colocated) r.allocated_gpu_s += r.gpus * (t - r.run_start);
  r.ran_s += t - r.run_start;
  r.running = false;
  ++r.version;
  for (int n : r.nodes) std::erase(node_jobs_[n], j);
  for (int n : r.nodes) {
    for (int other : node_jobs_[n]) {
      double k = 1;
      for (int m : runs_[other].nodes) k = std::max(k, static_cast<double>(node_jobs_[m].size()));
      if (k != runs_[other].nvme && !runs_[other].perf.opaque) {
        runs_[other].nvme = k;
        Reprice(other, t);
      }
    }
  }
  if (networked_.erase(j)) contention_dirty_ = true;
}

void Sim::Move(int j, const std::vector<placement::RankSlot>& ranks, double t) {
  struct Run& r = runs_[j];
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
  engine::StartJob s{.id = j, .ranks = ranks, .env = {}, .resume_progress = 0, .restart = true};
  StartJob(s, t);
}

void Sim::Handle(const std::vector<Decision>& ds, double t) {
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
  struct Run& r = runs_[j];
  r.done = r.need;
  r.last_t = t;
  Leave(j, t);
  auto st = engine_->Apply(engine::JobFinished{j, true, ""}, t);
  if (!st) return std::unexpected(st.error());
  ++terminal_;
  return Ok();
}

void Sim::Sample(double t) {
  ::tianshu::sim::Sample s;
  s.t = t;
  s.allocated_gpus = static_cast<float>(alloc_);
  s.effective_gpus = static_cast<float>(eff_);
  s.comm_gpus = static_cast<float>(comm_);
  s.power_w = static_cast<float>(base_w_ + extra_w_);
  s.queued = static_cast<int32_t>(engine_->Pending().size());
  if (!out_.samples.empty() && out_.samples.back().t == t) {
    out_.samples.back() = s;
  } else {
    out_.samples.push_back(s);
  }
}

std::optional<ServiceCost> Sim::Price(const model::JobSpec& spec, std::span<const int> gpus) {
  if (gpus.empty()) return std::nullopt;
  std::string key = spec.name + "|" + spec.model.profile + "|" + std::to_string(gpus.size()) + "|" +
                    std::to_string(topo_.nodes[comm::NodeOfGpu(topo_, gpus[0])].type) + "|" +
                    std::to_string(spec.gpu_milli);
  if (auto it = price_cache_.find(key); it != price_cache_.end()) return it->second;
  std::optional<ServiceCost> out = CostOfService(topo_, spec, gpus);
  price_cache_.emplace(std::move(key), out);
  return out;
}

Latency Sim::ServiceLatency(const struct Run& r, bool contended, double* pre, double* dec) const {
  *pre = r.pre_s;
  *dec = r.dec_s;
  if (contended) {
    *pre *= interference_.prefill_stretch;
    *dec *= interference_.decode_stretch;
  }
  return MmcLatency(r.lambda, *pre + *dec, r.servers, r.slo_s);
}

// A co-located service shares its GPUs with training while one holds any of them.
bool Sim::Contended(const struct Run& r) const {
  if (!r.colocated) return false;
  return std::any_of(r.gpu_ids.begin(), r.gpu_ids.end(), [&](int g) { return gpu_train_[g] >= 0; });
}

// Counts the service's requests up to t at its old latency, then takes its new one.
void Sim::UpdateService(int j, double t) {
  struct Run& r = runs_[j];
  if (!r.serving) return;
  const double dt = std::max(0.0, t - r.served_to);
  const double reqs = r.lambda * r.replicas * dt;
  r.req_total += reqs;
  r.req_ok += reqs * r.lat.attainment;
  r.p99_sum += reqs * std::min(r.lat.p99_s, 3600.0);
  r.served_to = t;
  if (!r.running) return;
  double pre = 0, dec = 0;
  r.lat = ServiceLatency(r, Contended(r), &pre, &dec);
  SplitBusy(r.lat, pre, dec, &r.busy_pre, &r.busy_dec);
}

// The replica's busy share, split over its phases by their shares of a request.
// Share of GPU g's time that training loses to the services overlaid on it.
double Sim::GpuLoss(int g) const {
  double l = 0;
  for (int i : gpu_inf_[g]) {
    const struct Run& s = runs_[i];
    if (s.colocated) l += ServiceLoss(s.busy_pre, s.busy_dec);
  }
  return l;
}

// A training job loses, on each GPU, what the services overlaid there take; the gang runs at
// the pace of its worst GPU.
void Sim::UpdateTrainingLoss(int j, double t) {
  struct Run& r = runs_[j];
  double loss = 0;
  if (r.running) {
    for (int g : r.gpu_ids) loss = std::max(loss, GpuLoss(g));
  }
  loss = std::min(loss, 0.9);
  if (std::abs(loss - r.coloc_loss) < 1e-12) return;
  SetColocLoss(r, loss);
  if (r.running) Reprice(j, t);
}

// A training job's loss and the run's sums of co-located GPUs and their loss, together.
void Sim::SetColocLoss(struct Run& r, double loss) {
  coloc_gpus_ += ((loss > 0 ? r.gpus : 0) - (r.coloc_loss > 0 ? r.gpus : 0));
  coloc_loss_ += (loss - r.coloc_loss) * r.gpus;
  r.coloc_loss = loss;
}

// The training jobs holding any of `gpus`.
std::set<int> Sim::TrainersOn(const std::vector<int>& gpus) const {
  std::set<int> trainers;
  for (int g : gpus) {
    if (gpu_train_[g] >= 0) trainers.insert(gpu_train_[g]);
  }
  return trainers;
}

void Sim::JoinGpus(int j, double t) {
  struct Run& r = runs_[j];
  if (mode_ == Colocation::kNone && r.spec.kind != model::JobKind::kInference) return;
  if (r.spec.kind == model::JobKind::kInference) {
    for (int g : r.gpu_ids) gpu_inf_[g].push_back(j);
    auto price = Price(r.spec, r.gpu_ids);
    r.serving = price.has_value();
    if (r.serving) {
      ApplyCost(*price, &r);
      r.served_to = t;
      UpdateService(j, t);
    }
    for (int tj : TrainersOn(r.gpu_ids)) UpdateTrainingLoss(tj, t);
    return;
  }
  if (r.spec.gpu_milli < model::kMilliPerGpu) return;
  std::set<int> services;
  for (int g : r.gpu_ids) {
    gpu_train_[g] = j;
    for (int i : gpu_inf_[g]) services.insert(i);
  }
  for (int i : services) UpdateService(i, t);
  if (!services.empty()) UpdateTrainingLoss(j, t);
}

void Sim::LeaveGpus(int j, double t) {
  struct Run& r = runs_[j];
  if (r.spec.kind == model::JobKind::kInference) {
    UpdateService(j, t);  // its requests up to now
    for (int g : r.gpu_ids) std::erase(gpu_inf_[g], j);
    r.busy_pre = r.busy_dec = 0;
    if (r.colocated) {
      for (int tj : TrainersOn(r.gpu_ids)) UpdateTrainingLoss(tj, t);
    }
    return;
  }
  std::set<int> services;
  for (int g : r.gpu_ids) {
    if (gpu_train_[g] != j) continue;
    gpu_train_[g] = -1;
    for (int i : gpu_inf_[g]) services.insert(i);
  }
  SetColocLoss(r, 0);
  for (int i : services) UpdateService(i, t);
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Result<SimResult> Sim::Run() {
  auto wall0 = std::chrono::steady_clock::now();
  if (!eo_.placement_slowdown) {
    // The engine's consolidation test asks the same performance model the run is priced with.
    eo_.placement_slowdown = [this](const model::JobSpec& spec,
                                    std::span<const placement::RankSlot> ranks) {
      JobPerf p = pm_.Evaluate(spec, ranks);
      double ideal = pm_.IdealStepSeconds(spec);
      if (p.opaque || ideal <= 0) return 1.0;
      return p.StepSeconds(pm_.AloneFraction(p), 1) / ideal;
    };
  }
  mode_ = ColocationFrom(eo_.config.colocation);
  interference_ = InterferenceOf(mode_);
  gpu_train_.assign(static_cast<size_t>(topo_.NumGpus()), -1);
  gpu_inf_.assign(static_cast<size_t>(topo_.NumGpus()), {});
  if (mode_ != Colocation::kNone && !eo_.colocation_fits) {
    // The engine overlays a service only where this model predicts it keeps its objective
    // (kSloTarget of requests) and costs the training there at most kMaxTrainingLoss.
    eo_.colocation_fits = [this](const model::JobSpec& spec,
                                 std::span<const placement::RankSlot> ranks) {
      std::vector<int> gpus;
      for (const auto& s : ranks) gpus.push_back(s.gpu);
      auto price = Price(spec, gpus);
      if (!price) return true;  // nothing to price: the overlay budget decides
      return estimate::OverlayAdmits(ForecastOverlay(*price, mode_), gpus,
                                     [this](int g) { return GpuLoss(g); });
    };
  }
  if (so_.estimates == Estimates::kNone) eo_.learn_runtimes = false;
  auto e = engine::Engine::Create(topo_, eo_);
  if (!e) return std::unexpected(e.error());
  engine_ = std::move(*e);
  const int n = static_cast<int>(w_.jobs.size());
  runs_.resize(n);
  node_jobs_.assign(topo_.nodes.size(), {});
  for (const auto& node : topo_.nodes) {
    const auto& acc = topo_.TypeOf(node.id).accelerator;
    base_w_ += acc.idle_watts * topo_.GpusOn(node.id);
  }
  out_.cluster_gpus = topo_.NumGpus();
  for (int i = 0; i < n; ++i) {
    struct Run& r = runs_[i];
    r.spec = SpecFor(w_.jobs[i]);
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
  // Node failures: the first failure of every node, from the seed.
  uint64_t rng = Mix(so_.seed ^ 0x5eedULL);
  auto exp_sample = [&](double mean) {
    rng = Mix(rng);
    double u = static_cast<double>(rng >> 11) * 0x1.0p-53;
    return -mean * std::log(1.0 - u);
  };
  if (so_.node_mtbf_s > 0) {
    for (const auto& node : topo_.nodes)
      Push(exp_sample(so_.node_mtbf_s), EvKind::kNodeFail, node.id);
  }
  int next_arrival = 0;
  int64_t events = 0;
  int last_report = -1;
  while (terminal_ < n) {
    double t_heap = heap_.empty() ? 1e300 : heap_.top().t;
    double t_arr = next_arrival < n ? w_.jobs[next_arrival].submit_s : 1e300;
    double t = std::min(t_heap, t_arr);
    if (t >= 1e300) break;
    // Only failures (or wakeups) left, nothing pending can ever start: stop.
    if (t_arr >= 1e300 && engine_->Running().empty() && alloc_ == 0 && !heap_.empty() &&
        heap_.top().kind >= EvKind::kNodeFail && engine_->Pending().empty()) {
      break;
    }
    Advance(t);
    bool changed = false;
    while (next_arrival < n && w_.jobs[next_arrival].submit_s <= t) {
      int i = next_arrival++;
      auto st = engine_->Apply(engine::SubmitJob{i, runs_[i].spec}, t);
      if (!st) return Fail("job ", w_.jobs[i].name, ": ", st.error().message);
      changed = true;
      ++events;
    }
    while (!heap_.empty() && heap_.top().t <= t) {
      Ev ev = heap_.top();
      heap_.pop();
      ++events;
      switch (ev.kind) {
        case EvKind::kCompletion: {
          struct Run& r = runs_[ev.job];
          if (!r.running || ev.version != r.version) break;
          if (auto st = Finish(ev.job, t); !st) return std::unexpected(st.error());
          changed = true;
          break;
        }
        case EvKind::kResume: {
          struct Run& r = runs_[ev.job];
          if (!r.running || ev.version != r.version || !r.paused) break;
          Contribute(r, -1);
          r.paused = false;
          r.last_t = t;
          Contribute(r, +1);
          Reprice(ev.job, t);
          break;
        }
        case EvKind::kNodeFail: {
          auto d = engine_->Apply(engine::NodeFailed{ev.job, "simulated failure"}, t);
          if (!d) return std::unexpected(d.error());
          base_w_ -= topo_.TypeOf(ev.job).accelerator.idle_watts * topo_.GpusOn(ev.job);
          Handle(*d, t);
          Push(t + so_.repair_s, EvKind::kNodeRepair, ev.job);
          changed = true;
          break;
        }
        case EvKind::kNodeRepair: {
          auto d = engine_->Apply(engine::NodeHealthy{ev.job}, t);
          if (!d) return std::unexpected(d.error());
          base_w_ += topo_.TypeOf(ev.job).accelerator.idle_watts * topo_.GpusOn(ev.job);
          Push(t + exp_sample(so_.node_mtbf_s), EvKind::kNodeFail, ev.job);
          changed = true;
          break;
        }
        case EvKind::kWakeup:
          if (ev.t == wakeup_at_) wakeup_at_ = -1;
          changed = true;
          break;
      }
    }
    if (changed && (!engine_->Pending().empty() || engine_->Reshapes())) {
      engine::CycleResult cr = engine_->Cycle(t);
      Handle(cr.decisions, t);
      // Moves and resizes make room the waiting job gets in a cycle of its own, at once.
      bool reshaped = std::any_of(cr.decisions.begin(), cr.decisions.end(), [](const auto& d) {
        return std::holds_alternative<engine::MigrateJob>(d) ||
               std::holds_alternative<engine::ResizeJob>(d);
      });
      if (reshaped && t != reshape_wakeup_at_) {  // once per instant: never a loop
        reshape_wakeup_at_ = t;
        Push(t, EvKind::kWakeup, -1);
      }
    }
    Resolve(t);
    if (auto wk = engine_->NextWakeup(t)) {
      if (wakeup_at_ < 0 || *wk < wakeup_at_) {
        wakeup_at_ = *wk;
        Push(*wk, EvKind::kWakeup, -1);
      }
    }
    Sample(t);
    if (so_.progress) {
      int pct = static_cast<int>(100.0 * terminal_ / std::max(1, n));
      if (pct != last_report) {
        last_report = pct;
        so_.progress(static_cast<double>(terminal_) / std::max(1, n));
      }
    }
  }
  double end = now_;
  // Jobs still running (the loop stopped early): close their accounting.
  for (int i = 0; i < n; ++i) {
    if (runs_[i].running && !runs_[i].colocated) {
      runs_[i].allocated_gpu_s += runs_[i].gpus * (end - runs_[i].run_start);
    }
    if (runs_[i].running) UpdateService(i, end);
  }

  // Results.
  Metrics& m = out_.metrics;
  std::vector<double> jcts;
  double queue_sum = 0, ideal_gpu_s = 0, completed_ideal_gpu_s = 0, lb_arrival = 0;
  double last_end = 0;
  double req_total = 0, req_ok = 0, p99_sum = 0;
  auto records = engine_->AllJobs();
  out_.jobs.reserve(n);
  for (const engine::JobRecord* rec : records) {
    int i = static_cast<int>(rec->id);
    const struct Run& r = runs_[i];
    JobResult jr;
    jr.id = w_.jobs[i].id;
    jr.name = w_.jobs[i].name;
    jr.model = r.spec.model.profile;
    jr.gpus = w_.jobs[i].gpus;
    jr.submit_s = rec->submit_s;
    jr.start_s = rec->first_start_s;
    jr.end_s = rec->end_s;
    jr.ideal_s = r.need0;
    jr.allocated_gpu_s = r.allocated_gpu_s;
    jr.preemptions = rec->preemptions;
    jr.retries = rec->retries;
    jr.migrations = rec->migrations;
    jr.nodes = static_cast<int>(r.nodes.size());
    jr.leaves = r.leaves;
    jr.state = std::string(engine::JobStateName(rec->state));
    if (r.serving && r.req_total > 0) {
      jr.slo_attainment = r.req_ok / r.req_total;
      jr.p99_latency_ms = 1000.0 * r.p99_sum / r.req_total;
      m.inference_services += 1;
      req_total += r.req_total;
      req_ok += r.req_ok;
      p99_sum += r.p99_sum;
    }
    jr.colocated = r.ever_colocated;
    if (r.ever_colocated) ++m.inference_colocated;
    double g = w_.jobs[i].gpus * w_.jobs[i].gpu_milli / 1000.0;
    ideal_gpu_s += g * r.need0;
    lb_arrival = std::max(lb_arrival, rec->submit_s + r.need0);
    m.preemptions += rec->preemptions;
    m.migrations += rec->migrations;
    m.retries += rec->retries;
    m.gpu_hours_lost += g * r.lost_s / 3600.0;
    if (rec->state == engine::JobState::kCompleted) {
      jr.jct_s = rec->end_s - rec->submit_s;
      jr.queue_s = std::max(0.0, jr.jct_s - r.ran_s);
      jr.slowdown = r.need0 > 0 ? jr.jct_s / r.need0 : 0;
      jcts.push_back(jr.jct_s);
      queue_sum += jr.queue_s;
      completed_ideal_gpu_s += g * r.need0;
      last_end = std::max(last_end, rec->end_s);
      ++m.jobs_completed;
    } else if (rec->state == engine::JobState::kFailed) {
      ++m.jobs_failed;
      ++m.jobs_unfinished;
    } else {
      ++m.jobs_unfinished;
    }
    out_.jobs.push_back(std::move(jr));
  }
  for (int i = static_cast<int>(records.size()); i < n; ++i) ++m.jobs_unfinished;
  double t0 = n > 0 ? w_.jobs.front().submit_s : 0;
  m.makespan_s = std::max(last_end, end) - t0;
  double gpus = topo_.NumGpus();
  double cap = gpus * m.makespan_s;
  m.utilization = cap > 0 ? alloc_int_ / cap : 0;
  m.effective_utilization = cap > 0 ? eff_int_ / cap : 0;
  m.waiting_hours = wait_t_ / 3600.0;
  m.effective_utilization_while_waiting = wait_t_ > 0 ? wait_eff_int_ / (gpus * wait_t_) : -1;
  m.comm_share = alloc_int_ > 0 ? comm_int_ / alloc_int_ : 0;
  m.energy_kwh = energy_j_ / 3.6e6;
  if (req_total > 0) {
    m.slo_attainment = req_ok / req_total;
    m.inference_p99_ms = 1000.0 * p99_sum / req_total;
  }
  m.colocated_training_gpu_h = coloc_gpu_int_ / 3600.0;
  m.colocation_training_loss = coloc_gpu_int_ > 0 ? coloc_loss_int_ / coloc_gpu_int_ : 0;
  m.throughput = m.makespan_s > 0 ? completed_ideal_gpu_s / m.makespan_s : 0;
  m.makespan_lower_bound_s = std::max(gpus > 0 ? ideal_gpu_s / gpus : 0, lb_arrival - t0);
  if (!jcts.empty()) {
    double sum = 0;
    for (double v : jcts) sum += v;
    m.avg_jct_s = sum / static_cast<double>(jcts.size());
    m.avg_queue_s = queue_sum / static_cast<double>(jcts.size());
    std::sort(jcts.begin(), jcts.end());
    auto pct = [&](double p) {
      size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(jcts.size()))) - 1;
      return jcts[std::min(k, jcts.size() - 1)];
    };
    m.p50_jct_s = pct(0.5);
    m.p99_jct_s = pct(0.99);
  }
  m.events = events;
  m.cycles = engine_->Cycles();
  out_.allocated_gpu_s = alloc_int_;
  out_.peak_allocated_milli = peak_alloc_;
  out_.config = eo_.preset;
  m.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
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
