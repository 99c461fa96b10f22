// The engine configuration, with the keys our users already write and their defaults.
//
//   cluster:   {node_discovery: dynamic, resource_weight: {compute: 0.6, network: 0.3, memory:
//   0.1}} scheduler: {algorithm: genetic, topology_aware: true, max_retries: 5, preemption: true,
//               checkpoint_interval: 1800, allreduce_threshold: 8MB}
//   task_scheduler: {elastic_scaling: false, min_nodes: 1, max_nodes: 0, scaling_interval: 300}
//   scheduler.order: priority | fifo | las | srtf | fair-share; scheduler.backfill: time | greedy
//   | none; scheduler.migration: false; scheduler.colocation: none | time-slice | priority;
//   scheduler.compact_wait: 12h; scheduler.las_thresholds: [3600, 36000];
//   scheduler.restart_overhead: 60s; scheduler.preemption_cost_model: false;
//   scheduler.binding: job | pod-each | pod-gang;
//   scheduler.small_job_algorithm: topology; scheduler.long_queue_algorithm: auto;
//   scheduler.long_queue_length: 64; queues: [{name, parent, weight, quota, borrow}]
//   NETWORK_BUFFER_SIZE, ALLREDUCE_ALGO, CHECKPOINT_MODE, SCHEDULER_BACKEND (also from env).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/accelerator.h"
#include "tianshu/model/job.h"

