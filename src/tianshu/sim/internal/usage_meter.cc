#include "tianshu/sim/internal/usage_meter.h"

namespace tianshu::sim::internal {

void UsageMeter::Advance(double dt, bool waiting) {
  if (dt <= 0) return;
  alloc_int_ += alloc_ * dt;
  eff_int_ += eff_ * dt;
  comm_int_ += comm_ * dt;
  energy_j_ += (base_w_ + extra_w_) * dt;
  coloc_gpu_int_ += coloc_gpus_ * dt;
  coloc_loss_int_ += coloc_loss_ * dt;
  if (waiting) {
    wait_t_ += dt;
    wait_eff_int_ += eff_ * dt;
  }
}

void UsageMeter::Contribute(const JobRun& r, double sign) {
  if (r.colocated) return;  // an overlaid service holds no GPU share: training's count
  double g = r.gpus;
  alloc_ += sign * g;
  if (!r.paused) {
    eff_ += sign * g * r.rate;
    comm_ += sign * g * r.comm_frac;
    extra_w_ += sign * g * (r.busy_w - r.idle_w) * r.compute_frac;
  }
}

void UsageMeter::SetColocLoss(JobRun& r, double loss) {
  coloc_gpus_ += ((loss > 0 ? r.gpus : 0) - (r.coloc_loss > 0 ? r.gpus : 0));
  coloc_loss_ += (loss - r.coloc_loss) * r.gpus;
  r.coloc_loss = loss;
}

::tianshu::sim::Sample UsageMeter::SampleAt(double t, size_t queued) const {
  ::tianshu::sim::Sample s;
  s.t = t;
  s.allocated_gpus = static_cast<float>(alloc_);
  s.effective_gpus = static_cast<float>(eff_);
  s.comm_gpus = static_cast<float>(comm_);
  s.power_w = static_cast<float>(base_w_ + extra_w_);
  s.queued = static_cast<int32_t>(queued);
  return s;
}

}  // namespace tianshu::sim::internal
