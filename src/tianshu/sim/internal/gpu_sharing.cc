#include "tianshu/sim/internal/gpu_sharing.h"

#include <algorithm>
#include <cmath>

namespace tianshu::sim::internal {

void GpuSharing::Configure(estimate::Colocation mode, size_t num_gpus) {
  mode_ = mode;
  interference_ = estimate::InterferenceOf(mode_);
  gpu_train_.assign(num_gpus, -1);
  gpu_inf_.assign(num_gpus, {});
}

estimate::Latency GpuSharing::ServiceLatency(const JobRun& r, bool contended, double* pre,
                                             double* dec) const {
  *pre = r.pre_s;
  *dec = r.dec_s;
  if (contended) {
    *pre *= interference_.prefill_stretch;
    *dec *= interference_.decode_stretch;
  }
  return estimate::MmcLatency(r.lambda, *pre + *dec, r.servers, r.slo_s);
}

// A co-located service shares its GPUs with training while one holds any of them.
bool GpuSharing::Contended(const JobRun& r) const {
  if (!r.colocated) return false;
  return std::any_of(r.gpu_ids.begin(), r.gpu_ids.end(), [&](int g) { return gpu_train_[g] >= 0; });
}

// Counts the service's requests up to t at its old latency, then takes its new one.
void GpuSharing::UpdateService(int j, double t) {
  JobRun& r = runs_[j];
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
  estimate::SplitBusy(r.lat, pre, dec, &r.busy_pre, &r.busy_dec);
}

// Share of GPU g's time that training loses to the services overlaid on it.
double GpuSharing::GpuLoss(int g) const {
  double l = 0;
  for (int i : gpu_inf_[g]) {
    const JobRun& s = runs_[i];
    if (s.colocated) l += estimate::TrainingLoss(interference_, s.busy_pre, s.busy_dec);
  }
  return l;
}

// A training job loses, on each GPU, what the services overlaid there take; the gang runs at
// the pace of its worst GPU.
void GpuSharing::UpdateTrainingLoss(int j, double t) {
  JobRun& r = runs_[j];
  double loss = 0;
  if (r.running) {
    for (int g : r.gpu_ids) loss = std::max(loss, GpuLoss(g));
  }
  loss = std::min(loss, 0.9);
  if (std::abs(loss - r.coloc_loss) < 1e-12) return;
  meter_.SetColocLoss(r, loss);
  if (r.running) reprice_(j, t);
}

// The training jobs holding any of `gpus`.
std::set<int> GpuSharing::TrainersOn(const std::vector<int>& gpus) const {
  std::set<int> trainers;
  for (int g : gpus) {
    if (gpu_train_[g] >= 0) trainers.insert(gpu_train_[g]);
  }
  return trainers;
}

void GpuSharing::Join(int j, double t) {
  JobRun& r = runs_[j];
  if (mode_ == estimate::Colocation::kNone && r.spec.kind != model::JobKind::kInference) return;
  if (r.spec.kind == model::JobKind::kInference) {
    for (int g : r.gpu_ids) gpu_inf_[g].push_back(j);
    auto price = prices_.Price(r.spec, r.gpu_ids);
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

void GpuSharing::Leave(int j, double t) {
  JobRun& r = runs_[j];
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
  meter_.SetColocLoss(r, 0);
  for (int i : services) UpdateService(i, t);
}

}  // namespace tianshu::sim::internal
