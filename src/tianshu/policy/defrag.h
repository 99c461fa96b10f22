// Checkpoint-based migration for defragmentation ("defrag"): when the first waiting job (in
// priority order) has enough free GPUs in total but no placement because they are scattered
// (e.g. a 64-node gang on a cluster whose free GPUs are half-nodes), pick the nodes it should
// get (the freest), move the running jobs on them elsewhere — whole jobs, re-placed by a
// packing strategy onto capacity outside those nodes — and do so only when the GPU-time the
// waiting job gains (its expected wait without moves, from the running jobs' runtime estimates)
// exceeds the GPU-time the moved jobs lose to checkpoint, transfer and restart. Emits one
// MigrateJob per moved job; the waiting job starts in the next cycle.
//   o.policies.migration = "defrag";
//   // after Engine::Create(topo, o): Cycle() emits MigrateJob{id, ranks} for each moved job
#pragma once

#include <memory>

#include "tianshu/base/status.h"
#include "tianshu/engine/policy.h"
#include "tianshu/policy/options.h"

namespace tianshu::policy {

// Fails when the engine's strategy or MigrationOptions::strategy cannot be built.
[[nodiscard]] Result<std::unique_ptr<engine::ReshapePolicy>> MakeDefragPolicy(
    const engine::EngineOptions& options, const MigrationOptions& migration);

}  // namespace tianshu::policy
