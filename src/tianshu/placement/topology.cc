// The topology strategy: the smallest subtree (one node → NVLink domain, leaf, spine, core)
// that holds the gang, choosing among equals the most-used subtree so large holes stay whole
// (as Slurm's topology/tree and block plugins and Kueue's topology-aware scheduling do);
// inside a node, one NVLink island and GPUs beside a NIC (see PickGpus); for sub-node jobs,
// the fullest node and the worst-connected free GPUs first, so whole NVLink sets stay free.
//
// Cost: the per-switch free counts of the snapshot prune subtrees, so a search visits the
// switches of a tier plus the nodes of the subtrees it inspects, never every GPU.
#include <algorithm>
#include <limits>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/tree_search.h"

namespace tianshu::placement::internal {
namespace {

using model::Switch;
using model::Topology;

constexpr int64_t kUnbounded = std::numeric_limits<int32_t>::max();

struct Scratch {
  std::vector<int> node_cap;    // ranks each node below the subtree can take
  std::vector<int64_t> sw_cap;  // sums per switch
};

// Capacities below `sw`, minus what `counts` already holds on a node.
int64_t ComputeCaps(const ClusterState& s, const PlacementRequest& r, int sw,
                    const NodeCounts* counts, Scratch* out) {
  const Topology& t = s.topology();
  out->node_cap.assign(t.NumNodes(), 0);
  out->sw_cap.assign(t.switches.size(), 0);
  // Post-order walk: children before parents.
  std::vector<std::pair<int, bool>> stack = {{sw, false}};
  while (!stack.empty()) {
    auto [id, done] = stack.back();
    stack.pop_back();
    const Switch& x = t.switches[id];
    if (!done) {
      stack.push_back({id, true});
      for (int c : x.children) {
        if (SwitchUpperBound(s, r, c) > 0) stack.push_back({c, false});
      }
      continue;
    }
    int64_t sum = 0;
    for (int n : x.nodes) {
      int cap = NodeCapacity(s, n, r);
      if (counts) {
        for (auto [cn, k] : *counts) {
          if (cn != n) continue;
          cap = (r.gpus_per_node > 0 || r.single_node) ? 0 : std::max(0, cap - k);
        }
      }
      out->node_cap[n] = cap;
      sum += cap;
    }
    for (int c : x.children) sum += out->sw_cap[c];
    out->sw_cap[id] = sum;
  }
  return out->sw_cap[sw];
}

// Best-fit descent: the item that holds all that is left with the least room, else the
// largest item whole, and again.
void Select(const ClusterState& s, const Scratch& sc, int sw, int ranks, NodeCounts* out) {
  const Switch& x = s.topology().switches[sw];
  struct Item {
    bool node;
    int id;
    int64_t cap;
  };
  std::vector<Item> items;
  for (int n : x.nodes) {
    if (sc.node_cap[n] > 0) items.push_back({true, n, sc.node_cap[n]});
  }
  for (int c : x.children) {
    if (sc.sw_cap[c] > 0) items.push_back({false, c, sc.sw_cap[c]});
  }
  // Among equals, the most used (least free) first; then the lowest id.
  auto used_key = [&](const Item& it) {
    return it.node ? s.FreeMilli(it.id) : static_cast<int64_t>(s.SwitchFreeWholeGpus(it.id));
  };
  while (ranks > 0) {
    int fit = -1, largest = -1;
    for (int i = 0; i < static_cast<int>(items.size()); ++i) {
      const Item& it = items[i];
      if (it.cap <= 0) continue;
      if (it.cap >= ranks) {
        if (fit < 0 || it.cap < items[fit].cap ||
            (it.cap == items[fit].cap && used_key(it) < used_key(items[fit]))) {
          fit = i;
        }
      }
      if (largest < 0 || it.cap > items[largest].cap) largest = i;
    }
    if (largest < 0) return;
    Item& pick = items[fit >= 0 ? fit : largest];
    const int take = static_cast<int>(std::min<int64_t>(pick.cap, ranks));
    if (pick.node) {
      out->push_back({pick.id, take});
    } else {
      Select(s, sc, pick.id, take, out);
    }
    pick.cap = 0;
    ranks -= take;
  }
}

// The single node with the least free capacity that holds the whole gang.
std::optional<int> BestNode(const ClusterState& s, const PlacementRequest& r) {
  const Topology& t = s.topology();
  std::optional<int> best;
  std::vector<int> stack = {t.Root()};
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    const Switch& x = t.switches[id];
    for (int c : x.children) {
      bool may = r.gpu_milli >= model::kMilliPerGpu ? s.SwitchMaxNodeWholeGpus(c) >= r.ranks
                                                    : SwitchUpperBound(s, r, c) >= r.ranks;
      if (may) stack.push_back(c);
    }
    for (int n : x.nodes) {
      if (NodeCapacity(s, n, r) < r.ranks) continue;
      if (!best || s.FreeMilli(n) < s.FreeMilli(*best) ||
          (s.FreeMilli(n) == s.FreeMilli(*best) &&
           (s.CpuFreeMilli(n) < s.CpuFreeMilli(*best) ||
            (s.CpuFreeMilli(n) == s.CpuFreeMilli(*best) && n < *best)))) {
        best = n;
      }
    }
  }
  return best;
}

int MaxGpusPerNode(const Topology& t) {
  int m = 0;
  for (const auto& ty : t.types) m = std::max(m, ty.gpus_per_node);
  return m;
}

class TopologyStrategy final : public Strategy {
 public:
  std::string_view Name() const override { return "topology"; }
  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    auto counts = TopologyChoose(s, r);
    if (!counts) {
      if (auto never = NeverFits(s, r)) return *never;
      return NotNow(r, SwitchUpperBound(s, r, s.topology().Root()));
    }
    return FinishPlacement(s, r, *counts);
  }
};

}  // namespace

