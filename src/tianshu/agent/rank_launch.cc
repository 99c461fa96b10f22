#include "tianshu/agent/rank_launch.h"

#include <vector>

#include "tianshu/agent/cgroup.h"
#include "tianshu/base/strings.h"
#include "tianshu/wire/rank_env.h"

namespace tianshu::agent {
namespace {

// A job id as one path component ("j-000012"; anything odd becomes '_').
std::string SafeComponent(const std::string& id) {
  std::string name = CgroupNameFor(id, 0);  // "job-<safe>-a0"
  return name.substr(4, name.size() - 4 - 3);
}

}  // namespace

JobPaths JobPathsFor(const wire::WorkOrder& order, const std::string& workdir,
                     const std::string& checkpoint_root) {
  const wire::LaunchOrder& l = *order.launch;
  JobPaths p;
  p.cgroup = CgroupNameFor(order.job_id, order.attempt);
  p.dir = workdir + "/jobs/" + p.cgroup;
  p.checkpoint_dir = !l.checkpoint_dir.empty()
                         ? l.checkpoint_dir
                         : checkpoint_root + "/" + SafeComponent(order.job_id);
  p.attempt_dir = p.checkpoint_dir + "/attempt-" + std::to_string(order.attempt);
  // A job whose ranks run as its owner writes its markers and ready files into a directory
  // of its own (given to the owner at spawn); its logs and exit files stay in the root-owned
  // job directory, which the owner cannot change.
  p.user_dir = l.run_as.empty() ? p.dir : p.dir + "/user";
  return p;
}

RankPaths RankPathsFor(const JobPaths& job, int rank) {
  std::string base = job.dir + "/rank-" + std::to_string(rank);
  std::string own = job.user_dir + "/rank-" + std::to_string(rank);
  return {.log = base + ".log",
          .exit = base + ".exit",
          .marker = own + ".ckpt",
          .ready = own + ".ready",
          .progress = job.user_dir + "/progress-rank-" + std::to_string(rank) + ".jsonl",
          .probe_result = own + ".probe.json"};
}

std::map<std::string, std::string> RankEnvironment(const wire::WorkOrder& order,
                                                   const wire::RankLaunch& rank,
                                                   const std::string& checkpoint_dir) {
  std::map<std::string, std::string> env = wire::RankEnvironment(order, rank);
  // The attempt's own checkpoint directory wins (a server from before attempts directories
  // sent the job's).
  env["TIANSHU_CHECKPOINT_DIR"] = checkpoint_dir;
  return env;
}

std::string RankLogPath(SystemFiles& fs, const std::string& workdir, const std::string& job_id,
                        int rank) {
  auto names = fs.List(workdir + "/jobs");
  if (!names) return "";
  std::string prefix = CgroupNameFor(job_id, 0);
  prefix = prefix.substr(0, prefix.size() - 1);  // "job-<id>-a"
  std::string best;
  int64_t best_attempt = -1;
  for (const auto& n : *names) {
    int64_t a = 0;
    if (StartsWith(n, prefix) && ParseInt64(n.substr(prefix.size()), &a) && a > best_attempt) {
      best_attempt = a;
      best = n;
    }
  }
  if (best.empty()) return "";
  return workdir + "/jobs/" + best + "/rank-" + std::to_string(rank) + ".log";
}

}  // namespace tianshu::agent
