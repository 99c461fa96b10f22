// The control plane's state and the one place that changes it: jobs and their state machine,
// nodes (registered by agents, lost on silence), outstanding work orders, the event log, and
// the scheduling cycle that turns pending jobs into launch orders. Every change is written to
// the Store (group-committed) before the call that made it returns; on start the state is
// rebuilt from the store, and agents' reports at registration reconcile what really runs.
//
//   auto cp = ControlPlane::Open(std::move(store), options, now_ms);
//   auto job = (*cp)->Submit(*ParseSubmitBody("application/yaml", text, "job.yaml"), now_ms);
//
// Thread-safe: every public method may be called from any thread (the HTTP workers and the
// ticker). Time is passed in as milliseconds since the epoch; the methods that wait
// (WaitEvents, Work) wait on real time for at most the duration they are given.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/comm/bandwidth_matrix.h"
#include "tianshu/engine/engine.h"
#include "tianshu/estimate/perf.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/topology.h"
#include "tianshu/server/committer.h"
#include "tianshu/server/identity.h"
#include "tianshu/server/metrics.h"
#include "tianshu/server/network_map.h"
#include "tianshu/server/order_outbox.h"
#include "tianshu/server/placer.h"
#include "tianshu/server/records.h"
#include "tianshu/server/requests.h"
#include "tianshu/server/store.h"
#include "tianshu/wire/wire.h"

namespace tianshu::server {

// What a submission made: the job (full view), and whether it was made before (an earlier
// try with the same Idempotency-Key and body).
struct Submitted {
  nlohmann::json job;
  bool replayed = false;
};

// What the server adds to a node's lease before it starts a fenced job's next attempt: the
// shim checks the lease every 200 ms, then the kill; and the two clocks' rates may differ.
inline constexpr int64_t kFenceMarginMs = 2000;

class ControlPlane;

struct ControlPlaneOptions {
  model::EngineConfig config;
  std::string admin_token;      // the server's token file: the built-in admin identity
  std::string checkpoint_root;  // TIANSHU_CHECKPOINT_DIR = checkpoint_root/JOB_ID
  int64_t heartbeat_interval_ms = 1000;
  int64_t lost_after_ms = 10000;
  // After a start, no node is declared lost for this long: longer than an agent's longest
  // reconnect backoff (30 s) plus lost_after_ms, so a server outage costs no healthy node.
  int64_t restart_grace_ms = 45000;
  // When more than half of the live nodes (at least two) have been silent for half of
  // lost_after at once (they cross lost_after a heartbeat or so apart), the server (or its
  // network) is the likelier fault: nothing is declared lost until the silence has lasted this
  // long (Kubernetes' node controller stops evicting in a full disruption the same way).
  int64_t mass_silence_max_ms = 120000;
  // The node lease (fencing): an agent whose heartbeats the server has not answered for this
  // long kills its ranks itself (the shim of each rank does, even when the agent is dead); the
  // server starts the next attempt of a job that had ranks on a lost node only after the lease
  // (plus kFenceMarginMs) has run out since that node's last heartbeat. Longer than an outage
  // that should cost nothing (restart_grace_ms plus backoff). 0: no fencing.
  int64_t node_lease_ms = 90000;
  size_t commit_batch = 512;   // 1: one transaction per change
  size_t events_kept = 20000;  // in memory, for the event stream
  std::string placement;       // strategy name; "" = config.algorithm
  std::string server_id;       // reported to agents; from the store when empty
  // A follower's view of the store (follower.h): Open writes nothing (no server id, no
  // migration of old records, no quarantine: the leader does those), and every change is
  // refused with 503 before anything changes. Only the read calls are meant for it.
  bool read_only = false;
  // A control plane of the same store loaded before (a follower's last view, which the replica
  // hands on when it is elected): Load takes the parsed spec of each job whose stored text is
  // unchanged from it instead of parsing and validating that text again, which was most of the
  // time a load took (yaml-cpp). Open lets go of it once loaded.
  std::shared_ptr<const ControlPlane> earlier;
  // cluster.node_discovery: static — only these nodes may register (others get 403), and
  // those that have not are listed as `waiting`. Empty: dynamic, any node may join.
  std::vector<std::string> static_nodes;
  std::string static_source;  // the cluster file they came from, for messages
  // Before every scheduling cycle, replay the records into a fresh engine and compare it with
  // the long-lived ledger (capacity, queue, placements, service); a difference is counted
  // (tianshu_ledger_mismatches_total), written to stderr, and the fresh engine replaces the
  // ledger. Costs a full replay a cycle: for tests (TIANSHU_VERIFY_LEDGER=1 for serve).
  bool verify_ledger = false;
};

class ControlPlane {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ControlPlane>> Open(std::unique_ptr<Store> store,
                                                                  ControlPlaneOptions options,
                                                                  int64_t now_ms);
  ~ControlPlane();

