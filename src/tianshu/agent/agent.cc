#include "tianshu/agent/agent.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "tianshu/agent/progress_file.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

std::string Key(const std::string& job_id, int attempt) {
  return job_id + "/" + std::to_string(attempt);
}

}  // namespace

Agent::Agent(AgentOptions options, HostInfo host, SystemFiles& fs, CgroupDriver& cgroups,
             ProcessRunner& runner)
    : options_(std::move(options)),
      host_(std::move(host)),
      fs_(fs),
      cgroups_(cgroups),
      runner_(runner),
      journal_(fs, options_.workdir + "/journal.jsonl"),
      journal_first_(runner, [this] { FlushJournal(); }),
      job_context_{.options = options_,
                   .fs = fs_,
                   .cgroups = cgroups_,
                   .runner = journal_first_,
                   .report = [this](wire::Report r) { Report(std::move(r)); },
                   .journal = [this](const nlohmann::json& record) { JournalOrLog(record); },
                   .journal_flush = [this] { FlushJournal(); },
                   .lease_held = [this] { return LeaseHeld(); },
                   .lease_path = LeasePath(),
                   .lease_deadline = [this] { return lease_deadline_ns_; }} {
  (void)fs_.MakeDirs(options_.workdir);  // a failure shows at the first journal write
  // A lease from before a restart still binds the ranks this agent adopts; one from an earlier
  // boot (CLOCK_BOOTTIME started again) means nothing and goes.
  boot_id_ = std::string(Trim(fs_.Read("/proc/sys/kernel/random/boot_id").value_or("")));
  if (auto text = fs_.ReadUntrusted(LeasePath(), 128)) {
    auto fields = SplitString(std::string(Trim(*text)), ' ');
    int64_t deadline = 0;
    // "DEADLINE BOOT_ID DEADLINE" (LeaseRecord), "DEADLINE BOOT_ID" (an older agent's),
    // "none BOOT_ID"; nobody writes it now, so two different numbers mean a broken file.
    const bool this_boot =
        fields.size() == 2 || fields.size() == 3 ? fields[1] == boot_id_ : boot_id_.empty();
    const bool whole = fields.size() != 3 || fields[2] == fields[0];
    if (!fields.empty() && this_boot && whole && ParseInt64(fields[0], &deadline) && deadline > 0) {
      lease_deadline_ns_ = deadline;
    } else if (fields.empty() || !this_boot || fields[0] != "none") {
      // The shims of ranks of this boot (if any) fence: nothing says a lease holds.
      (void)fs_.Remove(LeasePath());
    }
  }
}

void Agent::SetLease(int64_t lease_ns) {
  lease_ns_ = std::max<int64_t>(0, lease_ns);
  // Taken away: the file says "none" (on failure the old deadline stays, and LeaseHeld says
  // so; the next launch tries again).
  if (lease_ns_ == 0 && lease_deadline_ns_ != 0) (void)LeaseFileReady();
}

Status Agent::LeaseFileReady() {
  if (lease_ns_ == 0) {
    // No lease in force: the file says so ("none"), since a shim fences on a missing file.
    // Looked at before every launch (it may have been removed), written where it does not say so.
    const auto text = fs_.ReadUntrusted(LeasePath(), 128);
    if (!text || !text->starts_with("none")) {
      if (auto st =
              fs_.Replace(LeasePath(), "none " + boot_id_ + "\n", SystemFiles::Sync::kThisBoot);
          !st) {
        return Fail("cannot write ", LeasePath(),
                    " (each rank's shim reads it): ", st.error().message);
      }
    }
    lease_deadline_ns_ = 0;
    return {};
  }
  if (lease_deadline_ns_ == 0) {
    return Fail("no node lease yet (the server gave one of ", std::to_string(lease_ns_ / 1'000'000),
                " ms and no request of this agent has been answered since): a rank started now "
                "would be fenced");
  }
  if (!LeaseHeld()) {
    return Fail("the node lease ran out ",
                std::to_string((BootTimeNs() - lease_deadline_ns_) / 1'000'000),
                " ms ago (no heartbeat answered since): a rank started now would be fenced");
  }
  return {};
}

void Agent::RenewLease(int64_t sent_boot_ns) {
  if (lease_ns_ == 0) return;
  const int64_t deadline = sent_boot_ns + lease_ns_;
  if (deadline <= lease_deadline_ns_) return;
  // Rewritten in place (Overwrite) once the file holds a record of the same length: a shim
  // that reads it meanwhile sees two different numbers and reads again (LeaseExpired). The
  // first renewal after "none" or an older agent's record replaces the file (a temporary file
  // renamed over it). Not synced: after a crash of the machine no rank is left to fence, and
  // the next boot drops the file (its boot id differs); a restarted agent reads it from the
  // page cache. Every answered heartbeat writes it, so a flush each time cost every node one
  // disk flush a second.
  // Ranks adopted from an earlier agent process have shims of that agent, perhaps of a version
  // that reads the first number alone and cannot tell a torn read: until they end, the file is
  // replaced whole.
  bool older_shims = false;
  for (const auto& [key, job] : jobs_) {
    for (const RankRun& r : job.ranks) older_shims = older_shims || (r.adopted && !r.exited);
  }
  const std::string record = LeaseRecord(deadline, boot_id_);
  if ((!older_shims && fs_.Overwrite(LeasePath(), record)) ||
      fs_.Replace(LeasePath(), record, SystemFiles::Sync::kThisBoot)) {
    lease_deadline_ns_ = deadline;
  }
}

