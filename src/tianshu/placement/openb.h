// The openb trace of Alibaba's GPU cluster (alibaba/clusterdata, cluster-trace-gpu-v2023) and
// the fragmentation experiment of Weng et al. (ATC'23) on it: the GPU nodes with their CPU,
// memory, GPU count and model; the pods grown to `inflate` x the cluster's GPU capacity by
// adding copies drawn at random (with replacement), shuffled with a seed, and each placed
// once, in order, never leaving. The GPU allocation ratio is reported when 100% of the
// capacity has arrived and at the end.
//   auto nodes = ReadOpenbNodes("data/openb/openb_node_list_gpu_node.csv");
//   auto r = RunFragmentation(*nodes, *pods, "fgd", {.inflate = 1.3, .seed = 42});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/topology.h"
#include "tianshu/placement/fgd.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement {

struct OpenbNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpus = 0;
  std::string model;
};

struct OpenbPod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;                  // per GPU
  std::vector<std::string> gpu_spec;  // acceptable models; empty = any
};

// `sn,cpu_milli,memory_mib,gpu,model` (columns found by header name).
[[nodiscard]] Result<std::vector<OpenbNode>> ReadOpenbNodes(const std::string& path);
// `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...` (gpu_spec "A|B" or empty).
[[nodiscard]] Result<std::vector<OpenbPod>> ReadOpenbPods(const std::string& path);

// The nodes as a topology (one flat switch, as the trace has no network data; one server
// type per distinct model, GPU count, CPU and memory), and the state with those capacities.
[[nodiscard]] Result<model::Topology> OpenbTopology(const std::vector<OpenbNode>& nodes);
// A pod as a request: one rank per GPU (or one CPU-only rank), all on one node, CPU and
// memory split evenly over the ranks (rounded up).
PlacementRequest PodRequest(const OpenbPod& pod);

struct FragmentationOptions {
  double inflate = 1.3;
  uint64_t seed = 42;
  WorkloadOptions workload;             // how FGD's target workload is drawn from the pod list
  FgdScore score = FgdScore::kInteger;  // StrategyOptions.fgd_score
  FgdTies ties = FgdTies::kShuffled;    // StrategyOptions.fgd_ties
  // The order of the paper's simulator (TunePodsByNodeTotalResource with shufflePod): the
  // original pods shuffled, then copies drawn with replacement appended (not shuffled in) until
  // the next copy's per-GPU share would pass `inflate` x capacity.
  bool paper_order = false;
};

struct FragmentationResult {
  std::string strategy;
  uint64_t seed = 0;
  double allocation_ratio = 0;         // allocated GPU share / total, at the end
  double allocation_ratio_at_100 = 0;  // when 100% of the capacity had arrived
  double arrived_ratio = 0;            // GPU share asked for by all pods / total
  // The paper's figure: the mean allocation over the placements after which the arrived share,
  // rounded to a whole percent, equals round(100 x inflate) (merge_alloc_discrete.py).
  double allocation_ratio_window = 0;
  int pods_placed = 0;
  int pods_failed = 0;
};

[[nodiscard]] Result<FragmentationResult> RunFragmentation(const std::vector<OpenbNode>& nodes,
                                                           const std::vector<OpenbPod>& pods,
                                                           const std::string& strategy,
                                                           const FragmentationOptions& options);

}  // namespace tianshu::placement
