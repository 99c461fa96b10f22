// The node agent's core: carries out work orders (launch / checkpoint / stop) on this node and
// reports what happened, with every OS effect behind SystemFiles, CgroupDriver and
// ProcessRunner and time passed in, so it runs the same against fakes in tests and the real
// machine in `tianshu agent`. It does no I/O with the server (see session.h).
//
// Orders are idempotent by id (remembered in the journal). Launch: plan and create the job's
// cgroup, start each rank in it with its backend's environment, log per rank. Checkpoint:
// SIGUSR1 to the ranks, wait for each rank's checkpoint marker. Stop: optionally checkpoint
// first (SIGUSR1, wait for the markers within the grace period), then SIGTERM, then SIGKILL
// after the order's grace; the cgroup is removed once every rank is gone.
//   Agent agent(options, host, fs, *cgroups, runner);
//   (void)agent.Recover(now); agent.Apply(order, now); agent.Tick(now);
//   for (const wire::Report& r : agent.PendingReports()) ...
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/host.h"
#include "tianshu/agent/isolation.h"
#include "tianshu/agent/journal.h"
#include "tianshu/agent/process.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

inline constexpr int64_t kNsPerSec = 1'000'000'000;

struct AgentOptions {
  std::string node;             // node name registered with the server
  std::string workdir;          // journal, per-job logs, exit files and markers
  std::string checkpoint_root;  // checkpoint dirs <root>/<job> when the order names none
  int64_t checkpoint_grace_ns = 120 * kNsPerSec;  // SIGUSR1 -> marker, before SIGTERM
  // A rank gets SIGUSR1 only once it is ready: it created $TIANSHU_READY_FILE (after its
  // rendezvous), or wrote a checkpoint marker, or has run this long (workloads that do
  // neither). A signal during torch's rendezvous kills it ("Interrupted system call").
  int64_t ready_timeout_ns = 120 * kNsPerSec;
  bool apply_partitions = false;
  // The environment every rank starts from (PATH, HOME, LANG, PYTHONPATH...): the caller
  // chooses it; the agent reads no environment of its own.
  std::map<std::string, std::string> base_env;
};

// A rank's checkpoint marker, written by the workload after every completed checkpoint:
// {"step": 120, "path": "/ckpt/j-1/step-120.pt"}.
struct CheckpointMarker {
  int64_t step = -1;
  std::string path;
};

// The environment of one rank: rendezvous, visible devices of the backend, Tianshu's own
// variables; the order's env is applied on top (the communicator plan's variables).
std::map<std::string, std::string> RankEnvironment(const wire::WorkOrder& order,
                                                   const wire::RankLaunch& rank,
                                                   const std::string& checkpoint_dir);

// The log file of a job's rank under an agent's work directory (newest attempt), or "".
std::string RankLogPath(SystemFiles& fs, const std::string& workdir, const std::string& job_id,
                        int rank);

class Agent {
 public:
  Agent(AgentOptions options, HostInfo host, SystemFiles& fs, CgroupDriver& cgroups,
        ProcessRunner& runner);

  // Replays the journal: ranks still alive are adopted, ranks that ended while the agent was
  // away are reported from their exit files, and nothing is started twice. Call once, first.
  [[nodiscard]] Status Recover(int64_t now_ns);
  // What Recover skipped (corrupt journal lines), one line each, for the agent's log.
  const std::vector<std::string>& RecoveryWarnings() const { return recovery_warnings_; }
  // Carries out an order (validated with wire::ValidateOrder); a repeated id does nothing.
  void Apply(const wire::WorkOrder& order, int64_t now_ns);
  // Reaps exits, watches checkpoint markers, advances stop sequences, removes cgroups.
  void Tick(int64_t now_ns);

  // Reports not yet acknowledged, oldest first; AckReports(n) drops the first n.
  const std::vector<wire::Report>& PendingReports() const { return reports_; }
  void AckReports(size_t n);
  // What runs right now (for registration and heartbeats).
  std::vector<wire::RunningRank> Running() const;
  // True while a process runs or a stop/checkpoint waits: the caller ticks more often.
  // Placeholder ranks alone do not make the agent busy (NextDeadline covers them).
  bool Busy() const;
  // The earliest time Tick() must run for a deadline (SIGTERM/SIGKILL), or 0.
  int64_t NextDeadline() const;
  wire::Hardware Hardware() const;
  // Host CPU busy fraction since the previous call and memory in use, from /proc (for
  // heartbeats). The first call reports the average since boot.
  std::pair<double, int64_t> HostUsage();
  const HostInfo& host() const { return host_; }
  // Per-rank log file of a job (the newest attempt on this node), "" when unknown.
  std::string LogPath(const std::string& job_id, int rank) const;