  // ---- identities ----
  // Who holds `bearer`: the admin token, a user's or join token, or a node credential.
  std::optional<Identity> Authenticate(std::string_view bearer) const;
  // Admin only (checked by the caller): a new user with a new token, shown once.
  ApiResult<nlohmann::json> CreateUser(const std::string& name, Role role,
                                       const std::string& unix_user, int64_t now_ms);
  nlohmann::json ListUsers() const;
  ApiResult<nlohmann::json> RemoveUser(const std::string& name);
  // Admin only: drops a node's credential, so that its next registration (with a join token)
  // mints a new one; for an agent that lost its work directory.
  ApiResult<nlohmann::json> ForgetNode(const std::string& name);
  // Admin only: `action` is cordon (no new work), drain (cordon, and the jobs there are
  // checkpointed and requeued), uncordon (both undone) or remove (the node's record and
  // credential are deleted; refused with 409 while a job holds a placement there, unless the node
  // is lost or failed). Returns the node's view ({"node", "removed": true} for remove).
  ApiResult<nlohmann::json> AdminNode(const std::string& name, const std::string& action,
                                      const Identity& who, int64_t now_ms);

  // ---- users ----
  // Accepts a validated job; durable before it returns. Returns the job's JSON view.
  ApiResult<Submitted> Submit(SubmitRequest request, int64_t now_ms);
  // Holds (hold = true) or releases pending jobs, all of them in one change or none: each must
  // be the caller's (or the caller an admin) and pending (to hold) or held (to release);
  // otherwise nothing changes and the answer names every job refused and why. Returns the
  // jobs' views.
  ApiResult<nlohmann::json> SetHeld(const std::vector<std::string>& ids, bool hold,
                                    const Identity& who, int64_t now_ms);
  // Sends a job back to the queue (scontrol requeue): a starting or running one is checkpointed
  // and stopped, then waits again without spending a retry; a failed or cancelled one is
  // pending again with its retries reset. 409 for a pending or succeeded job.
  ApiResult<nlohmann::json> Requeue(const std::string& id, const Identity& who, int64_t now_ms);
  // pending -> cancelled; starting/running -> stopping (then cancelled); 409 when terminal.
  // Only its owner or an admin may cancel a job (403 otherwise).
  // Cancels job `id`; with whole_array, every unfinished task of the array whose id it is
  // (scancel ARRAYID), all in one change, or none when any belongs to someone `who` does not act
  // for: {"array_id", "cancelled": [ids], "already_finished": N}.
  ApiResult<nlohmann::json> Cancel(const std::string& id, const Identity& who, int64_t now_ms,
                                   bool whole_array = false);
  // The full view; `run` and `spec` (which hold env values) only for its owner or an admin.
  ApiResult<nlohmann::json> GetJob(const std::string& id, const Identity& who) const;
  // Where to read a rank's log: the registered host:port of the agent holding `rank` of the
  // job's current (or last) attempt, and the key that agent accepts from the server. Only the
  // job's owner or an admin (403 otherwise).
  // `rank` -1: the rank that failed the job when it failed, else rank 0. The answer names the
  // job's id and the rank it resolved to.
  struct LogSource {
    std::string address, key, job_id;
    int rank = 0;
  };
  ApiResult<LogSource> RankLog(const std::string& id, int rank, const Identity& who) const;
  nlohmann::json ListJobs(const JobFilter& filter) const;
  nlohmann::json ListNodes(int64_t now_ms) const;
  ApiResult<nlohmann::json> GetNode(const std::string& name, int64_t now_ms) const;
  nlohmann::json ListQueues(bool count_finished = true) const;  // false: no walk of every job
  // GPU-hours used in [since_ms, until_ms), by user and by queue, from every job's runs
  // (sreport's cluster utilisation by account): {"since_ms", "until_ms", "total_gpu_hours",
  // "users": [{"name", "gpu_hours", "jobs"}], "queues": [...]}.
  nlohmann::json Accounting(int64_t since_ms, int64_t until_ms, int64_t now_ms) const;
  // Events after `since` (durable ones only), waiting up to wait_ms for the first one.
  nlohmann::json WaitEvents(const EventQuery& query);
  std::string Metrics() const;
  // GET /v1/topology/measured (docs/network.md): every measured pair with its nominal figure,
  // class, slow or stale; the measured leaves; the probes running and their counts.
  nlohmann::json MeasuredNetwork(int64_t now_ms) const;
  // Counts a submission refused before it reached Submit (bad body, bad token).
  void CountRejected();

