// Elastic scaling ("elastic"): every task_scheduler.scaling_interval, each running elastic job
// (JobSpec::elastic) may grow by whole nodes into idle capacity no waiting job is counted on,
// when the cost model (estimate/ with comm/ pricing, parallelism re-planned for the new size)
// predicts a throughput gain that pays back the checkpoint-restart; and when a waiting job does
// not fit, elastic jobs of no higher priority give back nodes (never below their min_nodes)
// until it does. Every resize is a ResizeJob: checkpoint, restart at the new size.
// Node bounds: the job's elastic range, clamped by task_scheduler.min_nodes / max_nodes.
//   o.config.elastic_scaling = true; o.policies.elastic = "elastic";
//   // after Engine::Create(topo, o): Cycle() emits ResizeJob{id, ranks} for grows and shrinks
#pragma once

#include <memory>
#include <span>

#include "tianshu/base/status.h"
#include "tianshu/engine/policy.h"
#include "tianshu/estimate/parallel.h"
#include "tianshu/policy/options.h"

namespace tianshu::policy {

// Fails when the engine's placement strategy cannot be built.
[[nodiscard]] Result<std::unique_ptr<engine::ReshapePolicy>> MakeElasticPolicy(
    const engine::EngineOptions& options, const ElasticOptions& elastic);

// The parallelism a resized job restarts with on its new ranks: the configuration the grow was
// priced with (estimate::SearchParallelism on the ranks' GPUs). For whoever carries out a
// ResizeJob, which does not carry it. Fails when the job has no model shape or nothing fits.
[[nodiscard]] Result<estimate::ParallelConfig> ReplanParallelism(
    const model::Topology& topo, const model::JobSpec& job,
    std::span<const placement::RankSlot> ranks, const model::EngineConfig& config);

}  // namespace tianshu::policy
