#include "tianshu/agent/internal/job_run.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "tianshu/agent/agent.h"
#include "tianshu/agent/bandwidth_probe.h"
#include "tianshu/agent/rank_launch.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent::internal {
namespace {

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

// The probe tools as this agent has them: its script, and the ranks' PATH for vendor tests.
ProbeTools ProbeToolsOf(const JobContext& ctx) {
  ProbeTools tools{.python = ctx.options.probe_python, .script = ctx.options.probe_script};
  if (auto path = ctx.options.base_env.find("PATH"); path != ctx.options.base_env.end()) {
    tools.path = SplitString(path->second, ':');
  }
  tools.exists = [&fs = ctx.fs](const std::string& p) { return fs.Exists(p); };
  return tools;
}

}  // namespace

bool RankRun::ReadMarker(SystemFiles& fs) {
  auto text = fs.ReadUntrusted(marker_path, 4096);
  if (!text) return false;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;  // being written
  int64_t step = j.value("step", int64_t{-1});
  std::string path = j.value("path", std::string());
  bool changed = !marker_seen || step != last_step;
  marker_seen = true;
  last_step = step;
  last_path = path;
  return changed;
}

std::vector<std::string> JobRun::Prepare(const JobContext& ctx, const wire::WorkOrder& o,
                                         const std::string& k, int64_t now_ns) {
  const wire::LaunchOrder& l = *o.launch;
  key = k;
  order = o;
  JobPaths paths = JobPathsFor(o, ctx.options.workdir, ctx.options.checkpoint_root);
  cgroup = paths.cgroup;
  dir = paths.dir;
  checkpoint_dir = paths.checkpoint_dir;
  attempt_dir = paths.attempt_dir;
  (void)ctx.fs.MakeDirs(dir);
  user_dir = paths.user_dir;
  if (!l.run_as.empty()) (void)ctx.fs.MakeDirs(user_dir);
  std::vector<std::string> problems;
  if (Status s = ctx.fs.MakeDirs(attempt_dir); !s) {
    problems.push_back("checkpoint dir: " + s.error().message);
  }
  for (const auto& rl : l.ranks) {
    RankRun r;
    r.launch = rl;
    RankPaths files = RankPathsFor(paths, rl.rank);
    r.log_path = files.log;
    r.exit_path = files.exit;
    r.marker_path = files.marker;
    r.ready_path = files.ready;
    r.progress_path = files.progress;
    r.probe_result_path = files.probe_result;
    r.started_ns = now_ns;
    ranks.push_back(std::move(r));
  }
  return problems;
}

void JobRun::StartRanks(const JobContext& ctx, const IsolationPlan& plan, int64_t now_ns) {
  // Where to resume: the job's `latest` pointer, which only the agents of a current attempt
  // write (relative to the job's checkpoint directory; an absolute path from before attempts).
  std::string resume_from;
  if (auto latest = ctx.fs.ReadUntrusted(checkpoint_dir + "/latest", 4096)) {
    std::string name(Trim(*latest));
    if (!name.empty()) resume_from = name[0] == '/' ? name : checkpoint_dir + "/" + name;
  }
  for (RankRun& r : ranks) {
    if (!r.started) StartRank(ctx, r, plan, resume_from, now_ns);
  }
}