  // ---- agents ----
  // `who` registers the node: its own credential (again), or a join or admin token for a
  // name that holds no credential yet (one is minted and returned); anything else is 403.
  ApiResult<wire::RegisterResponse> Register(const wire::RegisterRequest& request,
                                             const Identity& who, int64_t now_ms);
  ApiResult<wire::HeartbeatResponse> Heartbeat(const std::string& node,
                                               const wire::Heartbeat& heartbeat, int64_t now_ms);
  // Outstanding orders of the node (durable ones only), waiting up to wait_ms when there are
  // none. With a cursor (the `cursor` of an earlier batch), it waits instead until an order
  // newer than the cursor is outstanding: an agent holds this request open, and an order
  // reaches it as soon as it is durable. A cursor of another server run counts as none.
  // The answer is the batch's JSON text (wire::WorkBatchText), written outside the lock from
  // the orders' texts serialized when they were made.
  ApiResult<std::string> Work(const std::string& node, const std::string& agent_id, int64_t wait_ms,
                              const std::string& after = "");
  // Applies the reports, then the heartbeat that came with them (as Heartbeat would, in the
  // same change: one commit for both).
  ApiResult<wire::ReportsAnswer> Reports(const std::string& node, const wire::ReportBatch& batch,
                                         int64_t now_ms);

  // ---- the ticker ----
  // Failure detection, one scheduling cycle when something changed, periodic checkpoints.
  void Tick(int64_t now_ms);
  // The ticker's wait between Ticks: returns after max_ms, or once a change asks for a
  // scheduling cycle (but not before min_ms), or at Shutdown.
  void WaitForChange(int64_t max_ms, int64_t min_ms);

  // The server could not serve heartbeats in time itself (connections waited for a worker):
  // no node is declared lost until restart_grace_ms after it caught up, for at most
  // mass_silence_max_ms of such starvation in a row.
  void DeferLosses(int64_t now_ms);
  // The hosts of the registered nodes' addresses (what their agents connect from, usually).
  std::set<std::string> NodeHosts() const;

  // Wakes every waiter (long polls) so that the server can stop.
  void Shutdown();
  bool StoreFailed() const { return committer_->Failed(); }
  std::string StoreDescription() const { return store_->Describe(); }
  // What the start could not read back: quarantined (failed) jobs, skipped node and order
  // records, one line each.
  std::vector<std::string> StartupWarnings() const;
  CommitStats StoreStats() const { return committer_->Stats(); }
  // Ledger rebuilds, jobs handed in again, nodes marked, and verify_ledger's differences (with
  // the last one); for tests and benchmarks.
  struct LedgerStats {
    int64_t rebuilds = 0, synced_jobs = 0, node_marks = 0, mismatches = 0;
    std::string last_mismatch;
  };
  LedgerStats Ledger() const;
  // What the load at Open read: jobs, and how many of their specs came parsed from
  // options.earlier instead of being parsed again.
  struct LoadStats {
    int64_t jobs = 0, specs_reused = 0;
  };
  LoadStats Loaded() const { return loaded_; }

