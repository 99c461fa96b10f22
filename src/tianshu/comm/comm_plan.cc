#include "tianshu/comm/comm_plan.h"

#include <algorithm>
#include <set>

#include "tianshu/base/strings.h"

namespace tianshu::comm {

std::string_view GroupKindName(GroupKind k) {
  switch (k) {
    case GroupKind::kTensor:
      return "tp";
    case GroupKind::kPipeline:
      return "pp";
    case GroupKind::kData:
      return "dp";
    case GroupKind::kExpert:
      return "ep";
  }
  return "?";
}

std::string_view RankOrderName(RankOrder o) {
  switch (o) {
    case RankOrder::kDataInner:
      return "tp-dp-pp";
    case RankOrder::kPipelineInner:
      return "tp-pp-dp";
    case RankOrder::kSpreadTensor:
      return "spread-tp";
    case RankOrder::kAsGiven:
      return "as-given";
  }
  return "?";
}

TrafficClass TrafficClassForPriority(int priority) {
  if (priority >= 100) return TrafficClass::kPriority;
  if (priority < 0) return TrafficClass::kBulk;
  return TrafficClass::kStandard;
}

int CommPlan::NumGroups(GroupKind k) const {
  const Layout& L = layout;
  switch (k) {
    case GroupKind::kTensor:
      return L.dp * L.pp;
    case GroupKind::kPipeline:
      return L.tp * L.dp;
    case GroupKind::kData:
      return L.tp * L.pp;
    case GroupKind::kExpert:
      return L.ep > 0 ? L.tp * L.pp * (L.dp / L.ep) : 0;
  }
  return 0;
}

std::vector<int> CommPlan::GroupRanks(GroupKind k, int index) const {
  const int T = layout.tp, D = layout.dp, P = layout.pp;
  auto rank = [&](int t, int d, int p) { return t + T * (d + D * p); };
  std::vector<int> out;
  switch (k) {
    case GroupKind::kTensor: {
      int d = index % D, p = index / D;
      for (int t = 0; t < T; ++t) out.push_back(rank(t, d, p));
      break;
    }
    case GroupKind::kData: {
      int t = index % T, p = index / T;
      for (int d = 0; d < D; ++d) out.push_back(rank(t, d, p));
      break;
    }
    case GroupKind::kPipeline: {
      int t = index % T, d = index / T;
      for (int p = 0; p < P; ++p) out.push_back(rank(t, d, p));
      break;
    }
    case GroupKind::kExpert: {
      const int E = std::max(1, layout.ep);
      int t = index % T, rest = index / T;
      int blocks = std::max(1, D / E);
      int b = rest % blocks, p = rest / blocks;
      for (int e = 0; e < E; ++e) out.push_back(rank(t, b * E + e, p));
      break;
    }
  }
  return out;
}

std::vector<int> CommPlan::GroupGpus(GroupKind k, int index) const {
  std::vector<int> out = GroupRanks(k, index);
  for (int& r : out) {
    // A plan that was never laid out (the job did not fit) has no GPUs to name.
    if (r < 0 || static_cast<size_t>(r) >= rank_to_gpu.size()) return {};
    r = rank_to_gpu[static_cast<size_t>(r)];
  }
  return out;
}

namespace {

// GPUs sorted by their place in the switch tree (core, spine, leaf, node, local index), so
// that neighbours in the list are neighbours in the fabric.
std::vector<int> TopologyOrder(const model::Topology& topo, std::span<const int> gpus,
                               std::vector<int>* node_of) {
  const int T = static_cast<int>(topo.tiers.size());
  struct Item {
    int gpu, node;
  };
  std::vector<Item> items;
  items.reserve(gpus.size());
  for (int g : gpus) items.push_back({g, NodeOfGpu(topo, g)});
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    if (a.node != b.node) {
      for (int t = T - 1; t >= 0; --t) {
        int x = topo.AncestorAt(a.node, t), y = topo.AncestorAt(b.node, t);
        if (x != y) return x < y;
      }
      return a.node < b.node;
    }
    return a.gpu < b.gpu;
  });
  std::vector<int> out;
  out.reserve(items.size());
  node_of->clear();
  for (const Item& i : items) {
    out.push_back(i.gpu);
    node_of->push_back(i.node);
  }
  return out;
}

