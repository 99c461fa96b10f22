#include "tianshu/placement/fgd.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "tianshu/base/strings.h"
#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/internal/tree_search.h"

namespace tianshu::placement {

using model::kMilliPerGpu;

FragmentationModel::FragmentationModel(const std::vector<TypicalTask>& workload,
                                       const model::Topology& topology) {
  double total = 0;
  double cpu_only = 0;
  for (const TypicalTask& t : workload) {
    if (t.gpus > 0 && t.gpu_milli > 0) {
      total += t.weight;
    } else if (t.weight > 0) {
      cpu_only += t.weight;
    }
  }
  if (total <= 0) return;
  total += cpu_only;
  cpu_only_weight_ = cpu_only / total;
  std::map<std::tuple<int, int, std::vector<std::string>>,
           std::vector<std::tuple<int64_t, int64_t, double>>>
      by_kind;
  for (const TypicalTask& t : workload) {
    if (t.gpus <= 0 || t.gpu_milli <= 0 || t.weight <= 0) continue;
    std::vector<std::string> models;
    for (const auto& m : t.models) models.push_back(ToLower(m));
    std::sort(models.begin(), models.end());
    by_kind[{t.gpus, t.gpu_milli, models}].push_back(
        {t.cpu_milli, t.memory_bytes, t.weight / total});
  }
  for (auto& [key, tasks] : by_kind) {
    Group g;
    g.gpus = std::get<0>(key);
    g.gpu_milli = std::get<1>(key);
    const auto& models = std::get<2>(key);
    for (const auto& type : topology.types) {
      bool ok = models.empty() || std::find(models.begin(), models.end(),
                                            ToLower(type.accelerator.model)) != models.end();
      g.access.push_back(ok && type.gpus_per_node >= g.gpus ? 1 : 0);
    }
    std::sort(tasks.begin(), tasks.end());
    double cum = 0;
    for (auto [cpu, mem, w] : tasks) {
      cum += w;
      g.cpu.push_back(cpu);
      g.mem.push_back(mem);
      g.w.push_back(w);
      g.cum.push_back(cum);
      g.any_memory = g.any_memory || mem > 0;
    }
    g.weight = cum;
    groups_.push_back(std::move(g));
  }
}

double FragmentationModel::Fragmentation(int type, int64_t cpu_free, std::span<const int> gpu_free,
                                         int64_t memory_free) const {
  int sorted[64];
  const int n = std::min<int>(static_cast<int>(gpu_free.size()), 64);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    sorted[i] = gpu_free[i];
    total += gpu_free[i];
  }
  if (total == 0) return 0;
  std::sort(sorted, sorted + n);
  double frag = cpu_only_weight_ * static_cast<double>(total);
  for (const Group& g : groups_) {
    if (!g.access[type]) {
      frag += g.weight * static_cast<double>(total);
      continue;
    }
    // GPUs too small for the task's share, and how many are big enough.
    int small = 0;
    int64_t small_sum = 0;
    while (small < n && sorted[small] < g.gpu_milli) small_sum += sorted[small++];
    if (n - small < g.gpus) {
      frag += g.weight * static_cast<double>(total);
      continue;
    }
    auto it = std::upper_bound(g.cpu.begin(), g.cpu.end(), cpu_free);
    double fit = it == g.cpu.begin() ? 0 : g.cum[it - g.cpu.begin() - 1];
    if (g.any_memory) {
      // Tasks whose CPU fits but whose memory does not cannot run either.
      for (auto i = it - g.cpu.begin() - 1; i >= 0; --i) {
        if (g.mem[i] > memory_free) fit -= g.w[i];
      }
    }
    frag += fit * static_cast<double>(small_sum) + (g.weight - fit) * static_cast<double>(total);
  }
  return frag;
}

double FragmentationModel::NodeFragmentation(const ClusterState& s, int node) const {
  const auto& t = s.topology();
  const int first = t.nodes[node].first_gpu;
  int free[64];
  const int n = std::min(t.GpusOn(node), 64);
  for (int i = 0; i < n; ++i) free[i] = s.GpuFreeMilli(first + i);
  return Fragmentation(t.nodes[node].type, s.CpuFreeMilli(node), std::span<const int>(free, n),
                       s.MemoryFreeBytes(node));
}

