// What the control plane records of each job (its state machine's states, placement, attempt
// progress, accounting, fencing) and of each node (registration, health, admin marks): the
// job table's and the node registry's rows, as ControlPlane keeps them in memory and JobDoc and
// the store write them. The methods are defined in control_plane.cc.
//   Job j;  j.placement = {{.rank = 0, .node = "node-0", .device = 0}};  j.OnNode("node-0");
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tianshu/model/job.h"
#include "tianshu/server/network_map.h"
#include "tianshu/server/requests.h"
#include "tianshu/wire/wire.h"

namespace tianshu::server {

enum class JobState {
  kPending,    // waiting for a placement (new, or retrying after a failed attempt)
  kStarting,   // placed; launch orders sent, not every rank has started yet
  kRunning,    // every rank has started
  kStopping,   // stop orders sent; goes to `after_stop` when every node has stopped
  kSucceeded,  // every rank exited 0 (terminal)
  kFailed,     // out of retries (terminal)
  kCancelled,  // cancelled by a user (terminal)
};
std::string_view JobStateName(JobState s);
std::optional<JobState> ParseJobState(std::string_view s);
inline bool IsTerminal(JobState s) { return s >= JobState::kSucceeded; }

struct RankPlace {
  int rank = 0;
  std::string node;
  int device = -1;  // the agent's local device index, -1 for a CPU-only rank
};

struct Transition {
  int64_t time_ms = 0;
  std::string from, to, reason;
};

struct Job {
  int64_t seq = 0;
  std::string id;
  std::string text, format;     // the body as submitted, byte for byte ("yaml" or "json")
  std::string idempotency_key;  // the client's Idempotency-Key, if it sent one
  std::string owner;            // the user that submitted it ("admin": the server's token)
  std::string run_as;           // the Unix user its ranks run as ("" = the agent's own)
  model::JobSpec spec;
  RunSpec run;
  JobState state = JobState::kPending;
  int attempt = 0;  // 1 on the first launch
  int retries = 0;
  int max_retries = 0;
  int64_t submitted_ms = 0, updated_ms = 0;
  std::string message;                    // last scheduler note (why pending, why failed)
  std::vector<RankPlace> placement;       // current attempt, rank order
  std::vector<RankPlace> last_placement;  // of the last attempt that had one (not persisted)
  std::vector<Transition> history;
  int64_t last_step = -1;
  std::string last_checkpoint;
  int64_t last_checkpoint_order_ms = 0;
  int checkpoint_orders = 0;
  // Current attempt's progress.
  std::set<int> started;
  std::map<int, std::pair<int, int>> exited;  // rank -> (exit code, signal)
  std::set<std::string> launch_accepted;      // nodes that journaled the launch order
  // When the launch orders of this attempt went out (not persisted: a restarted server counts
  // the gang timeout from its start).
  int64_t starting_since_ms = 0;
  std::set<std::string> stop_pending;  // nodes yet to report `stopped`
  std::string after_stop;              // state to reach once stopped
  bool cancel_requested = false;
  std::set<std::string> seen_reports;  // (order, kind, rank) already applied
  uint64_t created_ticket = 0;         // not persisted: visible once durable
  // A resize (elastic scaling) or a move (migration) in flight: the ranks stop with a
  // checkpoint, then the job relaunches on `target`, which stays reserved until then.
  std::vector<RankPlace> target;
  std::string reshape;  // "resize" | "migrate" | "replan" while target is set
  int resizes = 0, migrations = 0;
  CommReplan replan;  // the network watch's re-plan in place (control_plane_watch.cc)
  // 2D-LAS attained service: GPU-seconds held by the runs that have ended, and the current
  // run's start and size (the engine accrues the current run from run_started_ms).
  double attained_gpu_s = 0;
  int64_t run_started_ms = 0;
  int run_gpus = 0;
  // When it entered its current 2D-LAS queue by passing a threshold, dated when its run ends
  // (SetState); a running job's crossing the ledger dates itself from run_started_ms. FIFO inside
  // a queue counts from it. 0: never, it is in the queue it was submitted to.
  int64_t standing_since_ms = 0;
  // Accounting (`tianshu history`, time_limit): every run that has ended, with the GPUs it held
  // (whole-GPU equivalents: run_gpus x gpu_milli); the current run is run_started_ms..now.
  struct Run {
    int64_t start_ms = 0, end_ms = 0;
    double gpus = 0;
  };
  std::vector<Run> runs;  // at most kMaxRuns: the oldest are merged (their GPU-time kept)
  static constexpr size_t kMaxRuns = 64;
  int64_t ended_runs_ms = 0;  // the ended runs' durations added up (merging keeps no gaps)
  // time_limit counts the run time after this much (what it had run when it was last requeued
  // from failed or cancelled: a requeue gives a fresh budget, as Slurm's does).
  int64_t limit_base_ms = 0;
  // The rank whose exit (or loss) failed the last failed attempt, -1 when none did: what
  // `tianshu logs` shows by default.
  int failed_rank = -1;
  // An inference service overlaid on GPUs training holds (scheduler.colocation): it holds no
  // GPU share of its own.
  bool colocated = false;
  int master_port = 0;  // the current attempt's rendezvous port (cluster.rendezvous_ports)
  // Held (pending, but not scheduled until released): submitted with hold, or held by its
  // owner or an admin while pending (sbatch -H, scontrol hold/release).
  bool held = false;
  // When it last became eligible to run, its place in the queue (0: when submitted): a released
  // or requeued job queues from then, as Slurm's age factor counts from eligibility. `batch`: it
  // became eligible together with other jobs (one release of several held jobs), which the
  // engine orders among themselves fewest GPUs first (engine::SubmitJob::batch).
  int64_t eligible_ms = 0;
  bool batch = false;
  int64_t EligibleMs() const { return eligible_ms > 0 ? eligible_ms : submitted_ms; }
  // A task of a job array (submitted with ?array=, sbatch --array): the array's id (its first
  // task's job id), this task's index and the number of tasks; array_index -1 for a plain job.
  // An array's tasks have consecutive seqs; ranks get TIANSHU_ARRAY_{JOB_ID,TASK_ID,TASK_COUNT}.
  std::string array_id;
  int array_index = -1;
  int array_count = 0;
  // Fencing: ranks of an ended attempt may still run on these nodes (node -> attempt), which
  // were lost or failed under it; no new attempt starts before fence_until_ms, when their
  // agents' leases have run out, unless each node's agent says those ranks are gone.
  std::map<std::string, int> fence_nodes;
  int64_t fence_until_ms = 0;
  std::vector<std::string> Nodes() const;    // nodes of the placement, node_rank order
  bool OnNode(std::string_view node) const;  // a rank of it is there (Nodes() without a copy)
  // How long it has run, its ended runs and the current one (up to now_ms) added up.
  int64_t RanMs(int64_t now_ms) const;
};

enum class NodeState {
  kReady,     // heartbeating, healthy
  kDegraded,  // heartbeating, reports a problem: keeps its work, gets nothing new
  kFailed,    // reports it cannot run work: its jobs were sent to the retry path
  kLost,      // missed heartbeats: its jobs were sent to the retry path
};
std::string_view NodeStateName(NodeState s);

struct NodeEntry {
  std::string name;
  std::string agent_id;
  std::string address;
  wire::Hardware hardware;
  NodeState state = NodeState::kReady;
  std::string message;
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;  // not persisted; set to the load time on start
  int64_t grace_until_ms = 0;     // not persisted; no loss before (restart_grace_ms)
  std::string credential_hash;    // SHA-256 of its node credential (minted at first register)
  std::string log_key;            // what the server shows the node's agent to read rank logs
  bool rejoin = false;            // forgotten by an admin: a join token may register it again
  // Set by an admin (`tianshu node cordon|drain`): no new work is placed here; `draining` also
  // sent the jobs running here back to the queue from a checkpoint. Kept across registrations.
  bool cordoned = false;
  bool draining = false;
  // The data network (RegisterRequest::data_address/interface), for MASTER_ADDR and probes.
  std::string data_address, data_interface;
  std::string probing;  // the bandwidth probe running here (no new work meanwhile); not persisted
  int64_t links_changed_ms = 0;  // a link's line rate changed (heartbeats): re-probe; not persisted
  wire::Heartbeat last;          // not persisted
};

}  // namespace tianshu::server
