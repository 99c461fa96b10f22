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
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/host.h"
#include "tianshu/agent/host_report.h"
#include "tianshu/agent/internal/job_run.h"
#include "tianshu/agent/isolation.h"
#include "tianshu/agent/journal.h"
#include "tianshu/agent/net_counters.h"
#include "tianshu/agent/process.h"
#include "tianshu/agent/rank_launch.h"
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
  // The separate data network's interface (`--data-interface`): every rank gets it as
  // GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and TP_SOCKET_IFNAME unless its order sets them.
  std::string data_interface;
  // Bandwidth probes (bandwidth_probe.h): probes/gloo_bandwidth.py as the caller found it ("":
  // none, gloo probes fail to start) and the Python that runs it.
  std::string probe_script;
  std::string probe_python = "/usr/bin/python3";
};

// A rank's checkpoint marker, written by the workload after every completed checkpoint:
// {"step": 120, "path": "/ckpt/j-1/step-120.pt"}.
struct CheckpointMarker {
  int64_t step = -1;
  std::string path;
};

class Agent {
 public:
  Agent(AgentOptions options, HostInfo host, SystemFiles& fs, CgroupDriver& cgroups,
        ProcessRunner& runner);
  // Its jobs report through callbacks bound to this agent: not copied, not moved.
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

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
  // Link rates since the previous call (net_counters.h), for heartbeats.
  wire::NetworkSample NetworkUsage(int64_t now_ns) { return net_.Sample(now_ns); }
  // What each running job's progress file says (progress_file.h), read from its lowest rank
  // running on this node; jobs without a (valid) file are left out. At most 1024 jobs.
  std::vector<wire::JobProgress> Progress();
  const HostInfo& host() const { return host_; }
  // What it holds now and what it did, for its /metrics (agent_metrics.h): job attempts, the
  // cgroups it made for them, ranks running, and orders carried out by kind (repeats not
  // counted; "rejected" for invalid ones).
  struct Holdings {
    int64_t jobs = 0, cgroups = 0, ranks_running = 0;
    std::map<std::string, int64_t> orders;
  };
  Holdings Held() const;
  // Per-rank log file of a job (the newest attempt on this node), "" when unknown.
  std::string LogPath(const std::string& job_id, int rank) const;

  // The node lease (fencing). SetLease with the server's lease (0: none, the lease file then
  // says "none"); RenewLease after every heartbeat the server answered, with the CLOCK_BOOTTIME
  // time it was sent: WORKDIR/lease then holds sent + lease, which every rank's shim checks.
  // A shim fences its rank on a missing or unreadable file, so before a launch starts ranks
  // the file says what holds (LeaseFileReady): a deadline that has not passed, or "none" while
  // the server gives no lease. Otherwise the launch is rejected (the server retries it).
  void SetLease(int64_t lease_ns);
  void RenewLease(int64_t sent_boot_ns);
  // The lease's deadline (CLOCK_BOOTTIME ns; 0: no lease in force) and whether it holds now.
  int64_t LeaseDeadline() const { return lease_deadline_ns_; }
  bool LeaseHeld() const;
  [[nodiscard]] Status LeaseFileReady();
  std::string LeasePath() const { return options_.workdir + "/lease"; }

 private:
  using JobRun = internal::JobRun;
  using RankRun = internal::RankRun;

  void Launch(const wire::WorkOrder& order, int64_t now_ns, bool replay);
  void Checkpoint(const wire::WorkOrder& order, int64_t now_ns);
  void Stop(const wire::WorkOrder& order, int64_t now_ns);
  std::vector<JobRun*> JobsOf(const std::string& job_id, int attempt);
  void Report(wire::Report r);
  // Journal records wait in journal_pending_ while a JournalBatch is open (an order's Apply, a
  // Tick) and go to the file together (one write) when it closes, and so before any report of
  // them leaves the agent. An order's record and a spawned rank's start are written at once;
  // whatever waits is written before any process starts or is signalled (journal_first_).
  void JournalOrLog(const nlohmann::json& record);
  void FlushJournal();
  class JournalBatch {
   public:
    explicit JournalBatch(Agent& agent);
    ~JournalBatch();
    JournalBatch(const JournalBatch&) = delete;
    JournalBatch& operator=(const JournalBatch&) = delete;

   private:
    Agent& agent_;
  };
  // The runner actions go through: writes the waiting journal records before it spawns or
  // signals, so that the journal holds every order and rank the agent acted on.
  class JournalFirst final : public ProcessRunner {
   public:
    JournalFirst(ProcessRunner& inner, std::function<void()> flush)
        : inner_(inner), flush_(std::move(flush)) {}
    Result<int64_t> Spawn(const SpawnSpec& spec) override {
      flush_();
      return inner_.Spawn(spec);
    }
    Status Signal(int64_t pid, int sig) override {
      flush_();
      return inner_.Signal(pid, sig);
    }
    std::optional<ProcessExit> Poll(int64_t pid) override { return inner_.Poll(pid); }
    bool Adopt(int64_t pid, int64_t start_time, const std::string& exit_path) override {
      return inner_.Adopt(pid, start_time, exit_path);
    }
    int64_t StartTime(int64_t pid) override { return inner_.StartTime(pid); }

   private:
    ProcessRunner& inner_;
    std::function<void()> flush_;
  };

  AgentOptions options_;
  HostInfo host_;
  SystemFiles& fs_;
  CgroupDriver& cgroups_;
  ProcessRunner& runner_;
  Journal journal_;
  std::vector<nlohmann::json> journal_pending_;
  int journal_batch_ = 0;  // JournalBatch scopes open
  JournalFirst journal_first_;
  internal::JobContext job_context_;  // what every JobRun call gets: the OS, Report, the journal
  std::set<std::string> seen_orders_;
  std::map<std::string, int64_t> orders_applied_;  // by kind (Held)
  std::map<std::string, JobRun> jobs_;             // by key
  std::vector<wire::Report> reports_;
  std::vector<std::string> recovery_warnings_;  // from Recover
  std::set<std::string> report_keys_;           // (order, kind, rank) already queued
  HostUsageMeter usage_;
  NetCounters net_{fs_};
  int64_t lease_ns_ = 0;
  int64_t lease_deadline_ns_ = 0;  // from WORKDIR/lease at start, then from RenewLease
  std::string boot_id_;            // /proc/sys/kernel/random/boot_id: whose clock it counts on
};

}  // namespace tianshu::agent
