// Typed, validated options of the issue-6 policies: the queue tree that weighted fair share and
// queue reclaim read, and the cost knobs of elastic scaling and checkpoint-based migration.
// The queue tree comes from the engine configuration's `queues:` when it lists any; otherwise,
// and for the cost knobs, from what SetPolicyOptions set process-wide before Engine::Create
// (each engine copies what is set when its policies are built).
//   PolicyOptions o; o.queues.queues = {{.name = "team-a", .quota_gpus = 16}};
//   if (auto st = SetPolicyOptions(o); !st) std::cerr << st.error().message;
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/engine_config.h"

namespace tianshu::policy {

// One queue of the hierarchy (the `queues:` entries of the engine configuration).
using QueueSpec = model::QueueConfig;

struct QueueOptions {
  // Queues in any order; parents need not come first. A queue named "default" (weight 1, no
  // quota, borrowing) is added when absent; jobs naming an unknown queue count against it.
  std::vector<QueueSpec> queues;

  // Fails on: an empty or duplicate name, an unknown parent, a parent cycle, a weight <= 0, a
  // negative quota, children whose quotas add up to more than their parent's non-zero quota, and
  // a queue that may not borrow with a zero quota (it could never run anything).
  [[nodiscard]] Status Validate() const;
};

struct ElasticOptions {
  // A grow must raise predicted throughput (samples/s from estimate/) by at least this share.
  double min_throughput_gain = 0.05;
  // Fixed cost of a restart (process launch, communicator setup, data loader warm-up), added to
  // the checkpoint write and read that every resize pays.
  double restart_s = 60;

  [[nodiscard]] Status Validate() const;
};

struct MigrationOptions {
  // Strategy that re-places the jobs moved out of the way; best-fit packs them onto
  // partly used nodes, which is what consolidation wants.
  std::string strategy = "best-fit";
  double restart_s = 60;  // as ElasticOptions::restart_s
  // Wait assumed for a blocked job when no running job has a runtime estimate that would free
  // room for it (the gain side of the migration test).
  double unknown_wait_s = 3600;
  int max_moves = 64;       // most jobs moved in one cycle
  int max_wait_steps = 64;  // placement trials when estimating the wait without moves

  [[nodiscard]] Status Validate() const;
};

struct PolicyOptions {
  QueueOptions queues;
  ElasticOptions elastic;
  MigrationOptions migration;

  [[nodiscard]] Status Validate() const;
};

// Sets the options engines created from now on use. Validates first; on failure nothing
// changes. Thread-safe.
[[nodiscard]] Status SetPolicyOptions(const PolicyOptions& options);
// The options currently set (the defaults until SetPolicyOptions is called). Thread-safe.
PolicyOptions CurrentPolicyOptions();

}  // namespace tianshu::policy
