// The scheduling engine: one owner of the cluster's mutable scheduling state (jobs, their
// placements, free capacity) and the scheduling cycle that turns an immutable snapshot of it
// into decisions — order the pending queue, admit gangs all or nothing, place them, backfill or
// preempt where nothing fits. The same engine runs under the simulator (virtual time) and the
// server (real time): the caller feeds events in with the time they happened, asks for a cycle
// at a time of its choosing, and carries the returned decisions out. Nothing here reads a clock
// or a random source; every placement search is seeded from EngineOptions::seed (searches are
// step-bounded, never time-bounded), so a run is reproducible.
//   auto e = Engine::Create(topology, *PresetOptions("tianshu"));
//   (void)e->Apply(SubmitJob{.id = 1, .spec = spec}, /*now_s=*/0);
//   CycleResult r = e->Cycle(/*now_s=*/0);   // r.decisions: StartJob{1, ranks}
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/engine/id_table.h"
#include "tianshu/engine/pending_queue.h"
#include "tianshu/engine/runtime_history.h"
#include "tianshu/model/cluster_state.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/job.h"
#include "tianshu/model/load.h"
#include "tianshu/model/topology.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::engine {

using JobId = int64_t;

enum class JobState {
  kPending,    // waiting for a placement (new, preempted, or retrying after a failure)
  kRunning,    // holds its placement
  kCompleted,  // finished successfully (terminal)
  kFailed,     // can never fit, or out of retries (terminal)
  kCancelled,  // cancelled by the user (terminal)
};
std::string_view JobStateName(JobState s);
inline bool IsTerminal(JobState s) { return s >= JobState::kCompleted; }

// Everything the engine knows about one job. Owned by the Engine; callers read it by const
// reference (valid until the next mutating call).
struct JobRecord {
  // (The fields each cycle reads of every pending and running job come first, then the request
  // (its size) and the spec, so that a walk over the jobs touches few cache lines.)
  JobId id = 0;
  JobState state = JobState::kPending;
  double submit_s = 0;  // when it was submitted
  // Orders it among the jobs handed in at the same instant as one batch (SubmitJob::batch): its
  // GPU-equivalents, so the fewest go first; 0 for a job handed in alone. See SubmittedBefore.
  double batch_key = 0;
  double first_start_s = -1;                   // first time it started (-1: never)
  double start_s = -1;                         // start of the current run (-1: not running)
  double end_s = -1;                           // when it reached a terminal state
  double pending_since_s = 0;                  // when it last became pending
  std::vector<placement::RankSlot> placement;  // rank order; empty unless running
  // GPU-seconds of service received up to accrued_to_s; what 2D-LAS orders by. A running job's
  // service is charged when its standing changes, it stops or it is resized, not every cycle:
  // ServiceAt reads it at any time.
  double attained_gpu_s = 0;
  double accrued_to_s = 0;  // attained_gpu_s is exact up to this time
  // When its standing in the order last changed by itself (OrderPolicy::NextChange: a 2D-LAS
  // demotion), dated when it happened; -1: never. 2D-LAS is FIFO inside a queue by the time a
  // job entered it: its submission, or this.
  double standing_since_s = -1;
  // While it runs, when its order policy last said its standing changes next (NextChange, asked
  // when it started, crossed a threshold or changed rate; infinity: never). Until then the
  // policy gives the same time to within rounding: the engine keeps it so that a wake-up and an
  // accrual need not ask every running job each cycle.
  double next_change_s = std::numeric_limits<double>::infinity();
  double progress = 0;             // fraction of the work done, as last reported (0..1)
  double checkpoint_progress = 0;  // fraction saved by the last checkpoint (resume point)
  int preemptions = 0;
  int retries = 0;  // restarts after failures
  int migrations = 0;
  int resizes = 0;
  // A placement that spread it over more nodes than it needs was predicted too slow (cleared
  // when it starts): while it may wait for a compact one, it is not placed spread again.
  bool spread_too_slow = false;
  // Predicted step time of the current placement over a compact one's (placement_slowdown;
  // 1 when compact or unknown). A job running above the tolerance moves to a compact placement
  // when one frees and the time it saves outweighs the restart (see EngineOptions).
  double run_slowdown = 1;
  // An inference service overlaid on GPUs that training holds (scheduler.colocation): its
  // shares are counted against the overlay budget of those GPUs, not their free share.
  bool colocated = false;
  placement::PlacementRequest request;  // derived from spec at submission
  model::JobSpec spec;
  // With Binding::kPodEach: the pods of this pending job bound so far, holding their GPUs while
  // it waits for the rest; it starts when the last is bound.
  std::vector<placement::RankSlot> bound;
  std::string reason;  // why it failed or was cancelled; last note of the scheduler

