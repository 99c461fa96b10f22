// What the simulator knows of one job's run: the work it needs and has done, its speed on its
// current placement (the performance model's, slowed by uplink contention, NVMe sharing and
// co-located inference), where it runs, and for an inference service its queue and the
// requests it served. One per workload job, owned by the simulator. Private to sim/.
//   JobRun& r = runs[j];
//   double left_s = (r.need - r.done) / r.rate;  // while running and not paused
#pragma once

#include <cstdint>
#include <vector>

#include "tianshu/estimate/perf.h"
#include "tianshu/estimate/serving.h"
#include "tianshu/model/job.h"

namespace tianshu::sim::internal {

struct JobRun {
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
  estimate::JobPerf perf;
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
  estimate::Latency lat;
  double busy_pre = 0, busy_dec = 0;  // busy share of its GPUs in each phase
  double served_to = 0;               // requests are counted up to this time
  double req_total = 0, req_ok = 0, p99_sum = 0;
  bool networked() const { return !perf.uplink_bytes.empty(); }
};

// The queue of a service priced so (estimate/serving.h).
inline void ApplyCost(const estimate::ServiceCost& c, JobRun* r) {
  r->pre_s = c.pre_s;
  r->dec_s = c.dec_s;
  r->servers = c.servers;
  r->replicas = c.replicas;
  r->lambda = c.lambda;
  r->slo_s = c.slo_s;
}

}  // namespace tianshu::sim::internal
