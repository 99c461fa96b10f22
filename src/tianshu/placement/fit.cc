#include "tianshu/placement/fit.h"

#include <algorithm>
#include <limits>
#include <map>

#include "tianshu/base/strings.h"

namespace tianshu::placement {

using model::kMilliPerGpu;
using model::ServerType;
using model::Topology;

std::string_view RejectName(Reject r) {
  switch (r) {
    case Reject::kNone:
      return "fits";
    case Reject::kUnhealthy:
      return "unhealthy";
    case Reject::kBackend:
      return "wrong backend";
    case Reject::kModel:
      return "GPU model not accepted";
    case Reject::kSelector:
      return "node selector does not match";
    case Reject::kDeviceMemory:
      return "device memory too small";
    case Reject::kStorage:
      return "storage bandwidth too low";
    case Reject::kTooSmall:
      return "node too small for the ranks asked of it";
  }
  return "fits";
}

bool ModelAccepted(const PlacementRequest& request, const std::string& model) {
  if (request.accelerators.empty()) return true;
  std::string m = ToLower(model);
  for (const std::string& a : request.accelerators) {
    if (ToLower(a) == m) return true;
  }
  return false;
}

namespace {

Reject Check(const ClusterState& state, int node, const PlacementRequest& r, bool health) {
  if (health && !state.Healthy(node)) return Reject::kUnhealthy;
  const ServerType& t = state.topology().TypeOf(node);
  if (r.gpu_milli > 0) {
    if (r.backend && *r.backend != t.backend) return Reject::kBackend;
    if (!ModelAccepted(r, t.accelerator.model)) return Reject::kModel;
    if (r.device_memory_bytes > 0 && t.accelerator.memory_bytes > 0 &&
        r.device_memory_bytes * kMilliPerGpu > t.accelerator.memory_bytes * r.gpu_milli) {
      return Reject::kDeviceMemory;
    }
    if (t.gpus_per_node == 0) return Reject::kTooSmall;
  }
  if (!r.node_selector.empty() && !state.MatchesSelector(node, r.node_selector)) {
    return Reject::kSelector;
  }
  if (r.storage_bps_per_node > t.nvme_write_bandwidth.bits_per_sec && r.storage_bps_per_node > 0) {
    return Reject::kStorage;
  }
  return Reject::kNone;
}

int Bound(int gpus, int64_t cpu, int64_t mem, const PlacementRequest& r) {
  int64_t cap = gpus;
  if (r.cpu_milli_per_rank > 0) cap = std::min(cap, cpu / r.cpu_milli_per_rank);
  if (r.memory_bytes_per_rank > 0) cap = std::min(cap, mem / r.memory_bytes_per_rank);
  cap = std::min<int64_t>(cap, r.ranks);
  int c = static_cast<int>(std::max<int64_t>(cap, 0));
  if (r.gpus_per_node > 0) c = c >= r.gpus_per_node ? r.gpus_per_node : 0;
  if (r.single_node) c = c >= r.ranks ? r.ranks : 0;
  return c;
}

}  // namespace

Reject StaticCheck(const ClusterState& state, int node, const PlacementRequest& request) {
  return Check(state, node, request, /*health=*/true);
}

int NodeCapacity(const ClusterState& state, int node, const PlacementRequest& r) {
  if (Check(state, node, r, true) != Reject::kNone) return 0;
  if (r.storage_bps_per_node > state.StorageFreeBps(node)) return 0;
  int gpus = 0;
  if (r.gpu_milli == 0) {
    gpus = std::numeric_limits<int>::max();
  } else if (r.gpu_milli >= kMilliPerGpu) {
    gpus = state.FreeWholeGpus(node);
  } else if (state.UsableGpus(node) > 0) {
    const int first = state.topology().nodes[node].first_gpu;
    const int n = state.topology().GpusOn(node);
    for (int g = first; g < first + n; ++g) gpus += state.GpuFreeMilli(g) >= r.gpu_milli;
  }
  return Bound(gpus, state.CpuFreeMilli(node), state.MemoryFreeBytes(node), r);
}

namespace {
// What an idle `node` that passed Check can take of `r`.
int IdleBound(const ClusterState& state, int node, const PlacementRequest& r) {
  int gpus = r.gpu_milli == 0 ? std::numeric_limits<int>::max() : state.topology().GpusOn(node);
  return Bound(gpus, state.CpuCapacity(node), state.MemoryCapacity(node), r);
}
}  // namespace

int NodeCapacityIdle(const ClusterState& state, int node, const PlacementRequest& r) {
  if (Check(state, node, r, false) != Reject::kNone) return 0;
  return IdleBound(state, node, r);
}

Outcome NotNow(const PlacementRequest& request, int64_t available) {
  Outcome o;
  o.kind = OutcomeKind::kDoesNotFitNow;
  o.reason = "'" + request.name + "' needs " + std::to_string(request.ranks) +
             " ranks; the nodes that accept it can take " + std::to_string(available) + " now";
  return o;
}

std::optional<Outcome> NeverFits(const ClusterState& state, const PlacementRequest& r) {
  Outcome o;
  o.kind = OutcomeKind::kCanNeverFit;
  if (r.ranks <= 0) {
    o.reason = "'" + r.name + "' asks for no ranks";
    return o;
  }
  if (r.gpu_milli < 0 || r.gpu_milli > kMilliPerGpu) {
    o.reason = "'" + r.name + "': gpu_milli must be within 0..1000";
    return o;
  }
  if (r.gpus_per_node > 0 && r.ranks % r.gpus_per_node != 0) {
    o.reason = "'" + r.name + "': " + std::to_string(r.ranks) +
               " ranks do not split into nodes of " + std::to_string(r.gpus_per_node);
    return o;
  }
  std::map<Reject, int> rejects;
  int64_t total = 0;
  int best = 0;
  const int n = state.topology().NumNodes();
  for (int i = 0; i < n; ++i) {
    Reject why = Check(state, i, r, false);
    if (why != Reject::kNone) {
      ++rejects[why];
      continue;
    }
    int cap = IdleBound(state, i, r);
    if (cap == 0) ++rejects[Reject::kTooSmall];
    total += cap;
    best = std::max(best, cap);
    // It fits: the rest of the nodes would only explain a refusal.
    if (r.single_node ? best >= r.ranks : total >= r.ranks) return std::nullopt;
  }
  std::string why = "'" + r.name + "' needs " + std::to_string(r.ranks) +
                    (r.single_node ? " ranks on one node" : " ranks") +
                    "; an idle cluster could give it " +
                    std::to_string(r.single_node ? best : total);
  for (const auto& [k, count] : rejects) {
    why += "; " + std::to_string(count) + " nodes: " + std::string(RejectName(k));
  }
  o.reason = why;
  return o;
}

namespace {

struct Group {
  int key = 0;       // island or PCIe switch
  bool nic = false;  // a NIC hangs off it
  std::vector<int> gpus;
};

// Takes `want` GPUs from groups: the fullest group that holds them all, else the largest
// group whole and again for the rest. `inner` picks inside a group.
template <typename Inner>
void TakeFromGroups(std::vector<Group>& groups, int want, std::vector<int>* out, Inner inner) {
  while (want > 0) {
    int fit = -1, largest = -1;
    for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
      const int sz = static_cast<int>(groups[i].gpus.size());
      if (sz == 0) continue;
      if (sz >= want) {
        if (fit < 0) {
          fit = i;
        } else {
          const int fsz = static_cast<int>(groups[fit].gpus.size());
          if (sz < fsz || (sz == fsz && groups[i].nic && !groups[fit].nic)) fit = i;
        }
      }
      if (largest < 0 || sz > static_cast<int>(groups[largest].gpus.size())) largest = i;
    }
    if (largest < 0) return;
    const int pick = fit >= 0 ? fit : largest;
    const int take = std::min(want, static_cast<int>(groups[pick].gpus.size()));
    inner(groups[pick].gpus, take, out);
    groups[pick].gpus.clear();
    want -= take;
  }
}

}  // namespace

