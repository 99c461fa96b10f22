// The simulator's results at the end of a run: each job's record (from the engine's records
// and the run's own accounting) and the run's metrics (JCT percentiles, utilizations, makespan
// and its lower bound, energy, inference objectives, co-location loss). Private to sim/.
//   CollectResults({.engine = &engine, .workload = &w, .topology = &t, .runs = &runs,
//                   .meter = &meter, .end_s = now, .events = events}, &out);
#pragma once

#include <cstdint>
#include <vector>

#include "tianshu/engine/engine.h"
#include "tianshu/sim/internal/job_run.h"
#include "tianshu/sim/internal/usage_meter.h"
#include "tianshu/sim/simulator.h"

namespace tianshu::sim::internal {

// What the results are computed from; all of it as the run left it.
struct ResultInputs {
  const engine::Engine* engine = nullptr;
  const Workload* workload = nullptr;
  const model::Topology* topology = nullptr;
  const std::vector<JobRun>* runs = nullptr;  // one per workload job, by index
  const UsageMeter* meter = nullptr;
  double end_s = 0;  // the simulated time the run stopped at
  int64_t events = 0;
};

// Fills out->jobs, out->metrics (all but wall_seconds) and out->allocated_gpu_s.
void CollectResults(const ResultInputs& in, SimResult* out);

}  // namespace tianshu::sim::internal
