#include "tianshu/agent/agent.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <thread>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

std::string Key(const std::string& job_id, int attempt) {
  return job_id + "/" + std::to_string(attempt);
}

// A job id as one path component ("j-000012"; anything odd becomes '_').
std::string SafeComponent(const std::string& id) {
  std::string name = CgroupNameFor(id, 0);  // "job-<safe>-a0"
  return name.substr(4, name.size() - 4 - 3);
}

std::string VisibleDevicesVar(const std::string& backend) {
  if (backend == "ascend") return "ASCEND_RT_VISIBLE_DEVICES";
  if (backend == "rocm") return "HIP_VISIBLE_DEVICES";
  if (backend == "musa") return "MUSA_VISIBLE_DEVICES";
  return "CUDA_VISIBLE_DEVICES";
}

std::string WireVendor(model::Vendor v) {
  switch (v) {
    case model::Vendor::kNvidia:
      return "nvidia";
    case model::Vendor::kHuawei:
      return "huawei";
    case model::Vendor::kHygon:
      return "hygon";
    case model::Vendor::kMooreThreads:
      return "moorethreads";
    case model::Vendor::kOther:
      break;
  }
  return "other";
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "signal " + std::to_string(sig);
  }
}

}  // namespace

std::map<std::string, std::string> RankEnvironment(const wire::WorkOrder& order,
                                                   const wire::RankLaunch& rank,
                                                   const std::string& checkpoint_dir) {
  const wire::LaunchOrder& l = *order.launch;
  std::map<std::string, std::string> env;
  std::vector<std::string> devs;
  for (int d : rank.devices) devs.push_back(std::to_string(d));
  env[VisibleDevicesVar(l.backend)] = Join(devs, ",");
  env["MASTER_ADDR"] = l.master_addr.empty() ? "127.0.0.1" : l.master_addr;
  env["MASTER_PORT"] = std::to_string(l.master_port);
  env["WORLD_SIZE"] = std::to_string(l.world_size);
  env["RANK"] = std::to_string(rank.rank);
  env["LOCAL_RANK"] = std::to_string(rank.local_rank);
  env["NODE_RANK"] = std::to_string(rank.node_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(l.ranks.size());
  env["TIANSHU_JOB_ID"] = order.job_id;
  env["TIANSHU_JOB_NAME"] = l.job_name;
  env["TIANSHU_ATTEMPT"] = std::to_string(order.attempt);
  for (const auto& [k, v] : rank.env) env[k] = v;  // the communicator plan's variables win
  // ...but not over the attempt's own checkpoint directory (a server from before attempts
  // directories sent the job's).
  env["TIANSHU_CHECKPOINT_DIR"] = checkpoint_dir;
  return env;
}

Agent::Agent(AgentOptions options, HostInfo host, SystemFiles& fs, CgroupDriver& cgroups,
             ProcessRunner& runner)
    : options_(std::move(options)),
      host_(std::move(host)),
      fs_(fs),
      cgroups_(cgroups),
      runner_(runner),
      journal_(fs, options_.workdir + "/journal.jsonl") {
  (void)fs_.MakeDirs(options_.workdir);  // a failure shows at the first journal write
  // A lease from before a restart still binds the ranks this agent adopts; one from an earlier
  // boot (CLOCK_BOOTTIME started again) means nothing and goes.
  boot_id_ = std::string(Trim(fs_.Read("/proc/sys/kernel/random/boot_id").value_or("")));
  if (auto text = fs_.ReadUntrusted(LeasePath(), 128)) {
    auto fields = SplitString(std::string(Trim(*text)), ' ');
    int64_t deadline = 0;
    const bool this_boot = fields.size() == 2 ? fields[1] == boot_id_ : boot_id_.empty();
    if (!fields.empty() && this_boot && ParseInt64(fields[0], &deadline) && deadline > 0) {
      lease_deadline_ns_ = deadline;
    } else {
      (void)fs_.Remove(LeasePath());
    }
  }
}

void Agent::SetLease(int64_t lease_ns) {
  lease_ns_ = std::max<int64_t>(0, lease_ns);
  if (lease_ns_ == 0 && lease_deadline_ns_ != 0) {
    (void)fs_.Remove(LeasePath());
    lease_deadline_ns_ = 0;
  }
}

void Agent::RenewLease(int64_t sent_boot_ns) {
  if (lease_ns_ == 0) return;
  const int64_t deadline = sent_boot_ns + lease_ns_;
  if (deadline <= lease_deadline_ns_) return;
  // Replace writes a temporary file and renames it: a shim never reads half a number.
  // The boot the deadline belongs to follows it (the shim reads only the number).
  if (fs_.Replace(LeasePath(), std::to_string(deadline) + " " + boot_id_ + "\n")) {
    lease_deadline_ns_ = deadline;
  }
}

bool Agent::LeaseHeld() const {
  return lease_deadline_ns_ == 0 || BootTimeNs() < lease_deadline_ns_;
}

void Agent::PromoteLatest(JobRun& job, const RankRun& r) {
  if (r.launch.rank != 0 || !r.marker_seen || r.last_step <= job.promoted_step) return;
  if (job.attempt_dir.empty() || !LeaseHeld()) return;
  // Only a checkpoint inside this attempt's directory, named without a path of its own.
  const std::string prefix = job.attempt_dir + "/";
  if (r.last_path.size() <= prefix.size() || r.last_path.compare(0, prefix.size(), prefix) != 0) {
    return;
  }
  const std::string name = r.last_path.substr(prefix.size());
  const bool plain =
      !name.empty() && name.size() <= 255 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  if (!plain || name == "." || name == ".." || !fs_.Exists(r.last_path)) return;
  const std::string target = job.attempt_dir.substr(job.checkpoint_dir.size() + 1) + "/" + name;
  if (fs_.Replace(job.checkpoint_dir + "/latest", target + "\n")) job.promoted_step = r.last_step;
}

void Agent::Report(wire::Report r) {
  std::string key =
      r.order_id + "|" + std::string(wire::ReportKindName(r.kind)) + "|" + std::to_string(r.rank);
  if (!report_keys_.insert(key).second) return;
  reports_.push_back(std::move(r));
}

void Agent::AckReports(size_t n) {
  n = std::min(n, reports_.size());
  reports_.erase(reports_.begin(), reports_.begin() + static_cast<std::ptrdiff_t>(n));
}

void Agent::JournalOrLog(const nlohmann::json& record) {
  if (Status s = journal_.Append(record); !s) {
    // The journal is what makes restarts safe; without it the agent still works, and says so.
    wire::Report r;
    const auto& o = record.contains("order") ? record["order"] : nlohmann::json();
    r.order_id = o.is_string()   ? o.get<std::string>()
                 : o.is_object() ? o.value("id", std::string("journal"))
                                 : std::string("journal");
    r.kind = wire::ReportKind::kRejected;
    r.message = "journal write failed: " + s.error().message;
    reports_.push_back(std::move(r));
  }
}

std::vector<Agent::JobRun*> Agent::JobsOf(const std::string& job_id, int attempt) {
  std::vector<JobRun*> out;
  for (auto& [key, job] : jobs_) {
    if (job.done || job.order.job_id != job_id) continue;
    if (attempt > 0 && job.order.attempt != attempt) continue;
    out.push_back(&job);
  }
  return out;
}

void Agent::Apply(const wire::WorkOrder& order, int64_t now_ns) {
  if (seen_orders_.count(order.id)) {
    // The server resends until it hears `accepted`: acknowledge again, do nothing again.
    bool queued = std::any_of(reports_.begin(), reports_.end(), [&](const wire::Report& r) {
      return r.order_id == order.id && r.kind == wire::ReportKind::kAccepted;
    });
    if (!queued) {
      reports_.push_back(
          {.order_id = order.id, .kind = wire::ReportKind::kAccepted, .job_id = order.job_id});
    }
    return;
  }
  if (Status s = wire::ValidateOrder(order); !s) {
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kRejected,
            .job_id = order.job_id,
            .message = s.error().message});
    seen_orders_.insert(order.id);
    return;
  }
  JournalOrLog({{"t", "order"}, {"order", wire::ToJson(order)}});
  seen_orders_.insert(order.id);
  switch (order.kind) {
    case wire::OrderKind::kLaunch:
      Launch(order, now_ns, false);
      break;
    case wire::OrderKind::kCheckpoint:
      Checkpoint(order, now_ns);
      break;
    case wire::OrderKind::kStop:
      Stop(order, now_ns);
      break;
  }
}

