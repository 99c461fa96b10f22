// Fragmentation of GPU nodes with respect to an expected workload, after Weng et al.,
// "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
// Descent", USENIX ATC'23, §3-4. For a node n and a workload M of typical tasks m with
// popularity p_m:
//   F_n(M) = sum_m p_m * F_n(m),
//   F_n(m) = all free GPU share on n, if m cannot run on n (CPU, host memory, GPU model or
//            GPU count),
//            else the free share of those GPUs whose free part is smaller than m's share.
// FGD places a task where F grows least (the steepest descent of cluster fragmentation).
//   FragmentationModel f(workload, topology);
//   double frag = f.NodeFragmentation(snapshot, node);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tianshu/model/cluster_state.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement {

class FragmentationModel {
 public:
  // Weights are normalised to sum 1. A task without GPUs (only a paper_typical workload keeps
  // them) counts all free GPU share of a node as fragment, as in the paper's simulator; a
  // workload of such tasks alone fragments nothing.
  FragmentationModel(const std::vector<TypicalTask>& workload, const model::Topology& topology);

  // F_n(M) in milli-GPUs for a node of server type `type` with `cpu_free` and the given free
  // share per GPU (any order).
  double Fragmentation(int type, int64_t cpu_free, std::span<const int> gpu_free,
                       int64_t memory_free = INT64_MAX) const;
  // The same for a node of a snapshot.
  double NodeFragmentation(const ClusterState& state, int node) const;

  bool empty() const { return groups_.empty(); }

 private:
  struct Group {
    int gpus = 1;
    int gpu_milli = 1000;
    std::vector<char> access;  // per server type: may this group run there
    std::vector<int64_t> cpu;  // ascending CPU demands of its tasks
    std::vector<int64_t> mem;  // their host memory demands
    std::vector<double> w;     // their weights
    std::vector<double> cum;   // cumulative weight up to and including cpu[i]
    bool any_memory = false;
    double weight = 0;  // total weight
  };
  std::vector<Group> groups_;
  double cpu_only_weight_ = 0;  // the weight of tasks without GPUs
};

// How a pod list becomes a target workload. The paper's FGD counts tasks and does not check
// host memory; ours checks it (with the integer score, openb at 130%, seeds 42-51: 95.45%
// against 95.40% without). Weighing each kind by the GPU share it asks for instead of by its
// count helped with the exact score (95.06% against 94.80%) and hurts with the integer one
// (95.20% against 95.45%), so it is off.
struct WorkloadOptions {
  bool with_memory = true;
  bool weight_by_gpu_share = false;
  // As the paper's simulator (utils.GetTypicalPods with its experiment's settings): tasks keyed
  // by (CPU, GPUs, share, models), counted, CPU-only tasks included, and only the most popular
  // kinds kept until they cover `popularity` of all tasks (ties: the larger kind first).
  bool paper_typical = false;
  double popularity = 0.95;
};

// The typical tasks of a pod list: one per distinct (CPU, GPUs, share, models[, memory]),
// weighted by how often it occurs (times its GPU share); tasks without GPUs are dropped.
std::vector<TypicalTask> TypicalWorkload(std::span<const PlacementRequest> pods,
                                         const WorkloadOptions& options = {});

}  // namespace tianshu::placement
