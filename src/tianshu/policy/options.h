// Typed, validated options of the policy library's plugins, read from the engine configuration:
// the queue tree that weighted fair share and queue reclaim read comes from `queues:`, the cost
// knobs of elastic scaling and checkpoint-based migration from `plugins: {elastic: {...},
// defrag: {...}}` (engine/plugin_options.h). Nothing is process-wide: each engine reads its own.
//   model::EngineConfig c;  c.plugins["elastic"]["restart_s"] = {.value = "30"};
//   Result<ElasticOptions> e = ElasticOptionsFrom(c);   // restart_s 30, the rest defaults
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>
#include "tianshu/base/status.h"

#include "tianshu/model/engine_config.h"
#include "tianshu/model/load.h"

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

// The options `config` gives the plugins "elastic" and "defrag" (defaults for what it does not
// give): the first bad or unknown option, with its file, line and `plugins.NAME.KEY`, else
// nullopt (the checks registered with engine::RegisterPluginOptions).
std::optional<model::Diagnostic> CheckElasticOptions(const model::EngineConfig& config);
std::optional<model::Diagnostic> CheckMigrationOptions(const model::EngineConfig& config);
// The same, read: fails with the diagnostic's text.
[[nodiscard]] Result<ElasticOptions> ElasticOptionsFrom(const model::EngineConfig& config);
[[nodiscard]] Result<MigrationOptions> MigrationOptionsFrom(const model::EngineConfig& config);

}  // namespace tianshu::policy
