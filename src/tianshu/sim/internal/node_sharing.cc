#include "tianshu/sim/internal/node_sharing.h"

#include <algorithm>

namespace tianshu::sim::internal {

double NodeSharing::Join(int j, const std::vector<int>& nodes) {
  double share = 1;
  for (int n : nodes) {
    jobs_[n].push_back(j);
    share = std::max(share, static_cast<double>(jobs_[n].size()));
  }
  return share;
}

void NodeSharing::Leave(int j, const std::vector<int>& nodes) {
  for (int n : nodes) std::erase(jobs_[n], j);
}

double NodeSharing::Share(const std::vector<int>& nodes) const {
  double k = 1;
  for (int m : nodes) k = std::max(k, static_cast<double>(jobs_[m].size()));
  return k;
}

}  // namespace tianshu::sim::internal
