// One attempt of a job on this node, as its agent runs it: the job's paths and cgroup, each
// rank's process (start, checkpoint marker, readiness, exit), and the job's stop sequence
// (SIGUSR1 and the markers, SIGTERM, SIGKILL after the grace) and pending checkpoint order.
// The Agent owns one per (job, attempt) and hands each call a JobContext: the OS behind its
// interfaces, and where reports and journal records go. Not thread-safe (the agent's thread).
//   std::vector<std::string> problems = job.Prepare(ctx, order, key, now_ns);
//   job.StartRanks(ctx, plan, now_ns);  // later: job.Tick(...)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/isolation.h"
#include "tianshu/agent/process.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

struct AgentOptions;

namespace internal {

// What a job needs from its agent. The references outlive every call.
struct JobContext {
  const AgentOptions& options;
  SystemFiles& fs;
  CgroupDriver& cgroups;
  ProcessRunner& runner;
  std::function<void(wire::Report)> report;            // queued once per (order, kind, rank)
  std::function<void(const nlohmann::json&)> journal;  // appended before the agent acts on
  std::function<void()> journal_flush;                 // what journal held, on disk now
  std::function<bool()> lease_held;                    // the node lease holds now
  std::string lease_path;                              // checked by every rank's shim
  std::function<int64_t()> lease_deadline;             // the node lease's deadline (0: none)
};

struct RankRun {
  wire::RankLaunch launch;
  int64_t pid = 0;
  int64_t start_time = 0;
  bool started = false;
  bool exited = false;
  ProcessExit exit;
  std::string log_path, exit_path, marker_path, ready_path;
  std::string progress_path, probe_result_path;  // TIANSHU_PROGRESS_FILE, TIANSHU_PROBE_RESULT
  int64_t started_ns = 0;                        // when this agent started (or adopted) it
  bool ready = false;                            // see AgentOptions::ready_timeout_ns
  bool usr1_pending = false;                     // a checkpoint signal waits for it to be ready
  int64_t last_step = -1;
  std::string last_path;
  bool marker_seen = false;  // since the last SIGUSR1
  int64_t end_ns = 0;        // placeholder ranks with a duration: when they end
  bool adopted = false;      // its shim is an earlier agent process's (Recover adopted it)

  // Reads the rank's checkpoint marker; true when it is new or names another step.
  bool ReadMarker(SystemFiles& fs);
};

enum class Phase {
  kRunning,        // ranks run (or have ended on their own)
  kCheckpointing,  // stop order: SIGUSR1 sent, waiting for markers
  kTerminating,    // SIGTERM sent, waiting for exits
  kKilled,         // SIGKILL sent
};

class JobRun {
 public:
  // Sets the job's paths and ranks from its launch order and makes its directories; starts
  // nothing. Returns what went wrong on the way (a checkpoint directory not made).
  std::vector<std::string> Prepare(const JobContext& ctx, const wire::WorkOrder& order,
                                   const std::string& key, int64_t now_ns);
  // Starts every rank not started yet (or a placeholder) in the job's cgroup; journals and
  // reports each. The job's `latest` checkpoint pointer is read once for all of them.
  void StartRanks(const JobContext& ctx, const IsolationPlan& plan, int64_t now_ns);
  // A checkpoint order: SIGUSR1 to the ranks, reported from Tick once every marker is in.
  void BeginCheckpoint(const JobContext& ctx, const std::string& order_id, int64_t now_ns);
  // A stop order: checkpoint first when asked and worth it, then SIGTERM. A job already
  // stopping carries on with its first stop.
  void BeginStop(const JobContext& ctx, const wire::WorkOrder& order, int64_t now_ns);
  // Reaps exits, watches markers, advances the stop sequence; Finish once every rank is gone.
  void Tick(const JobContext& ctx, int64_t now_ns);
  // True while a process runs or a stop/checkpoint waits.
  bool Busy() const;
  // The earliest deadline of the job (stop, checkpoint, a placeholder's end), or 0.
  int64_t NextDeadline() const;

  std::string key;  // job_id + "/" + attempt
  wire::WorkOrder order;
  // checkpoint_dir: the job's (the `latest` pointer only this agent writes); attempt_dir:
  // checkpoint_dir/attempt-N, the ranks' TIANSHU_CHECKPOINT_DIR.
  std::string dir, cgroup, checkpoint_dir, attempt_dir;
  int64_t promoted_step = -1;  // the last step of rank 0 this agent made `latest`
  std::string user_dir;        // markers and ready files: dir, or dir/user owned by the job's owner
  std::vector<RankRun> ranks;
  Phase phase = Phase::kRunning;
  std::string stop_order_id;
  int64_t deadline_ns = 0;
  int64_t term_grace_ns = 30'000'000'000;  // 30 s until a stop order says
  std::string stop_note;
  std::string ckpt_order_id;  // a pending checkpoint order (no stop)
  int64_t ckpt_deadline_ns = 0;
  bool cgroup_created = false;
  int finish_attempts = 0;
  bool done = false;

 private:
  // One rank; `resume_from` is TIANSHU_RESUME_FROM ("" : none).
  void StartRank(const JobContext& ctx, RankRun& r, const IsolationPlan& plan,
                 const std::string& resume_from, int64_t now_ns);
  void EndPlaceholder(const JobContext& ctx, RankRun& r, int64_t step, const std::string& message);
  void SignalAll(const JobContext& ctx, int sig);
  // SIGUSR1 to the ranks that are ready; the others get it from Tick once they are.
  void SignalCheckpoint(const JobContext& ctx, int64_t now_ns);
  bool Ready(const JobContext& ctx, RankRun& r, int64_t now_ns);
  void BeginTerminate(const JobContext& ctx, int64_t now_ns);
  // One rank's part of Tick: a placeholder's end, its marker, a held-back SIGUSR1, its exit.
  void TickRank(const JobContext& ctx, RankRun& r, int64_t now_ns);
  // Points the job's `latest` at rank 0's newest checkpoint of this attempt, while the lease
  // holds: a fenced or superseded attempt never does.
  void PromoteLatest(const JobContext& ctx, const RankRun& rank0);
  void Finish(const JobContext& ctx);
};

}  // namespace internal
}  // namespace tianshu::agent