void Agent::Launch(const wire::WorkOrder& order, int64_t now_ns, bool replay) {
  std::string key = Key(order.job_id, order.attempt);
  if (jobs_.count(key) && !replay) {
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kAccepted,
            .job_id = order.job_id,
            .message = "already running attempt " + std::to_string(order.attempt)});
    return;
  }
  const wire::LaunchOrder& l = *order.launch;
  JobRun& job = jobs_[key];
  job.key = key;
  job.order = order;
  job.cgroup = CgroupNameFor(order.job_id, order.attempt);
  job.dir = options_.workdir + "/jobs/" + job.cgroup;
  job.checkpoint_dir = !l.checkpoint_dir.empty()
                           ? l.checkpoint_dir
                           : options_.checkpoint_root + "/" + SafeComponent(order.job_id);
  job.attempt_dir = job.checkpoint_dir + "/attempt-" + std::to_string(order.attempt);
  (void)fs_.MakeDirs(job.dir);
  // A job whose ranks run as its owner writes its markers and ready files into a directory
  // of its own (given to the owner at spawn); its logs and exit files stay in the root-owned
  // job directory, which the owner cannot change.
  job.user_dir = l.run_as.empty() ? job.dir : job.dir + "/user";
  if (!l.run_as.empty()) (void)fs_.MakeDirs(job.user_dir);
  std::vector<std::string> problems;
  if (Status s = fs_.MakeDirs(job.attempt_dir); !s) {
    problems.push_back("checkpoint dir: " + s.error().message);
  }
  for (const auto& rl : l.ranks) {
    RankRun r;
    r.launch = rl;
    std::string base = job.dir + "/rank-" + std::to_string(rl.rank);
    std::string own = job.user_dir + "/rank-" + std::to_string(rl.rank);
    r.log_path = base + ".log";
    r.exit_path = base + ".exit";
    r.marker_path = own + ".ckpt";
    r.ready_path = own + ".ready";
    r.started_ns = now_ns;
    job.ranks.push_back(std::move(r));
  }
  if (replay) return;

  IsolationPlan plan = PlanIsolation(host_, l, job.cgroup, job.checkpoint_dir, fs_,
                                     {.apply_partitions = options_.apply_partitions});
  CgroupOutcome outcome;
  if (auto made = cgroups_.Create(plan.cgroup); made) {
    outcome = *made;
    job.cgroup_created = true;
  } else {
    outcome.unsupported.push_back("job cgroup: " + made.error().message);
  }
  if (plan.apply_partitions) {
    for (const std::string& cmd : plan.partition_commands) {
      auto pid = runner_.Spawn({.argv = {"/bin/sh", "-c", cmd},
                                .env = options_.base_env,
                                .log_path = job.dir + "/partitions.log",
                                .exit_path = job.dir + "/partitions.exit"});
      std::optional<ProcessExit> e;
      for (int i = 0; pid && i < 6000 && !(e = runner_.Poll(*pid)); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!pid || !e || e->exit_code != 0 || e->signal != 0) {
        problems.push_back("partition command failed: " + cmd);
      }
    }
  }
  std::string message = DescribeIsolation(plan, outcome);
  if (!problems.empty()) message += " | problems: " + Join(problems, "; ");
  (void)fs_.Replace(job.dir + "/isolation.txt", message + "\n");
  Report({.order_id = order.id,
          .kind = wire::ReportKind::kAccepted,
          .job_id = order.job_id,
          .message = message});
  for (RankRun& r : job.ranks) StartRank(job, r, plan, now_ns);
}

