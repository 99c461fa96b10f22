// Predicted time of one training iteration on a concrete placement, and the network and
// storage demand that follows.
//
// Time = compute (hardware FLOPs / (GPUs · peak · matmul efficiency)) + tensor-parallel
// collectives (exposed) + pipeline send/recv + the pipeline bubble (p−1)/(v·m) of the stage
// time + the data-parallel gradient reduction that the last backward does not hide + the
// checkpoint stall amortised over the checkpoint interval. Collectives are priced with
// comm/ on the plan's actual groups.
//   auto plan = comm::PlanCommunicators(topo, gpus, {.tp = 8, .pp = 8, .dp = 16});
//   IterationEstimate e = EstimateIteration(topo, job.model, 1536, config, *plan, {});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tianshu/comm/comm_plan.h"
#include "tianshu/comm/cost_model.h"
#include "tianshu/estimate/memory.h"
#include "tianshu/estimate/parallel.h"
#include "tianshu/model/job.h"
#include "tianshu/model/topology.h"

namespace tianshu::estimate {

// One kind of collective the iteration issues.
struct CollectiveEstimate {
  comm::GroupKind group = comm::GroupKind::kData;
  comm::Collective op = comm::Collective::kAllReduce;
  int group_size = 0;
  int64_t bytes = 0;  // per call
  int64_t calls = 0;  // per iteration, on each rank
  comm::Algorithm algorithm = comm::Algorithm::kRing;
  comm::Protocol protocol = comm::Protocol::kSimple;
  comm::LinkClass bottleneck = comm::LinkClass::kSameDevice;
  double seconds = 0;            // one call
  double bus_bytes_per_sec = 0;  // reached by one call
  double total_seconds = 0;      // calls · seconds
  double exposed_seconds = 0;    // what stays on the critical path
};

struct TimeBreakdown {
  double compute = 0;
  double tp_comm = 0;
  double pp_comm = 0;
  double dp_comm = 0;  // exposed part only
  double ep_comm = 0;
  double bubble = 0;
  double checkpoint = 0;  // stall per iteration, amortised
  double Total() const {
    return compute + tp_comm + pp_comm + dp_comm + ep_comm + bubble + checkpoint;
  }
  double Comm() const { return tp_comm + pp_comm + dp_comm + ep_comm; }
};

// Bytes each GPU moves per iteration for one group kind, and the bandwidth that keeps that
// group's communication under the target share of compute time.
struct NetworkDemand {
  comm::GroupKind group = comm::GroupKind::kData;
  double bytes_per_iteration = 0;       // on the wire, per GPU
  double bytes_per_sec_for_target = 0;  // per GPU
};

struct StorageDemand {
  int64_t checkpoint_bytes = 0;       // whole job: bf16 weights + fp32 master and moments
  int64_t bytes_per_node = 0;         // every node writes its share to local NVMe
  double write_seconds = 0;           // per checkpoint, at the node's NVMe write bandwidth
  double required_bytes_per_sec = 0;  // per node, to finish one checkpoint per interval
  double iops = 0;                    // 1 MiB writes per second at the NVMe rate
  int64_t interval_s = 0;
  bool async = true;
  bool hidden = true;        // async and the write fits in the interval
  double stall_seconds = 0;  // training stops this long per checkpoint
};

struct EstimateOptions {
  comm::CommOptions comm;  // algorithm choice, threshold, cost options
  int64_t checkpoint_interval_s = 1800;
  model::CheckpointMode checkpoint_mode = model::CheckpointMode::kAsync;
  double target_comm_share = 0.10;  // for NetworkDemand
  bool all_groups = false;          // price every group of a kind (slowest wins), not group 0
};

struct IterationEstimate {
  ParallelConfig config;
  MemoryBreakdown memory;
  int64_t device_memory_bytes = 0;
  bool fits = false;
  double model_flops = 0;     // per iteration, 72 form
  double hardware_flops = 0;  // with recomputation
  double peak_flops = 0;      // per GPU
  double matmul_efficiency = 0;
  int64_t micro_batches = 0;
  double bubble_fraction = 0;
  TimeBreakdown time;
  double seconds = 0;
  double mfu = 0;  // model FLOPs / (seconds · GPUs · peak)
  double hfu = 0;
  double samples_per_sec = 0;
  double tokens_per_sec = 0;
  double comm_share = 0;  // exposed communication / iteration
  std::vector<CollectiveEstimate> collectives;
  std::vector<NetworkDemand> network;
  StorageDemand storage;
  std::vector<std::string> notes;  // why the figures are what they are
};

// Prices collectives on a plan's groups, memoised per (group kind, collective, bytes): the
// search calls it thousands of times. Not thread-safe; cheap to construct.
class GroupPricer {
 public:
  GroupPricer(const model::Topology& topo, const comm::CommPlan& plan,
              const comm::CommOptions& options, bool all_groups);
  comm::CollectiveCost Cost(comm::GroupKind kind, comm::Collective op, int64_t bytes);
  const comm::CommPlan& plan() const { return plan_; }
  const model::Topology& topo() const { return topo_; }
  // Slowest accelerator and smallest figures among the plan's nodes.
  double peak_flops() const { return peak_flops_; }
  int64_t device_memory() const { return device_memory_; }
  double nvme_write_bytes_per_sec() const { return nvme_write_; }
  double pcie_bytes_per_sec() const { return pcie_; }
  double nvlink_bytes_per_sec() const { return nvlink_; }
  int nodes() const { return nodes_; }

 private:
  struct Memo {
    comm::GroupKind kind;
    comm::Collective op;
    int64_t bytes;
    comm::CollectiveCost cost;
  };
  const model::Topology& topo_;
  const comm::CommPlan& plan_;
  comm::CommOptions options_;
  bool all_groups_;
  std::vector<Memo> memo_;
  std::vector<int> scratch_;
  double peak_flops_ = 0;
  int64_t device_memory_ = 0;
  double nvme_write_ = 0;
  double pcie_ = 0;
  double nvlink_ = 0;
  int nodes_ = 0;
};

// Matmul efficiency on the device for this shape: kMax · w / (w + kHalf), w = h / t (see
// iteration.cc for the constants and their calibration).
double MatmulEfficiency(const model::ModelSpec& m, const ParallelConfig& c);

IterationEstimate EstimateIteration(const model::ModelSpec& m, int64_t global_batch,
                                    const ParallelConfig& c, GroupPricer& pricer,
                                    const EstimateOptions& options);
// Convenience: builds the pricer.
IterationEstimate EstimateIteration(const model::Topology& topo, const model::ModelSpec& m,
                                    int64_t global_batch, const ParallelConfig& c,
                                    const comm::CommPlan& plan, const EstimateOptions& options);

}  // namespace tianshu::estimate