// Tensor peers on different nodes, consecutive peers under different leaves where the
// allocation spans several: nodes are interleaved leaf by leaf, and rank r takes slot r / N
// of node r mod N.
std::vector<int> SpreadOrder(const model::Topology& topo, const std::vector<int>& sorted,
                             const std::vector<int>& node_of) {
  std::vector<int> nodes;
  std::vector<std::vector<int>> per_node;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (nodes.empty() || nodes.back() != node_of[i]) {
      nodes.push_back(node_of[i]);
      per_node.emplace_back();
    }
    per_node.back().push_back(sorted[i]);
  }
  // Interleave by leaf: the k-th node of every leaf, then the (k+1)-th, ...
  std::vector<std::vector<int>> by_leaf;
  std::vector<int> leaf_ids;
  for (size_t i = 0; i < nodes.size(); ++i) {
    int leaf = topo.nodes[nodes[i]].leaf;
    auto it = std::find(leaf_ids.begin(), leaf_ids.end(), leaf);
    if (it == leaf_ids.end()) {
      leaf_ids.push_back(leaf);
      by_leaf.emplace_back();
      it = leaf_ids.end() - 1;
    }
    by_leaf[it - leaf_ids.begin()].push_back(static_cast<int>(i));
  }
  std::vector<int> order;
  for (size_t k = 0; order.size() < nodes.size(); ++k) {
    for (auto& l : by_leaf) {
      if (k < l.size()) order.push_back(l[k]);
    }
  }
  std::vector<int> out;
  out.reserve(sorted.size());
  for (size_t slot = 0; out.size() < sorted.size(); ++slot) {
    for (int i : order) {
      if (slot < per_node[i].size()) out.push_back(per_node[i][slot]);
    }
  }
  return out;
}

}  // namespace

Result<CommPlan> PlanCommunicators(const model::Topology& topo, std::span<const int> gpus,
                                   const Layout& layout, const CommOptions& options) {
  if (layout.tp < 1 || layout.pp < 1 || layout.dp < 1 || layout.ep < 1) {
    return Fail("parallel degrees must be positive (tp=", std::to_string(layout.tp),
                " pp=", std::to_string(layout.pp), " dp=", std::to_string(layout.dp), ")");
  }
  if (static_cast<int64_t>(gpus.size()) != int64_t{layout.tp} * layout.pp * layout.dp) {
    return Fail("the allocation has ", std::to_string(gpus.size()),
                " GPUs but tp·pp·dp = ", std::to_string(layout.Ranks()));
  }
  if (layout.dp % layout.ep != 0) {
    return Fail("ep=", std::to_string(layout.ep),
                " does not divide dp=", std::to_string(layout.dp));
  }
  for (int g : gpus) {
    if (g < 0 || g >= topo.NumGpus())
      return Fail("GPU ", std::to_string(g), " is not in the topology");
  }
  CommPlan plan;
  plan.layout = layout;
  plan.order = options.order;
  const int T = layout.tp, D = layout.dp, P = layout.pp;
  const int n = layout.Ranks();
  if (options.order == RankOrder::kAsGiven) {
    plan.rank_to_gpu.assign(gpus.begin(), gpus.end());
  } else {
    std::vector<int> node_of;
    std::vector<int> sorted = TopologyOrder(topo, gpus, &node_of);
    if (options.order == RankOrder::kSpreadTensor) sorted = SpreadOrder(topo, sorted, node_of);
    plan.rank_to_gpu.resize(n);
    for (int p = 0; p < P; ++p) {
      for (int d = 0; d < D; ++d) {
        for (int t = 0; t < T; ++t) {
          int rank = t + T * (d + D * p);
          int pos = options.order == RankOrder::kPipelineInner ? t + T * (p + P * d) : rank;
          plan.rank_to_gpu[rank] = sorted[pos];
        }
      }
    }
  }
  // The environment: algorithms the plan would use for the data-parallel gradient buckets
  // and the tensor-parallel all-reduces of group 0.
  std::vector<Algorithm> algos;
  std::vector<Protocol> protos;
  bool nvls = true;
  for (GroupKind k : {GroupKind::kTensor, GroupKind::kData}) {
    auto g = plan.GroupGpus(k, 0);
    if (g.size() < 2) continue;
    for (int64_t bytes : {int64_t{64} << 10, options.allreduce_threshold_bytes}) {
      auto c = PlanCollective(topo, g, Collective::kAllReduce, bytes, options);
      algos.push_back(c.algorithm);
      protos.push_back(c.protocol);
    }
  }
  for (int g : plan.rank_to_gpu) {
    if (!HasNvls(topo.TypeOf(NodeOfGpu(topo, g)))) {
      nvls = false;
      break;
    }
  }
  plan.env = CommEnvironment(options, algos, protos, nvls);
  return plan;
}