void Agent::StartRank(JobRun& job, RankRun& r, const IsolationPlan& plan, int64_t now_ns) {
  const wire::WorkOrder& order = job.order;
  std::map<std::string, std::string> env = options_.base_env;
  for (const auto& [k, v] : plan.env) env[k] = v;
  for (const auto& [k, v] : RankEnvironment(order, r.launch, job.attempt_dir)) env[k] = v;
  env["TIANSHU_CHECKPOINT_MARKER"] = r.marker_path;
  env["TIANSHU_READY_FILE"] = r.ready_path;
  (void)fs_.Remove(r.ready_path);
  r.started_ns = now_ns;
  r.ready = false;
  env["TIANSHU_NODE"] = options_.node;
  // Where to resume: the job's `latest` pointer, which only the agents of a current attempt
  // write (relative to the job's checkpoint directory; an absolute path from before attempts).
  if (auto latest = fs_.ReadUntrusted(job.checkpoint_dir + "/latest", 4096)) {
    std::string name(Trim(*latest));
    if (!name.empty()) {
      env["TIANSHU_RESUME_FROM"] = name[0] == '/' ? name : job.checkpoint_dir + "/" + name;
    }
  }
  r.started = true;
  if (r.launch.command.empty()) {
    // A placeholder rank holds its devices, runs no process, and ends (code 0) after
    // TIANSHU_DURATION_S when the job gave one: sleep jobs cost the node nothing.
    r.pid = 0;
    double secs = 0;
    if (auto it = env.find("TIANSHU_DURATION_S");
        it != env.end() && ParseDouble(it->second, &secs)) {
      r.end_ns = now_ns + static_cast<int64_t>(secs * 1e9);
    }
    JournalOrLog({{"t", "start"},
                  {"order", order.id},
                  {"rank", r.launch.rank},
                  {"pid", 0},
                  {"start_time", 0},
                  {"end_ns", r.end_ns}});
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kStarted,
            .job_id = order.job_id,
            .rank = r.launch.rank,
            .pid = 0,
            .message = "placeholder rank (no command)"});
    return;
  }
  std::vector<std::string> procs =
      job.cgroup_created ? cgroups_.ProcsFiles(job.cgroup) : std::vector<std::string>{};
  std::string cwd = order.launch->workdir.empty() ? job.dir : order.launch->workdir;
  // Ranks of a user's job run as its owner: the job's directory (markers, the ready file) and
  // its checkpoint directory become theirs; the agent's own state stays root's.
  std::vector<std::string> owned;
  if (!order.launch->run_as.empty()) owned = {job.user_dir, job.attempt_dir};
  auto pid = runner_.Spawn({.argv = r.launch.command,
                            .env = env,
                            .cwd = cwd,
                            .log_path = r.log_path,
                            .exit_path = r.exit_path,
                            .cgroup_procs_files = procs,
                            .run_as = order.launch->run_as,
                            .owned_dirs = owned,
                            .lease_path = LeasePath()});
  if (!pid) {
    r.exited = true;
    r.exit = {127, 0, false};
    JournalOrLog({{"t", "exit"},
                  {"order", order.id},
                  {"rank", r.launch.rank},
                  {"code", 127},
                  {"signal", 0}});
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kExited,
            .job_id = order.job_id,
            .rank = r.launch.rank,
            .exit_code = 127,
            .message = pid.error().message});
    return;
  }
  r.pid = *pid;
  r.start_time = runner_.StartTime(r.pid);
  JournalOrLog({{"t", "start"},
                {"order", order.id},
                {"rank", r.launch.rank},
                {"pid", r.pid},
                {"start_time", r.start_time}});
  Report({.order_id = order.id,
          .kind = wire::ReportKind::kStarted,
          .job_id = order.job_id,
          .rank = r.launch.rank,
          .pid = r.pid});
}