std::vector<int> PickGpus(const ClusterState& state, int node, int count, int gpu_milli) {
  if (count <= 0) return {};
  if (gpu_milli == 0) return std::vector<int>(count, -1);
  const Topology& topo = state.topology();
  const ServerType& t = topo.TypeOf(node);
  const int first = topo.nodes[node].first_gpu;
  std::vector<Group> islands;
  int found = 0;
  for (int g = 0; g < t.gpus_per_node; ++g) {
    if (state.GpuFreeMilli(first + g) < gpu_milli) continue;
    const int island = t.NvlinkIsland(g);
    auto it = std::find_if(islands.begin(), islands.end(),
                           [&](const Group& x) { return x.key == island; });
    if (it == islands.end()) {
      islands.push_back({island, false, {}});
      it = islands.end() - 1;
    }
    it->gpus.push_back(g);
    ++found;
  }
  if (found < count) return {};
  std::vector<int> out;
  auto in_pcie = [&](std::vector<int>& gpus, int take, std::vector<int>* dst) {
    // Shared GPUs: the fullest device first, so whole devices stay free.
    std::stable_sort(gpus.begin(), gpus.end(), [&](int a, int b) {
      return state.GpuFreeMilli(first + a) < state.GpuFreeMilli(first + b);
    });
    for (int i = 0; i < take; ++i) dst->push_back(first + gpus[i]);
  };
  auto in_island = [&](std::vector<int>& gpus, int take, std::vector<int>* dst) {
    std::vector<Group> pcie;
    for (int g : gpus) {
      const int sw = g < static_cast<int>(t.gpu_pcie_switch.size()) ? t.gpu_pcie_switch[g] : g;
      auto it = std::find_if(pcie.begin(), pcie.end(), [&](const Group& x) { return x.key == sw; });
      if (it == pcie.end()) {
        bool nic = std::any_of(t.nics.begin(), t.nics.end(),
                               [&](const model::Nic& n) { return n.pcie_switch == sw; });
        pcie.push_back({sw, nic, {}});
        it = pcie.end() - 1;
      }
      it->gpus.push_back(g);
    }
    TakeFromGroups(pcie, take, dst, in_pcie);
  };
  TakeFromGroups(islands, count, &out, in_island);
  if (static_cast<int>(out.size()) < count) return {};
  return out;
}

