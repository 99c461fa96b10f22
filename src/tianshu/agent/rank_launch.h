// Where a job's ranks live on this node and what they start with, as pure functions of the
// launch order: the job's directories (work, checkpoint, this attempt's), each rank's log, exit,
// marker, ready, progress and probe result files, and the rank's environment (rendezvous, visible
// devices, Tianshu's own variables). The agent launches with them; `tianshu logs` finds a rank's
// log with RankLogPath.
//   JobPaths p = JobPathsFor(order, "/var/lib/tianshu/agent", "/ckpt");
//   auto env = RankEnvironment(order, order.launch->ranks[0], p.attempt_dir);
#pragma once

#include <map>
#include <string>

#include "tianshu/agent/system_files.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

// The directories of one attempt of a job on this node.
struct JobPaths {
  std::string cgroup;  // "job-<id>-a<attempt>", also the job directory's name
  std::string dir;     // <workdir>/jobs/<cgroup>: logs, exit files (root's)
  // The job's checkpoint directory (the `latest` pointer only the agent writes) and this
  // attempt's, checkpoint_dir/attempt-N, the ranks' TIANSHU_CHECKPOINT_DIR.
  std::string checkpoint_dir, attempt_dir;
  std::string user_dir;  // markers and ready files: dir, or dir/user owned by the job's owner
};

// The paths of a launch order's job: the order's checkpoint directory, else
// <checkpoint_root>/<job>.
JobPaths JobPathsFor(const wire::WorkOrder& order, const std::string& workdir,
                     const std::string& checkpoint_root);

// The files of one rank of a job.
struct RankPaths {
  std::string log, exit;      // in the job's directory
  std::string marker, ready;  // in the job's user directory
  // Also the user directory's, written by the workload: TIANSHU_PROGRESS_FILE
  // (progress-rank-R.jsonl, progress_file.h) and, for a probe, TIANSHU_PROBE_RESULT.
  std::string progress, probe_result;
};
RankPaths RankPathsFor(const JobPaths& job, int rank);

// The environment of one rank: rendezvous, visible devices of the backend, Tianshu's own
// variables; the order's env is applied on top (the communicator plan's variables).
std::map<std::string, std::string> RankEnvironment(const wire::WorkOrder& order,
                                                   const wire::RankLaunch& rank,
                                                   const std::string& checkpoint_dir);

// The log file of a job's rank under an agent's work directory (newest attempt), or "".
std::string RankLogPath(SystemFiles& fs, const std::string& workdir, const std::string& job_id,
                        int rank);

}  // namespace tianshu::agent