void JobRun::StartRank(const JobContext& ctx, RankRun& r, const IsolationPlan& plan,
                       const std::string& resume_from, int64_t now_ns) {
  std::map<std::string, std::string> env = ctx.options.base_env;
  for (const auto& [k, v] : plan.env) env[k] = v;
  for (const auto& [k, v] : RankEnvironment(order, r.launch, attempt_dir)) env[k] = v;
  env["TIANSHU_CHECKPOINT_MARKER"] = r.marker_path;
  env["TIANSHU_READY_FILE"] = r.ready_path;
  env["TIANSHU_PROGRESS_FILE"] = r.progress_path;
  // A separate data network: the ranks' sockets leave by its interface, unless the job says.
  if (!ctx.options.data_interface.empty()) {
    for (const char* k : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"}) {
      if (!r.launch.env.count(k)) env[k] = ctx.options.data_interface;
    }
  }
  (void)ctx.fs.Remove(r.ready_path);
  r.started_ns = now_ns;
  r.ready = false;
  env["TIANSHU_NODE"] = ctx.options.node;
  if (!resume_from.empty()) env["TIANSHU_RESUME_FROM"] = resume_from;
  r.started = true;
  std::vector<std::string> argv = r.launch.command;
  std::string spawn_error;
  if (order.launch->probe && argv.empty()) {  // a probe: the agent picks what the rank runs
    if (auto probe =
            PlanProbeRank(*order.launch, r.launch, ProbeToolsOf(ctx), r.probe_result_path)) {
      for (const auto& [k, v] : probe->env) env[k] = v;
      argv = std::move(probe->argv);
      (void)ctx.fs.Remove(r.probe_result_path);
    } else {
      spawn_error = "probe: " + probe.error().message;
    }
  }
  if (argv.empty() && spawn_error.empty()) {
    // A placeholder rank holds its devices, runs no process, and ends (code 0) after
    // TIANSHU_DURATION_S when the job gave one: sleep jobs cost the node nothing.
    r.pid = 0;
    double secs = 0;
    if (auto it = env.find("TIANSHU_DURATION_S");
        it != env.end() && ParseDouble(it->second, &secs)) {
      r.end_ns = now_ns + static_cast<int64_t>(secs * 1e9);
    }
    ctx.journal({{"t", "start"},
                 {"order", order.id},
                 {"rank", r.launch.rank},
                 {"pid", 0},
                 {"start_time", 0},
                 {"end_ns", r.end_ns}});
    ctx.report({.order_id = order.id,
                .kind = wire::ReportKind::kStarted,
                .job_id = order.job_id,
                .rank = r.launch.rank,
                .pid = 0,
                .message = "placeholder rank (no command)"});
    return;
  }
  std::vector<std::string> procs =
      cgroup_created ? ctx.cgroups.ProcsFiles(cgroup) : std::vector<std::string>{};
  std::string cwd = order.launch->workdir.empty() ? dir : order.launch->workdir;
  // Ranks of a user's job run as its owner: the job's directory (markers, the ready file) and
  // its checkpoint directory become theirs; the agent's own state stays root's.
  std::vector<std::string> owned;
  if (!order.launch->run_as.empty()) owned = {user_dir, attempt_dir};
  Result<int64_t> pid = Fail(spawn_error);
  if (spawn_error.empty()) {
    pid = ctx.runner.Spawn({.argv = argv,
                            .env = env,
                            .cwd = cwd,
                            .log_path = r.log_path,
                            .exit_path = r.exit_path,
                            .cgroup_procs_files = procs,
                            .run_as = order.launch->run_as,
                            .owned_dirs = owned,
                            .lease_path = ctx.lease_path,
                            .lease_deadline_ns = ctx.lease_deadline ? ctx.lease_deadline() : 0,
                            .low_priority = order.launch->probe.has_value()});
  }
  if (!pid) {
    r.exited = true;
    r.exit = {127, 0, false};
    ctx.journal({{"t", "exit"},
                 {"order", order.id},
                 {"rank", r.launch.rank},
                 {"code", 127},
                 {"signal", 0}});
    ctx.report({.order_id = order.id,
                .kind = wire::ReportKind::kExited,
                .job_id = order.job_id,
                .rank = r.launch.rank,
                .exit_code = 127,
                .message = pid.error().message});
    return;
  }
  r.pid = *pid;
  r.start_time = ctx.runner.StartTime(r.pid);
  ctx.journal({{"t", "start"},
               {"order", order.id},
               {"rank", r.launch.rank},
               {"pid", r.pid},
               {"start_time", r.start_time}});
  ctx.journal_flush();  // a running process is on disk at once: a restart adopts it
  ctx.report({.order_id = order.id,
              .kind = wire::ReportKind::kStarted,
              .job_id = order.job_id,
              .rank = r.launch.rank,
              .pid = r.pid});
}

// A placeholder rank (no process) ends: exit 0, journaled and reported.
void JobRun::EndPlaceholder(const JobContext& ctx, RankRun& r, int64_t step,
                            const std::string& message) {
  r.exited = true;
  r.exit = {0, 0, false};
  ctx.journal(
      {{"t", "exit"}, {"order", order.id}, {"rank", r.launch.rank}, {"code", 0}, {"signal", 0}});
  ctx.report({.order_id = order.id,
              .kind = wire::ReportKind::kExited,
              .job_id = order.job_id,
              .rank = r.launch.rank,
              .step = step,
              .message = message});
}