// A placeholder rank (no process) ends: exit 0, journaled and reported.
void Agent::EndPlaceholder(JobRun& job, RankRun& r, int64_t step, const std::string& message) {
  r.exited = true;
  r.exit = {0, 0, false};
  JournalOrLog({{"t", "exit"},
                {"order", job.order.id},
                {"rank", r.launch.rank},
                {"code", 0},
                {"signal", 0}});
  Report({.order_id = job.order.id,
          .kind = wire::ReportKind::kExited,
          .job_id = job.order.job_id,
          .rank = r.launch.rank,
          .step = step,
          .message = message});
}

void Agent::SignalAll(JobRun& job, int sig) {
  for (RankRun& r : job.ranks) {
    if (!r.started || r.exited) continue;
    if (r.pid == 0) {  // placeholder: ends on the first stop signal
      if (sig == SIGTERM || sig == SIGKILL) {
        EndPlaceholder(job, r, r.last_step, "");
      }
      continue;
    }
    (void)runner_.Signal(r.pid, sig);
  }
}

bool Agent::Ready(RankRun& r, int64_t now_ns) {
  if (!r.ready) {
    r.ready = r.marker_seen || r.last_step >= 0 || fs_.Exists(r.ready_path) ||
              now_ns - r.started_ns >= options_.ready_timeout_ns;
  }
  return r.ready;
}

void Agent::SignalCheckpoint(JobRun& job, int64_t now_ns) {
  for (RankRun& r : job.ranks) {
    if (!r.started || r.exited || r.pid == 0) continue;
    r.usr1_pending = !Ready(r, now_ns);
    if (!r.usr1_pending) (void)runner_.Signal(r.pid, SIGUSR1);
  }
}

void Agent::Checkpoint(const wire::WorkOrder& order, int64_t now_ns) {
  auto jobs = JobsOf(order.job_id, order.attempt);
  if (jobs.empty()) {
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kRejected,
            .job_id = order.job_id,
            .message = "job " + order.job_id + " runs no rank on this node"});
    return;
  }
  Report({.order_id = order.id, .kind = wire::ReportKind::kAccepted, .job_id = order.job_id});
  for (JobRun* job : jobs) {
    for (RankRun& r : job->ranks) {
      (void)fs_.Remove(r.marker_path);
      r.marker_seen = false;
    }
    job->ckpt_order_id = order.id;
    job->ckpt_deadline_ns = now_ns + options_.checkpoint_grace_ns;
    SignalCheckpoint(*job, now_ns);
  }
}

