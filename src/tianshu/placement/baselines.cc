// The baselines users run today: first-fit (lowest node ids), random, spread (least allocated,
// a default Kubernetes scheduler), best-fit (packing onto the fullest node) and yarn (the
// consolidation of Microsoft's YARN scheduler on Philly).
#include <algorithm>
#include <numeric>
#include <queue>
#include <set>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/random.h"

namespace tianshu::placement::internal {
namespace {

// Fills nodes in `order` with as many ranks as each can take.
Outcome FillInOrder(const ClusterState& s, const PlacementRequest& r, const std::vector<int>& order,
                    const std::vector<int>& cap) {
  std::vector<std::pair<int, int>> chosen;
  int left = r.ranks;
  for (int n : order) {
    if (left == 0) break;
    int take = std::min(cap[n], left);
    if (r.single_node && take < r.ranks) continue;
    if (take > 0) {
      chosen.push_back({n, take});
      left -= take;
    }
  }
  if (left > 0) {
    if (auto never = NeverFits(s, r)) return *never;
    return NotNow(r, r.ranks - left);
  }
  return FinishPlacement(s, r, chosen);
}

std::vector<int> Caps(const ClusterState& s, const PlacementRequest& r) {
  std::vector<int> cap(s.topology().NumNodes());
  for (int n = 0; n < static_cast<int>(cap.size()); ++n) cap[n] = NodeCapacity(s, n, r);
  return cap;
}

// Free share of a node's GPUs (or CPU for CPU-only ranks), 0..1.
double FreeFraction(const ClusterState& s, int node, const PlacementRequest& r) {
  if (r.gpu_milli == 0 || s.topology().GpusOn(node) == 0) {
    return s.CpuCapacity(node) > 0 ? static_cast<double>(s.CpuFreeMilli(node)) /
                                         static_cast<double>(s.CpuCapacity(node))
                                   : 0;
  }
  return static_cast<double>(s.FreeMilli(node)) /
         (static_cast<double>(s.topology().GpusOn(node)) * model::kMilliPerGpu);
}

class FirstFit final : public Strategy {
 public:
  std::string_view Name() const override { return "first-fit"; }
  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    std::vector<int> order(s.topology().NumNodes());
    std::iota(order.begin(), order.end(), 0);
    return FillInOrder(s, r, order, Caps(s, r));
  }
};

class Random final : public Strategy {
 public:
  explicit Random(uint64_t seed) : seed_(seed) {}
  std::string_view Name() const override { return "random"; }
  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    std::vector<int> cap = Caps(s, r);
    std::vector<int> order;
    for (int n = 0; n < static_cast<int>(cap.size()); ++n) {
      if (cap[n] > 0) order.push_back(n);
    }
    Rng rng(MixSeed(seed_, r.name));
    rng.Shuffle(&order);
    return FillInOrder(s, r, order, cap);
  }

 private:
  uint64_t seed_;
};

// One rank at a time onto the least-allocated node, as a default Kubernetes scheduler scores
// pods (NodeResourcesLeastAllocated); with gpus_per_node or single_node, whole chunks.
class Spread final : public Strategy {
 public:
  std::string_view Name() const override { return "spread"; }
  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    std::vector<int> cap = Caps(s, r);
    const int chunk = r.single_node ? r.ranks : std::max(1, r.gpus_per_node);
    struct Item {
      double free;
      int node;
      bool operator<(const Item& o) const { return free != o.free ? free < o.free : node > o.node; }
    };
    std::priority_queue<Item> heap;
    std::vector<int> taken(cap.size(), 0);
    auto score = [&](int n) {
      const int gpus = std::max(1, s.topology().GpusOn(n));
      return FreeFraction(s, n, r) - static_cast<double>(taken[n]) * r.gpu_milli /
                                         (static_cast<double>(gpus) * model::kMilliPerGpu);
    };
    for (int n = 0; n < static_cast<int>(cap.size()); ++n) {
      if (cap[n] >= chunk) heap.push({score(n), n});
    }
    int left = r.ranks;
    while (left > 0 && !heap.empty()) {
      Item it = heap.top();
      heap.pop();
      taken[it.node] += chunk;
      left -= chunk;
      if (!r.single_node && r.gpus_per_node == 0 && cap[it.node] - taken[it.node] >= chunk) {
        heap.push({score(it.node), it.node});
      }
    }
    if (left > 0) {
      if (auto never = NeverFits(s, r)) return *never;
      return NotNow(r, r.ranks - std::max(left, 0));
    }
    std::vector<std::pair<int, int>> chosen;
    for (int n = 0; n < static_cast<int>(taken.size()); ++n) {
      if (taken[n] > 0) chosen.push_back({n, taken[n]});
    }
    return FinishPlacement(s, r, chosen);
  }
};