void JobRun::SignalAll(const JobContext& ctx, int sig) {
  for (RankRun& r : ranks) {
    if (!r.started || r.exited) continue;
    if (r.pid == 0) {  // placeholder: ends on the first stop signal
      if (sig == SIGTERM || sig == SIGKILL) {
        EndPlaceholder(ctx, r, r.last_step, "");
      }
      continue;
    }
    (void)ctx.runner.Signal(r.pid, sig);
  }
}

bool JobRun::Ready(const JobContext& ctx, RankRun& r, int64_t now_ns) {
  if (!r.ready) {
    r.ready = r.marker_seen || r.last_step >= 0 || ctx.fs.Exists(r.ready_path) ||
              now_ns - r.started_ns >= ctx.options.ready_timeout_ns;
  }
  return r.ready;
}

void JobRun::SignalCheckpoint(const JobContext& ctx, int64_t now_ns) {
  for (RankRun& r : ranks) {
    if (!r.started || r.exited || r.pid == 0) continue;
    r.usr1_pending = !Ready(ctx, r, now_ns);
    if (!r.usr1_pending) (void)ctx.runner.Signal(r.pid, SIGUSR1);
  }
}

void JobRun::BeginCheckpoint(const JobContext& ctx, const std::string& order_id, int64_t now_ns) {
  for (RankRun& r : ranks) {
    (void)ctx.fs.Remove(r.marker_path);
    r.marker_seen = false;
  }
  ckpt_order_id = order_id;
  ckpt_deadline_ns = now_ns + ctx.options.checkpoint_grace_ns;
  SignalCheckpoint(ctx, now_ns);
}

void JobRun::BeginStop(const JobContext& ctx, const wire::WorkOrder& stop, int64_t now_ns) {
  const wire::StopOrder& s = *stop.stop;
  if (!stop_order_id.empty() && phase != Phase::kRunning) return;  // stopping
  stop_order_id = stop.id;
  stop_note = s.reason;
  term_grace_ns = std::max<int64_t>(0, s.grace_ms) * 1'000'000;
  bool live = std::any_of(ranks.begin(), ranks.end(),
                          [](const RankRun& r) { return r.started && !r.exited && r.pid > 0; });
  // A gang with a rank still in its rendezvous has trained nothing since its last
  // checkpoint: there is nothing new to save, and a signal now would kill that rank.
  std::vector<std::string> starting;
  for (RankRun& r : ranks) {
    if (r.started && !r.exited && r.pid > 0 && !Ready(ctx, r, now_ns)) {
      starting.push_back(std::to_string(r.launch.rank));
    }
  }
  if (s.checkpoint_first && live && !starting.empty()) {
    stop_note += "; no checkpoint: rank(s) " + Join(starting, ",") +
                 " not ready yet (still starting), nothing new to save";
  }
  if (s.checkpoint_first && live && starting.empty()) {
    for (RankRun& r : ranks) {
      (void)ctx.fs.Remove(r.marker_path);
      r.marker_seen = false;
    }
    phase = Phase::kCheckpointing;
    deadline_ns = now_ns + ctx.options.checkpoint_grace_ns;
    SignalCheckpoint(ctx, now_ns);
  } else {
    BeginTerminate(ctx, now_ns);
  }
}

void JobRun::BeginTerminate(const JobContext& ctx, int64_t now_ns) {
  phase = Phase::kTerminating;
  deadline_ns = now_ns + term_grace_ns;
  SignalAll(ctx, SIGTERM);
}

