// The cluster-wide sums the simulator's metrics come from: allocated, effective (weighted by
// each job's rate) and communicating GPUs, board power, co-located training GPUs and their
// loss, all piecewise constant between events, and their integrals over the run (also the
// effective GPUs while some job waits). Runs add and take back their share as their speed
// changes. Private to sim/.
//   meter.Contribute(run, -1);  /* reprice the run */  meter.Contribute(run, +1);
//   meter.Advance(/*dt=*/t - now, /*waiting=*/!engine.Pending().empty());
#pragma once

#include <cstddef>

#include "tianshu/sim/internal/job_run.h"
#include "tianshu/sim/simulator.h"

namespace tianshu::sim::internal {

class UsageMeter {
 public:
  // Integrates the sums over `dt` seconds (nothing when dt <= 0); `waiting`: some job waits.
  void Advance(double dt, bool waiting);
  // Adds (`sign` +1) or takes back (-1) what `r` holds and does at its current rate; an
  // overlaid service holds no GPU share and counts nothing.
  void Contribute(const JobRun& r, double sign);
  // Sets a training run's loss to co-located inference, keeping the co-location sums in step.
  void SetColocLoss(JobRun& r, double loss);
  // Idle board power of powered nodes (nodes that fail stop drawing it).
  void AddBaseWatts(double w) { base_w_ += w; }

  double Allocated() const { return alloc_; }  // GPUs held now
  // The sums now, as one sample at `t` with `queued` jobs waiting.
  ::tianshu::sim::Sample SampleAt(double t, size_t queued) const;

  // Integrals over the run so far.
  double AllocatedGpuS() const { return alloc_int_; }
  double EffectiveGpuS() const { return eff_int_; }
  double CommGpuS() const { return comm_int_; }
  double EnergyJ() const { return energy_j_; }
  double WaitS() const { return wait_t_; }
  double EffectiveGpuSWhileWaiting() const { return wait_eff_int_; }
  double ColocatedGpuS() const { return coloc_gpu_int_; }
  double ColocLossGpuS() const { return coloc_loss_int_; }

 private:
  double alloc_ = 0, eff_ = 0, comm_ = 0, extra_w_ = 0, base_w_ = 0;
  double alloc_int_ = 0, eff_int_ = 0, comm_int_ = 0, energy_j_ = 0;
  double wait_t_ = 0, wait_eff_int_ = 0;  // while some job waits (the queue is not empty)
  double coloc_gpus_ = 0, coloc_loss_ = 0, coloc_gpu_int_ = 0, coloc_loss_int_ = 0;
};

}  // namespace tianshu::sim::internal