 private:
  struct Txn;
  struct OrderEntry {
    wire::WorkOrder order;
    std::string node;
    uint64_t seq = 0;  // in this server run's order of adding (Work's cursors)
    // `order` as a work batch carries it (wire::OrderText), serialized once and shared with
    // outbox_, which also keeps the commit that makes it durable. The store's form (its status
    // rows) is wire::OrderMessageText of it.
    std::shared_ptr<const std::string> text;
  };

  ControlPlane(std::unique_ptr<Store> store, ControlPlaneOptions options);
  Status Load(int64_t now_ms);
  // The spec this control plane parsed for job `seq`, when the job's stored text and format are
  // `text` and `format` and its spec validated (Load's reuse of options.earlier).
  std::optional<model::JobSpec> ParsedSpec(int64_t seq, const std::string& format,
                                           const std::string& text) const;
  // Fails the jobs Load could not read back (one transaction); see StartupWarnings.
  Status Quarantine(int64_t now_ms);
  // Declares no node lost for the restart window from now (agents may be backing off).
  void HoldLossesForRestartWindow(int64_t now_ms);
  // Runs `f` under the lock; if it made changes, writes them and waits until durable.
  template <typename T, typename F>
  ApiResult<T> Mutate(F&& f);
  void Commit(Txn& txn, std::unique_lock<std::mutex>& lock);

  nlohmann::json JobJson(const Job& j, bool full) const;
  bool Visible(const Job& j) const;