namespace tianshu::model {

enum class NodeDiscovery {
  kDynamic,  // nodes join by registering their agent and leave by missing heartbeats
  kStatic,   // nodes come from the topology file; the server waits for their agents
};

struct ResourceWeight {
  double compute = 0.6;
  double network = 0.3;
  double memory = 0.1;
};

// One queue of the hierarchy `queues:` declares (weighted fair share with quotas). Jobs name
// their leaf queue (JobSpec::queue) and count against it and every ancestor.
struct QueueConfig {
  std::string name;
  std::string parent;      // "" = directly under the (implicit, unbounded) root
  double weight = 1;       // share of the parent's capacity relative to its siblings (> 0)
  int64_t quota_gpus = 0;  // guaranteed GPUs (whole-GPU equivalents); 0 = no guarantee
  bool borrow = true;      // may run beyond its quota on idle capacity (reclaimable there)
};

// network: the live network dimension (docs/network.md): bandwidth probes between idle
// nodes, the measured matrix placement and the communicator plan use, and the congestion
// watch that re-plans or moves a running job.
struct NetworkConfig {
  bool probes = true;                  // network.probes: run probes on idle nodes
  int64_t probe_interval_s = 3600;     // network.probe_interval: re-probe a pair this often
  int64_t probe_bytes = 16 << 20;      // network.probe_bytes: message size
  double probe_seconds = 2.0;          // network.probe_seconds: per measurement
  int64_t probe_timeout_s = 120;       // network.probe_timeout: a probe still running is stopped
  int full_mesh_max_nodes = 8;         // network.full_mesh_max_nodes: all pairs in smaller leaves
  int64_t measured_ttl_s = 24 * 3600;  // network.measured_ttl: older figures are not used
  // network.slow_link_ratio: a pair below this share of the best measured pair of its nominal
  // class (same nominal path, same nominal figure) is slow. 0.5: a port at half its speed or
  // worse (a 100G port at 40G, ECMP halving a flow) is slow; run-to-run noise is not.
  double slow_link_ratio = 0.5;
  bool use_measured = true;  // network.use_measured: placement and plans use them
  bool watch = true;         // network.watch: the congestion watch
  // network.step_time_growth: a running job whose step time grows by this factor over its
  // baseline while a link it uses shows congestion is re-planned or moved (if it pays).
  double step_time_growth = 1.3;
  int64_t replan_horizon_s = 3600;  // network.replan_horizon: the gain is counted over this
  int64_t replan_cooldown_s = 600;  // network.replan_cooldown: between two decisions for a job
};

struct EngineConfig {
  NodeDiscovery node_discovery = NodeDiscovery::kDynamic;
  ResourceWeight resource_weight;
  // cluster.rendezvous_ports: the ports a job's rank 0 listens on for its rendezvous
  // (MASTER_PORT), one per running job on a node. Below Linux's ephemeral range (32768-60999 by
  // default): a port there can be held by any client connection, even one in TIME_WAIT, and
  // torch's TCPStore then fails to bind (`Address already in use`).
  int rendezvous_port_low = 20000;
  int rendezvous_port_high = 32767;
  std::string algorithm = "genetic";
  bool topology_aware = true;
  int max_retries = 5;
  // scheduler.no_retry_exit_codes: a rank exiting with one of these codes (and not by a signal)
  // fails its job at once, whatever retries it has left: the failure is deterministic (2: a
  // usage error, Python's "can't open file"; 126: not executable; 127: command not found), and
  // a retry would fail the same way. [] retries every failure.
  std::vector<int> no_retry_exit_codes = {2, 126, 127};
  bool preemption = true;
  int64_t checkpoint_interval_s = 1800;
  int64_t allreduce_threshold_bytes = 8'000'000;
  bool elastic_scaling = false;
  int min_nodes = 1;
  int max_nodes = 0;  // 0: unbounded
  int64_t scaling_interval_s = 300;
  // The order of the pending queue (scheduler.order), backfill behind a blocked head
  // (scheduler.backfill) and checkpoint-based migration to defragment (scheduler.migration).
  std::string order = "las";
  std::string backfill = "time";
  bool migration = false;
  // scheduler.compact_wait: how long a job may wait for a compact placement (fewest nodes and
  // leaf switches, or one predicted no more than 10% slower) before it takes what fits; also
  // capped at half its runtime estimate. 0: never waits.
  int64_t compact_wait_s = 12 * 3600;
  // scheduler.colocation: how inference services share GPUs with training. none: an inference
  // service holds GPU shares of its own; time-slice: it may overlay GPUs training holds, and
  // the device alternates between them (CUDA's default time slicing); priority: it may overlay
  // them with inference first on memory bandwidth and training first on compute (MPS client
  // priorities, as REEF / Orion schedule kernels).
  std::string colocation = "none";
  // scheduler.gang_timeout: a gang whose ranks have not all started this long after its
  // launch orders went out is released (its started ranks stopped, its devices freed) and
  // retried, as a failed attempt. 0: wait for ever.
  int64_t gang_timeout_s = 600;
  // scheduler.las_thresholds: the attained service, in GPU-seconds, at which a job moves down
  // to the next queue of the 2D-LAS order and preemption (scheduler.order: las); one queue
  // more than thresholds. Tiresias' own simulator uses [3250, 7200].
  std::vector<int> las_thresholds_gpu_s = {3600, 36000};
  // scheduler.las_queue_order: the order inside a 2D-LAS queue. entered: by the time a job
  // entered the queue (its submission, or its demotion), and the running job that started last
  // is evicted first. preempted-first: as Tiresias' simulator keeps each queue, a job preempted
  // in its queue waits ahead of those that have not run there, the most recently preempted
  // first, and the running job that joined the queue's running jobs last (started, or was
  // demoted into it) is evicted first.
  std::string las_queue_order = "entered";
  // scheduler.preempt_for: which waiting jobs may preempt (scheduler.preemption). head: the jobs
  // of the queue up to the first that neither fits nor preempts (the blocked head); behind it,
  // jobs only start where they fit. every-job: each waiting job in queue order may preempt
  // running jobs that rank below it, as Tiresias' simulator gives GPUs down its queues (needs
  // scheduler.backfill: greedy, where a blocked head holds no reservation).
  std::string preempt_for = "head";
  // scheduler.binding: how a job's ranks are bound to GPUs. job: the whole gang in one
  // decision, all or nothing. pod-each: pods (a job's share of one node) bound one at a time
  // as each finds a node, holding their GPUs while the rest wait (the default kube-scheduler,
  // no co-scheduling plugin). pod-gang: pods placed one at a time and committed all or none
  // (Volcano's gang plugin). `tianshu serve` binds whole jobs only (job).
  std::string binding = "job";
  // scheduler.small_job_algorithm: the placement strategy for jobs that fit on one node (a
  // batch search buys nothing there); `same`: scheduler.algorithm.
  std::string small_job_algorithm = "topology";
  // scheduler.long_queue_algorithm: the strategy while more than scheduler.long_queue_length
  // jobs wait, so that a cycle stays cheap under load; `auto`: topology where scheduler.algorithm
  // is a batch search (genetic, exact), else the same; `same`: scheduler.algorithm.
  // long_queue_length 0: never.
  std::string long_queue_algorithm = "auto";
  int long_queue_length = 64;
  // scheduler.restart_overhead: how long a job restarted from its checkpoint (after a
  // preemption, a resize or a migration) takes before it makes progress again: re-launch,
  // rendezvous, checkpoint load. `tianshu simulate` charges it to every resumed start (a live
  // restart takes what it takes); with the checkpoint write it is the price a topology move
  // must beat, in both drivers; the elastic and defrag policies weigh their own restart_s.
  int64_t restart_overhead_s = 60;
  // scheduler.preemption_cost_model: of the victims the preemption policy offers a waiting job
  // inside its priority class, evict only those whose eviction is predicted, by the runtime
  // estimates, to pay: more run left than the newcomer's run plus restart_overhead, and, while
  // others wait too, not the job ending last (it sets the drain) (engine::KeepVictimsThatPay).
  // Without the estimates it decides on, the policy's rule stands. The `tianshu` preset sets
  // it (docs/simulate.md: it shortens the average JCT and can cost throughput).
  bool preemption_cost_model = false;
  std::vector<QueueConfig> queues;  // queues: [] (then every job runs in "default")
  NetworkConfig network;
  // Tuning knobs, also read from environment variables of the same names.
  int64_t network_buffer_size_bytes = 4 * 1024 * 1024;      // NETWORK_BUFFER_SIZE, 4-16 MB
  std::string allreduce_algo = "auto";                      // ALLREDUCE_ALGO
  CheckpointMode checkpoint_mode = CheckpointMode::kAsync;  // CHECKPOINT_MODE
  Backend scheduler_backend = Backend::kCuda;               // SCHEDULER_BACKEND