  int Gpus() const { return request.ranks; }
  // Learned estimate (EngineOptions::learn_runtimes) for a job that gives no duration.
  double learned_estimate_s = 0;
  // Runtime estimate for backfill, SRTF, the consolidation wait: spec.duration_s (the user's,
  // under ideal placement), else the learned one; 0 if unknown.
  double EstimatedDurationS() const {
    return spec.duration_s > 0 ? spec.duration_s : learned_estimate_s;
  }
  // GPU-equivalents held while it runs: the rate its service grows at.
  double HeldGpus() const {
    return Gpus() * request.gpu_milli / static_cast<double>(model::kMilliPerGpu);
  }
};
// Submission order, the queue's and every FIFO tie's: submit time, then, among one batch
// (SubmitJob::batch), fewer GPUs first, then id.
inline bool SubmittedBefore(const JobRecord& a, const JobRecord& b) {
  if (a.submit_s != b.submit_s) return a.submit_s < b.submit_s;
  if (a.batch_key != b.batch_key) return a.batch_key < b.batch_key;
  return a.id < b.id;
}
// Higher priority classes first, then submission order: the order of the `priority` policy,
// and the order in which policies that walk waiting jobs take them.
inline bool QueuedBefore(const JobRecord& a, const JobRecord& b) {
  if (a.spec.priority != b.spec.priority) return a.spec.priority > b.spec.priority;
  return SubmittedBefore(a, b);
}
// `r`'s GPU-seconds of service at `now_s`: what was charged, plus its run since then.
inline double ServiceAt(const JobRecord& r, double now_s) {
  if (r.state != JobState::kRunning || now_s <= r.accrued_to_s) return r.attained_gpu_s;
  return r.attained_gpu_s + (now_s - r.accrued_to_s) * r.HeldGpus();
}
using JobTable = IdTable<JobRecord>;  // the engine's records by id

// ---- Events in. Each carries what happened; the time is passed to Engine::Apply. ----

struct SubmitJob {
  JobId id = 0;
  model::JobSpec spec;
  // Handed in at this instant together with others (the server's release of several held
  // jobs): no order among them was asked for, so the queue puts the fewest GPUs first
  // (JobRecord::batch_key). With equal run times that is the least work first, which lowers
  // their mean completion time, and a burst of mixed sizes packs without the drain each large
  // job in between would cost.
  bool batch = false;
};
struct CancelJob {
  JobId id = 0;
};
// One rank of a running job died (process exit, device error); the whole gang restarts.
struct RankFailed {
  JobId id = 0;
  int rank = 0;
  std::string reason;
};
// A node is lost (missed heartbeats, hardware fault): it becomes unschedulable and every job
// on it restarts from its last checkpoint, within its retry budget.
struct NodeFailed {
  int node = 0;
  std::string reason;
};
// A node of the topology joins (dynamic discovery) or becomes healthy again after a repair.
struct NodeAdded {
  int node = 0;
};
struct NodeHealthy {
  int node = 0;
};
// A node is drained out of service (its jobs are stopped with a checkpoint and requeued).
struct NodeRemoved {
  int node = 0;
};
struct CheckpointDone {
  JobId id = 0;
  double progress = 0;  // fraction of the work the checkpoint holds
};
struct JobFinished {
  JobId id = 0;
  bool success = true;
  std::string reason;  // for failures: exit code, message
};
// Periodic progress of a running job (optional; backfill estimates use it when present).
struct ProgressReport {
  JobId id = 0;
  double progress = 0;
};
using Event = std::variant<SubmitJob, CancelJob, RankFailed, NodeFailed, NodeAdded, NodeHealthy,
                           NodeRemoved, CheckpointDone, JobFinished, ProgressReport>;

// ---- Decisions out. The engine has already applied each to its own state when it returns
// them; the caller carries them out (launch ranks, signal a checkpoint, kill ranks). ----

