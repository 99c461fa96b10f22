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
  if (config.preempt_for != "head" && config.preempt_for != "every-job") {
    return Fail("unknown preempt_for '", config.preempt_for, "'; known: head, every-job");
  }
  if (config.preempt_for == "every-job" && policies.backfill != "greedy") {
    return Fail("preempt_for every-job needs the greedy backfill, not '", policies.backfill, "'");
  }
  if (compact_wait_ratio < 0 || compact_max_wait_s < 0 || compact_slowdown_tolerance < 0) {
    return Fail(
        "compact_wait_ratio, compact_max_wait_s and compact_slowdown_tolerance cannot be "
        "negative");
  }
  const auto& las = config.las_thresholds_gpu_s;
  for (size_t i = 0; i < las.size(); ++i) {
    if (las[i] <= 0 || (i > 0 && las[i] <= las[i - 1])) {
      return Fail("scheduler.las_thresholds must be positive and increase");
    }
  }
  if (config.restart_overhead_s < 0) return Fail("scheduler.restart_overhead cannot be negative");
  return Ok();
}

std::vector<std::string> PresetNames() {
  return {"mainstream", "fifo", "kube-default", "volcano", "slurm", "tiresias", "tianshu"};
}
std::vector<std::string> ComparedPresetNames() {
  return {"mainstream", "slurm", "tiresias", "tianshu"};
}

std::optional<model::Diagnostic> FindPluginNameProblem(const model::EngineConfig& config) {
  std::vector<std::string> or_same = placement::StrategyNames();
  or_same.push_back("same");
  std::vector<std::string> or_auto = or_same;
  or_auto.push_back("auto");
  for (const auto& [path, name, what, known] :
       {std::tuple{"scheduler.algorithm", config.algorithm, "placement strategy",
                   placement::StrategyNames()},
        std::tuple{"scheduler.small_job_algorithm", config.small_job_algorithm,
                   "placement strategy", or_same},
        std::tuple{"scheduler.long_queue_algorithm", config.long_queue_algorithm,
                   "placement strategy", or_auto},
        std::tuple{"scheduler.order", config.order, "ordering policy", OrderPolicyNames()},
        std::tuple{"scheduler.backfill", config.backfill, "backfill policy",
                   BackfillPolicyNames()}}) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string near = NearestWord(name, known);
    return model::DiagnosticAt(
        config, path,
        "unknown " + std::string(what) + " '" + name + "'" +
            (near.empty() ? std::string() : " (did you mean '" + near + "'?)") +
            "; registered: " + Join(known, ", "));
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
    return Fail(d->ToString());
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
  auto strategy = [&](const std::string& name) { return name == "same" ? std::string() : name; };
  o.placement_small = strategy(config.small_job_algorithm);
  o.placement_large_queue =
      config.long_queue_algorithm != "auto" ? strategy(config.long_queue_algorithm)
      : (config.algorithm == "genetic" || config.algorithm == "exact") ? "topology"
                                                                       : "";
  o.large_queue_threshold = config.long_queue_length;
  o.binding = config.binding == "pod-each"   ? Binding::kPodEach
              : config.binding == "pod-gang" ? Binding::kPodGang
                                             : Binding::kJob;
  return o;
}

namespace {

// A preset that places with `placement`, blind to the network, and never preempts.
void TopologyUnaware(EngineOptions* o, const std::string& placement) {
  o->config.algorithm = placement;
  o->config.topology_aware = false;
  o->config.preemption = false;
  o->placement = placement;
  o->strategy.weights.network = 0;
}

}  // namespace

Result<EngineOptions> PresetOptions(std::string_view name) {
  std::string n = ToLower(name);
  if (n == "tianshu") {
    model::EngineConfig config;
    config.colocation = "priority";  // inference services overlay training's GPUs
    // A preemption goes ahead only where it is predicted to pay (engine::KeepVictimsThatPay).
    config.preemption_cost_model = true;
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
    TopologyUnaware(&o, n == "fifo" ? "yarn" : "first-fit");
    o.policies = {.order = "fifo", .backfill = "none", .preemption = "none"};
    return o;
  }
  // The default Kubernetes scheduler (kube-scheduler's default profile): the PrioritySort
  // queue (priority, then creation time); each pod scored by NodeResourcesFit with the
  // LeastAllocated strategy (the emptiest node first: spread) and
  // NodeResourcesBalancedAllocation (all resources of a node used alike: nothing to balance when
  // pods ask GPUs alone), bound on its own with no gang (no co-scheduling plugin), so a job's
  // bound pods hold their GPUs while it waits for the rest; a pod that fits nowhere waits
  // without blocking the ones behind it. DefaultPreemption (evicting pods of lower priority
  // classes) is not modelled: the traces have one class.
  if (n == "kube-default") {
    TopologyUnaware(&o, "spread");
    o.binding = Binding::kPodEach;
    o.policies = {.order = "priority", .backfill = "greedy", .preemption = "none"};
    return o;
  }
  // Volcano with its default actions (enqueue, allocate, backfill; no preempt or reclaim):
  // the priority and gang plugins (a job's tasks placed one by one and committed all or none;
  // a job that does not fit is skipped and the next one tried), binpack (the fullest node that
  // fits a task first, binpack.resources set to the GPU), and no network topology.
  if (n == "volcano") {
    TopologyUnaware(&o, "best-fit");
    o.binding = Binding::kPodGang;
    o.policies = {.order = "priority", .backfill = "greedy", .preemption = "none"};
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
    // The Tiresias simulator's own parameters (its dlas-gpu): queue limits of 3,250 and 7,200
    // GPU-seconds, a restart that costs nothing, its order inside a queue, and GPUs given down
    // the queues (every waiting job may preempt those below it).
    o.config.las_thresholds_gpu_s = {3250, 7200};
    o.config.restart_overhead_s = 0;
    o.config.las_queue_order = "preempted-first";
    o.config.preempt_for = "every-job";
    return o;
  }
  return Fail("unknown preset '", std::string(name), "'; known: ", Join(PresetNames(), ", "));
}

}  // namespace tianshu::engine