void JobRun::PromoteLatest(const JobContext& ctx, const RankRun& r) {
  if (r.launch.rank != 0 || !r.marker_seen || r.last_step <= promoted_step) return;
  if (attempt_dir.empty() || !ctx.lease_held()) return;
  // Only a checkpoint inside this attempt's directory, named without a path of its own.
  const std::string prefix = attempt_dir + "/";
  if (r.last_path.size() <= prefix.size() || r.last_path.compare(0, prefix.size(), prefix) != 0) {
    return;
  }
  const std::string name = r.last_path.substr(prefix.size());
  const bool plain =
      !name.empty() && name.size() <= 255 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  if (!plain || name == "." || name == ".." || !ctx.fs.Exists(r.last_path)) return;
  const std::string target = attempt_dir.substr(checkpoint_dir.size() + 1) + "/" + name;
  if (ctx.fs.Replace(checkpoint_dir + "/latest", target + "\n", SystemFiles::Sync::kDurable)) {
    promoted_step = r.last_step;
  }
}

void JobRun::TickRank(const JobContext& ctx, RankRun& r, int64_t now_ns) {
  if (r.started && !r.exited && r.pid == 0 && r.end_ns > 0 && now_ns >= r.end_ns) {
    EndPlaceholder(ctx, r, -1, "placeholder finished its duration");
  }
  if (!r.started || r.exited || r.pid == 0) return;
  if (!r.marker_seen || phase == Phase::kCheckpointing || !ckpt_order_id.empty() ||
      r.launch.rank == 0) {
    r.ReadMarker(ctx.fs);
  }
  PromoteLatest(ctx, r);
  if (r.usr1_pending) {  // a checkpoint signal held back until the rank is ready
    const bool wanted = phase == Phase::kCheckpointing || !ckpt_order_id.empty();
    if (!wanted) {
      r.usr1_pending = false;
    } else if (Ready(ctx, r, now_ns)) {
      r.usr1_pending = false;
      (void)ctx.runner.Signal(r.pid, SIGUSR1);
    }
  }
  std::optional<ProcessExit> e = ctx.runner.Poll(r.pid);
  if (!e) return;
  r.ReadMarker(ctx.fs);
  PromoteLatest(ctx, r);
  r.exited = true;
  r.exit = *e;
  std::string msg;
  if (e->unknown) {
    // No exit file: its shim was killed too (an OOM kill, a kill of the group): ReportedSignal.
    msg = "ended while the agent was away; exit status unknown (no exit file: counted as killed)";
  } else if (e->fenced) {
    msg = "killed by SIGKILL: fenced (no heartbeat answered within the node lease)";
  } else if (e->signal != 0) {
    msg = "killed by " + SignalName(e->signal);
    if (e->signal == SIGKILL && phase != Phase::kKilled && cgroup_created) {
      if (auto u = ctx.cgroups.Usage(cgroup); u && u->oom_kills > 0) {
        msg += " (the job's memory limit: " + std::to_string(u->oom_kills) + " OOM kill(s))";
      }
    }
  } else {
    msg = "exited with code " + std::to_string(e->exit_code);
  }
  // Rank 0 of a probe that finished: what it measured goes with its exit.
  std::optional<wire::ProbeResult> probe;
  if (order.launch->probe && r.launch.rank == 0 && !e->unknown && e->exit_code == 0 &&
      e->signal == 0) {
    auto method = ProbeMethod(*order.launch, ProbeToolsOf(ctx));
    auto got =
        method ? CollectProbeResult(ctx.fs, *method, *order.launch, r.probe_result_path, r.log_path)
               : Result<wire::ProbeResult>(std::unexpected(method.error()));
    if (got) {
      probe = *got;
    } else {
      msg += "; " + got.error().message;
    }
  }
  ctx.journal({{"t", "exit"},
               {"order", order.id},
               {"rank", r.launch.rank},
               {"code", e->exit_code},
               {"signal", e->signal},
               {"unknown", e->unknown},
               {"step", r.last_step}});
  ctx.report({.order_id = order.id,
              .kind = wire::ReportKind::kExited,
              .job_id = order.job_id,
              .rank = r.launch.rank,
              .exit_code = e->exit_code,
              .signal = ReportedSignal(*e),
              .step = r.last_step,
              .message = msg,
              .probe = probe});
}