bool Agent::LeaseHeld() const {
  return lease_deadline_ns_ == 0 || BootTimeNs() < lease_deadline_ns_;
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
  journal_pending_.push_back(record);
  if (journal_batch_ == 0) FlushJournal();
}

void Agent::FlushJournal() {
  if (journal_pending_.empty()) return;
  const std::vector<nlohmann::json> records = std::move(journal_pending_);
  journal_pending_.clear();
  Status s = journal_.AppendAll(records);
  if (s) return;
  // The journal is what makes restarts safe; without it the agent still works, and says so.
  for (const nlohmann::json& record : records) {
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

Agent::JournalBatch::JournalBatch(Agent& agent) : agent_(agent) { ++agent_.journal_batch_; }

Agent::JournalBatch::~JournalBatch() {
  if (--agent_.journal_batch_ == 0) agent_.FlushJournal();
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
  const JournalBatch batch(*this);
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
  // Refused before anything is journaled (a restart does not carry it out either).
  auto reject = [&](const std::string& why) {
    Report({.order_id = order.id,
            .kind = wire::ReportKind::kRejected,
            .job_id = order.job_id,
            .message = why});
    seen_orders_.insert(order.id);
    ++orders_applied_["rejected"];
  };
  if (Status s = wire::ValidateOrder(order); !s) return reject(s.error().message);
  if (order.kind == wire::OrderKind::kLaunch && !jobs_.count(Key(order.job_id, order.attempt))) {
    // A rank's shim kills it on a missing lease file or a lapsed lease: start nothing then, and
    // let the server place the attempt again (a rejected launch is retried).
    if (Status ready = LeaseFileReady(); !ready) return reject(ready.error().message);
  }
  JournalOrLog({{"t", "order"}, {"order", wire::ToJson(order)}});
  FlushJournal();  // the order is on disk before anything is done for it
  seen_orders_.insert(order.id);
  ++orders_applied_[std::string(wire::OrderKindName(order.kind))];
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
  std::vector<std::string> problems = job.Prepare(job_context_, order, key, now_ns);
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
      auto pid = journal_first_.Spawn({.argv = {"/bin/sh", "-c", cmd},
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
  (void)fs_.Replace(job.dir + "/isolation.txt", message + "\n", SystemFiles::Sync::kThisBoot);
  Report({.order_id = order.id,
          .kind = wire::ReportKind::kAccepted,
          .job_id = order.job_id,
          .message = message});
  job.StartRanks(job_context_, plan, now_ns);
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
  for (JobRun* job : jobs) job->BeginCheckpoint(job_context_, order.id, now_ns);
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
  for (JobRun* job : jobs) job->BeginStop(job_context_, order, now_ns);
}

void Agent::Tick(int64_t now_ns) {
  const JournalBatch batch(*this);
  for (auto& [key, job] : jobs_) {
    if (!job.done) job.Tick(job_context_, now_ns);
  }
  // Forget finished jobs, keeping their log locations.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    it = it->second.done ? jobs_.erase(it) : std::next(it);
  }
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

Agent::Holdings Agent::Held() const {
  Holdings h;
  h.orders = orders_applied_;
  for (const auto& [key, job] : jobs_) {
    if (job.done) continue;
    ++h.jobs;
    h.cgroups += job.cgroup_created ? 1 : 0;
    for (const RankRun& r : job.ranks) h.ranks_running += r.started && !r.exited ? 1 : 0;
  }
  return h;
}

bool Agent::Busy() const {
  for (const auto& [key, job] : jobs_) {
    if (!job.done && job.Busy()) return true;
  }
  return false;
}

int64_t Agent::NextDeadline() const {
  int64_t best = 0;
  for (const auto& [key, job] : jobs_) {
    const int64_t d = job.NextDeadline();
    if (d > 0 && (best == 0 || d < best)) best = d;
  }
  return best;
}

std::string Agent::LogPath(const std::string& job_id, int rank) const {
  return RankLogPath(fs_, options_.workdir, job_id, rank);
}

std::pair<double, int64_t> Agent::HostUsage() { return usage_.Sample(fs_); }

std::vector<wire::JobProgress> Agent::Progress() {
  constexpr size_t kMaxJobs = 1024;  // what a heartbeat carries at most
  std::vector<wire::JobProgress> out;
  for (const auto& [key, job] : jobs_) {
    if (job.done || out.size() >= kMaxJobs) continue;
    const RankRun* lowest = nullptr;
    for (const RankRun& r : job.ranks) {
      if (!r.started || r.exited || r.pid == 0) continue;
      if (!lowest || r.launch.rank < lowest->launch.rank) lowest = &r;
    }
    if (!lowest) continue;
    auto p = ReadProgressFile(fs_, lowest->progress_path);
    if (!p) continue;
    out.push_back({.job_id = job.order.job_id,
                   .attempt = job.order.attempt,
                   .rank = lowest->launch.rank,
                   .step = p->summary.step,
                   .step_time_s = p->summary.step_time_s,
                   .samples = p->summary.samples,
                   .updated_ms = p->updated_ms});
  }
  return out;
}

wire::Hardware Agent::Hardware() const { return HardwareReport(host_); }

namespace {

// How a journaled `exit` record says the rank ended.
ProcessExit RecordedExit(const nlohmann::json& rec) {
  return {rec.value("code", 0), rec.value("signal", 0), rec.value("unknown", false)};
}

}  // namespace

Status Agent::Recover(int64_t now_ns) {
  auto contents = journal_.ReadAll();
  if (!contents) return std::unexpected(contents.error());
  recovery_warnings_ = contents->skipped;
  const std::vector<nlohmann::json>& records = contents->records;
  std::vector<wire::WorkOrder> launches, stops;
  std::map<std::string, std::map<int, nlohmann::json>> starts, exits;  // order -> rank -> rec
  std::set<std::string> done_orders;
  std::string journal_boot;  // "" in a journal from before boot records
  for (const auto& rec : records) {
    std::string t = rec.value("t", "");
    if (t == "boot") {
      // Only as the first line, where compaction writes it: a line appended later (by a rank
      // running as the agent's user) cannot make every rank here an earlier boot's.
      if (&rec == &records.front()) journal_boot = rec.value("id", "");
    } else if (t == "seen") {
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
  // A journal of an earlier boot names processes that the machine's restart ended (and it is
  // not flushed to disk, so its tail may be gone): nothing in it is started, adopted or stopped
  // again. Each rank it ordered that had not ended is reported ended with the machine, so the
  // server fails the attempt at once instead of waiting for the node's fence.
  if (!journal_boot.empty() && !boot_id_.empty() && journal_boot != boot_id_) {
    int ended = 0;
    for (const wire::WorkOrder& o : launches) {
      if (done_orders.count(o.id) || !o.launch) continue;
      for (const wire::RankLaunch& rank : o.launch->ranks) {
        // A rank with no exit record had not ended before the restart: an end nobody saw.
        auto ex = exits[o.id].find(rank.rank);
        const ProcessExit e =
            ex != exits[o.id].end() ? RecordedExit(ex->second) : ProcessExit{.unknown = true};
        Report({.order_id = o.id,
                .kind = wire::ReportKind::kExited,
                .job_id = o.job_id,
                .rank = rank.rank,
                .exit_code = e.exit_code,
                .signal = ReportedSignal(e),
                .message =
                    e.unknown ? "the machine restarted while the rank ran; it ended with it" : ""});
      }
      done_orders.insert(o.id);
      ++ended;
    }
    // Its stops are done (nothing of theirs runs here): said so, else a stop the server sends
    // again would only be acknowledged (its id is seen) and the job would wait in stopping.
    for (const wire::WorkOrder& stop : stops) {
      Report({.order_id = stop.id,
              .kind = wire::ReportKind::kStopped,
              .job_id = stop.job_id,
              .message = "the machine restarted: nothing of the job runs on this node"});
    }
    stops.clear();
    if (ended > 0) {
      recovery_warnings_.push_back(
          journal_.path() + ": written before the machine restarted (boot " + journal_boot +
          "): " + std::to_string(ended) + " launch(es) not resumed, their ranks reported ended");
    }
  }
  std::vector<nlohmann::json> kept;
  if (!boot_id_.empty()) kept.push_back({{"t", "boot"}, {"id", boot_id_}});
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
      r.ReadMarker(fs_);
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
        r.exit = RecordedExit(ex->second);
        Report({.order_id = o.id,
                .kind = wire::ReportKind::kExited,
                .job_id = o.job_id,
                .rank = r.launch.rank,
                .exit_code = r.exit.exit_code,
                .signal = ReportedSignal(r.exit),
                .step = r.last_step});
        continue;
      }
      if (!r.started) continue;
      if (r.pid > 0) r.adopted = runner_.Adopt(r.pid, r.start_time, r.exit_path);  // Tick polls it
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
    job.StartRanks(job_context_, plan, now_ns);
  }
  for (const wire::WorkOrder& s : stops) {
    if (JobsOf(s.job_id, s.attempt).empty()) continue;
    JournalOrLog({{"t", "order"}, {"order", wire::ToJson(s)}});
    Stop(s, now_ns);  // resumes an interrupted stop
  }
  return Ok();
}

}  // namespace tianshu::agent
