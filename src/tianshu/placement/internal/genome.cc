#include "tianshu/placement/internal/genome.h"

#include <algorithm>

namespace tianshu::placement::internal {

NodeCounts GeneOf(const Outcome& o) {
  NodeCounts out;
  for (const RankSlot& s : o.ranks) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == s.node; });
    if (it == out.end()) {
      out.push_back({s.node, 1});
    } else {
      ++it->second;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ValidGene(const PlacementRequest& r, const NodeCounts& counts) {
  if (counts.empty()) return false;
  int total = 0;
  for (auto [n, k] : counts) {
    if (k <= 0) return false;
    if (r.gpus_per_node > 0 && k != r.gpus_per_node) return false;
    total += k;
  }
  return total == r.ranks && (!r.single_node || counts.size() == 1);
}

}  // namespace tianshu::placement::internal