int64_t SwitchUpperBound(const ClusterState& s, const PlacementRequest& r, int sw) {
  if (r.gpu_milli == 0) return kUnbounded;
  if (r.gpu_milli >= model::kMilliPerGpu) return s.SwitchFreeWholeGpus(sw);
  return s.SwitchUsableGpus(sw);
}

std::optional<NodeCounts> TopologyChoose(const ClusterState& s, const PlacementRequest& r,
                                         bool least_loaded) {
  const Topology& t = s.topology();
  if (r.ranks <= 0) return std::nullopt;
  const bool one_node_possible = r.gpu_milli == 0 || r.single_node || r.ranks <= MaxGpusPerNode(t);
  if (one_node_possible && (r.gpus_per_node == 0 || r.gpus_per_node == r.ranks)) {
    if (auto n = BestNode(s, r)) return NodeCounts{{*n, r.ranks}};
    if (r.single_node) return std::nullopt;
  }
  if (r.single_node) return std::nullopt;
  if (SwitchUpperBound(s, r, t.Root()) < r.ranks) return std::nullopt;
  Scratch sc;
  const int tiers = static_cast<int>(t.tiers.size());
  for (int tier = 0; tier < tiers; ++tier) {
    std::vector<std::pair<int64_t, int>> cands;
    for (const auto& x : t.switches) {
      if (x.tier != tier) continue;
      int64_t ub = SwitchUpperBound(s, r, x.id);
      if (ub < r.ranks) continue;
      // Most used first (least free), or least loaded first (in parts per million).
      cands.push_back({least_loaded ? static_cast<int64_t>(s.SwitchLoad(x.id) * 1e6) : ub, x.id});
    }
    std::sort(cands.begin(), cands.end());
    for (auto [ub, id] : cands) {
      if (ComputeCaps(s, r, id, nullptr, &sc) < r.ranks) continue;
      NodeCounts out;
      Select(s, sc, id, r.ranks, &out);
      return out;
    }
  }
  return std::nullopt;
}

bool FillBelow(const ClusterState& s, const PlacementRequest& r, int sw, int ranks,
               NodeCounts* counts) {
  if (ranks <= 0) return true;
  Scratch sc;
  if (ComputeCaps(s, r, sw, counts, &sc) < ranks) return false;
  NodeCounts more;
  Select(s, sc, sw, ranks, &more);
  for (auto [n, k] : more) {
    const int node = n;  // clang 14 cannot capture a structured binding
    auto it =
        std::find_if(counts->begin(), counts->end(), [&](auto& p) { return p.first == node; });
    if (it == counts->end()) {
      counts->push_back({n, k});
    } else {
      it->second += k;
    }
  }
  return true;
}

std::unique_ptr<Strategy> NewTopology(const StrategyOptions&) {
  return std::make_unique<TopologyStrategy>();
}

}  // namespace tianshu::placement::internal
