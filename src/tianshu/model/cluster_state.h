// The mutable state of a cluster as placement sees it: free GPU share per device, free CPU,
// host memory and storage bandwidth per node, health and labels, with per-switch free counts
// kept up to date so that a search can prune whole subtrees without visiting their GPUs.
//
// A ClusterState refers to its Topology (which must outlive it) and is plain, copyable data:
// a scheduling cycle copies it as its immutable snapshot, and one owner applies decisions.
//   ClusterState s(topology);
//   s.TakeGpu(/*gpu=*/3, /*milli=*/500);   // s.SwitchFreeWholeGpus(root) drops by one
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/topology.h"

namespace tianshu::model {

inline constexpr int kMilliPerGpu = 1000;

class ClusterState {
 public:
  ClusterState() = default;
  // Everything free and healthy; CPU and memory from each node's server type.
  explicit ClusterState(const Topology& topology);

  const Topology& topology() const { return *topology_; }

  // Per GPU (global index): thousandths of the device still free.
  int GpuFreeMilli(int gpu) const { return gpu_free_[gpu]; }
  // Per node.
  int64_t CpuFreeMilli(int node) const { return cpu_free_[node]; }
  int64_t MemoryFreeBytes(int node) const { return mem_free_[node]; }
  int64_t StorageFreeBps(int node) const { return storage_free_[node]; }
  bool Healthy(int node) const { return healthy_[node] != 0; }
  int FreeWholeGpus(int node) const { return node_whole_[node]; }  // GPUs entirely free
  int UsableGpus(int node) const { return node_usable_[node]; }    // GPUs with any share free
  int64_t FreeMilli(int node) const { return node_milli_[node]; }
  // Per switch: sums over the nodes below it, and the most whole GPUs free on one node.
  int SwitchFreeWholeGpus(int sw) const { return sw_whole_[sw]; }
  int SwitchUsableGpus(int sw) const { return sw_usable_[sw]; }
  int SwitchMaxNodeWholeGpus(int sw) const { return sw_max_node_whole_[sw]; }
  // Allocated fraction of the GPU capacity below a switch (0 = idle, 1 = full).
  double SwitchLoad(int sw) const;

  // Labels of a node: its server type's labels, then its own (which win), then the implicit
  // "tianshu.io/gpu" (accelerator model) and "tianshu.io/group" (node group).
  std::string Label(int node, const std::string& key) const;
  bool MatchesSelector(int node, const std::map<std::string, std::string>& selector) const;

  // Mutators. Each checks its bounds and fails without changing anything.
  [[nodiscard]] Status TakeGpu(int gpu, int milli);
  [[nodiscard]] Status ReturnGpu(int gpu, int milli);
  [[nodiscard]] Status TakeHost(int node, int64_t cpu_milli, int64_t memory_bytes,
                                int64_t storage_bps = 0);
  [[nodiscard]] Status ReturnHost(int node, int64_t cpu_milli, int64_t memory_bytes,
                                  int64_t storage_bps = 0);
  void SetHealthy(int node, bool healthy);
  void SetLabel(int node, const std::string& key, const std::string& value);
  // Replaces a node's CPU and memory capacity (and frees them), for traces that give per-node
  // figures that differ from the server type.
  void SetHostCapacity(int node, int64_t cpu_milli, int64_t memory_bytes);
  int64_t CpuCapacity(int node) const { return cpu_cap_[node]; }
  int64_t MemoryCapacity(int node) const { return mem_cap_[node]; }
  int64_t StorageCapacity(int node) const { return storage_cap_[node]; }

  // Totals over the cluster.
  int64_t TotalGpuMilli() const { return static_cast<int64_t>(gpu_free_.size()) * kMilliPerGpu; }
  int64_t AllocatedGpuMilli() const { return TotalGpuMilli() - free_milli_; }

 private:
  void RefreshNode(int node);

  const Topology* topology_ = nullptr;
  std::vector<int> gpu_free_;
  int64_t free_milli_ = 0;  // the sum of gpu_free_
  // Fixed by the topology, or rarely set: shared between copies (a scheduling cycle copies the
  // state for every trial), the labels copied on their first change.
  std::shared_ptr<const std::vector<int>> gpu_node_;
  std::vector<int64_t> cpu_free_, mem_free_, storage_free_, cpu_cap_, mem_cap_, storage_cap_;
  std::vector<char> healthy_;
  std::vector<int> node_whole_, node_usable_;
  std::vector<int64_t> node_milli_;
  std::vector<int> sw_whole_, sw_usable_, sw_max_node_whole_;
  std::vector<int64_t> sw_milli_;
  using Labels = std::vector<std::map<std::string, std::string>>;
  std::shared_ptr<Labels> labels_;  // per node, own labels only
};

}  // namespace tianshu::model