void Agent::Stop(const wire::WorkOrder& order, int64_t now_ns) {
  auto jobs = JobsOf(order.job_id, order.attempt);
  Report({.order_id = order.id, .kind = wire::ReportKind::kAccepted, .job_id = order.job_id});
  if (jobs.empty()) {
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kStopped,
            .job_id = order.job_id,
            .message = "nothing of the job runs on this node"});
    return;
  }
  const wire::StopOrder& s = *order.stop;
  for (JobRun* job : jobs) {
    if (!job->stop_order_id.empty() && job->phase != Phase::kRunning) continue;  // stopping
    job->stop_order_id = order.id;
    job->stop_note = s.reason;
    job->term_grace_ns = std::max<int64_t>(0, s.grace_ms) * 1'000'000;
    bool live = std::any_of(job->ranks.begin(), job->ranks.end(),
                            [](const RankRun& r) { return r.started && !r.exited && r.pid > 0; });
    // A gang with a rank still in its rendezvous has trained nothing since its last
    // checkpoint: there is nothing new to save, and a signal now would kill that rank.
    std::vector<std::string> starting;
    for (RankRun& r : job->ranks) {
      if (r.started && !r.exited && r.pid > 0 && !Ready(r, now_ns)) {
        starting.push_back(std::to_string(r.launch.rank));
      }
    }
    if (s.checkpoint_first && live && !starting.empty()) {
      job->stop_note += "; no checkpoint: rank(s) " + Join(starting, ",") +
                        " not ready yet (still starting), nothing new to save";
    }
    if (s.checkpoint_first && live && starting.empty()) {
      for (RankRun& r : job->ranks) {
        (void)fs_.Remove(r.marker_path);
        r.marker_seen = false;
      }
      job->phase = Phase::kCheckpointing;
      job->deadline_ns = now_ns + options_.checkpoint_grace_ns;
      SignalCheckpoint(*job, now_ns);
    } else {
      BeginTerminate(*job, now_ns);
    }
  }
}

void Agent::BeginTerminate(JobRun& job, int64_t now_ns) {
  job.phase = Phase::kTerminating;
  job.deadline_ns = now_ns + job.term_grace_ns;
  SignalAll(job, SIGTERM);
}

bool Agent::ReadMarker(RankRun& r) {
  auto text = fs_.ReadUntrusted(r.marker_path, 4096);
  if (!text) return false;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;  // being written
  int64_t step = j.value("step", int64_t{-1});
  std::string path = j.value("path", std::string());
  bool changed = !r.marker_seen || step != r.last_step;
  r.marker_seen = true;
  r.last_step = step;
  r.last_path = path;
  return changed;
}