std::vector<TypicalTask> TypicalWorkload(std::span<const PlacementRequest> pods,
                                         const WorkloadOptions& options) {
  if (options.paper_typical) {
    std::map<std::tuple<int64_t, int, int, std::vector<std::string>>, double> count;
    for (const PlacementRequest& p : pods) {
      const bool gpu = p.gpu_milli > 0;
      count[{p.cpu_milli_per_rank * p.ranks, gpu ? p.ranks : 0, p.gpu_milli,
             gpu ? p.accelerators : std::vector<std::string>{}}] += 1;
    }
    std::vector<std::pair<double, std::tuple<int64_t, int, int, std::vector<std::string>>>> kinds;
    double all = 0;
    for (const auto& [k, w] : count) {
      kinds.push_back({w, k});
      all += w;
    }
    // Most popular first; equal counts: the larger (CPU, share, GPUs, models) first.
    std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first > b.first;
      const auto& [ca, ga, ma, ta] = a.second;
      const auto& [cb, gb, mb, tb] = b.second;
      return std::tie(ca, ma, ga, ta) > std::tie(cb, mb, gb, tb);
    });
    std::vector<TypicalTask> out;
    double cum = 0;
    for (const auto& [w, k] : kinds) {
      if (cum >= options.popularity * all) break;
      cum += w;
      out.push_back({.cpu_milli = std::get<0>(k),
                     .gpus = std::get<1>(k),
                     .gpu_milli = std::get<2>(k),
                     .models = std::get<3>(k),
                     .weight = w,
                     .memory_bytes = 0});
    }
    return out;
  }
  const bool with_memory = options.with_memory;
  std::map<std::tuple<int64_t, int, int, std::vector<std::string>, int64_t>, double> count;
  for (const PlacementRequest& p : pods) {
    if (p.gpu_milli == 0) continue;
    count[{p.cpu_milli_per_rank * p.ranks, p.ranks, p.gpu_milli, p.accelerators,
           with_memory ? p.memory_bytes_per_rank * p.ranks : 0}] += 1;
  }
  std::vector<TypicalTask> out;
  for (const auto& [k, w] : count) {
    const double share = options.weight_by_gpu_share
                             ? std::get<1>(k) * std::get<2>(k) / static_cast<double>(kMilliPerGpu)
                             : 1.0;
    out.push_back({.cpu_milli = std::get<0>(k),
                   .gpus = std::get<1>(k),
                   .gpu_milli = std::get<2>(k),
                   .models = std::get<3>(k),
                   .weight = w * share,
                   .memory_bytes = std::get<4>(k)});
  }
  return out;
}