  // The node lease (fencing). SetLease with the server's lease (0: none, the lease file is
  // removed); RenewLease after every heartbeat the server answered, with the CLOCK_BOOTTIME
  // time it was sent: WORKDIR/lease then holds sent + lease, which every rank's shim checks.
  void SetLease(int64_t lease_ns);
  void RenewLease(int64_t sent_boot_ns);
  // The lease's deadline (CLOCK_BOOTTIME ns; 0: no lease in force) and whether it holds now.
  int64_t LeaseDeadline() const { return lease_deadline_ns_; }
  bool LeaseHeld() const;
  std::string LeasePath() const { return options_.workdir + "/lease"; }

 private:
  struct RankRun {
    wire::RankLaunch launch;
    int64_t pid = 0;
    int64_t start_time = 0;
    bool started = false;
    bool exited = false;
    ProcessExit exit;
    std::string log_path, exit_path, marker_path, ready_path;
    int64_t started_ns = 0;     // when this agent started (or adopted) it
    bool ready = false;         // see AgentOptions::ready_timeout_ns
    bool usr1_pending = false;  // a checkpoint signal waits for it to be ready
    int64_t last_step = -1;
    std::string last_path;
    bool marker_seen = false;  // since the last SIGUSR1
    int64_t end_ns = 0;        // placeholder ranks with a duration: when they end
  };
  enum class Phase {
    kRunning,        // ranks run (or have ended on their own)
    kCheckpointing,  // stop order: SIGUSR1 sent, waiting for markers
    kTerminating,    // SIGTERM sent, waiting for exits
    kKilled,         // SIGKILL sent
  };
  struct JobRun {
    std::string key;  // job_id + "/" + attempt
    wire::WorkOrder order;
    // checkpoint_dir: the job's (the `latest` pointer only this agent writes); attempt_dir:
    // checkpoint_dir/attempt-N, the ranks' TIANSHU_CHECKPOINT_DIR.
    std::string dir, cgroup, checkpoint_dir, attempt_dir;
    int64_t promoted_step = -1;  // the last step of rank 0 this agent made `latest`
    std::string user_dir;  // markers and ready files: dir, or dir/user owned by the job's owner
    std::vector<RankRun> ranks;
    Phase phase = Phase::kRunning;
    std::string stop_order_id;
    int64_t deadline_ns = 0;
    int64_t term_grace_ns = 30 * kNsPerSec;
    std::string stop_note;
    std::string ckpt_order_id;  // a pending checkpoint order (no stop)
    int64_t ckpt_deadline_ns = 0;
    bool cgroup_created = false;
    int finish_attempts = 0;
    bool done = false;
  };

  void Launch(const wire::WorkOrder& order, int64_t now_ns, bool replay);
  void StartRank(JobRun& job, RankRun& rank, const IsolationPlan& plan, int64_t now_ns);
  void Checkpoint(const wire::WorkOrder& order, int64_t now_ns);
  void Stop(const wire::WorkOrder& order, int64_t now_ns);
  void EndPlaceholder(JobRun& job, RankRun& r, int64_t step, const std::string& message);
  void SignalAll(JobRun& job, int sig);
  // SIGUSR1 to the ranks that are ready; the others get it from Tick once they are.
  void SignalCheckpoint(JobRun& job, int64_t now_ns);
  bool Ready(RankRun& r, int64_t now_ns);
  void BeginTerminate(JobRun& job, int64_t now_ns);
  bool ReadMarker(RankRun& rank);
  // Points the job's `latest` at rank 0's newest checkpoint of this attempt, while the lease
  // holds: a fenced or superseded attempt never does.
  void PromoteLatest(JobRun& job, const RankRun& rank0);
  void Finish(JobRun& job);
  std::vector<JobRun*> JobsOf(const std::string& job_id, int attempt);
  void Report(wire::Report r);
  void JournalOrLog(const nlohmann::json& record);

  AgentOptions options_;
  HostInfo host_;
  SystemFiles& fs_;
  CgroupDriver& cgroups_;
  ProcessRunner& runner_;
  Journal journal_;
  std::set<std::string> seen_orders_;
  std::map<std::string, JobRun> jobs_;  // by key
  std::vector<wire::Report> reports_;
  std::vector<std::string> recovery_warnings_;  // from Recover
  std::set<std::string> report_keys_;           // (order, kind, rank) already queued
  int64_t cpu_busy_ = 0, cpu_total_ = 0;        // /proc/stat at the previous HostUsage()
  int64_t lease_ns_ = 0;
  int64_t lease_deadline_ns_ = 0;  // from WORKDIR/lease at start, then from RenewLease
  std::string boot_id_;            // /proc/sys/kernel/random/boot_id: whose clock it counts on
};

}  // namespace tianshu::agent