void Agent::Tick(int64_t now_ns) {
  for (auto& [key, job] : jobs_) {
    if (job.done) continue;
    for (RankRun& r : job.ranks) {
      if (r.started && !r.exited && r.pid == 0 && r.end_ns > 0 && now_ns >= r.end_ns) {
        EndPlaceholder(job, r, -1, "placeholder finished its duration");
      }
      if (!r.started || r.exited || r.pid == 0) continue;
      if (!r.marker_seen || job.phase == Phase::kCheckpointing || !job.ckpt_order_id.empty() ||
          r.launch.rank == 0) {
        ReadMarker(r);
      }
      PromoteLatest(job, r);
      if (r.usr1_pending) {  // a checkpoint signal held back until the rank is ready
        const bool wanted = job.phase == Phase::kCheckpointing || !job.ckpt_order_id.empty();
        if (!wanted) {
          r.usr1_pending = false;
        } else if (Ready(r, now_ns)) {
          r.usr1_pending = false;
          (void)runner_.Signal(r.pid, SIGUSR1);
        }
      }
      std::optional<ProcessExit> e = runner_.Poll(r.pid);
      if (!e) continue;
      ReadMarker(r);
      PromoteLatest(job, r);
      r.exited = true;
      r.exit = *e;
      std::string msg;
      if (e->unknown) {
        msg = "ended while the agent was away; exit status unknown";
      } else if (e->fenced) {
        msg = "killed by SIGKILL: fenced (no heartbeat answered within the node lease)";
      } else if (e->signal != 0) {
        msg = "killed by " + SignalName(e->signal);
        if (e->signal == SIGKILL && job.phase != Phase::kKilled && job.cgroup_created) {
          if (auto u = cgroups_.Usage(job.cgroup); u && u->oom_kills > 0) {
            msg += " (the job's memory limit: " + std::to_string(u->oom_kills) + " OOM kill(s))";
          }
        }
      } else {
        msg = "exited with code " + std::to_string(e->exit_code);
      }
      JournalOrLog({{"t", "exit"},
                    {"order", job.order.id},
                    {"rank", r.launch.rank},
                    {"code", e->exit_code},
                    {"signal", e->signal},
                    {"unknown", e->unknown},
                    {"step", r.last_step}});
      Report({.order_id = job.order.id,
              .kind = wire::ReportKind::kExited,
              .job_id = job.order.job_id,
              .rank = r.launch.rank,
              .exit_code = e->exit_code,
              .signal = e->signal,
              .step = r.last_step,
              .message = msg});
    }
    JobRun& this_job = job;  // clang 14 cannot capture a structured binding
    auto live = [&]() {
      std::vector<RankRun*> out;
      for (RankRun& r : this_job.ranks) {
        if (r.started && !r.exited && r.pid > 0) out.push_back(&r);
      }
      return out;
    };
    auto all_marked = [&]() {
      auto l = live();
      return std::all_of(l.begin(), l.end(), [](RankRun* r) { return r->marker_seen; });
    };
    // A checkpoint order (no stop): report each rank's marker once all have one.
    if (!job.ckpt_order_id.empty()) {
      if (all_marked()) {
        for (RankRun& r : job.ranks) {
          if (!r.marker_seen) continue;
          Report({.order_id = job.ckpt_order_id,
                  .kind = wire::ReportKind::kCheckpointed,
                  .job_id = job.order.job_id,
                  .rank = r.launch.rank,
                  .step = r.last_step,
                  .path = r.last_path});
        }
        job.ckpt_order_id.clear();
      } else if (now_ns >= job.ckpt_deadline_ns) {
        Report({.order_id = job.ckpt_order_id,
                .kind = wire::ReportKind::kRejected,
                .job_id = job.order.job_id,
                .message = "no checkpoint marker within " +
                           std::to_string(options_.checkpoint_grace_ns / kNsPerSec) + "s"});
        job.ckpt_order_id.clear();
      }
    }
    switch (job.phase) {
      case Phase::kRunning:
        break;
      case Phase::kCheckpointing:
        if (all_marked()) {
          for (RankRun& r : job.ranks) {
            if (!r.marker_seen) continue;
            Report({.order_id = job.stop_order_id,
                    .kind = wire::ReportKind::kCheckpointed,
                    .job_id = job.order.job_id,
                    .rank = r.launch.rank,
                    .step = r.last_step,
                    .path = r.last_path});
          }
          BeginTerminate(job, now_ns);
        } else if (now_ns >= job.deadline_ns) {
          job.stop_note += "; no checkpoint marker within " +
                           std::to_string(options_.checkpoint_grace_ns / kNsPerSec) + "s";
          BeginTerminate(job, now_ns);
        }
        break;
      case Phase::kTerminating:
        if (now_ns >= job.deadline_ns && !live().empty()) {
          job.stop_note +=
              "; SIGKILL after " + std::to_string(job.term_grace_ns / 1'000'000) + " ms grace";
          job.phase = Phase::kKilled;
          SignalAll(job, SIGKILL);
        }
        break;
      case Phase::kKilled:
        break;
    }
    bool all_gone =
        std::all_of(job.ranks.begin(), job.ranks.end(), [](const RankRun& r) { return r.exited; });
    if (all_gone) Finish(job);
  }
  // Forget finished jobs, keeping their log locations.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    it = it->second.done ? jobs_.erase(it) : std::next(it);
  }
}

void Agent::Finish(JobRun& job) {
  if (job.cgroup_created) {
    // Stragglers: processes of the job that left their process group.
    if (auto u = cgroups_.Usage(job.cgroup); u) {
      for (int64_t pid : u->pids) (void)runner_.Signal(pid, SIGKILL);
      // Next tick, once the kernel has reaped them; a process that will not die (stuck in
      // the kernel) does not keep the job from finishing forever.
      if (!u->pids.empty() && ++job.finish_attempts < 40) return;
    }
    if (Status s = cgroups_.Remove(job.cgroup); !s) {
      job.stop_note += "; cgroup not removed: " + s.error().message;
    }
  }
  JournalOrLog({{"t", "done"}, {"key", job.key}, {"order", job.order.id}});
  if (!job.stop_order_id.empty()) {
    Report({.order_id = job.stop_order_id,
            .kind = wire::ReportKind::kStopped,
            .job_id = job.order.job_id,
            .message = job.stop_note});
  }
  job.done = true;
}

