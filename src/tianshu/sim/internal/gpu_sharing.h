// Who shares each GPU under co-location (scheduler.colocation): the training job holding it
// whole and the inference services overlaid on it. It keeps both sides' models in step as runs
// join and leave: a service is stretched by the mode's interference while training holds any
// of its GPUs (and counts its requests at the latency it had), and a training job loses on
// each GPU what the services there take, the gang at the pace of its worst GPU. Also prices
// every inference service, overlaid or not. Private to sim/.
//   GpuSharing gpus(runs, meter, prices, [&](int j, double t) { Reprice(j, t); });
//   gpus.Configure(Colocation::kPriority, topology.NumGpus());  gpus.Join(j, now);
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <vector>

#include "tianshu/estimate/serving.h"
#include "tianshu/sim/internal/job_run.h"
#include "tianshu/sim/internal/service_prices.h"
#include "tianshu/sim/internal/usage_meter.h"

namespace tianshu::sim::internal {

class GpuSharing {
 public:
  // Recomputes job `job`'s speed at `t` after its co-location loss changed.
  using Reprice = std::function<void(int job, double t)>;
  // `runs`, `meter` and `prices` must outlive it; runs are indexed by job.
  GpuSharing(std::vector<JobRun>& runs, UsageMeter& meter, ServicePrices& prices, Reprice reprice)
      : runs_(runs), meter_(meter), prices_(prices), reprice_(std::move(reprice)) {}

  // The co-location mode of the run and the cluster's GPU count; before any Join.
  void Configure(estimate::Colocation mode, size_t num_gpus);
  estimate::Colocation Mode() const { return mode_; }

  // Run `j` started on its gpu_ids / is leaving them at `t`.
  void Join(int j, double t);
  void Leave(int j, double t);
  // Counts service `j`'s requests up to `t` at its old latency, then takes its new one.
  void UpdateService(int j, double t);
  // Share of GPU g's time that training loses to the services overlaid on it.
  double GpuLoss(int g) const;

 private:
  estimate::Latency ServiceLatency(const JobRun& r, bool contended, double* pre, double* dec) const;
  bool Contended(const JobRun& r) const;
  void UpdateTrainingLoss(int j, double t);
  std::set<int> TrainersOn(const std::vector<int>& gpus) const;

  std::vector<JobRun>& runs_;
  UsageMeter& meter_;
  ServicePrices& prices_;
  Reprice reprice_;
  estimate::Colocation mode_ = estimate::Colocation::kNone;
  estimate::Interference interference_;
  std::vector<int> gpu_train_;             // per GPU: the training job holding it whole, or -1
  std::vector<std::vector<int>> gpu_inf_;  // per GPU: the services on it
};

}  // namespace tianshu::sim::internal
