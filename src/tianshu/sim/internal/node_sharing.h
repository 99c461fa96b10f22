// Which running jobs sit on each node: jobs on one node share its NVMe (checkpoints, data
// loading), so a job's NVMe share is the most jobs on any of its nodes. Owned by the
// simulator; it reprices the jobs whose share a start or a stop changes. Private to sim/.
//   NodeSharing nodes(topology.nodes.size());
//   double nvme = nodes.Join(j, run.nodes);  // then reprice the others on run.nodes
#pragma once

#include <cstddef>
#include <vector>

namespace tianshu::sim::internal {

class NodeSharing {
 public:
  explicit NodeSharing(size_t num_nodes) : jobs_(num_nodes) {}
  // Puts job `j` on `nodes`; returns its NVMe share (at least 1).
  double Join(int j, const std::vector<int>& nodes);
  // Takes job `j` off `nodes`.
  void Leave(int j, const std::vector<int>& nodes);
  // The NVMe share of a job on `nodes`: the most jobs on any of them (at least 1).
  double Share(const std::vector<int>& nodes) const;
  const std::vector<int>& JobsOn(int node) const { return jobs_[node]; }

 private:
  std::vector<std::vector<int>> jobs_;  // per node, in the order they started
};

}  // namespace tianshu::sim::internal
