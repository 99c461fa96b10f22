// The communicator plan of one job on its allocated GPUs: which GPU each rank gets, the
// tensor/pipeline/data/expert groups that follow, the collective algorithm and buffer per
// message, and the environment a launcher sets for the job's backend (NCCL, HCCL, RCCL, MCCL).
//
// Ranks follow Megatron's numbering, rank = t + T·(d + D·p) (tensor fastest, then data, then
// pipeline). What the plan chooses is the GPU behind each rank: tensor groups inside NVLink
// domains, data replicas of one tensor rank on the same local index (same rail), and either
// data replicas (kDataInner) or pipeline stages (kPipelineInner) on neighbouring nodes.
//   auto plan = PlanCommunicators(topo, allocated_gpus, {.tp = 8, .pp = 4, .dp = 32});
//   auto tp0 = plan->GroupGpus(GroupKind::kTensor, 0);   // 8 GPUs of one node
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/comm/cost_model.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/topology.h"

namespace tianshu::comm {

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int ep = 1;  // expert-parallel groups are consecutive data-parallel ranks
  int Ranks() const { return tp * pp * dp; }
};

enum class GroupKind : int8_t {
  kTensor,    // tensor (and sequence) parallel peers of one stage and replica
  kPipeline,  // the stages of one model replica slice
  kData,      // replicas holding the same shard
  kExpert,    // expert-parallel peers inside a data-parallel group
};
std::string_view GroupKindName(GroupKind k);

// How GPUs are handed to ranks.
enum class RankOrder : int8_t {
  kDataInner,      // topology order: tensor groups, then data replicas, on neighbouring nodes
  kPipelineInner,  // topology order: tensor groups, then pipeline stages, on neighbours
  kSpreadTensor,   // what-if: tensor peers on different nodes, alternating leaves (a bad
                   // placement, to show what it costs)
  kAsGiven,        // rank r gets gpus[r]: the caller already ordered them
};
std::string_view RankOrderName(RankOrder o);

// Class of service of a job's traffic, mapped to RoCE traffic class / IB service level.
enum class TrafficClass : int8_t {
  kBulk,      // low-priority and best-effort jobs (DSCP AF11)
  kStandard,  // ordinary training (DSCP AF31, the usual lossless RoCE class)
  kPriority,  // high-priority and latency-bound inference (DSCP AF41)
};
TrafficClass TrafficClassForPriority(int priority);

struct CommOptions {
  RankOrder order = RankOrder::kDataInner;
  model::Backend backend = model::Backend::kCuda;
  // ALLREDUCE_ALGO ("auto" lets the cost model pick per message).
  Algorithm allreduce_algo = Algorithm::kAuto;
  // scheduler.allreduce_threshold: gradient buckets are this size, and below it the plan
  // prefers latency-bound algorithms (tree / LL), at or above it bandwidth-bound ones.
  int64_t allreduce_threshold_bytes = 8'000'000;
  // NETWORK_BUFFER_SIZE: per-channel staging buffer (NCCL_BUFFSIZE / HCCL_BUFFSIZE).
  int64_t buffer_bytes = 4 << 20;
  TrafficClass traffic = TrafficClass::kStandard;
  std::string socket_ifname;  // bootstrap interface; "" = exclude loopback and docker
  CostOptions cost;
};

struct CommPlan {
  Layout layout;
  RankOrder order = RankOrder::kDataInner;
  std::vector<int> rank_to_gpu;  // global GPU id of every rank
  std::map<std::string, std::string> env;

  int NumGroups(GroupKind k) const;
  // Global GPU ids of group `index` of a kind, in rank order within the group.
  std::vector<int> GroupGpus(GroupKind k, int index) const;
  // The ranks (not GPUs) of that group.
  std::vector<int> GroupRanks(GroupKind k, int index) const;
};

// Builds the plan. Fails when the allocation does not hold tp·pp·dp GPUs, when ep does not
// divide dp, or when a GPU id is outside the topology.
[[nodiscard]] Result<CommPlan> PlanCommunicators(const model::Topology& topo,
                                                 std::span<const int> gpus, const Layout& layout,
                                                 const CommOptions& options = {});

// The algorithm the plan uses for `op` of `bytes` on a group: an explicit ALLREDUCE_ALGO if it
// is set (and the group can run it), otherwise latency-bound algorithms below the threshold
// and bandwidth-bound ones at or above it, cheapest first.
CollectiveCost PlanCollective(const model::Topology& topo, std::span<const int> gpus, Collective op,
                              int64_t bytes, const CommOptions& options);

// Environment for the backend's collective library. `algorithms` and `protocols` are the
// ones the plan chose across its groups (their union becomes NCCL_ALGO / NCCL_PROTO).
std::map<std::string, std::string> CommEnvironment(const CommOptions& options,
                                                   const std::vector<Algorithm>& algorithms,
                                                   const std::vector<Protocol>& protocols,
                                                   bool nvls_capable);

// CommOptions from the engine configuration and a job priority.
CommOptions CommOptionsFrom(const model::EngineConfig& config, model::Backend backend,
                            int priority);

}  // namespace tianshu::comm