  // Plugin names (scheduler.algorithm, .order, .backfill) are not checked here: model/ knows
  // no plugins. engine::OptionsFromConfig checks them against the registries, and names the
  // place each came from (field path -> where; set when read from a file).
  struct SourcePos {
    std::string file;
    int line = 0, column = 0;
  };
  std::map<std::string, SourcePos> plugin_at;

  // plugins: each plugin's own options, by its name (`plugins: {elastic: {restart_s: 30}}`).
  // model/ knows no plugin: it keeps each value as its scalar text with its place, and the
  // plugin that registered the name parses and checks them (engine::FindPluginNameProblem).
  struct PluginOption {
    std::string value;
    SourcePos at;
  };
  using PluginOptions = std::map<std::string, PluginOption>;  // option -> value
  std::map<std::string, PluginOptions> plugins;               // plugin name -> its options
  // Where each plugin's entry is ("plugins.NAME" in plugin_at holds it too).
};

// Collective algorithms ALLREDUCE_ALGO accepts.
const std::vector<std::string>& AllreduceAlgoNames();

// Environment variables that override the tuning knobs. `getenv` is passed in so that only
// tools/ reads the real environment. Errors name the variable.
[[nodiscard]] Status ApplyEnvironment(
    const std::function<std::optional<std::string>(const char*)>& getenv, EngineConfig* config);

}  // namespace tianshu::model
