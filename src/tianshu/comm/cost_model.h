// The collective cost model: how long one collective takes on a concrete group of GPUs.
//
// Costs are alpha-beta, shaped like NCCL's own tuner: a latency term (a base per protocol
// plus one hop latency per algorithm step, intra-node or network, taken from the topology)
// plus bytes over the bus bandwidth that the algorithm reaches on the group's bottleneck
// link (NVLink, PCIe, the NICs the group uses, or a switch tier's share after
// oversubscription). Every function is pure, allocation-free on the hot path, thread-safe,
// and never fails: an empty or one-GPU group costs 0. GPU ids are global
// (`node.first_gpu + local`), listed in rank order.
//   std::vector<int> gpus = {0, 1, 2, 3, 4, 5, 6, 7};
//   double s = CollectiveSeconds(topo, gpus, Collective::kAllReduce, 1 << 30, Algorithm::kAuto);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "tianshu/model/topology.h"

namespace tianshu::comm {

class BandwidthMatrix;  // bandwidth_matrix.h

// The path between two GPUs, as an ordered scale from nearest to farthest.
enum class LinkClass : int8_t {
  kSameDevice,  // both ranks share one accelerator: a device-memory copy
  kNvLink,      // NVLink / NVSwitch (or HCCS, Infinity Fabric) inside one node
  kPcieSwitch,  // peer-to-peer under one PCIe switch
  kPcieHost,    // through the host bridge / CPU interconnect of one node
  kNicLeaf,     // NIC to NIC through one leaf (ToR or rail) switch
  kLeafSpine,   // up a leaf's uplinks to a spine and down again
  kSpineCore,   // up to the core tier and down again
};
std::string_view LinkClassName(LinkClass c);

enum class Collective : int8_t {
  kAllReduce,      // bytes = buffer per rank
  kAllGather,      // bytes = gathered output per rank (nccl-tests "size")
  kReduceScatter,  // bytes = input per rank before scattering
  kAllToAll,       // bytes = total a rank sends (to all peers together)
  kBroadcast,      // bytes = buffer
  kSendRecv,       // bytes = message; every rank i sends to rank i+1 concurrently
};
std::string_view CollectiveName(Collective c);

enum class Algorithm : int8_t {
  kAuto,          // cheapest of ring, tree and NVLS where the group can run them, as NCCL picks
                  // (hierarchical is priced only when asked for: NCCL has no such algorithm)
  kRing,          // one ring per channel through every rank
  kTree,          // chain inside a node, double binary tree across nodes
  kHierarchical,  // intra-node reduce-scatter, inter-node ring among peers, intra all-gather
  kNvls,          // NVLink SHARP (NVSwitch reduces in-network; Hopper and later)
};
std::string_view AlgorithmName(Algorithm a);
// "auto", "ring", "tree", "hierarchical", "nvls" (case-insensitive); nullopt otherwise.
std::optional<Algorithm> ParseAlgorithm(std::string_view s);

// NCCL's wire protocols: LL trades half its bandwidth for the lowest latency, LL128 loses
// 1/16th, Simple has full bandwidth and the highest per-step latency.
enum class Protocol : int8_t {
  kLL,      // 8-byte stores with inline flags
  kLL128,   // 128-byte lines with inline flags
  kSimple,  // bulk copies with fences
};
std::string_view ProtocolName(Protocol p);

struct CostOptions {
  // Measured bandwidths that replace nominal figures where they cover a pair (may be null).
  const BandwidthMatrix* measured = nullptr;
  // True: every other node under a switch is as busy as ours, so a group gets the share of a
  // switch's uplink proportional to its nodes there (what a packed cluster sees). False: the
  // group has the fabric to itself (what a lone benchmark such as nccl-tests sees).
  bool contended = true;
  // Allowed protocols; the default lets the model pick, like NCCL.
  bool allow_ll = true;
  bool allow_ll128 = true;
};

// What the model found for one collective.
struct CollectiveCost {
  double seconds = 0;
  Algorithm algorithm = Algorithm::kRing;
  Protocol protocol = Protocol::kSimple;
  double latency_seconds = 0;    // the alpha part
  double bus_bytes_per_sec = 0;  // nccl-tests bus bandwidth reached (0 for one rank)
  LinkClass bottleneck = LinkClass::kSameDevice;  // the class that limits the bandwidth
  LinkClass span = LinkClass::kSameDevice;        // the farthest class the group crosses
};

// The class of the path between two GPUs.
LinkClass ClassBetween(const model::Topology& topo, int gpu_a, int gpu_b);

// Cost of `op` over `gpus` with `algo` (kAuto picks the cheapest; an algorithm the group
// cannot run, such as NVLS without NVSwitch SHARP, falls back to the cheapest that it can).
CollectiveCost CostCollective(const model::Topology& topo, std::span<const int> gpus, Collective op,
                              int64_t bytes, Algorithm algo = Algorithm::kAuto,
                              const CostOptions& options = {});

// Seconds only; the call placement/ uses to price a candidate.
inline double CollectiveSeconds(const model::Topology& topo, std::span<const int> gpus,
                                Collective op, int64_t bytes, Algorithm algo = Algorithm::kAuto,
                                const CostOptions& options = {}) {
  return CostCollective(topo, gpus, op, bytes, algo, options).seconds;
}

// The per-rank bandwidth (bytes/s) a bandwidth-bound ring over `gpus` reaches, i.e. the
// nccl-tests bus bandwidth of a large AllReduce; `bottleneck` (optional) receives the link
// class that limits it.
double BottleneckBandwidth(const model::Topology& topo, std::span<const int> gpus,
                           const CostOptions& options = {}, LinkClass* bottleneck = nullptr);

// Converts a measured time into nccl-tests bus bandwidth (bytes/s) for `ranks` ranks
// (Jeaugey, nccl-tests doc/PERFORMANCE.md: busbw = algbw * factor, e.g. 2(n-1)/n AllReduce).
double BusBandwidth(Collective op, int ranks, int64_t bytes, double seconds);

// Node holding a global GPU id (binary search over Node::first_gpu); -1 if out of range.
int NodeOfGpu(const model::Topology& topo, int gpu);

// True when a node type can run NVLS: NVIDIA NVSwitch systems of the Hopper generation on.
bool HasNvls(const model::ServerType& type);

}  // namespace tianshu::comm