std::vector<wire::RunningRank> Agent::Running() const {
  std::vector<wire::RunningRank> out;
  for (const auto& [key, job] : jobs_) {
    for (const RankRun& r : job.ranks) {
      if (!r.started || r.exited) continue;
      out.push_back({.order_id = job.order.id,
                     .job_id = job.order.job_id,
                     .attempt = job.order.attempt,
                     .rank = r.launch.rank,
                     .pid = r.pid});
    }
  }
  return out;
}

bool Agent::Busy() const {
  for (const auto& [key, job] : jobs_) {
    if (job.done) continue;
    if (job.phase != Phase::kRunning || !job.ckpt_order_id.empty()) return true;
    for (const RankRun& r : job.ranks) {
      if (r.started && !r.exited && r.pid > 0) return true;
    }
  }
  return false;
}

int64_t Agent::NextDeadline() const {
  int64_t best = 0;
  for (const auto& [key, job] : jobs_) {
    for (int64_t d : {job.phase != Phase::kRunning ? job.deadline_ns : int64_t{0},
                      job.ckpt_order_id.empty() ? int64_t{0} : job.ckpt_deadline_ns}) {
      if (d > 0 && (best == 0 || d < best)) best = d;
    }
    for (const RankRun& r : job.ranks) {
      if (r.started && !r.exited && r.end_ns > 0 && (best == 0 || r.end_ns < best)) best = r.end_ns;
    }
  }
  return best;
}