  void SetState(Txn& t, Job& j, JobState to, const std::string& reason, int64_t now_ms);
  // Observes a start's wait in its queue's histogram (control_plane_metrics.cc).
  void CountWait(const Job& j, int64_t now_ms);
  void NodeEvent(Txn& t, NodeEntry& n, NodeState to, const std::string& reason, int64_t now_ms);
  void AddOrder(Txn& t, const std::string& node, wire::WorkOrder order);
  void FinishOrder(Txn& t, const std::string& id, const std::string& status);
  void DropOrdersFor(Txn& t, const std::string& node);
  void StartJob(Txn& t, Job& j, const placement::Outcome& outcome, const model::Topology& topo,
                int64_t now_ms, bool colocated = false);
  int RendezvousPort(Txn& t, const Job& j, const std::string& master_node) const;
  void FailAttempt(Txn& t, Job& j, const std::string& reason, const std::string& lost_node,
                   int64_t now_ms);
  void BeginStop(Txn& t, Job& j, const std::string& after, const std::string& reason,
                 const std::string& exclude_node, bool checkpoint_first, int64_t now_ms);
  void MaybeFinishStop(Txn& t, Job& j, int64_t now_ms);
  void LoseNode(Txn& t, NodeEntry& n, NodeState to, const std::string& reason, int64_t now_ms);
  void StopStale(Txn& t, const std::string& node, const std::vector<wire::RunningRank>& running);
  void TrackFences(Txn& t, const std::string& node, const std::vector<wire::RunningRank>& running,
                   int64_t now_ms);
  void ApplyReport(Txn& t, const std::string& node, const wire::Report& r, int64_t now_ms);
  // A heartbeat's effect (alone, or with a report batch).
  wire::HeartbeatResponse ApplyHeartbeat(Txn& t, const std::string& node, const wire::Heartbeat& hb,
                                         int64_t now_ms);
  // Records one fact of the job's current attempt as a progress row of its own (a rank started
  // or exited, a node accepted the launch, a report applied): the job's record is not rewritten.
  void Progress(Txn& t, const Job& j, std::string key, std::string value = "");
  void Schedule(Txn& t, int64_t now_ms);
  // ---- the ledger (control_plane_ledger.cc) ----
  // What the ledger should hold for a job, from its record: nothing (ended, held, fenced, or
  // waiting to relaunch on a reserved target), a place in the queue, or the slots it holds.
  struct LedgerEntry {
    enum Kind { kNone, kQueued, kHolding } kind = kNone;
    std::vector<placement::RankSlot> ranks;  // kHolding: held slots (a reshape's target too)
    int64_t run_start_ms = 0;                // kHolding: service accrues from here
    int64_t queued_since_ms = 0;             // kQueued: its last (re)queueing
    int64_t eligible_ms = 0;                 // kQueued: its place in the queue (Job::EligibleMs)
    bool batch = false;                      // kQueued: Job::batch
    double attained_gpu_s = 0;
    int64_t standing_since_ms = 0;  // Job::standing_since_ms
    bool colocated = false;
    bool operator==(const LedgerEntry&) const = default;
  };
  LedgerEntry EntryOf(const Job& j, int64_t now_ms) const;
  void NoteLedgerChanges(const Txn& t);           // what `t` changed, for PrepareLedger
  std::vector<NodeHardware> ViewMembers() const;  // the nodes a view is built of, by name
  int MarkSchedulable(engine::Engine& e) const;   // marks view_'s nodes in `e`: how many changed
  // Before a cycle: the ledger rebuilt when the view's nodes changed (or there is none), else its
  // nodes marked and the changed (and launching) jobs handed in again; verified with
  // verify_ledger. False (every pending job told why) when no view can be built.
  bool PrepareLedger(int64_t now_ms, const std::vector<Job*>& pending);
  // A fresh engine over view_ holding every job's entry, as the records say now; with
  // `remember`, the entries are noted as the ledger's (SyncLedger).
  Result<std::unique_ptr<engine::Engine>> ReplayLedger(int64_t now_ms, bool remember);
  // Hands jobs to `e` again as their records say: all withdrawn first, then re-entered (holding
  // ones before queued ones), so a slot one gave up is free for another. With `remember`, a
  // job whose entry is unchanged is skipped, the entries entered are noted in
  // ledger_entries_, and one that does not fit is tried again at the next cycle. Returns the
  // number of jobs entered.
  int SyncLedger(engine::Engine& e, const std::vector<int64_t>& seqs, int64_t now_ms,
                 bool remember);
  // The first difference between two ledgers at `now_ms` ("" when none).
  std::string CompareLedgers(const engine::Engine& a, const engine::Engine& b,
                             int64_t now_ms) const;
  // Adds a succeeded job's run time (its attained service per GPU) to runtimes_.
  void LearnRuntime(const Job& j);
  // Carries out an engine's ResizeJob or MigrateJob on `state` (the cycle's view of what is
  // held); false when the job is no longer running or the target does not fit. `reason`: the
  // move's own (MigrateJob::reason; "" for one that makes room for waiting work).
  bool BeginReshape(Txn& t, Job& j, const std::string& kind,
                    const std::vector<placement::RankSlot>& target,
                    const placement::Outcome& holding, const std::string& reason,
                    model::ClusterState* state, int64_t now_ms);
  std::string JobDoc(const Job& j) const;
  // An array's task indexes (of its first task's job; empty for a plain job), and the answer to
  // its submission: {"id", "array_id", "count", "ids", "name", "state", "held"}.
  std::vector<int> ArrayIndexesOf(const Job& first) const;
  // The seqs of the array whose first task is `first` (empty when it is not an array's first).
  std::vector<int64_t> ArrayTasks(const Job& first) const;
  // A 413 when a change of about `ops` rows and `bytes` bytes would not fit what the store
  // writes at once (Store::Limits); `what` names the request for the message.
  std::optional<ApiError> OverStoreLimits(size_t ops, size_t bytes, const std::string& what) const;
  // Cancels one job in `t` (stops its ranks when it holds a placement); false if it has ended.
  bool CancelOne(Txn& t, Job& j, int64_t now_ms);
  nlohmann::json ArrayJson(const Job& first) const;

