// The entry point of the issue-6 policy library: registers its plugins in the engine's
// registries (policy.h), so that EngineOptions can name them:
//   ordering   "fair-share" (hierarchical weighted fair share with quotas), "srtf"
//   preemption "queue-reclaim" (take back quota other queues borrowed)
//   elastic    "elastic"   (grow into idle capacity, shrink to admit waiting work)
//   migration  "defrag"    (checkpoint-based moves that let a fragmented-out gang start)
//   placement  "by-speed"  (fastest accepted accelerator model that fits; wraps "topology")
// It also binds them to the configuration's switches (fair-share -> queue-reclaim, srtf -> srtf,
// task_scheduler.elastic_scaling -> elastic, scheduler.migration -> defrag) and registers the
// checks of the options `plugins: {elastic: {...}, defrag: {...}}` gives (options.h); every
// option comes from EngineOptions::config.
//   if (auto st = policy::RegisterBuiltinPolicies(); !st) return st;
//   o.policies.order = "fair-share"; auto e = engine::Engine::Create(topo, o);
#pragma once

#include "tianshu/base/status.h"
#include "tianshu/policy/options.h"

namespace tianshu::policy {

// Registers every policy above. Idempotent and thread-safe: the first call registers, later
// calls return that call's result. Fails when a name is already taken by someone else.
[[nodiscard]] Status RegisterBuiltinPolicies();

}  // namespace tianshu::policy
