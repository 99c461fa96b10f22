// The discrete-event simulator: a virtual clock driving engine::Engine, the cycle the server
// also runs (on real time, from its own records; server/control_plane.cc).
// Arrivals become SubmitJob events, the engine's cycle runs whenever something changed (or at
// the wakeups it asks for), its decisions are carried out here: starts get a speed from the
// performance model (perf.h) for their placement, shared uplinks and NVMe slow their users,
// completions and failures are fed back as events. Everything is a function of the workload,
// the topology, the options and the seed: two runs give identical results.
//   auto r = Simulate(topology, workload, *engine::PresetOptions("tianshu"), {});
//   std::cout << r->metrics.avg_jct_s;
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/engine/engine.h"
#include "tianshu/model/topology.h"
#include "tianshu/sim/trace.h"

namespace tianshu::sim {

// What the engine is told of run times.
enum class Estimates {
  kTrace,    // each job's duration from the trace (an oracle: what users rarely know)
  kHistory,  // none given: the engine learns them from completed jobs (learn_runtimes)
  kNone,     // none given, none learned
};

struct SimOptions {
  bool fixed_durations = false;  // every job runs exactly its trace duration
  Estimates estimates = Estimates::kTrace;
  double node_mtbf_s = 0;      // >0: node failures, exponential with this mean per node
  double repair_s = 4 * 3600;  // a failed node comes back after this long
  // Node failures at given times (seconds, topology node), besides the random ones of
  // node_mtbf_s; each node comes back after repair_s.
  std::vector<std::pair<double, int>> node_failures;
  uint64_t seed = 42;  // failures (and the engine's searches, via its options)
  // Non-zero: every job asks for this topology.leaves (a required leaf bound,
  // model::kFewestLeaves for `minimum`), whatever its spec says.
  int max_leaves = 0;
  // Called with every decision the simulator carries out, at its time, in the order carried
  // out: a record of the run (the recorded-sequence test compares it with the server's).
  std::function<void(double t, const engine::Decision& d)> on_decision;
  std::function<void(double done_fraction)> progress;  // called now and then; may be empty
};

struct Metrics {
  double utilization = 0;            // allocated GPU-time / (GPUs x makespan)
  double effective_utilization = 0;  // the same weighted by each job's rate (ideal = 1)
  // Over the time some job waits only (the queue is not empty; -1 when it never is): how much
  // of the cluster does useful work when there is more work than room. Unlike the two above,
  // a run whose makespan is set by one long late job does not pin it to that bound.
  double effective_utilization_while_waiting = -1;
  double waiting_hours = 0;  // time with a non-empty queue
  double avg_jct_s = 0, p50_jct_s = 0, p99_jct_s = 0;
  double avg_queue_s = 0;             // time not running, between submission and completion
  double makespan_s = 0;              // first submission to last completion
  double makespan_lower_bound_s = 0;  // max(ideal GPU-time / GPUs, max submit + duration)
  double comm_share = 0;              // GPU-time-weighted exposed communication / step time
  double throughput = 0;              // completed ideal GPU-hours per hour of makespan
  double energy_kwh = 0;              // accelerator boards: busy/idle/off per device
  int64_t preemptions = 0, migrations = 0, retries = 0;
  int64_t jobs_completed = 0, jobs_unfinished = 0, jobs_failed = 0;
  double wall_seconds = 0;
  int64_t events = 0, cycles = 0;
  double gpu_hours_lost = 0;  // work redone after failures
  // Inference services (sim/serving.h), weighted by requests: the share served within the
  // latency objective (-1 without priced services) and the mean 99th-percentile latency.
  int64_t inference_services = 0, inference_colocated = 0;
  double slo_attainment = -1;
  double inference_p99_ms = 0;
  // Training next to co-located services: GPU-hours that shared a GPU with one, and the
  // share of those GPUs' time training lost (its slowdown there is 1 / (1 - loss)).
  double colocated_training_gpu_h = 0;
  double colocation_training_loss = 0;
};

struct JobResult {
  int64_t id = 0;
  std::string name;
  std::string model;
  int gpus = 0;
  double submit_s = 0, start_s = -1, end_s = -1;
  double jct_s = -1, queue_s = -1, slowdown = -1;
  double ideal_s = 0;          // trace duration = ideal run time
  double allocated_gpu_s = 0;  // GPU-time its placements held
  int preemptions = 0, retries = 0, migrations = 0;
  int nodes = 0, leaves = 0;  // of its last placement
  std::string state;          // completed | failed | cancelled | pending | running
  // Inference services: requests served within the objective, mean p99 latency (-1: not a
  // priced service) and whether it overlaid training's GPUs.
  double slo_attainment = -1, p99_latency_ms = -1;
  bool colocated = false;
};

// One point of the time series (after the events of one instant were handled).
struct Sample {
  double t = 0;
  float allocated_gpus = 0;
  float effective_gpus = 0;  // sum over running jobs of GPUs x rate
  float comm_gpus = 0;       // sum over running jobs of GPUs x exposed-comm share
  float power_w = 0;
  int32_t queued = 0;
};

struct SimResult {
  std::string config;
  Metrics metrics;
  std::vector<JobResult> jobs;
  std::vector<Sample> samples;
  std::vector<float> heat;  // per node: allocated share at the busiest moment
  double heat_time_s = 0;
  int cluster_gpus = 0;
  double allocated_gpu_s = 0;  // integral of allocated GPUs (conservation checks)
  double peak_allocated_milli = 0;
};

// Runs the workload to completion (or until nothing more can happen). Errors: an engine that
// cannot be built (unknown or unbuilt policy), a job the engine refuses at submission.
[[nodiscard]] Result<SimResult> Simulate(const model::Topology& topology, const Workload& workload,
                                         const engine::EngineOptions& options,
                                         const SimOptions& sim = {});

}  // namespace tianshu::sim