struct StartJob {
  JobId id = 0;
  std::vector<placement::RankSlot> ranks;  // rank order
  double resume_progress = 0;              // restart from this checkpointed fraction
  bool restart = false;                    // not its first start
  bool colocated = false;                  // overlaid on GPUs training holds (time slicing)
};
enum class StopReason {
  kPreempted,  // to make room for a job that outranks it; requeued
  kCancelled,  // the user cancelled it
  kFailed,     // a rank or node failed; requeued for a retry or failed for good
  kDrained,    // its node was removed; requeued
};
std::string_view StopReasonName(StopReason r);
struct StopJob {
  JobId id = 0;
  StopReason reason = StopReason::kPreempted;
  bool checkpoint_first = true;  // ask the job to checkpoint within its grace period first
  bool requeued = true;          // false: terminal (cancelled, out of retries)
};
struct CheckpointJob {
  JobId id = 0;
};
// Elastic resize: checkpoint, restart at a new size (the parallelism re-planned).
struct ResizeJob {
  JobId id = 0;
  std::vector<placement::RankSlot> ranks;
};
// Checkpoint-based migration: checkpoint, move, restart.
struct MigrateJob {
  JobId id = 0;
  std::vector<placement::RankSlot> ranks;
  // Why, for people: "" for a move that makes room for waiting work (defragmentation), else
  // what the move itself buys (a topology upgrade to a compact placement).
  std::string reason;
};
// A job that can never run here (no state of this cluster could hold it); terminal.
struct RejectJob {
  JobId id = 0;
  std::string reason;
};
// With Binding::kPodEach: pods of a pending job bound to devices that hold them from now on,
// though nothing runs until the job's last pod is bound and a StartJob names all its ranks.
struct BindPods {
  JobId id = 0;
  std::vector<placement::RankSlot> ranks;
};
using Decision =
    std::variant<StartJob, StopJob, CheckpointJob, ResizeJob, MigrateJob, RejectJob, BindPods>;
JobId DecisionJob(const Decision& d);

// ---- Options: which policies, found by name in the registries of policy.h. ----

// The engine's own: order fifo | priority | las, backfill none (strict head-of-line) | greedy |
// time, preemption none | priority | las, elastic and migration none; libraries register more.
struct PolicyNames {
  std::string order = "priority";
  std::string backfill = "time";
  std::string preemption = "priority";
  std::string elastic = "none";
  std::string migration = "none";
};

// 2D-LAS (Tiresias, Gu et al. NSDI'19 §3.1): queue k holds jobs whose attained GPU-service lies
// in [thresholds[k-1], thresholds[k]); lower queues first, FIFO inside a queue. The thresholds
// are scheduler.las_thresholds (model::EngineConfig).
struct LasOptions {
  std::vector<double> thresholds_gpu_s;
  // A job demoted this instant yields its GPUs to the jobs waiting in its new queue that entered
  // it earlier. Only where a restart costs nothing (scheduler.restart_overhead: 0, as in
  // Tiresias' simulator): the two are equals in the order, and trading one for the other costs a
  // restart and buys no priority.
  bool demoted_yields = false;
  // scheduler.las_queue_order: preempted-first (model::EngineConfig::las_queue_order).
  bool preempted_first = false;
};

// How a job's ranks are bound to devices.
enum class Binding {
  // The placement strategy places the whole gang at once, splitting it over nodes as it sees
  // fit; it starts whole or not at all.
  kJob,
  // The job is cut into pods (PodRanks), each placed on one node by the strategy, one after the
  // other; they are bound all or none (Volcano's gang plugin, whose allocate action discards a
  // job whose tasks do not all fit and goes on with the next).
  kPodGang,
  // The same pods, each bound as soon as a node fits it; the bound ones hold their devices while
  // the job waits for the rest (the default Kubernetes scheduler without a co-scheduling plugin:
  // two jobs can hold each other's capacity for ever). Nothing behind them is blocked, and
  // nothing is preempted for them.
  kPodEach,
};