  // ---- the network (control_plane_network.cc, control_plane_watch.cc; issue 18) ----
  static bool IsProbeId(const std::string& job_id);
  bool IsRunningProbe(const std::string& job_id, const std::string& node) const;
  // Probes (start, give way, time out), the measured leaves, the congestion watch; each tick.
  void NetworkTick(Txn& t, int64_t now_ms);
  void StartProbe(Txn& t, const std::string& a, const std::string& b, int64_t now_ms);
  void StopProbe(Txn& t, ProbeRun& p, const std::string& why, int64_t now_ms);
  // Stops the running probes (in this change, so their stop orders go out with it) for work
  // that waits: after a cycle (NetworkTick), or at once for work that cannot fit (Mutate).
  void ProbesGiveWay(Txn& t, int64_t now_ms);
  // The whole GPUs the ledger holds free on healthy nodes that run no probe, as of the last
  // cycle (unbounded before the ledger is built: nothing is known to be short).
  int64_t FreeGpusOutsideProbes() const;
  void FinishProbe(Txn& t, const std::string& id, int64_t now_ms);
  void ApplyProbeReport(Txn& t, const std::string& node, const wire::Report& r, int64_t now_ms);
  void NetworkEvent(Txn& t, const std::string& id, const std::string& reason, int64_t now_ms);
  std::vector<ProbeNode> ProbeNodes(bool failed_too = false) const;  // live (and failed, lost)
  NominalPair NominalOf(const std::string& a, const std::string& b) const;
  std::vector<PairView> PairViews(int64_t now_ms) const;  // measured pairs of registered nodes
  void RefreshNominalView();
  // Node -> measured leaf ({} when nothing is measured or network.use_measured is off).
  std::map<std::string, std::string> MeasuredLeavesNow(int64_t now_ms) const;
  // The fresh measured node pairs over `view`'s node ids, for the communicator plan.
  comm::BandwidthMatrix MeasuredMatrix(const ClusterView& view, int64_t now_ms) const;
  // "; measured ...": a start event's measured leaf and slowest fresh pair ("" when none).
  std::string MeasuredNote(const std::vector<std::string>& nodes, int64_t now_ms) const;
  void NetworkMetrics(Exposition& out) const;  // the tianshu_network_* families of /metrics
  void WatchCongestion(Txn& t, int64_t now_ms);
  // Signs of congestion on these nodes' links ("" when none), from their last heartbeats.
  std::string CongestionEvidence(const std::vector<std::string>& nodes) const;
  void DecideReplan(Txn& t, Job& j, JobWatch& w, const std::string& evidence, int64_t now_ms);

  std::unique_ptr<Store> store_;
  ControlPlaneOptions options_;
  std::unique_ptr<Committer> committer_;
  engine::EngineOptions engine_options_;  // from the config
  // The scheduling ledger: one long-lived engine over view_'s topology (the registered nodes),
  // the owner of the queue's order, the placements and the free capacity the cycles decide on.
  // Rebuilt from the records at load and when the view's nodes change (one registers or is
  // removed, its hardware or measured leaf changes); a node that only stops or resumes taking
  // work (lost, back) is marked (SetSchedulable); a changed job is handed in (ledger_dirty_).
  std::unique_ptr<ClusterView> view_;
  std::vector<std::pair<std::string, wire::Hardware>> view_members_;  // what view_ was built of
  // The training speed model over view_'s topology (estimate/perf.h): what the ledger's
  // consolidation wait and topology upgrades judge a spread placement by.
  std::unique_ptr<estimate::PerfModel> perf_;
  std::unique_ptr<engine::Engine> ledger_;
  std::unordered_map<int64_t, LedgerEntry> ledger_entries_;  // what each job was handed in as
  // Waiting jobs whose only change in a cycle was their message: written in a second change
  // right after the cycle's (Tick), so that the cycle's orders do not wait for every waiting
  // job's record.
  std::set<int64_t> later_docs_;
  std::set<int64_t> ledger_dirty_;                                   // changed since the last cycle
  bool ledger_nodes_changed_ = true, ledger_nodes_touched_ = false;  // rebuild; rebuild or mark
  int64_t runtimes_added_ = 0, runtimes_in_ledger_ = -1;  // completions learned, handed in
  // Per GPU: the share of training lost to the services overlaid on it (serving model), read
  // by the ledger's co-location check; refreshed every cycle.
  std::shared_ptr<std::map<int, double>> overlay_taken_ = std::make_shared<std::map<int, double>>();
  LedgerStats ledger_stats_;

