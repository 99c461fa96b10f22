#include <cmath>
#include <cstdio>
#include <map>

#include "tianshu/base/strings.h"
#include "tianshu/model/internal/parsers.h"

namespace tianshu::model::internal {

namespace {

void ParseNetwork(YamlReader& r, const YAML::Node& n, NetworkConfig* c) {
  const std::string p = "network";
  r.CheckKeys(n, p,
              {"probes", "probe_interval", "probe_bytes", "probe_seconds", "probe_timeout",
               "full_mesh_max_nodes", "measured_ttl", "slow_link_ratio", "use_measured", "watch",
               "step_time_growth", "replan_horizon", "replan_cooldown"});
  r.Bool(n, p, "probes", &c->probes);
  r.Bool(n, p, "use_measured", &c->use_measured);
  r.Bool(n, p, "watch", &c->watch);
  auto positive = [&](const char* key, int64_t* out) {
    if (r.Seconds(n, p, key, out) && *out <= 0) {
      r.Error(r.Get(n, key), p + "." + key, "must be at least 1 second");
    }
  };
  positive("probe_interval", &c->probe_interval_s);
  positive("probe_timeout", &c->probe_timeout_s);
  positive("measured_ttl", &c->measured_ttl_s);
  positive("replan_horizon", &c->replan_horizon_s);
  if (r.Seconds(n, p, "replan_cooldown", &c->replan_cooldown_s) && c->replan_cooldown_s < 0) {
    r.Error(r.Get(n, "replan_cooldown"), p + ".replan_cooldown", "cannot be negative");
  }
  if (r.Size(n, p, "probe_bytes", &c->probe_bytes) &&
      (c->probe_bytes < 1024 || c->probe_bytes > (int64_t{1} << 30))) {
    r.Error(r.Get(n, "probe_bytes"), p + ".probe_bytes", "must be between 1KiB and 1GiB");
  }
  r.Double(n, p, "probe_seconds", &c->probe_seconds, 0.1, 60);
  r.Int(n, p, "full_mesh_max_nodes", &c->full_mesh_max_nodes, 2, 64);
  r.Double(n, p, "slow_link_ratio", &c->slow_link_ratio, 0.05, 0.99);
  r.Double(n, p, "step_time_growth", &c->step_time_growth, 1.01, 100);
}

// `queues:`: a list of {name, parent, weight, quota, borrow}. Checks what one file can get wrong
// (names, parents, cycles, quotas of children above their parent's); errors point at the entry.
void ParseQueues(YamlReader& r, const YAML::Node& list, std::vector<QueueConfig>* out) {
  std::map<std::string, size_t> index;
  std::vector<YAML::Node> at;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node q = list[i];
    const std::string p = YamlReader::Index("queues", i);
    if (!r.ExpectMap(q, p)) continue;
    r.CheckKeys(q, p, {"name", "parent", "weight", "quota", "borrow"});
    QueueConfig c;
    if (!r.Require(q, p, "name") || !r.String(q, p, "name", &c.name)) continue;
    if (c.name.empty()) {
      r.Error(q, YamlReader::Child(p, "name"), "must not be empty");
      continue;
    }
    r.String(q, p, "parent", &c.parent);
    if (r.Double(q, p, "weight", &c.weight, 0, 1e9) && !(c.weight > 0)) {
      r.Error(r.Get(q, "weight"), YamlReader::Child(p, "weight"), "must be more than 0");
    }
    r.Int(q, p, "quota", &c.quota_gpus, 0, int64_t{1} << 40);
    r.Bool(q, p, "borrow", &c.borrow);
    if (!index.emplace(c.name, out->size()).second) {
      r.Error(q, YamlReader::Child(p, "name"), "duplicate queue '" + c.name + "'");
      continue;
    }
    out->push_back(c);
    at.push_back(q);
  }
  std::map<std::string, int64_t> child_quota;
  for (size_t i = 0; i < out->size(); ++i) {
    const QueueConfig& q = (*out)[i];
    const std::string p = YamlReader::Index("queues", i);
    if (q.parent.empty()) continue;
    if (!index.count(q.parent)) {
      r.Error(r.Get(at[i], "parent"), YamlReader::Child(p, "parent"),
              "unknown queue '" + q.parent + "'");
      continue;
    }
    child_quota[q.parent] += q.quota_gpus;
    size_t steps = 0;
    for (const QueueConfig* a = &q; !a->parent.empty() && index.count(a->parent);) {
      a = &(*out)[index.at(a->parent)];
      if (a == &q || ++steps > out->size()) {
        r.Error(r.Get(at[i], "parent"), YamlReader::Child(p, "parent"),
                "parents form a cycle through '" + q.name + "'");
        break;
      }
    }
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const QueueConfig& q = (*out)[i];
    const std::string p = YamlReader::Index("queues", i);
    auto it = child_quota.find(q.name);
    int64_t children = it == child_quota.end() ? 0 : it->second;
    if (q.quota_gpus > 0 && children > q.quota_gpus) {
      r.Error(at[i], YamlReader::Child(p, "quota"),
              "its children's quotas add up to " + std::to_string(children) +
                  " GPUs, more than its own " + std::to_string(q.quota_gpus));
    }
    if (!q.borrow && q.quota_gpus == 0 && children == 0) {
      r.Error(at[i], YamlReader::Child(p, "borrow"),
              "a queue that may not borrow needs a quota (it could never run anything)");
    }
  }
}

}  // namespace

