// Helpers shared by the elastic and migration policies: whether a cycle's working state is
// safe to reshape on, what a checkpoint-restart costs, the throughput the cost model predicts
// for a job on a set of GPUs, and small placement utilities.
//   if (!Quiescent(view, work)) return {};
//   double s = RestartCostS(topo, spec, nodes, /*restart_s=*/60);
#pragma once

#include <span>
#include <vector>

#include "tianshu/engine/policy.h"
#include "tianshu/estimate/search.h"
#include "tianshu/model/engine_config.h"

namespace tianshu::policy::internal {

// True when the cycle changed nothing before the reshape policies run (no start, no eviction):
// the working state equals the snapshot on every GPU. The engine does not tell a reshape policy
// which jobs it started or evicted in the cycle, so a policy only acts on a quiescent cycle,
// where view.running and view.pending are exact.
bool Quiescent(const engine::CycleView& view, const model::ClusterState& work);

// Distinct nodes of a placement, in first-use order.
std::vector<int> NodesOf(const std::vector<placement::RankSlot>& ranks);
std::vector<int> GpusOf(const std::vector<placement::RankSlot>& ranks);

// Seconds a checkpoint-restart of `job` onto `nodes` stops training: write its checkpoint
// (14 bytes per parameter, estimate/iteration.cc) to local NVMe, move each node's share over
// its NICs, read it back, plus a fixed restart cost.
double RestartCostS(const model::Topology& topo, const model::JobSpec& job,
                    std::span<const int> nodes, double restart_s);

// The cost model's parallelism search for the job on these GPUs, with the engine's checkpoint
// and communication settings.
[[nodiscard]] Result<estimate::SearchResult> SearchFor(const model::Topology& topo,
                                                       const model::JobSpec& job,
                                                       std::span<const int> gpus,
                                                       const model::EngineConfig& config);

// Samples per second the cost model predicts for the job on these GPUs with parallelism
// re-planned (estimate::SearchParallelism), 0 if nothing fits in memory. A job without a model
// shape is assumed to scale linearly (returns the GPU count).
double PredictThroughput(const model::Topology& topo, const model::JobSpec& job,
                         std::span<const int> gpus, const model::EngineConfig& config);

// Ranks per node of a job that is resized in whole nodes: its gpus_per_node, else the GPUs of
// the node its rank 0 runs on.
int RanksPerNode(const engine::JobRecord& job, const model::Topology& topo);

}  // namespace tianshu::policy::internal