void JobRun::Tick(const JobContext& ctx, int64_t now_ns) {
  for (RankRun& r : ranks) TickRank(ctx, r, now_ns);
  auto live = [&]() {
    std::vector<RankRun*> out;
    for (RankRun& r : ranks) {
      if (r.started && !r.exited && r.pid > 0) out.push_back(&r);
    }
    return out;
  };
  auto all_marked = [&]() {
    auto l = live();
    return std::all_of(l.begin(), l.end(), [](RankRun* r) { return r->marker_seen; });
  };
  // A checkpoint order (no stop): report each rank's marker once all have one.
  if (!ckpt_order_id.empty()) {
    if (all_marked()) {
      for (RankRun& r : ranks) {
        if (!r.marker_seen) continue;
        ctx.report({.order_id = ckpt_order_id,
                    .kind = wire::ReportKind::kCheckpointed,
                    .job_id = order.job_id,
                    .rank = r.launch.rank,
                    .step = r.last_step,
                    .path = r.last_path});
      }
      ckpt_order_id.clear();
    } else if (now_ns >= ckpt_deadline_ns) {
      ctx.report({.order_id = ckpt_order_id,
                  .kind = wire::ReportKind::kRejected,
                  .job_id = order.job_id,
                  .message = "no checkpoint marker within " +
                             std::to_string(ctx.options.checkpoint_grace_ns / kNsPerSec) + "s"});
      ckpt_order_id.clear();
    }
  }
  switch (phase) {
    case Phase::kRunning:
      break;
    case Phase::kCheckpointing:
      if (all_marked()) {
        for (RankRun& r : ranks) {
          if (!r.marker_seen) continue;
          ctx.report({.order_id = stop_order_id,
                      .kind = wire::ReportKind::kCheckpointed,
                      .job_id = order.job_id,
                      .rank = r.launch.rank,
                      .step = r.last_step,
                      .path = r.last_path});
        }
        BeginTerminate(ctx, now_ns);
      } else if (now_ns >= deadline_ns) {
        stop_note += "; no checkpoint marker within " +
                     std::to_string(ctx.options.checkpoint_grace_ns / kNsPerSec) + "s";
        BeginTerminate(ctx, now_ns);
      }
      break;
    case Phase::kTerminating:
      if (now_ns >= deadline_ns && !live().empty()) {
        stop_note += "; SIGKILL after " + std::to_string(term_grace_ns / 1'000'000) + " ms grace";
        phase = Phase::kKilled;
        SignalAll(ctx, SIGKILL);
      }
      break;
    case Phase::kKilled:
      break;
  }
  bool all_gone =
      std::all_of(ranks.begin(), ranks.end(), [](const RankRun& r) { return r.exited; });
  if (all_gone) Finish(ctx);
}

void JobRun::Finish(const JobContext& ctx) {
  if (cgroup_created) {
    // Stragglers: processes of the job that left their process group.
    if (auto u = ctx.cgroups.Usage(cgroup); u) {
      for (int64_t pid : u->pids) (void)ctx.runner.Signal(pid, SIGKILL);
      // Next tick, once the kernel has reaped them; a process that will not die (stuck in
      // the kernel) does not keep the job from finishing forever.
      if (!u->pids.empty() && ++finish_attempts < 40) return;
    }
    if (Status s = ctx.cgroups.Remove(cgroup); !s) {
      stop_note += "; cgroup not removed: " + s.error().message;
    }
  }
  ctx.journal({{"t", "done"}, {"key", key}, {"order", order.id}});
  if (!stop_order_id.empty()) {
    ctx.report({.order_id = stop_order_id,
                .kind = wire::ReportKind::kStopped,
                .job_id = order.job_id,
                .message = stop_note});
  }
  done = true;
}

bool JobRun::Busy() const {
  if (phase != Phase::kRunning || !ckpt_order_id.empty()) return true;
  for (const RankRun& r : ranks) {
    if (r.started && !r.exited && r.pid > 0) return true;
  }
  return false;
}

int64_t JobRun::NextDeadline() const {
  int64_t best = 0;
  for (int64_t d : {phase != Phase::kRunning ? deadline_ns : int64_t{0},
                    ckpt_order_id.empty() ? int64_t{0} : ckpt_deadline_ns}) {
    if (d > 0 && (best == 0 || d < best)) best = d;
  }
  for (const RankRun& r : ranks) {
    if (r.started && !r.exited && r.end_ns > 0 && (best == 0 || r.end_ns < best)) best = r.end_ns;
  }
  return best;
}

}  // namespace tianshu::agent::internal