// The fullest node that still takes the job: the Tetris-style best-fit score of the FGD
// paper's baseline, 0.5 * (free CPU - asked) / max CPU + 0.5 * (free GPU share - asked) / max
// GPU share (lower is better), nodes then filled in that order.
class BestFit final : public Strategy {
 public:
  std::string_view Name() const override { return "best-fit"; }
  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    std::vector<int> cap = Caps(s, r);
    int64_t max_cpu = 1, max_gpu = 1;
    for (int n = 0; n < static_cast<int>(cap.size()); ++n) {
      max_cpu = std::max(max_cpu, s.CpuCapacity(n));
      max_gpu = std::max<int64_t>(max_gpu, int64_t{s.topology().GpusOn(n)} * model::kMilliPerGpu);
    }
    std::vector<std::pair<double, int>> order;
    for (int n = 0; n < static_cast<int>(cap.size()); ++n) {
      if (cap[n] <= 0) continue;
      const int k = std::min(cap[n], r.ranks);
      const double cpu = static_cast<double>(s.CpuFreeMilli(n) - k * r.cpu_milli_per_rank);
      const double gpu = static_cast<double>(s.FreeMilli(n) - int64_t{k} * r.gpu_milli);
      order.push_back(
          {0.5 * cpu / static_cast<double>(max_cpu) + 0.5 * gpu / static_cast<double>(max_gpu), n});
    }
    std::stable_sort(order.begin(), order.end());
    std::vector<int> nodes;
    for (auto [score, n] : order) nodes.push_back(n);
    return FillInOrder(s, r, nodes, cap);
  }
};

// YARN-style consolidation, as Microsoft's YARN scheduler placed jobs on Philly (Jeon et al.,
// ATC'19, section 2.2; the MS-YARN placement of the Tiresias simulator): a gang that one node
// can hold goes on one node, the first in id order that has room now, or it waits; a larger
// gang takes whole idle nodes for all but its remainder and one more node, the first with room,
// for the rest, all under one leaf switch; otherwise it waits. It never splits a gang that fits
// one node, where first-fit spreads it over the nodes' leftovers.
class Yarn final : public Strategy {
 public:
  std::string_view Name() const override { return "yarn"; }

  // A multi-node gang no leaf switch could ever hold: refused (at submission, where the engine
  // asks), not kept waiting for ever (in FIFO order it would block every job behind it).
  std::optional<Outcome> NeverPlaces(const ClusterState& s,
                                     const PlacementRequest& r) const override {
    // (A leaf holds at least what its roomiest node does: a gang one node holds passes too.)
    const model::Topology& t = s.topology();
    int leaf_most = 0;
    std::set<int> leaves_seen;
    for (int first = 0; first < t.NumNodes(); ++first) {
      const int leaf = t.AncestorAt(first, 0);
      if (!leaves_seen.insert(leaf).second) continue;
      int held = 0;
      for (int n : t.NodesUnder(leaf)) held += NodeCapacityIdle(s, n, r);
      leaf_most = std::max(leaf_most, held);
    }
    if (r.ranks <= leaf_most) return std::nullopt;
    Outcome o;
    o.kind = OutcomeKind::kCanNeverFit;
    o.reason = "'" + r.name +
               "': yarn places a multi-node gang under one leaf switch, and the largest holds " +
               std::to_string(leaf_most) + " of its " + std::to_string(r.ranks) + " ranks";
    return o;
  }

  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    if (auto never = NeverFits(s, r)) return *never;
    const model::Topology& t = s.topology();
    const std::vector<int> cap = Caps(s, r);
    int largest = 0;  // the most ranks one node could ever take
    for (int n = 0; n < t.NumNodes(); ++n) largest = std::max(largest, NodeCapacityIdle(s, n, r));
    if (r.ranks <= largest) {
      for (int n = 0; n < t.NumNodes(); ++n) {
        if (cap[n] >= r.ranks) return FinishPlacement(s, r, {{n, r.ranks}});
      }
      return NotNow(r, *std::max_element(cap.begin(), cap.end()));
    }
    if (auto never = NeverPlaces(s, r)) return *never;
    int64_t most = 0;
    std::set<int> leaves_seen;
    for (int first = 0; first < t.NumNodes(); ++first) {
      const int leaf = t.AncestorAt(first, 0);
      if (!leaves_seen.insert(leaf).second) continue;
      const std::vector<int> nodes = t.NodesUnder(leaf);
      std::vector<std::pair<int, int>> chosen;
      std::vector<bool> used(t.NumNodes(), false);
      int left = r.ranks;
      for (int n : nodes) {  // whole idle nodes while a whole node's worth is left
        const int whole = NodeCapacityIdle(s, n, r);
        if (whole > 0 && whole <= left && cap[n] == whole && Idle(s, n)) {
          chosen.push_back({n, whole});
          used[n] = true;
          left -= whole;
        }
      }
      for (int n : nodes) {  // the remainder on the first other node with room
        if (left == 0) break;
        if (!used[n] && cap[n] >= left) {
          chosen.push_back({n, left});
          left = 0;
        }
      }
      most = std::max<int64_t>(most, r.ranks - left);
      if (left == 0) return FinishPlacement(s, r, chosen);
    }
    return NotNow(r, most);
  }

 private:
  static bool Idle(const ClusterState& s, int n) {
    return s.FreeMilli(n) == int64_t{s.topology().GpusOn(n)} * model::kMilliPerGpu &&
           s.CpuFreeMilli(n) == s.CpuCapacity(n);
  }
};

}  // namespace

std::unique_ptr<Strategy> NewYarn(const StrategyOptions&) { return std::make_unique<Yarn>(); }
std::unique_ptr<Strategy> NewFirstFit(const StrategyOptions&) {
  return std::make_unique<FirstFit>();
}
std::unique_ptr<Strategy> NewRandom(const StrategyOptions& o) {
  return std::make_unique<Random>(o.seed);
}
std::unique_ptr<Strategy> NewSpread(const StrategyOptions&) { return std::make_unique<Spread>(); }
std::unique_ptr<Strategy> NewBestFit(const StrategyOptions&) { return std::make_unique<BestFit>(); }

}  // namespace tianshu::placement::internal