CollectiveCost PlanCollective(const model::Topology& topo, std::span<const int> gpus, Collective op,
                              int64_t bytes, const CommOptions& options) {
  if (options.allreduce_algo != Algorithm::kAuto) {
    return CostCollective(topo, gpus, op, bytes, options.allreduce_algo, options.cost);
  }
  if (op != Collective::kAllReduce || bytes < options.allreduce_threshold_bytes) {
    return CostCollective(topo, gpus, op, bytes, Algorithm::kAuto, options.cost);
  }
  // At or above the threshold: bandwidth-bound algorithms only.
  CollectiveCost ring = CostCollective(topo, gpus, op, bytes, Algorithm::kRing, options.cost);
  CollectiveCost nvls = CostCollective(topo, gpus, op, bytes, Algorithm::kNvls, options.cost);
  if (nvls.algorithm == Algorithm::kNvls && nvls.seconds < ring.seconds) return nvls;
  return ring;
}

namespace {

std::string NcclAlgoName(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "Ring";
    // NCCL has no separate hierarchical algorithm: its tree is already intra-node chain +
    // inter-node tree (CollNet needs switch support we do not model), so both map to Tree.
    case Algorithm::kTree:
    case Algorithm::kHierarchical:
      return "Tree";
    case Algorithm::kNvls:
      return "NVLS";
    case Algorithm::kAuto:
      return "";
  }
  return "";
}

std::string JoinSet(const std::vector<std::string>& order, const std::set<std::string>& have) {
  std::vector<std::string> parts;
  for (const auto& s : order) {
    if (have.count(s)) parts.push_back(s);
  }
  return Join(parts, ",");
}

}  // namespace