std::string Agent::LogPath(const std::string& job_id, int rank) const {
  return RankLogPath(fs_, options_.workdir, job_id, rank);
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

std::pair<double, int64_t> Agent::HostUsage() {
  double cpu = 0;
  int64_t used = 0;
  if (auto stat = fs_.Read("/proc/stat")) {
    auto line = SplitString(stat->substr(0, stat->find('\n')), ' ');
    int64_t total = 0, idle = 0, v = 0;
    int field = 0;
    for (const auto& f : line) {
      if (f.empty() || f == "cpu" || !ParseInt64(f, &v)) continue;
      total += v;
      if (field == 3 || field == 4) idle += v;  // idle, iowait
      ++field;
    }
    int64_t busy = total - idle;
    if (total > cpu_total_) {
      cpu = static_cast<double>(busy - cpu_busy_) / static_cast<double>(total - cpu_total_);
    }
    cpu_busy_ = busy;
    cpu_total_ = total;
  }
  if (auto mi = fs_.Read("/proc/meminfo")) {
    int64_t total = 0, avail = 0;
    for (const auto& l : SplitString(*mi, '\n')) {
      auto f = SplitString(std::string(Trim(l)), ' ');
      int64_t v = 0;
      if (f.empty() || !ParseInt64(f.size() > 1 ? f[f.size() - 2] : "", &v)) continue;
      if (f[0] == "MemTotal:") total = v * 1024;
      if (f[0] == "MemAvailable:") avail = v * 1024;
    }
    used = std::max<int64_t>(0, total - avail);
  }
  return {std::clamp(cpu, 0.0, 1.0), used};
}

wire::Hardware Agent::Hardware() const {
  wire::Hardware h;
  for (const Accelerator& a : host_.accelerators) {
    h.devices.push_back({.index = a.index,
                         .model = a.model,
                         .vendor = WireVendor(a.vendor),
                         .memory_bytes = a.memory_bytes,
                         .uuid = a.declared ? "" : a.uuid,
                         .numa = a.numa,
                         .pci_bus_id = a.pci_address,
                         .mig_enabled = a.mig_enabled.value_or(false),
                         .declared = a.declared});
  }
  h.cpu_milli = int64_t{host_.cpus} * 1000;
  h.memory_bytes = host_.memory_bytes;
  h.numa_nodes = std::max<int>(1, static_cast<int>(host_.numa_nodes.size()));
  for (const NetInterface& n : host_.nics) {
    if (n.name == "lo") continue;
    bool rdma = std::any_of(host_.rdma.begin(), host_.rdma.end(), [&](const RdmaDevice& d) {
      return std::find(d.netdevs.begin(), d.netdevs.end(), n.name) != d.netdevs.end();
    });
    h.nics.push_back(
        {.name = n.name, .bandwidth_bps = n.speed_mbps * 1'000'000, .rdma = rdma, .numa = n.numa});
  }
  for (const BlockDevice& b : host_.block_devices) {
    h.disks.push_back({.name = b.name, .capacity_bytes = b.size_bytes, .nvme = b.nvme});
  }
  if (!host_.accelerators.empty()) {
    h.backend =
        std::string(model::BackendName(model::DefaultBackend(host_.accelerators[0].vendor)));
  }
  return h;
}

Status Agent::Recover(int64_t now_ns) {
  auto contents = journal_.ReadAll();
  if (!contents) return std::unexpected(contents.error());
  recovery_warnings_ = contents->skipped;
  const std::vector<nlohmann::json>& records = contents->records;
  std::vector<wire::WorkOrder> launches, stops;
  std::map<std::string, std::map<int, nlohmann::json>> starts, exits;  // order -> rank -> rec
  std::set<std::string> done_orders;
  for (const auto& rec : records) {
    std::string t = rec.value("t", "");
    if (t == "seen") {
      seen_orders_.insert(rec.value("id", ""));
    } else if (t == "order") {
      auto o = wire::WorkOrderFromJson(rec["order"]);
      if (!o) continue;
      seen_orders_.insert(o->id);
      if (o->kind == wire::OrderKind::kLaunch) launches.push_back(*o);
      if (o->kind == wire::OrderKind::kStop) stops.push_back(*o);
    } else if (t == "start") {
      starts[rec.value("order", "")][rec.value("rank", -1)] = rec;
    } else if (t == "exit") {
      exits[rec.value("order", "")][rec.value("rank", -1)] = rec;
    } else if (t == "done") {
      done_orders.insert(rec.value("order", ""));
    }
  }
  std::vector<nlohmann::json> kept;
  for (const std::string& id : seen_orders_) {
    bool live = std::any_of(launches.begin(), launches.end(), [&](const wire::WorkOrder& o) {
      return o.id == id && !done_orders.count(id);
    });
    if (!live) kept.push_back({{"t", "seen"}, {"id", id}});
  }
  for (const wire::WorkOrder& o : launches) {
    if (done_orders.count(o.id)) continue;
    kept.push_back({{"t", "order"}, {"order", wire::ToJson(o)}});
    Launch(o, now_ns, /*replay=*/true);
    JobRun& job = jobs_[Key(o.job_id, o.attempt)];
    job.cgroup_created = !cgroups_.ProcsFiles(job.cgroup).empty();
    for (RankRun& r : job.ranks) {
      ReadMarker(r);
      r.marker_seen = false;
      auto st = starts[o.id].find(r.launch.rank);
      auto ex = exits[o.id].find(r.launch.rank);
      if (st != starts[o.id].end()) {
        kept.push_back(st->second);
        r.started = true;
        r.pid = st->second.value("pid", int64_t{0});
        r.start_time = st->second.value("start_time", int64_t{0});
        r.end_ns = st->second.value("end_ns", int64_t{0});
      }
      if (ex != exits[o.id].end()) {
        kept.push_back(ex->second);
        r.exited = true;
        r.exit = {ex->second.value("code", 0), ex->second.value("signal", 0),
                  ex->second.value("unknown", false)};
        Report({.order_id = o.id,
                .kind = wire::ReportKind::kExited,
                .job_id = o.job_id,
                .rank = r.launch.rank,
                .exit_code = r.exit.exit_code,
                .signal = r.exit.signal,
                .step = r.last_step});
        continue;
      }
      if (!r.started) continue;
      if (r.pid > 0) runner_.Adopt(r.pid, r.start_time, r.exit_path);  // Tick polls it
      Report({.order_id = o.id,
              .kind = wire::ReportKind::kStarted,
              .job_id = o.job_id,
              .rank = r.launch.rank,
              .pid = r.pid});
    }
  }
  // The compacted journal goes down before the agent acts again (the actions append to it).
  if (Status s = journal_.Rewrite(kept); !s) return s;
  for (auto& [key, job] : jobs_) {
    // Ranks journaled as ordered but never started (the agent died in between): start now.
    bool need_start = std::any_of(job.ranks.begin(), job.ranks.end(),
                                  [](const RankRun& r) { return !r.started; });
    if (!need_start) continue;
    IsolationPlan plan = PlanIsolation(host_, *job.order.launch, job.cgroup, job.checkpoint_dir,
                                       fs_, {.apply_partitions = false});
    job.cgroup_created = cgroups_.Create(plan.cgroup).has_value();
    for (RankRun& r : job.ranks) {
      if (!r.started) StartRank(job, r, plan, now_ns);
    }
  }
  for (const wire::WorkOrder& s : stops) {
    if (JobsOf(s.job_id, s.attempt).empty()) continue;
    JournalOrLog({{"t", "order"}, {"order", wire::ToJson(s)}});
    Stop(s, now_ns);  // resumes an interrupted stop
  }
  return Ok();
}

}  // namespace tianshu::agent
