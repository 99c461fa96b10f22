#include <algorithm>

#include "tianshu/base/strings.h"
#include "tianshu/engine/engine.h"
#include "tianshu/engine/plugin_options.h"
#include "tianshu/engine/policy.h"
#include "tianshu/placement/strategy.h"

#include <set>
#include <tuple>

namespace tianshu::engine {

Status EngineOptions::Validate() const {
  if (auto st = strategy.Validate(); !st) return st;
  if (large_queue_threshold < 0) return Fail("large_queue_threshold cannot be negative");
  if (config.colocation != "none" && config.colocation != "time-slice" &&
      config.colocation != "priority") {
    return Fail("unknown colocation '", config.colocation, "'; known: none, time-slice, priority");
  }
  if (max_placements_per_cycle < 0) return Fail("max_placements_per_cycle cannot be negative");
  if (max_queue_scan < 0) return Fail("max_queue_scan cannot be negative");
  if (compact_wait_ratio < 0 || compact_max_wait_s < 0 || compact_slowdown_tolerance < 0) {
    return Fail(
        "compact_wait_ratio, compact_max_wait_s and compact_slowdown_tolerance cannot be "
        "negative");
  }
  for (size_t i = 1; i < las.thresholds_gpu_s.size(); ++i) {
    if (las.thresholds_gpu_s[i] <= las.thresholds_gpu_s[i - 1]) {
      return Fail("las.thresholds must increase");
    }
  }
  return Ok();
}

std::vector<std::string> PresetNames() {
  return {"mainstream", "fifo", "slurm", "tiresias", "tianshu"};
}
std::vector<std::string> ComparedPresetNames() {
  return {"mainstream", "slurm", "tiresias", "tianshu"};
}

std::optional<model::Diagnostic> FindPluginNameProblem(const model::EngineConfig& config) {
  for (const auto& [path, name, what, known] :
       {std::tuple{"scheduler.algorithm", config.algorithm, "placement strategy",
                   placement::StrategyNames()},
        std::tuple{"scheduler.order", config.order, "ordering policy", OrderPolicyNames()},
        std::tuple{"scheduler.backfill", config.backfill, "backfill policy",
                   BackfillPolicyNames()}}) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string near = NearestWord(name, known);
    model::Diagnostic d{
        .path = path,
        .message = "unknown " + std::string(what) + " '" + name + "'" +
                   (near.empty() ? std::string() : " (did you mean '" + near + "'?)") +
                   "; registered: " + Join(known, ", ")};
    if (auto at = config.plugin_at.find(path); at != config.plugin_at.end()) {
      d.file = at->second.file;
      d.line = at->second.line;
      d.column = at->second.column;
    }
    return d;
  }
  // plugins: entries name registered plugins, whose own checks read their options.
  std::set<std::string> known;
  for (const auto& names :
       {placement::StrategyNames(), OrderPolicyNames(), BackfillPolicyNames(),
        PreemptionPolicyNames(), ElasticPolicyNames(), MigrationPolicyNames()}) {
    known.insert(names.begin(), names.end());
  }
  return FindPluginOptionsProblem(config, {known.begin(), known.end()});
}

Result<EngineOptions> OptionsFromConfig(const model::EngineConfig& config) {
  if (auto d = FindPluginNameProblem(config)) {
    return Fail(d->file.empty() ? d->path + ": " + d->message : d->ToString());
  }
  EngineOptions o;
  o.config = config;
  o.placement = config.algorithm;
  o.strategy.weights = config.resource_weight;
  if (!config.topology_aware) o.strategy.weights.network = 0;
  o.policies.order = config.order;
  o.policies.backfill = config.backfill;
  // What a waiting job may evict: what its ordering policy's library bound to it (by attained
  // service under las, by remaining time under srtf, borrowed quota under fair-share), else
  // by priority.
  o.policies.preemption = config.preemption ? BoundPreemption(config.order) : "none";
  o.compact_max_wait_s = static_cast<double>(config.compact_wait_s);
  o.compact_wait_ratio = config.compact_wait_s > 0 ? 0.5 : 0;
  // The switches turn on what the policy library bound to them; with it not loaded they fail.
  o.policies.elastic = o.policies.migration = "none";
  if (config.elastic_scaling) {
    auto bound = BoundElasticScaling();
    if (!bound) {
      return Fail(
          "task_scheduler.elastic_scaling: no elastic scaling policy is registered (the policy "
          "library is not loaded)");
    }
    o.policies.elastic = *bound;
  }
  if (config.migration) {
    auto bound = BoundMigration();
    if (!bound) {
      return Fail(
          "scheduler.migration: no migration policy is registered (the policy library is not "
          "loaded)");
    }
    o.policies.migration = *bound;
  }
  // Batch searches stay for short queues; a long queue is placed by the greedy tree search.
  o.placement_large_queue =
      (config.algorithm == "genetic" || config.algorithm == "exact") ? "topology" : "";
  return o;
}

Result<EngineOptions> PresetOptions(std::string_view name) {
  std::string n = ToLower(name);
  if (n == "tianshu") {
    model::EngineConfig config;
    config.colocation = "priority";  // inference services overlay training's GPUs
    auto o = OptionsFromConfig(config);
    if (o) o->preset = "tianshu";
    return o;
  }
  EngineOptions o;
  o.preset = n;
  o.placement_large_queue = "";
  o.placement_small = "";
  // fifo is mainstream with YARN consolidation: the Tiresias simulator's fifo with
  // --scheme=yarn, and Microsoft's YARN on Philly.
  if (n == "mainstream" || n == "fifo") {
    const std::string placement = n == "fifo" ? "yarn" : "first-fit";
    o.config.algorithm = placement;
    o.config.topology_aware = false;
    o.config.preemption = false;
    o.placement = placement;
    o.strategy.weights.network = 0;
    o.policies = {.order = "fifo", .backfill = "none", .preemption = "none"};
    return o;
  }
  if (n == "slurm") {
    o.config.algorithm = "topology";
    o.config.preemption = false;
    o.placement = "topology";
    o.policies = {.order = "priority", .backfill = "time", .preemption = "none"};
    return o;
  }
  if (n == "tiresias") {
    o.config.algorithm = "best-fit";
    o.config.preemption = true;
    o.placement = "best-fit";
    o.policies = {.order = "las", .backfill = "greedy", .preemption = "las"};
    return o;
  }
  return Fail("unknown preset '", std::string(name), "'; known: ", Join(PresetNames(), ", "));
}

}  // namespace tianshu::engine