EngineConfig ParseEngineConfig(YamlReader& r, const YAML::Node& root) {
  EngineConfig c;
  r.CheckKeys(root, "",
              {"kind", "cluster", "scheduler", "task_scheduler", "queues", "plugins", "network",
               "NETWORK_BUFFER_SIZE", "ALLREDUCE_ALGO", "CHECKPOINT_MODE", "SCHEDULER_BACKEND"});

  YAML::Node cluster = r.Get(root, "cluster");
  if (cluster.IsDefined() && r.ExpectMap(cluster, "cluster")) {
    r.CheckKeys(cluster, "cluster", {"node_discovery", "resource_weight", "rendezvous_ports"});
    std::string ports;
    if (r.String(cluster, "cluster", "rendezvous_ports", &ports)) {
      int low = 0, high = 0;
      char dash = 0, rest = 0;
      if (std::sscanf(ports.c_str(), "%d %c %d %c", &low, &dash, &high, &rest) != 3 ||
          dash != '-' || low < 1024 || high > 65535 || low > high) {
        r.Error(r.Get(cluster, "rendezvous_ports"), "cluster.rendezvous_ports",
                "expected LOW-HIGH with 1024 <= LOW <= HIGH <= 65535, got \"" + ports + "\"");
      } else {
        c.rendezvous_port_low = low;
        c.rendezvous_port_high = high;
      }
    }
    std::string discovery;
    if (r.Choice(cluster, "cluster", "node_discovery", {"dynamic", "static"}, &discovery)) {
      c.node_discovery = discovery == "static" ? NodeDiscovery::kStatic : NodeDiscovery::kDynamic;
    }
    YAML::Node w = r.Get(cluster, "resource_weight");
    if (w.IsDefined() && r.ExpectMap(w, "cluster.resource_weight")) {
      const std::string p = "cluster.resource_weight";
      r.CheckKeys(w, p, {"compute", "network", "memory"});
      size_t before = r.ErrorCount();
      r.Double(w, p, "compute", &c.resource_weight.compute, 0, 1);
      r.Double(w, p, "network", &c.resource_weight.network, 0, 1);
      r.Double(w, p, "memory", &c.resource_weight.memory, 0, 1);
      double sum = c.resource_weight.compute + c.resource_weight.network + c.resource_weight.memory;
      if (r.ErrorCount() == before && std::fabs(sum - 1.0) > 1e-6) {
        char buf[160];
        std::snprintf(
            buf, sizeof buf, "weights must sum to 1, got %g (compute %g + network %g + memory %g)",
            sum, c.resource_weight.compute, c.resource_weight.network, c.resource_weight.memory);
        r.Error(w, p, buf);
      }
    }
  }

  YAML::Node s = r.Get(root, "scheduler");
  if (s.IsDefined() && r.ExpectMap(s, "scheduler")) {
    const std::string p = "scheduler";
    r.CheckKeys(s, p,
                {"algorithm",
                 "topology_aware",
                 "max_retries",
                 "preemption",
                 "checkpoint_interval",
                 "allreduce_threshold",
                 "order",
                 "backfill",
                 "migration",
                 "compact_wait",
                 "colocation",
                 "gang_timeout",
                 "las_thresholds",
                 "las_queue_order",
                 "preempt_for",
                 "restart_overhead",
                 "preemption_cost_model",
                 "no_retry_exit_codes",
                 "binding",
                 "small_job_algorithm",
                 "long_queue_algorithm",
                 "long_queue_length"});
    // Plugin names: checked against the registries by engine::OptionsFromConfig.
    r.PluginName(s, p, "algorithm", &c.algorithm, &c.plugin_at);
    r.PluginName(s, p, "order", &c.order, &c.plugin_at);
    r.PluginName(s, p, "backfill", &c.backfill, &c.plugin_at);
    r.PluginName(s, p, "small_job_algorithm", &c.small_job_algorithm, &c.plugin_at);
    r.PluginName(s, p, "long_queue_algorithm", &c.long_queue_algorithm, &c.plugin_at);
    r.Int(s, p, "long_queue_length", &c.long_queue_length, 0, 1'000'000);
    // Its place is kept: `tianshu serve` refuses the pod bindings, naming the line.
    if (r.Choice(s, p, "binding", {"job", "pod-each", "pod-gang"}, &c.binding)) {
      r.Remember(s, p, "binding", &c.plugin_at);
    }
    r.Bool(s, p, "migration", &c.migration);
    r.Bool(s, p, "preemption_cost_model", &c.preemption_cost_model);
    r.Choice(s, p, "colocation", {"none", "time-slice", "priority"}, &c.colocation);
    if (r.Seconds(s, p, "gang_timeout", &c.gang_timeout_s) && c.gang_timeout_s < 0) {
      r.Error(r.Get(s, "gang_timeout"), "scheduler.gang_timeout", "cannot be negative");
    }
    if (r.Seconds(s, p, "compact_wait", &c.compact_wait_s) && c.compact_wait_s < 0) {
      r.Error(r.Get(s, "compact_wait"), "scheduler.compact_wait", "cannot be negative");
    }
    if (r.Seconds(s, p, "restart_overhead", &c.restart_overhead_s) && c.restart_overhead_s < 0) {
      r.Error(r.Get(s, "restart_overhead"), "scheduler.restart_overhead", "cannot be negative");
    }
    if (r.IntList(s, p, "las_thresholds", &c.las_thresholds_gpu_s, 1, 2'000'000'000)) {
      const YAML::Node list = r.Get(s, "las_thresholds");
      for (size_t i = 1; i < c.las_thresholds_gpu_s.size(); ++i) {
        if (c.las_thresholds_gpu_s[i] <= c.las_thresholds_gpu_s[i - 1]) {
          r.Error(list[i], YamlReader::Index("scheduler.las_thresholds", i),
                  "must be more than the threshold before it (" +
                      std::to_string(c.las_thresholds_gpu_s[i - 1]) + " GPU-seconds)");
          break;
        }
      }
    }
    r.Choice(s, p, "las_queue_order", {"entered", "preempted-first"}, &c.las_queue_order);
    if (r.Choice(s, p, "preempt_for", {"head", "every-job"}, &c.preempt_for) &&
        c.preempt_for == "every-job" && c.backfill != "greedy") {
      r.Error(r.Get(s, "preempt_for"), "scheduler.preempt_for",
              "every-job needs scheduler.backfill: greedy, not '" + c.backfill +
                  "' (only there does a blocked head hold nothing the jobs behind it could take)");
    }
    r.Bool(s, p, "topology_aware", &c.topology_aware);
    r.Int(s, p, "max_retries", &c.max_retries, 0, 1000);
    r.IntList(s, p, "no_retry_exit_codes", &c.no_retry_exit_codes, 1, 255);
    r.Bool(s, p, "preemption", &c.preemption);
    if (r.Seconds(s, p, "checkpoint_interval", &c.checkpoint_interval_s) &&
        c.checkpoint_interval_s <= 0) {
      r.Error(r.Get(s, "checkpoint_interval"), "scheduler.checkpoint_interval",
              "must be at least 1 second");
    }
    if (r.Size(s, p, "allreduce_threshold", &c.allreduce_threshold_bytes) &&
        c.allreduce_threshold_bytes <= 0) {
      r.Error(r.Get(s, "allreduce_threshold"), "scheduler.allreduce_threshold",
              "must be more than 0 bytes");
    }
  }

  YAML::Node t = r.Get(root, "task_scheduler");
  if (t.IsDefined() && r.ExpectMap(t, "task_scheduler")) {
    const std::string p = "task_scheduler";
    r.CheckKeys(t, p, {"elastic_scaling", "min_nodes", "max_nodes", "scaling_interval"});
    r.Bool(t, p, "elastic_scaling", &c.elastic_scaling);
    r.Int(t, p, "min_nodes", &c.min_nodes, 1, 1'000'000);
    std::string max_text;
    YAML::Node max_node = r.Get(t, "max_nodes");
    if (max_node.IsDefined() && max_node.IsScalar() &&
        (ToLower(max_node.Scalar()) == "unbounded" || max_node.Scalar() == "0")) {
      c.max_nodes = 0;
    } else {
      r.Int(t, p, "max_nodes", &c.max_nodes, 1, 1'000'000);
    }
    if (r.Seconds(t, p, "scaling_interval", &c.scaling_interval_s) && c.scaling_interval_s <= 0) {
      r.Error(r.Get(t, "scaling_interval"), "task_scheduler.scaling_interval",
              "must be at least 1 second");
    }
    if (c.max_nodes > 0 && c.min_nodes > c.max_nodes) {
      r.Error(t, "task_scheduler.min_nodes",
              "min_nodes (" + std::to_string(c.min_nodes) + ") is more than max_nodes (" +
                  std::to_string(c.max_nodes) + ")");
    }
  }

  YAML::Node net = r.Get(root, "network");
  if (net.IsDefined() && r.ExpectMap(net, "network")) ParseNetwork(r, net, &c.network);

  YAML::Node plugins = r.Get(root, "plugins");
  if (plugins.IsDefined() && r.ExpectMap(plugins, "plugins")) r.PluginOptions(plugins, &c);

  YAML::Node queues = r.Get(root, "queues");
  if (queues.IsDefined() && r.ExpectSeq(queues, "queues")) ParseQueues(r, queues, &c.queues);

  if (r.Size(root, "", "NETWORK_BUFFER_SIZE", &c.network_buffer_size_bytes) &&
      (c.network_buffer_size_bytes < 4'000'000 || c.network_buffer_size_bytes > 16 * 1024 * 1024)) {
    r.Error(r.Get(root, "NETWORK_BUFFER_SIZE"), "NETWORK_BUFFER_SIZE",
            "must be between 4MB and 16MiB, got " + r.Get(root, "NETWORK_BUFFER_SIZE").Scalar());
  }
  r.Choice(root, "", "ALLREDUCE_ALGO", AllreduceAlgoNames(), &c.allreduce_algo);
  std::string mode;
  if (r.Choice(root, "", "CHECKPOINT_MODE", {"async", "sync"}, &mode)) {
    c.checkpoint_mode = mode == "sync" ? CheckpointMode::kSync : CheckpointMode::kAsync;
  }
  std::string backend;
  if (r.Choice(root, "", "SCHEDULER_BACKEND", BackendNames(), &backend)) {
    c.scheduler_backend = *ParseBackend(backend);
  }
  return c;
}

}  // namespace tianshu::model::internal