std::map<std::string, std::string> CommEnvironment(const CommOptions& o,
                                                   const std::vector<Algorithm>& algorithms,
                                                   const std::vector<Protocol>& protocols,
                                                   bool nvls_capable) {
  std::map<std::string, std::string> env;
  std::set<std::string> algo_set, proto_set;
  if (o.allreduce_algo != Algorithm::kAuto) {
    algo_set.insert(NcclAlgoName(o.allreduce_algo));
  } else {
    for (Algorithm a : algorithms) {
      if (!NcclAlgoName(a).empty()) algo_set.insert(NcclAlgoName(a));
    }
    algo_set.insert("Ring");  // every collective other than AllReduce needs it
  }
  for (Protocol p : protocols) proto_set.insert(std::string(ProtocolName(p)));
  proto_set.insert("Simple");
  std::string algo = JoinSet({"NVLS", "Tree", "Ring"}, algo_set);
  if (o.allreduce_algo != Algorithm::kAuto && !algo.empty()) {
    // ALLREDUCE_ALGO pins the all-reduce only: NCCL's per-collective form (NCCL 2.24 and
    // newer) leaves all-gather, reduce-scatter and broadcast free to use Ring.
    algo = "allreduce:" + ToLower(algo);
  }
  std::string proto = JoinSet({"LL", "LL128", "Simple"}, proto_set);
  const int64_t buffer = std::clamp<int64_t>(o.buffer_bytes, 1 << 20, int64_t{1} << 30);
  // RoCE traffic class = DSCP << 2; IB service level per class.
  int dscp = 26, sl = 3;
  if (o.traffic == TrafficClass::kPriority) dscp = 34, sl = 4;
  if (o.traffic == TrafficClass::kBulk) dscp = 10, sl = 1;
  const std::string ifname = o.socket_ifname.empty() ? "^lo,docker" : o.socket_ifname;

  switch (o.backend) {
    case model::Backend::kCuda:
    case model::Backend::kRocm: {
      // RCCL reads the NCCL_* names itself.
      env["NCCL_ALGO"] = algo;
      env["NCCL_PROTO"] = proto;
      env["NCCL_BUFFSIZE"] = std::to_string(buffer);
      env["NCCL_IB_TC"] = std::to_string(dscp << 2);
      env["NCCL_IB_SL"] = std::to_string(sl);
      env["NCCL_SOCKET_IFNAME"] = ifname;
      env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
      if (o.backend == model::Backend::kCuda) {
        env["NCCL_NVLS_ENABLE"] = nvls_capable && algo_set.count("NVLS") ? "1" : "0";
      }
      break;
    }
    case model::Backend::kAscend: {
      env["HCCL_CONNECT_TIMEOUT"] = "600";
      env["HCCL_EXEC_TIMEOUT"] = "1800";
      // HCCL_BUFFSIZE is in MB.
      env["HCCL_BUFFSIZE"] = std::to_string(std::max<int64_t>(1, buffer >> 20));
      env["HCCL_RDMA_TC"] = std::to_string(dscp << 2);
      env["HCCL_RDMA_SL"] = std::to_string(sl);
      env["HCCL_SOCKET_IFNAME"] = ifname;
      env["HCCL_ASYNC_ERROR_HANDLING"] = "1";  // torch_npu's watchdog, as TORCH_NCCL_...=1
      if (o.allreduce_algo == Algorithm::kRing) env["HCCL_ALGO"] = "level0:NA;level1:ring";
      if (o.allreduce_algo == Algorithm::kTree || o.allreduce_algo == Algorithm::kHierarchical) {
        env["HCCL_ALGO"] = "level0:NA;level1:H-D_R";
      }
      break;
    }
    case model::Backend::kMusa: {
      env["MCCL_ALGO"] = algo;
      env["MCCL_PROTO"] = proto;
      env["MCCL_BUFFSIZE"] = std::to_string(buffer);
      env["MCCL_IB_TC"] = std::to_string(dscp << 2);
      env["MCCL_IB_SL"] = std::to_string(sl);
      env["MCCL_SOCKET_IFNAME"] = ifname;
      env["TORCH_MCCL_ASYNC_ERROR_HANDLING"] = "1";
      break;
    }
  }
  return env;
}

CommOptions CommOptionsFrom(const model::EngineConfig& config, model::Backend backend,
                            int priority) {
  CommOptions o;
  o.backend = backend;
  o.allreduce_algo = ParseAlgorithm(config.allreduce_algo).value_or(Algorithm::kAuto);
  o.allreduce_threshold_bytes = config.allreduce_threshold_bytes;
  o.buffer_bytes = config.network_buffer_size_bytes;
  o.traffic = TrafficClassForPriority(priority);
  return o;
}

}  // namespace tianshu::comm