void OrderRanks(const Topology& topo, std::vector<RankSlot>* ranks) {
  auto key = [&](const RankSlot& s) {
    const model::Node& n = topo.nodes[s.node];
    int island = s.gpu < 0 ? -1 : topo.TypeOf(s.node).NvlinkIsland(s.gpu - n.first_gpu);
    return std::tuple(n.leaf, s.node, island, s.gpu);
  };
  std::stable_sort(ranks->begin(), ranks->end(),
                   [&](const RankSlot& a, const RankSlot& b) { return key(a) < key(b); });
}

Outcome FinishPlacement(const ClusterState& state, const PlacementRequest& request,
                        const std::vector<std::pair<int, int>>& node_counts) {
  std::map<int, int> merged;
  int total = 0;
  for (auto [node, count] : node_counts) {
    if (count <= 0) continue;
    merged[node] += count;
    total += count;
  }
  if (total != request.ranks) return NotNow(request, total);
  Outcome o;
  for (auto [node, count] : merged) {
    if (count > NodeCapacity(state, node, request)) return NotNow(request, total);
    if (request.gpus_per_node > 0 && count != request.gpus_per_node) return NotNow(request, total);
    std::vector<int> gpus = PickGpus(state, node, count, request.gpu_milli);
    if (static_cast<int>(gpus.size()) != count) return NotNow(request, total);
    for (int g : gpus) o.ranks.push_back({node, g});
  }
  OrderRanks(state.topology(), &o.ranks);
  o.kind = OutcomeKind::kPlaced;
  return o;
}

}  // namespace tianshu::placement