struct EngineOptions {
  model::EngineConfig config;  // the users' keys (algorithm, preemption, retries, ...)
  PolicyNames policies;
  std::string placement = "genetic";  // strategy for single jobs and batches
  // Strategy used instead of `placement` once the pending queue is longer than
  // large_queue_threshold, so that a cycle stays cheap under heavy load ("" = never).
  std::string placement_large_queue = "topology";
  int large_queue_threshold = 64;
  // Strategy for jobs that fit on one node (<= small_job_max_gpus ranks): a batch search buys
  // nothing for them and they are most of every trace ("" = always `placement`).
  std::string placement_small = "topology";
  int small_job_max_gpus = 8;
  placement::StrategyOptions strategy;  // seed, weights, genetic budget
  // Consolidation (Slurm's --switches=N@max-time, Tiresias' consolidated placement): a job whose
  // only placement now is predicted to run more than `compact_slowdown_tolerance` slower than
  // on a compact one waits for a better placement, for at most
  // min(compact_wait_ratio x its remaining runtime estimate, compact_max_wait_s) since it last
  // became pending (a job without an estimate never waits); then it takes what fits. The
  // prediction is `placement_slowdown` when set (the simulator sets it from its performance model);
  // without it, any placement on more nodes or leaf switches than the job needs counts as too slow.
  // Both limits 0 (the default; configurations turn it on, see OptionsFromConfig): never waits.
  double compact_wait_ratio = 0;
  double compact_max_wait_s = 0;
  double compact_slowdown_tolerance = 0.1;
  // Predicted step time of `job` on `ranks` over its step time on the most compact placement
  // (>= 1); empty, or a value <= 0 for a job it cannot price: unknown (then a placement on more
  // nodes or leaves than needed counts as too slow to start on, and a running job is not moved).
  std::function<double(const model::JobSpec& job, std::span<const placement::RankSlot> ranks)>
      placement_slowdown;
  // Seconds one checkpoint of `job` on `ranks` takes to write (the speed model's; both drivers
  // set it); empty, or a value <= 0: not known, counted as nothing.
  std::function<double(const model::JobSpec& job, std::span<const placement::RankSlot> ranks)>
      checkpoint_write_s;
  // With the consolidation wait on and placement_slowdown set: a running job whose placement
  // is predicted more than the tolerance slower than a compact one is moved (checkpoint,
  // restart; a MigrateJob) to a compact placement of the free capacity when the run time it
  // is predicted to save exceeds what the move costs it: the checkpoint it writes before it
  // stops (checkpoint_write_s) and the restart pause (config.restart_overhead_s). At most
  // `upgrade_tries_per_cycle` placement searches per cycle; never while the queue's head is
  // blocked (the free capacity is the head's).
  int upgrade_tries_per_cycle = 8;
  // Co-location (config.colocation other than "none"): an inference service may overlay GPUs
  // that running training jobs hold whole, up to one GPU's worth (kMilliPerGpu) of inference
  // shares per GPU, all its ranks on one node. `colocation_fits` (the simulator sets it from
  // its serving model) says whether the service keeps its latency objective on `ranks` next to
  // what runs there; empty: any overlay with room is taken. Where no overlay fits, the service
  // takes GPU shares of its own like any job.
  std::function<bool(const model::JobSpec& job, std::span<const placement::RankSlot> ranks)>
      colocation_fits;
  // A job that gives no duration gets a learned estimate: the mean run time of the last two
  // completed jobs like it (engine/runtime_history.h).
  bool learn_runtimes = true;
  // How a job's ranks are bound (see Binding).
  Binding binding = Binding::kJob;
  int max_placements_per_cycle = 0;  // 0: no limit
  // Jobs examined behind a blocked head in one cycle (Slurm's bf_max_job_test); 0: all.
  int max_queue_scan = 1000;
  uint64_t seed = 42;
  std::string preset;  // name of the preset it came from, "" for a config file

  [[nodiscard]] Status Validate() const;
};

// Where jobs are bound pod by pod (Binding), the ranks of one pod of `r`: all of them where they
// must share a node (single_node), a node's share where one is set (gpus_per_node), else the
// largest divisor of the rank count that the biggest node of `topology` holds (a job that fits one
// node is one pod, 16 ranks on 8-GPU nodes are two pods of 8, 12 are two of 6), as training
// operators run one worker pod per node's share.
int PodRanks(const placement::PlacementRequest& r, const model::Topology& topology);
// The same, given the most GPUs any node has.
int PodRanks(const placement::PlacementRequest& r, int biggest_node_gpus);

