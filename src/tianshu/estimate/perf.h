// The training speed model (the simulator's, and any driver's): how fast a job runs on its
// current placement, priced by estimate/ (compute, exposed communication per parallel group,
// pipeline bubble) on the real GPUs it got, plus what sharing adds on top: contention between
// jobs on shared switch uplinks (max-min fair, see ContentionSolver) and on a node's NVMe while
// checkpointing.
//
// A job's speed is its rate: ideal step time / actual step time (<= 1), where the ideal is the
// same job alone on the most compact placement of the cluster's fastest accelerator. A trace
// job that ran `duration_s` in the trace needs `duration_s` of ideal time, so a worse placement
// makes it run longer.
//   PerfModel pm(topology, engine_config);
//   JobPerf p = pm.Evaluate(spec, ranks);  double s = p.StepSeconds(/*x=*/0.5, /*nvme_share=*/2);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tianshu/estimate/parallel.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/job.h"
#include "tianshu/model/topology.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::estimate {

// One job's step on one placement, before contention.
struct JobPerf {
  bool opaque = false;         // no model (shared-GPU pods, CPU jobs): runs at rate 1
  double compute_s = 0;        // compute + pipeline bubble (devices busy)
  double local_comm_s = 0;     // exposed communication inside nodes (NVLink/PCIe)
  double net_total_s = 0;      // wire time of collectives that cross the network
  double net_exposed_s = 0;    // the part of it on the critical path, uncontended
  double ckpt_write_s = 0;     // one checkpoint, the node's NVMe to itself
  double ckpt_snapshot_s = 0;  // async: copy to host memory (training pauses for it)
  bool ckpt_async = true;
  double ckpt_interval_s = 1800;
  // Bytes per step each crossed switch uplink carries (per direction), switch id -> bytes.
  std::vector<std::pair<int, double>> uplink_bytes;

  // Step time when the job gets fraction `x` (0..1] of its network demand and shares each
  // node's NVMe with `nvme_share` checkpointing jobs. The hidden part of the gradient traffic
  // stays hidden; only what contention adds beyond it becomes exposed.
  double StepSeconds(double x, double nvme_share) const;
  // Exposed communication (local + network) at fraction x.
  double CommSeconds(double x) const;
  // Peak network demand on a link while communicating: bytes / net_total_s.
  double DemandBytesPerSec(double bytes) const { return net_total_s > 0 ? bytes / net_total_s : 0; }
};

// Resolved parallelism for a job spec on `gpus` GPUs (fixed specs as written; `auto` from a
// heuristic by model size, see perf.cc).
estimate::ParallelConfig ResolveParallelism(const model::JobSpec& spec, int gpus);

// Max-min fair sharing of switch uplinks between jobs (progressive filling per link, iterated
// so that a job limited elsewhere leaves its share to others). Demands are bytes/s while the
// job communicates; the result is each job's fraction of its demand it gets (0..1].
class ContentionSolver {
 public:
  struct Flow {
    int job = 0;                                 // caller's index
    std::vector<std::pair<int, double>> demand;  // link -> bytes/s
  };
  // capacity[link] in bytes/s. Returns x per flow, in input order.
  static std::vector<double> Solve(std::span<const Flow> flows, std::span<const double> capacity,
                                   int passes = 3);
};

class PerfModel {
 public:
  PerfModel(const model::Topology& topology, const model::EngineConfig& config);

  // The job on its placement (rank order). Memoised for single-node placements.
  JobPerf Evaluate(const model::JobSpec& spec, std::span<const placement::RankSlot> ranks);
  // Ideal step time (alone, most compact placement on the fastest accelerator, no contention
  // beyond the job's own traffic). Memoised per model and size.
  double IdealStepSeconds(const model::JobSpec& spec);
  // Uplink capacity of a switch in bytes/s (0 for the root).
  const std::vector<double>& UplinkCapacity() const { return uplink_capacity_; }
  // The fraction x a job gets alone on its links (its own groups share the uplinks).
  double AloneFraction(const JobPerf& p) const;

 private:
  JobPerf Compute(const model::JobSpec& spec, std::span<const int> gpus);
  std::string Key(const model::JobSpec& spec, int gpus) const;

  const model::Topology& topo_;
  model::EngineConfig config_;
  std::vector<double> uplink_capacity_;
  std::vector<int> ideal_gpus_;  // GPUs in most-compact order on the fastest accelerator
  std::unordered_map<std::string, JobPerf> single_node_cache_;
  std::unordered_map<std::string, double> ideal_cache_;
};

// The predicted step time of `spec` on `ranks` (alone on its links) over its ideal step time:
// what the engine's consolidation wait and topology upgrades judge a placement by
// (engine::EngineOptions::placement_slowdown), in the simulator and the server alike. nullopt
// when the model cannot price the job (no model, an opaque job).
std::optional<double> PredictedSlowdown(PerfModel& model, const model::JobSpec& spec,
                                        std::span<const placement::RankSlot> ranks);
// Seconds one checkpoint of `spec` on `ranks` takes to write: what a move costs beyond the
// restart (engine::EngineOptions::checkpoint_write_s), in both drivers. 0 for an opaque job.
double PredictedCheckpointWriteS(PerfModel& model, const model::JobSpec& spec,
                                 std::span<const placement::RankSlot> ranks);

}  // namespace tianshu::estimate