  mutable std::mutex mu_;
  std::condition_variable events_cv_, tick_cv_;
  std::atomic<int> event_waiters_{0};  // WaitEvents calls that may wait (see Mutate)
  // Each node's outstanding orders and registered agent, as Work reads them (its own lock,
  // changed under mu_ with orders_ and nodes_).
  OrderOutbox outbox_{[this] { return committer_ ? committer_->Durable() : 0; }};
  uint64_t next_order_seq_ = 1;
  std::string order_epoch_;  // this server run's name in Work cursors
  bool shutdown_ = false;
  int64_t next_job_seq_ = 1;
  int64_t next_event_seq_ = 1;
  std::map<int64_t, Job> jobs_;               // by seq
  std::map<std::string, NodeEntry> nodes_;    // by name
  std::map<std::string, OrderEntry> orders_;  // outstanding, by id
  std::set<std::string> stale_stops_;         // stop orders sent for ranks nobody owns
  struct EventEntry {
    int64_t seq;
    uint64_t ticket;
    nlohmann::json doc;
  };
  std::deque<EventEntry> events_;
  bool schedule_dirty_ = true;
  int64_t ledger_wake_ms_ = 0;     // the ledger's next wake-up (NextWakeup; 0: none)
  int64_t fence_wake_ms_ = 0;      // the earliest fence of a pending job to run out (0: none)
  std::set<int64_t> fenced_seqs_;  // unfinished jobs with fence_nodes (heartbeats look at these)
  // Indexes over jobs_ by state, kept by SetState (and rebuilt by Load): the jobs that hold a
  // placement (starting, running, stopping), the pending ones, and how many ended in each
  // terminal state. A tick or a scrape looks at these, not at every job the store keeps.
  std::set<int64_t> active_seqs_, pending_seqs_;
  std::map<std::string, std::array<int64_t, 3>> ended_;  // per queue: succeeded/failed/cancelled
  void IndexState(int64_t seq, JobState from, JobState to);
  // A copy of active_seqs_, for loops whose body may change a job's state.
  std::vector<int64_t> ActiveSeqs() const { return {active_seqs_.begin(), active_seqs_.end()}; }
  int64_t last_tick_ms_ = 0;  // the ticker's last time (a job's service up to now, for views)
  // No node is declared lost before this (the server was starved, or a mass silence ended),
  // nor while most go silent at once.
  int64_t losses_not_before_ms_ = 0, mass_silence_since_ms_ = 0;  // 0: not in a mass silence
  int64_t starved_since_ms_ = 0, last_starved_ms_ = 0;            // DeferLosses episodes
  std::vector<std::pair<int64_t, std::string>> quarantined_;      // job seq, why (from Load)
  std::vector<std::string> skipped_records_;                      // node and order records
  std::map<std::string, int64_t> idempotency_keys_;               // key -> job seq
  struct UserEntry {
    Role role = Role::kUser;
    std::string token_hash, unix_user;
    int64_t created_ms = 0;
  };
  std::map<std::string, UserEntry> users_;                 // by name
  std::map<std::string, std::string> user_by_token_;       // token hash -> user name
  std::map<std::string, std::string> node_by_credential_;  // credential hash -> node name
  std::string admin_token_hash_;
  LoadStats loaded_;  // set by Load
  // Run times of succeeded jobs (in completion order), for the engine's learned estimates.
  engine::RuntimeHistory runtimes_;
  // Per overlaid service: the share of each of its GPUs training loses to it (serving model),
  // for the attempt it was priced for.
  struct OverlayLoss {
    int attempt = -1;
    double loss = 0;
  };
  std::map<int64_t, OverlayLoss> overlay_loss_;
  server::Metrics metrics_;
  // The measured network (issue 18).
  NetworkMap network_;
  int64_t network_version_ = 0;  // bumped by every probe's end
  std::map<std::string, ProbeRun> probes_;
  int64_t next_probe_ = 1, probes_done_ = 0, probes_failed_ = 0, probes_gave_way_ = 0;
  std::unique_ptr<ClusterView> nominal_view_;  // the registered nodes, leaves from labels
  bool nominal_dirty_ = true;
  std::map<std::string, std::string> view_leaves_;  // the measured leaves view_ was built with
  int64_t leaves_checked_ms_ = 0, leaves_version_ = -1, network_planned_ms_ = 0;
  std::map<int64_t, JobWatch> watch_;
};

}  // namespace tianshu::server