namespace internal {
namespace {

class Fgd final : public Strategy {
 public:
  Fgd(std::vector<TypicalTask> workload, FgdScore score, FgdTies ties, uint64_t seed)
      : workload_(std::move(workload)),
        integer_score_(score == FgdScore::kInteger),
        ties_(ties),
        seed_(seed) {}
  std::string_view Name() const override { return "fgd"; }

  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    const auto& topo = s.topology();
    std::vector<TypicalTask> own;
    if (workload_.empty()) {
      own.push_back({.cpu_milli = r.cpu_milli_per_rank * r.ranks,
                     .gpus = r.ranks,
                     .gpu_milli = r.gpu_milli,
                     .models = r.accelerators,
                     .weight = 1});
    }
    FragmentationModel fm(workload_.empty() ? own : workload_, topo);
    int best_node = -1;
    double best_delta = 0;
    int best_gpu = -1;
    const int n_nodes = topo.NumNodes();
    int free[64];
    // integer_score_: the best integer score of the node being scored, and the tied best nodes.
    int node_in_hand = -1;
    int64_t hand_score = -1;
    int hand_gpu = -1;
    int64_t top_score = -1;
    std::vector<std::pair<int, int>> top;  // (node, gpu)
    uint64_t state_hash = internal::MixSeed(seed_, r.name) ^
                          static_cast<uint64_t>(s.AllocatedGpuMilli()) * 0x9e3779b97f4a7c15ULL;
    auto settle = [&] {
      if (node_in_hand < 0) return;
      if (hand_score > top_score) {
        top_score = hand_score;
        top.clear();
      }
      if (hand_score == top_score) top.push_back({node_in_hand, hand_gpu});
      node_in_hand = -1;
    };
    for (int n = 0; n < n_nodes; ++n) {
      if (integer_score_) settle();
      if (NodeCapacity(s, n, r) < r.ranks) continue;
      if (integer_score_ && ties_ == FgdTies::kRandom)
        state_hash = (state_hash ^ static_cast<uint64_t>(s.CpuFreeMilli(n))) * 0x100000001b3ULL;
      const int first = topo.nodes[n].first_gpu;
      const int g_count = std::min(topo.GpusOn(n), 64);
      for (int i = 0; i < g_count; ++i) free[i] = s.GpuFreeMilli(first + i);
      const int type = topo.nodes[n].type;
      const std::span<const int> view(free, g_count);
      const double before = fm.Fragmentation(type, s.CpuFreeMilli(n), view, s.MemoryFreeBytes(n));
      const int64_t cpu_after = s.CpuFreeMilli(n) - r.cpu_milli_per_rank * r.ranks;
      const int64_t mem_before = s.MemoryFreeBytes(n);
      const int64_t mem_after = mem_before - r.memory_bytes_per_rank * r.ranks;
      auto consider = [&](double delta, int gpu) {
        if (integer_score_) {
          // The plugin's integer score; a GPU of this node only replaces an earlier one
          // when its score is higher (the first index wins), nodes tie on equal scores.
          const double x = -delta / 1000.0;
          const auto score = static_cast<int64_t>(100.0 / (1.0 + std::exp(-x)));
          if (n != node_in_hand || score > hand_score) {
            node_in_hand = n;
            hand_score = score;
            hand_gpu = gpu;
          }
          return;
        }
        bool better = best_node < 0 || delta < best_delta - 1e-9;
        if (!better && delta <= best_delta + 1e-9) {
          // Ties: the node with less free GPU share, then the lower id.
          better = s.FreeMilli(n) < s.FreeMilli(best_node);
        }
        if (better) {
          best_node = n;
          best_delta = delta;
          best_gpu = gpu;
        }
      };
      if (r.gpu_milli > 0 && r.gpu_milli < kMilliPerGpu && r.ranks == 1) {
        // A shared GPU: try each distinct free share that holds the task.
        int tried[64];
        int n_tried = 0;
        for (int i = 0; i < g_count; ++i) {
          if (free[i] < r.gpu_milli) continue;
          if (std::find(tried, tried + n_tried, free[i]) != tried + n_tried) continue;
          tried[n_tried++] = free[i];
          free[i] -= r.gpu_milli;
          consider(fm.Fragmentation(type, cpu_after, view, mem_after) - before, first + i);
          free[i] += r.gpu_milli;
        }
      } else {
        std::vector<int> gpus = PickGpus(s, n, r.ranks, r.gpu_milli);
        if (static_cast<int>(gpus.size()) != r.ranks) continue;
        for (int g : gpus) {
          if (g >= 0) free[g - first] -= r.gpu_milli;
        }
        consider(fm.Fragmentation(type, cpu_after, view, mem_after) - before, -1);
      }
    }
    if (integer_score_) {
      settle();
      if (!top.empty()) {
        size_t k = 0;
        if (ties_ == FgdTies::kRandom) {
          internal::Rng rng(state_hash);
          k = static_cast<size_t>(rng.Below(static_cast<int>(top.size())));
        } else if (ties_ == FgdTies::kShuffled) {
          auto rank = [&](int node) {
            internal::Rng h(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(node));
            return h.Next();
          };
          for (size_t i = 1; i < top.size(); ++i) {
            if (rank(top[i].first) < rank(top[k].first)) k = i;
          }
        }
        const auto& pick = top[k];
        best_node = pick.first;
        best_gpu = pick.second;
      }
    }
    if (best_node >= 0) {
      if (best_gpu >= 0) {
        Outcome o;
        o.kind = OutcomeKind::kPlaced;
        o.ranks.push_back({best_node, best_gpu});
        return o;
      }
      return FinishPlacement(s, r, {{best_node, r.ranks}});
    }
    if (!r.single_node) {
      // A gang larger than a node: whole chunks where fragmentation grows least, via the
      // topology search (multi-node jobs take whole nodes, which fragment nothing).
      if (auto counts = TopologyChoose(s, r)) return FinishPlacement(s, r, *counts);
    }
    if (auto never = NeverFits(s, r)) return *never;
    return NotNow(r, 0);
  }

 private:
  std::vector<TypicalTask> workload_;
  bool integer_score_ = true;
  FgdTies ties_ = FgdTies::kShuffled;
  uint64_t seed_ = 42;
};

}  // namespace

std::unique_ptr<Strategy> NewFgd(const StrategyOptions& o) {
  // Without a target workload (the engine's and the server's `scheduler.algorithm: fgd` score a
  // job against itself, so most nodes tie), the exact score and its best-fit ties: the integer
  // score was measured with a target workload only (openb).
  return std::make_unique<Fgd>(o.workload, o.workload.empty() ? FgdScore::kExact : o.fgd_score,
                               o.fgd_ties, o.seed);
}

}  // namespace internal
}  // namespace tianshu::placement
