// The entry point of the issue-6 policy library: registers its plugins in the engine's
// registries (policy.h), so that EngineOptions can name them:
//   ordering   "fair-share" (hierarchical weighted fair share with quotas), "srtf"
//   preemption "queue-reclaim" (take back quota other queues borrowed)
//   elastic    "elastic"   (grow into idle capacity, shrink to admit waiting work)
//   migration  "defrag"    (checkpoint-based moves that let a fragmented-out gang start)
//   placement  "by-speed"  (fastest accepted accelerator model that fits; wraps "topology")
// Options come from SetPolicyOptions (options.h) and from EngineOptions::config.
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