// The built-in presets:
//   mainstream: FIFO, strict head-of-line, first-fit, topology-unaware, no preemption.
//   fifo:       FIFO, strict head-of-line, YARN consolidation (a gang that fits one node waits
//               for one node; placement "yarn"), no preemption: Philly's scheduler as the
//               Tiresias simulator models it (fifo, --scheme=yarn).
//   kube-default: the default Kubernetes scheduler: priority order, pods (PodRanks) bound one
//               by one on the least-allocated node (spread) with no gang, so a waiting job's
//               bound pods hold their GPUs (Binding::kPodEach); nothing blocks; no preemption.
//   volcano:    Volcano's default actions with the gang and binpack plugins: priority order,
//               pods placed on the fullest node that fits, committed all or none
//               (Binding::kPodGang); a job that does not fit is skipped; no topology, no
//               preemption.
//   slurm:      priority, time-based (EASY) backfill, topology-tree placement, no preemption.
//   tiresias:   2D-LAS with preemption, greedy admission, consolidated (best-fit) placement.
//   tianshu:    the EngineConfig defaults: 2D-LAS order with LAS preemption (priority classes
//               first), time-based backfill, genetic topology-aware placement, and a job waits
//               up to 12 h (at most half its runtime) for a placement not predicted >10% slower
//               than a compact one (scheduler.compact_wait); and scheduler.colocation: priority
//               (inference services overlay training's GPUs).
[[nodiscard]] Result<EngineOptions> PresetOptions(std::string_view name);
std::vector<std::string> PresetNames();
// The presets `tianshu simulate` compares when it is given none (fifo is for comparing with the
// Tiresias simulator).
std::vector<std::string> ComparedPresetNames();
// Options from a user's engine configuration: placement from scheduler.algorithm (network
// weight 0 when topology_aware is false), order and backfill from scheduler.order/backfill,
// preemption from scheduler.preemption (the policy bound to the order, else priority), the
// reshape policies bound to task_scheduler.elastic_scaling and scheduler.migration (refused when
// none is bound), the consolidation wait from scheduler.compact_wait. The policies of policy/
// and their bindings need policy::RegisterBuiltinPolicies() first (simulate and serve call it).
[[nodiscard]] Result<EngineOptions> OptionsFromConfig(const model::EngineConfig& config);
// A plugin name of the config (scheduler.algorithm, .order, .backfill) that no registry knows,
// as a diagnostic: where the file gave it (no file or line when it came from no file), its
// field path, and the message with the nearest registered name; else the first problem with the
// `plugins:` options (plugin_options.h). OptionsFromConfig fails with it.
std::optional<model::Diagnostic> FindPluginNameProblem(const model::EngineConfig& config);

// What one cycle did.
struct CycleStats {
  int pending_seen = 0;
  int placement_calls = 0;
  int started = 0;
  int backfilled = 0;
  int preempted = 0;
  // scheduler.preemption_cost_model: waiting jobs (once per cycle each) that it spared every
  // victim the preemption policy offered
  int preemptions_declined = 0;
  int rejected = 0;
  int held_for_compact = 0;  // placed, but waiting for a compact placement
  int colocated = 0;         // inference services started on training's GPUs
  int upgraded = 0;          // running jobs moved to a compact placement
  int pods_bound = 0;        // Binding::kPodEach: pods bound to jobs that still wait
  bool head_blocked = false;
};
struct CycleResult {
  std::vector<Decision> decisions;
  CycleStats stats;
};

class Policies;    // policy.h: the instantiated plugins
struct CycleView;  // policy.h: what policies read of one cycle

