#include "tianshu/comm/cost_model.h"

#include <algorithm>
#include <vector>

#include "tianshu/base/strings.h"
#include "tianshu/comm/internal/algorithms.h"
#include "tianshu/comm/internal/link_paths.h"
#include "tianshu/comm/internal/shape.h"

// The link classification lives in internal/link_paths, the group analysis in internal/shape
// and the per-algorithm formulas in internal/algorithms; this file picks among them.
namespace tianshu::comm {

std::string_view LinkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kSameDevice:
      return "same-device";
    case LinkClass::kNvLink:
      return "nvlink";
    case LinkClass::kPcieSwitch:
      return "pcie-switch";
    case LinkClass::kPcieHost:
      return "pcie-host";
    case LinkClass::kNicLeaf:
      return "nic-leaf";
    case LinkClass::kLeafSpine:
      return "leaf-spine";
    case LinkClass::kSpineCore:
      return "spine-core";
  }
  return "?";
}

std::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "allreduce";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reducescatter";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

std::string_view AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kNvls:
      return "nvls";
  }
  return "?";
}

std::optional<Algorithm> ParseAlgorithm(std::string_view s) {
  std::string l = ToLower(s);
  if (l == "auto") return Algorithm::kAuto;
  if (l == "ring") return Algorithm::kRing;
  if (l == "tree") return Algorithm::kTree;
  if (l == "hierarchical") return Algorithm::kHierarchical;
  if (l == "nvls") return Algorithm::kNvls;
  return std::nullopt;
}

std::string_view ProtocolName(Protocol p) {
  switch (p) {
    case Protocol::kLL:
      return "LL";
    case Protocol::kLL128:
      return "LL128";
    case Protocol::kSimple:
      return "Simple";
  }
  return "?";
}

int NodeOfGpu(const model::Topology& topo, int gpu) {
  const auto& nodes = topo.nodes;
  if (nodes.empty() || gpu < 0 || gpu >= topo.NumGpus()) return -1;
  // Nodes are numbered in first_gpu order by Topology::Finalize.
  auto it = std::upper_bound(nodes.begin(), nodes.end(), gpu,
                             [](int g, const model::Node& n) { return g < n.first_gpu; });
  return static_cast<int>(it - nodes.begin()) - 1;
}

bool HasNvls(const model::ServerType& type) {
  if (type.accelerator.vendor != model::Vendor::kNvidia) return false;
  if (type.intra_kind != model::IntraNodeKind::kNvSwitch) return false;
  const std::string& m = type.accelerator.model;
  // Hopper (H100/H200/H800, GH200) and Blackwell (B100/B200/GB200) NVSwitch systems.
  return !m.empty() && (m[0] == 'H' || m[0] == 'B' || StartsWith(m, "GH") || StartsWith(m, "GB"));
}

using internal::Analyze;
using internal::BusFactor;
using internal::Candidate;
using internal::kInf;
using internal::Pair;
using internal::SendRecvCost;
using internal::Shape;

LinkClass ClassBetween(const model::Topology& topo, int gpu_a, int gpu_b) {
  int na = NodeOfGpu(topo, gpu_a), nb = NodeOfGpu(topo, gpu_b);
  if (na < 0 || nb < 0) return LinkClass::kSpineCore;
  return Pair(topo, gpu_a, gpu_b, na, nb, {}).cls;
}

double BusBandwidth(Collective op, int ranks, int64_t bytes, double seconds) {
  if (seconds <= 0 || ranks <= 0) return 0;
  return static_cast<double>(bytes) / seconds * BusFactor(op, ranks);
}

CollectiveCost CostCollective(const model::Topology& topo, std::span<const int> gpus, Collective op,
                              int64_t bytes_i, Algorithm algo, const CostOptions& o) {
  CollectiveCost out;
  out.algorithm = algo == Algorithm::kAuto ? Algorithm::kRing : algo;
  if (gpus.size() <= 1 || bytes_i <= 0) return out;
  const double bytes = static_cast<double>(bytes_i);
  if (op == Collective::kSendRecv) return SendRecvCost(topo, gpus, bytes, o);

  Shape sh = Analyze(topo, gpus, o);
  if (sh.nodes == 0) return out;
  out.span = sh.nodes > 1 ? sh.net_class : sh.intra.cls;

  double best = kInf;
  auto consider = [&](Algorithm a, Protocol p, const Candidate& c) {
    double t = c.lat + c.bw_seconds;
    if (!(t < best)) return;
    best = t;
    out.seconds = t;
    out.algorithm = a;
    out.protocol = p;
    out.latency_seconds = c.lat;
    out.bus_bytes_per_sec = c.busbw;
    out.bottleneck = c.bottleneck;
  };
  const bool all_reduce = op == Collective::kAllReduce;
  const bool can_tree = all_reduce && sh.nodes > 1;
  const bool can_hier =
      (all_reduce || op == Collective::kAllGather || op == Collective::kReduceScatter) &&
      sh.nodes > 1 && sh.max_ppn > 1 && sh.uniform;
  const bool can_nvls = all_reduce && sh.nvls && sh.max_ppn > 1 && sh.uniform;
  Algorithm want = algo;
  if ((want == Algorithm::kTree && !can_tree) || (want == Algorithm::kHierarchical && !can_hier) ||
      (want == Algorithm::kNvls && !can_nvls)) {
    want = Algorithm::kAuto;  // the group cannot run it: NCCL would fall back too
  }
  for (Protocol p : {Protocol::kLL, Protocol::kLL128, Protocol::kSimple}) {
    if (p == Protocol::kLL && !o.allow_ll) continue;
    if (p == Protocol::kLL128 && (!o.allow_ll128 || !sh.ll128)) continue;
    if (op == Collective::kAllToAll) {
      if (p == Protocol::kLL128) continue;
      consider(Algorithm::kRing, p, AllToAll(sh, bytes, p));
      continue;
    }
    if (want == Algorithm::kAuto || want == Algorithm::kRing) {
      consider(Algorithm::kRing, p, Ring(sh, op, bytes, p));
    }
    if (can_tree && (want == Algorithm::kAuto || want == Algorithm::kTree)) {
      consider(Algorithm::kTree, p, Tree(sh, bytes, p));
    }
    if (can_hier && want == Algorithm::kHierarchical) {
      consider(Algorithm::kHierarchical, p, Hierarchical(sh, op, bytes, p));
    }
    if (can_nvls && p == Protocol::kSimple &&
        (want == Algorithm::kAuto || want == Algorithm::kNvls)) {
      consider(Algorithm::kNvls, p, Nvls(sh, bytes, p));
    }
  }
  return out;
}

double BottleneckBandwidth(const model::Topology& topo, std::span<const int> gpus,
                           const CostOptions& o, LinkClass* bottleneck) {
  if (gpus.size() <= 1) {
    if (bottleneck) *bottleneck = LinkClass::kSameDevice;
    return kInf;
  }
  Shape sh = Analyze(topo, gpus, o);
  Candidate c = Ring(sh, Collective::kAllReduce, 1.0, Protocol::kSimple);
  if (bottleneck) *bottleneck = c.bottleneck;
  return c.busbw;
}

}  // namespace tianshu::comm
