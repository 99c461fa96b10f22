#include "tianshu/placement/internal/pricer.h"

#include <algorithm>

#include "tianshu/placement/internal/genome.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement::internal {

Pricer::Pricer(const ClusterState& s, const model::ResourceWeight& w)
    : t_(s.topology()), w_(w), c_(TierCosts(t_)), slow_(TypeSlowdowns(t_)) {
  levels_ = static_cast<int>(c_.size()) - 1;
  load_.resize(t_.switches.size());
  for (size_t sw = 0; sw < t_.switches.size(); ++sw) load_[sw] = s.SwitchLoad(static_cast<int>(sw));
}

double Pricer::Placed(const PlacementRequest& r, const NodeCounts& counts) const {
  double compute = 0, memory = 0;
  int nodes = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const auto [n, k] = counts[i];
    bool seen = false;
    for (size_t p = 0; p < i && !seen; ++p) seen = counts[p].first == n;
    nodes += !seen;
    const auto& ty = t_.TypeOf(n);
    compute += k * slow_[t_.nodes[n].type];
    if (r.device_memory_bytes > 0 && ty.accelerator.memory_bytes > 0) {
      memory += k * (static_cast<double>(r.device_memory_bytes) /
                     static_cast<double>(ty.accelerator.memory_bytes));
    }
  }
  const double ranks = std::max(1, r.ranks);
  double network = c_[0] * (nodes - 1);
  blocks_.clear();
  for (int level = 0; level < levels_; ++level) {
    blocks_.clear();
    for (auto [n, k] : counts) {
      const int b = t_.AncestorAt(n, level);
      if (std::find(blocks_.begin(), blocks_.end(), b) != blocks_.end()) continue;
      blocks_.push_back(b);
      network += c_[1 + level] * (1 + load_[b]);
    }
    network -= c_[1 + level];
  }
  return w_.compute * compute / ranks + w_.network * network + w_.memory * memory / ranks;
}

double Pricer::Of(const PlacementRequest& r, const Outcome& o) const {
  return o.placed() ? Placed(r, GeneOf(o)) : Unplaced(r);
}

}  // namespace tianshu::placement::internal