// Not thread-safe: one owner (the simulator's loop, the server's reconciler) calls it.
class Engine {
 public:
  // Builds the policies and the strategies by name; fails on an unknown or unbuilt name.
  // `topology` must outlive the engine.
  [[nodiscard]] static Result<std::unique_ptr<Engine>> Create(const model::Topology& topology,
                                                              const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Records an event that happened at `now_s`. Returns the decisions it forces at once (the
  // remaining ranks of a failed gang are stopped; a cancelled running job is stopped).
  // Errors: unknown job or node, duplicate submission, a spec whose request is invalid.
  // Idempotent for JobFinished/CancelJob of a job already terminal (returns no decisions).
  [[nodiscard]] Result<std::vector<Decision>> Apply(const Event& event, double now_s);

  // Marks a submitted, pending job as already running on `ranks` since `start_s`: how a caller
  // that keeps its own records (the server, after a restart or at every cycle) hands the
  // engine what runs now. `colocated`: an inference service overlaid on training's GPUs (it
  // takes overlay budget, no GPU share). Error when the job is not pending or the ranks do
  // not fit what is free (the overlay budget, for a co-located service).
  [[nodiscard]] Status Restore(JobId id, const std::vector<placement::RankSlot>& ranks,
                               double start_s, bool colocated = false);
  // Forgets a job entirely, as if it had never been submitted: what it holds is given back and
  // it leaves the queue. For a caller that keeps the engine as a long-lived ledger of its own
  // records (the server) and hands it a job again, as it now is, after the job changed there.
  // Error when there is no such job.
  [[nodiscard]] Status Withdraw(JobId id);
  // Sets the GPU-seconds of service a submitted job received before its current run (what
  // 2D-LAS orders by), for a caller that keeps its own records across engines. Error when
  // there is no such job or the value is negative.
  [[nodiscard]] Status SetAttainedService(JobId id, double gpu_s);
  // Sets when a job's standing last changed by itself (JobRecord::standing_since_s: the time it
  // entered its 2D-LAS queue), for a caller that keeps its own records across engines. Error
  // when there is no such job.
  [[nodiscard]] Status SetStandingSince(JobId id, double since_s);
  // Sets when a pending job last became pending (its submission, or its last requeue): the
  // consolidation wait counts from it. For a caller that keeps its own records across engines.
  // Error when the job is not pending.
  [[nodiscard]] Status SetPendingSince(JobId id, double since_s);
  // Marks a node as taking new work or not, leaving what runs there as it is: for a caller
  // whose nodes keep their jobs while they take none (cordoned, degraded, being probed).
  // NodeFailed and NodeRemoved stop the node's jobs; this does not. Error for an unknown node.
  [[nodiscard]] Status SetSchedulable(int node, bool schedulable);
  // The completed runs the learned estimates come from, for a caller that keeps its own
  // records across engines (the server); the engine adds the completions it sees.
  void SetRuntimeHistory(RuntimeHistory history) {
    runtimes_ = std::move(history);
    all_estimates_stale_ = true;
  }
  const RuntimeHistory& Runtimes() const { return runtimes_; }

  // One scheduling cycle at `now_s`: snapshot -> order -> admit -> place -> decisions, then the
  // decisions are applied to the engine's state in one place. Never fails: outcomes such as
  // "does not fit" stay in the queue; "can never fit" becomes a RejectJob.
  CycleResult Cycle(double now_s);

  // Earliest time after `now_s` at which a cycle could decide differently with no new event
  // (a running job crossing a 2D-LAS threshold while jobs wait, the end of a held job's wait for
  // a compact placement, the next scaling interval of a running elastic job), or nullopt. Lets
  // a simulator skip idle time, and the server sleep until then.
  std::optional<double> NextWakeup(double now_s) const;

  // Whether an elastic or migration policy is on: then a cycle is worth running with nothing
  // pending (to grow into idle capacity).
  bool Reshapes() const;

  // Reads.
  const JobRecord* Find(JobId id) const;
  // Per GPU: thousandths of co-located inference shares overlaid on it.
  int OverlayMilli(int gpu) const { return overlay_[gpu]; }
  const model::ClusterState& State() const { return state_; }
  const model::Topology& Topology() const { return *topology_; }
  const EngineOptions& Options() const { return options_; }
  // Pending jobs in submission order (SubmittedBefore).
  std::span<const JobId> Pending() const { return pending_.Ids(); }
  std::span<const JobId> Running() const { return running_; }
  size_t NumJobs() const { return jobs_.size(); }
  int64_t Cycles() const { return cycles_; }
  // Every record, in submission order (for reports); terminal ones included.
  std::vector<const JobRecord*> AllJobs() const;

 private:
  Engine(const model::Topology& topology, const EngineOptions& options);
  bool ElasticOn() const;  // an elastic policy other than "none" is configured
  // The predicted slowdown of `ranks` for `job` (1 when compact or without a prediction).
  double RunSlowdown(const JobRecord& job, const std::vector<placement::RankSlot>& ranks) const;
  // Takes or gives back what a placement holds: GPU shares of state_, or overlay budget for
  // a co-located service.
  void Occupy(JobRecord& r, const std::vector<placement::RankSlot>& ranks, bool colocated);
  void Vacate(JobRecord& r);
  // A job without a duration arrived or changed size: its learned estimate is out of date.
  void MarkEstimateStale(const JobRecord& r);
  // Gives back what the pods bound to a pending job hold (all of them, or those on `node`).
  void Unbind(JobRecord& r, int node = -1);
  void Accrue(JobRecord& job, double now_s);
  // A crossing this close past `now_s` (a rounding error of the wake-up computed for it) counts
  // as now; a change kept for a job up to DueBy(now_s) (a second more) may have come by now.
  static double CrossingSlack(double now_s) { return 1e-9 * std::max(1.0, std::abs(now_s)); }
  static double DueBy(double now_s) { return now_s + CrossingSlack(now_s) + 1; }
  // Charges the service of the running jobs whose change of standing is due by `now_s` (kept in
  // change_heap_), so that it is dated when it happened and this cycle's policies see it.
  void AccrueDue(double now_s);
  // Asks the order policy for running `r`'s next change of standing after `now_s` and keeps it
  // (JobRecord::next_change_s, change_heap_).
  void TrackChange(JobRecord& r, double now_s);
  // Applying decisions: the one place that mutates placements and capacity.
  void Commit(const Decision& d, double now_s);
  void MarkRunning(JobRecord& r, const std::vector<placement::RankSlot>& ranks, double now_s);
  void Requeue(JobRecord& job, double progress, double now_s);
  void AddPending(const JobRecord& job);
  std::vector<Decision> StopJobsOnNode(int node, StopReason why, double now_s);
  // Steps of Cycle (engine.cc says why each is one).
  void RefreshLearnedEstimates();
  std::vector<JobId> OrderedQueue(const CycleView& view) const;
  // NextWakeup's part that depends on the records only (thresholds, compact waits).
  std::optional<double> RecordWakeup(double now_s) const;
  void ApplyDecisions(const std::vector<Decision>& decisions, double now_s);

  const model::Topology* topology_;
  EngineOptions options_;
  std::unique_ptr<Policies> policies_;
  model::ClusterState state_;
  std::vector<int> overlay_;  // per GPU: milli of co-located inference
  model::ClusterState idle_;  // the empty, healthy cluster (for "can never fit")
  JobTable jobs_;
  // Ids in submission order; a withdrawn job's entry stays until compaction (kNoJob marks it),
  // so that a withdrawal costs O(1): submission_slot_ says where each job's entry is.
  std::vector<JobId> order_of_submission_;
  std::unordered_map<JobId, size_t> submission_slot_;
  size_t withdrawn_slots_ = 0;
  PendingQueue pending_;
  std::vector<JobId> running_;                         // start order
  std::map<int, int> running_classes_;                 // priority -> running jobs of it
  void LeaveRunning(const JobRecord& r);               // takes r out of both (if there)
  std::unordered_map<JobId, std::string> never_fits_;  // rejected at the next cycle
  int64_t cycles_ = 0;
  // Learned estimates that may be out of date (RefreshLearnedEstimates): a prediction depends
  // on the job's queue, model and GPU count, so a completion dates those of its GPU count
  // (stale_sizes_), an arrival or a change of size the job's own (stale_jobs_), a new history
  // all of them. learn_by_size_ lists the jobs without a duration under every GPU count they
  // were marked with (entries of jobs since ended or resized are dropped as they are met).
  bool all_estimates_stale_ = true;
  std::vector<int> stale_sizes_;
  std::vector<JobId> stale_jobs_;
  struct LearnList {
    std::vector<JobId> ids;
    size_t live = 0;  // entries left by the last DropStale
  };
  std::unordered_map<int, LearnList> learn_by_size_;
  // Drops from `list` (GPU count `gpus`) repeated entries and jobs that ended or changed size;
  // with `refresh`, re-predicts the others.
  void DropStale(int gpus, LearnList& list, bool refresh);
  double last_cycle_s_ = 0;  // the time of the last Cycle (when cycles_ > 0)
  RuntimeHistory runtimes_;
  // NextWakeup's answer from the records, kept until a record changes (every non-const entry
  // point clears `valid`) or its time passes; and whether an elastic job runs.
  struct WakeCache {
    bool valid = false;
    std::optional<double> at;
    bool elastic_running = false;
  };
  mutable WakeCache wake_;
  // (next_change_s, id) of running jobs, earliest first, as TrackChange kept them; an entry no
  // longer its job's (stopped, or asked again since) is dropped when met, and the heap is
  // rebuilt from the running jobs once it holds twice as many entries (plus 64).
  mutable std::vector<std::pair<double, JobId>> change_heap_;
  // Jobs the planner found too slow spread (JobRecord::spread_too_slow), each added when noted;
  // entries of jobs since started or gone are dropped when RecordWakeup walks them.
  mutable std::vector<JobId> held_spread_;
};

}  // namespace tianshu::engine
