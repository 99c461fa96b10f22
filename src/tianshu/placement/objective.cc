#include "tianshu/placement/objective.h"

#include <algorithm>
#include <set>

#include "tianshu/comm/cost_model.h"

namespace tianshu::placement {

// Relative cost of one more block at each level, from the comm/ cost model: the time of a
// 1 GiB AllReduce between two GPUs that meet at that level (two nodes under one leaf, under
// one spine, ...), over the same on two GPUs of one node; c[0] is the first ratio, each next
// level the increase over the one below (at least 5% of c[0], so crossing a tier always
// costs). Where the fabric has no pair meeting at a tier, the bandwidth ratio stands in.
std::vector<double> TierCosts(const model::Topology& t) {
  constexpr int64_t kBytes = int64_t{1} << 30;
  comm::CostOptions alone;
  alone.contended = false;
  auto pair_seconds = [&](int a, int b) {
    const int ga = t.nodes[a].first_gpu;
    const int gb = a == b ? ga + 1 : t.nodes[b].first_gpu;
    const int gpus[2] = {ga, gb};
    return comm::CollectiveSeconds(t, gpus, comm::Collective::kAllReduce, kBytes,
                                   comm::Algorithm::kAuto, alone);
  };
  const model::ServerType& ty = t.types.front();
  const double nvlink = std::max(1.0, ty.intra_bandwidth.GBps());
  const double nic = std::max(0.1, ty.Injection().GBps() / std::max(1, ty.gpus_per_node));
  const double one = t.NumNodes() > 0 && t.GpusOn(0) >= 2 ? pair_seconds(0, 0) : 0;
  const int tiers = static_cast<int>(t.tiers.size());
  std::vector<double> ratio(tiers, 0);  // pair time at tier / one-node time
  for (int n = 1; n < t.NumNodes() && one > 0; ++n) {
    const int tier = t.CommonTier(0, n);
    if (tier >= 0 && tier < tiers && ratio[tier] == 0) ratio[tier] = pair_seconds(0, n) / one;
  }
  std::vector<double> c;
  c.push_back(ratio[0] > 0 ? ratio[0] : nvlink / nic);
  double over = 1, prev = c[0];
  for (int tier = 0; tier + 1 < tiers; ++tier) {
    over *= std::max(1.0, t.tiers[tier].oversubscription);
    double r = ratio[tier + 1] > 0 ? ratio[tier + 1] - prev : 0.25 * c[0] * over;
    if (ratio[tier + 1] > 0) prev = ratio[tier + 1];
    c.push_back(std::max(r, 0.05 * c[0]));
  }
  return c;
}

std::vector<double> TypeSlowdowns(const model::Topology& t) {
  double best = 0;
  for (const auto& ty : t.types) best = std::max(best, ty.accelerator.peak_tflops);
  std::vector<double> out;
  for (const auto& ty : t.types) {
    out.push_back(best > 0 && ty.accelerator.peak_tflops > 0 ? best / ty.accelerator.peak_tflops - 1
                                                             : 0);
  }
  return out;
}

bool NoneCheaper(const ClusterState& s, const PlacementRequest& r, const Outcome& o) {
  const model::Topology& t = s.topology();
  if (!o.placed() || o.ranks.empty() || r.gpu_milli != model::kMilliPerGpu ||
      static_cast<int>(o.ranks.size()) != r.ranks) {
    return false;
  }
  // Forced: whole-GPU ranks on every whole GPU that is free, so any feasible placement has the
  // same ranks on each node, and the cost depends on nothing else.
  if (s.SwitchFreeWholeGpus(t.Root()) == r.ranks) return true;
  // The lower bound. Compute and memory are the same on every node where every node type has
  // the same accelerator speed, memory and GPU count (the server makes a type per label set, so
  // a leaf label alone makes types that differ in nothing priced here); the network term grows
  // with the nodes, the blocks of each tier and the blocks' loads (every c > 0).
  const model::ServerType& first = t.types.front();
  for (const model::ServerType& ty : t.types) {
    if (ty.gpus_per_node != first.gpus_per_node ||
        ty.accelerator.peak_tflops != first.accelerator.peak_tflops ||
        ty.accelerator.memory_bytes != first.accelerator.memory_bytes) {
      return false;
    }
  }
  const int per_node = first.gpus_per_node;
  if (per_node <= 0) return false;
  std::set<int> nodes;
  for (const RankSlot& slot : o.ranks) nodes.insert(slot.node);
  const int min_nodes = (r.ranks + per_node - 1) / per_node;
  if (static_cast<int>(nodes.size()) != min_nodes) return false;
  const int levels = static_cast<int>(t.tiers.size()) - 1;  // tiers below the root
  for (int level = 0; level < levels; ++level) {
    // The most nodes any block of this level holds, a block being what EvaluateBatch counts:
    // a node's ancestor at the level, which is a higher switch where a tier is skipped (a leaf
    // right under the core).
    int block_nodes = 0;
    for (int n = 0; n < t.NumNodes(); ++n) {
      block_nodes = std::max(block_nodes, t.switches[t.AncestorAt(n, level)].gpus / per_node);
    }
    if (block_nodes <= 0) return false;
    std::set<int> blocks;
    for (int n : nodes) blocks.insert(t.AncestorAt(n, level));
    if (static_cast<int>(blocks.size()) != (min_nodes + block_nodes - 1) / block_nodes) {
      return false;
    }
    for (int b : blocks) {
      if (s.SwitchLoad(b) > 0) return false;
    }
  }
  return true;
}

BatchCost EvaluateBatch(const ClusterState& s, std::span<const PlacementRequest> requests,
                        std::span<const Outcome> outcomes, const model::ResourceWeight& w) {
  const model::Topology& t = s.topology();
  const std::vector<double> c = TierCosts(t);
  const std::vector<double> slow = TypeSlowdowns(t);
  const int levels = static_cast<int>(c.size()) - 1;  // switch tiers below the root
  BatchCost out;
  for (size_t j = 0; j < requests.size(); ++j) {
    const PlacementRequest& r = requests[j];
    if (j >= outcomes.size() || !outcomes[j].placed()) {
      ++out.unplaced_jobs;
      out.total += kUnplacedPenalty * r.ranks;
      continue;
    }
    std::set<int> nodes;
    double compute = 0, memory = 0;
    for (const RankSlot& slot : outcomes[j].ranks) {
      nodes.insert(slot.node);
      const auto& ty = t.TypeOf(slot.node);
      compute += slow[t.nodes[slot.node].type];
      if (r.device_memory_bytes > 0 && ty.accelerator.memory_bytes > 0) {
        memory += static_cast<double>(r.device_memory_bytes) /
                  static_cast<double>(ty.accelerator.memory_bytes);
      }
    }
    const double ranks = std::max(1, r.ranks);
    compute /= ranks;
    memory /= ranks;
    double network = c[0] * (static_cast<double>(nodes.size()) - 1);
    for (int level = 0; level < levels; ++level) {
      std::set<int> blocks;
      for (int n : nodes) blocks.insert(t.AncestorAt(n, level));
      for (int b : blocks) network += c[1 + level] * (1 + s.SwitchLoad(b));
      network -= c[1 + level];
      if (blocks.size() > 1) out.max_tier_crossed = std::max(out.max_tier_crossed, level + 1);
    }
    if (nodes.size() > 1) out.max_tier_crossed = std::max(out.max_tier_crossed, 0);
    out.compute += compute;
    out.network += network;
    out.memory += memory;
    out.total += w.compute * compute + w.network * network + w.memory * memory;
  }
  return out;
}

}  // namespace tianshu::placement
