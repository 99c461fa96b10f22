// What the API shows: jobs, nodes, queues, events, metrics (read only).
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

bool ControlPlane::Visible(const Job& j) const {
  return j.created_ticket == 0 || j.created_ticket <= committer_->Durable();
}

json ControlPlane::JobJson(const Job& j, bool full) const {
  // What it holds now (an elastic job may run at another size than it asked for).
  const int gpus = !j.placement.empty() ? static_cast<int>(j.placement.size())
                   : !j.target.empty()  ? static_cast<int>(j.target.size())
                                        : j.spec.TotalGpus();
  json out = {{"id", j.id},
              {"name", j.spec.name},
              {"kind", model::JobKindName(j.spec.kind)},
              {"queue", j.spec.queue},
              {"priority", j.spec.priority},
              {"gpus", gpus},
              {"gpus_requested", j.spec.TotalGpus()},
              {"state", JobStateName(j.state)},
              {"attempt", j.attempt},
              {"retries", j.retries},
              {"max_retries", j.max_retries},
              {"submitted_ms", j.submitted_ms},
              {"updated_ms", j.updated_ms},
              {"message", j.message},
              {"nodes", j.Nodes()},
              {"resizes", j.resizes},
              {"migrations", j.migrations},
              {"attained_gpu_s", AttainedNow(j, last_tick_ms_)},
              {"colocated", j.colocated},
              {"held", j.held},
              {"owner", j.owner}};
  if (j.array_index >= 0) {
    out["array"] = {{"id", j.array_id}, {"index", j.array_index}, {"count", j.array_count}};
  }
  // The run time the scheduler assumes (backfill, SRTF): the user's `duration`, else learned
  // from succeeded jobs like it, else unknown.
  const double learned = runtimes_.Predict(j.spec, j.spec.TotalGpus());
  out["runtime_estimate_s"] = j.spec.duration_s > 0 ? j.spec.duration_s : learned;
  out["runtime_estimate_source"] = j.spec.duration_s > 0 ? "user"
                                   : learned > 0         ? "history"
                                                         : "none";
  if (!j.target.empty()) {
    std::set<std::string> nodes;
    for (const auto& p : j.target) nodes.insert(p.node);
    out["reshape"] = {{"kind", j.reshape},
                      {"gpus", j.target.size()},
                      {"nodes", std::vector<std::string>(nodes.begin(), nodes.end())}};
  }
  if (full) {
    json history = json::array();
    for (const auto& h : j.history) {
      history.push_back(
          {{"time_ms", h.time_ms}, {"from", h.from}, {"to", h.to}, {"reason", h.reason}});
    }
    out["placement"] = PlacesJson(j.placement);
    out["history"] = history;
    out["run"] = RunJson(j.run);
    out["last_step"] = j.last_step;
    out["last_checkpoint"] = j.last_checkpoint;
    out["spec"] = j.text;
    out["spec_format"] = j.format;
  }
  return out;
}

ApiResult<json> ControlPlane::GetJob(const std::string& id, const Identity& who) const {
  std::lock_guard l(mu_);
  auto seq = ParseJobId(id);
  auto it = seq ? jobs_.find(*seq) : jobs_.end();
  if (it == jobs_.end() || !Visible(it->second)) return Refuse(404, "no job " + id);
  json out = JobJson(it->second, true);
  if (!who.ActsFor(it->second.owner)) {  // run.env may hold secrets
    out.erase("run");
    out.erase("spec");
  }
  return out;
}

json ControlPlane::ListJobs(const JobFilter& filter) const {
  std::lock_guard l(mu_);
  json out = json::array();
  uint64_t durable = committer_->Durable();
  int64_t total = 0;
  for (const auto& [seq, j] : jobs_) {
    if (j.created_ticket > durable) continue;
    if (!filter.queue.empty() && j.spec.queue != filter.queue) continue;
    if (!filter.states.empty() && std::find(filter.states.begin(), filter.states.end(),
                                            JobStateName(j.state)) == filter.states.end()) {
      continue;
    }
    ++total;
    if (static_cast<int64_t>(out.size()) < filter.limit) out.push_back(JobJson(j, false));
  }
  return {{"jobs", out}, {"total", total}};
}

json ControlPlane::NodeJson(const NodeEntry& n, int64_t now_ms) const {
  std::map<int, json> allocations;
  for (const auto& [seq, j] : jobs_) {
    if (!HoldsPlacement(j.state)) {
      continue;
    }
    for (const auto& p : j.placement) {
      if (p.node != n.name) continue;
      allocations[p.device].push_back(
          {{"job", j.id}, {"rank", p.rank}, {"gpu_milli", j.spec.gpu_milli}});
    }
  }
  json devices = json::array();
  for (const auto& d : n.hardware.devices) {
    json dj = wire::ToJson(d);
    dj["allocations"] = allocations.contains(d.index) ? allocations[d.index] : json::array();
    for (const auto& u : n.last.devices) {
      if (u.index == d.index) {
        dj["utilization"] = u.utilization;
        dj["memory_used_bytes"] = u.memory_used_bytes;
        dj["healthy"] = u.healthy;
      }
    }
    devices.push_back(dj);
  }
  return {{"name", n.name},
          {"state", NodeStateName(n.state)},
          {"message", n.message},
          {"address", n.address},
          {"agent_id", n.agent_id},
          {"registered_ms", n.registered_ms},
          {"heartbeat_age_ms", now_ms - n.last_heartbeat_ms},
          {"cpu_milli", n.hardware.cpu_milli},
          {"memory_bytes", n.hardware.memory_bytes},
          {"cpu_utilization", n.last.cpu_utilization},
          {"labels", n.hardware.labels},
          {"backend", n.hardware.backend},
          {"running_ranks", n.last.running.size()},
          {"devices", devices}};
}

json ControlPlane::ListNodes(int64_t now_ms) const {
  std::lock_guard l(mu_);
  json out = json::array();
  for (const auto& [name, n] : nodes_) out.push_back(NodeJson(n, now_ms));
  for (const auto& name : options_.static_nodes) {
    if (nodes_.contains(name)) continue;
    out.push_back({{"name", name},
                   {"state", "waiting"},
                   {"message", "in the static cluster " + options_.static_source +
                                   "; its agent has not registered"},
                   {"devices", json::array()}});
  }
  return {{"nodes", out}};
}

ApiResult<ControlPlane::LogSource> ControlPlane::RankLog(const std::string& id, int rank,
                                                         const Identity& who) const {
  std::lock_guard l(mu_);
  auto seq = ParseJobId(id);
  auto it = seq ? jobs_.find(*seq) : jobs_.end();
  if (it == jobs_.end() || !Visible(it->second)) return Refuse(404, "no job " + id);
  const Job& j = it->second;
  if (!who.ActsFor(j.owner)) {
    return Refuse(403, "job " + id + " belongs to " + j.owner +
                           ": only its owner or an admin may read its logs");
  }
  const auto& places = j.placement.empty() ? j.last_placement : j.placement;
  if (places.empty()) {
    return Refuse(409, "job " + id + " has not been placed yet (" +
                           std::string(JobStateName(j.state)) + "): no log");
  }
  for (const auto& p : places) {
    if (p.rank != rank) continue;
    auto n = nodes_.find(p.node);
    if (n == nodes_.end() || n->second.address.find(':') == std::string::npos) {
      return Refuse(404, "the node of rank " + std::to_string(rank) + " (" + p.node +
                             ") has no log address registered");
    }
    if (n->second.log_key.empty()) {
      return Refuse(404, "node " + p.node + " has not registered since logs needed a key");
    }
    return LogSource{n->second.address, n->second.log_key};
  }
  return Refuse(404, "job " + id + " has no rank " + std::to_string(rank) + " (" +
                         std::to_string(places.size()) + " ranks)");
}

ApiResult<json> ControlPlane::GetNode(const std::string& name, int64_t now_ms) const {
  std::lock_guard l(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Refuse(404, "no node " + name);
  return NodeJson(it->second, now_ms);
}

json ControlPlane::ListQueues() const {
  std::lock_guard l(mu_);
  struct Q {
    int64_t pending = 0, active = 0, done = 0, gpu_milli = 0;
  };
  std::map<std::string, Q> queues;
  uint64_t durable = committer_->Durable();
  for (const auto& [seq, j] : jobs_) {
    if (j.created_ticket > durable) continue;
    Q& q = queues[j.spec.queue];
    if (j.state == JobState::kPending) {
      q.pending++;
    } else if (IsTerminal(j.state)) {
      q.done++;
    } else {
      q.active++;
      q.gpu_milli += static_cast<int64_t>(j.placement.size()) * j.spec.gpu_milli;
    }
  }
  int64_t total_gpus = 0;
  for (const auto& [name, n] : nodes_) {
    if (n.state == NodeState::kReady || n.state == NodeState::kDegraded) {
      total_gpus += static_cast<int64_t>(n.hardware.devices.size());
    }
  }
  json out = json::array();
  for (const auto& [name, q] : queues) {
    double used = static_cast<double>(q.gpu_milli) / 1000.0;
    out.push_back({{"name", name},
                   {"pending", q.pending},
                   {"active", q.active},
                   {"finished", q.done},
                   {"gpus_in_use", used},
                   {"share_of_cluster", total_gpus ? used / static_cast<double>(total_gpus) : 0.0},
                   {"quota_gpus", nullptr}});
  }
  return {{"queues", out}, {"cluster_gpus", total_gpus}};
}

json ControlPlane::WaitEvents(const EventQuery& q) {
  std::unique_lock lock(mu_);
  auto collect = [&] {
    json out = json::array();
    uint64_t durable = committer_->Durable();
    auto it = std::upper_bound(events_.begin(), events_.end(), q.since,
                               [](int64_t s, const EventEntry& e) { return s < e.seq; });
    for (; it != events_.end() && static_cast<int64_t>(out.size()) < q.limit; ++it) {
      if (it->ticket > durable) break;  // keep order: nothing after a change not yet durable
      out.push_back(it->doc);
    }
    return out;
  };
  json events = collect();
  if (events.empty() && q.wait_ms > 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(q.wait_ms);
    while (events.empty() && !shutdown_) {
      if (events_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        events = collect();
        break;
      }
      events = collect();
    }
  }
  int64_t next = events.empty() ? q.since : events.back()["seq"].get<int64_t>();
  return {{"events", events}, {"next", next}};
}

std::string ControlPlane::Metrics() const {
  std::lock_guard l(mu_);
  std::map<std::string, int64_t> by_state, queue_len;
  for (const auto& n : JobStateNames()) by_state[n] = 0;
  int64_t allocated_milli = 0;
  for (const auto& [seq, j] : jobs_) {
    by_state[std::string(JobStateName(j.state))]++;
    if (j.state == JobState::kPending) queue_len[j.spec.queue]++;
    if (HoldsPlacement(j.state) && !j.colocated) {  // an overlaid service holds no GPU share
      allocated_milli += static_cast<int64_t>(j.placement.size()) * j.spec.gpu_milli;
    }
  }
  std::map<std::string, int64_t> node_states = {
      {"ready", 0}, {"degraded", 0}, {"failed", 0}, {"lost", 0}};
  int64_t gpus = 0;
  for (const auto& [name, n] : nodes_) {
    node_states[std::string(NodeStateName(n.state))]++;
    if (n.state == NodeState::kReady || n.state == NodeState::kDegraded) {
      gpus += static_cast<int64_t>(n.hardware.devices.size());
    }
  }
  std::string out;
  out += MetricHeader("tianshu_queue_length", "gauge", "Jobs waiting for a placement.");
  out += "tianshu_queue_length " + std::to_string(by_state["pending"]) + "\n";
  out += MetricHeader("tianshu_queue_pending", "gauge", "Pending jobs per queue.");
  for (const auto& [q, n] : queue_len) {
    out += "tianshu_queue_pending{queue=\"" + LabelValue(q) + "\"} " + std::to_string(n) + "\n";
  }
  out += MetricHeader("tianshu_jobs", "gauge", "Jobs by state.");
  for (const auto& [s, n] : by_state) {
    out += "tianshu_jobs{state=\"" + s + "\"} " + std::to_string(n) + "\n";
  }
  out += MetricHeader("tianshu_nodes", "gauge", "Registered nodes by state.");
  for (const auto& [s, n] : node_states) {
    out += "tianshu_nodes{state=\"" + s + "\"} " + std::to_string(n) + "\n";
  }
  char buf[64];
  double alloc = static_cast<double>(allocated_milli) / 1000.0;
  out += MetricHeader("tianshu_gpus", "gauge",
                      "Accelerators of ready and degraded nodes, allocated or free.");
  std::snprintf(buf, sizeof buf, "%.3f", alloc);
  out += std::string("tianshu_gpus{state=\"allocated\"} ") + buf + "\n";
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(gpus) - alloc);
  out += std::string("tianshu_gpus{state=\"free\"} ") + buf + "\n";
  out += metrics_.cycle_seconds.Render("tianshu_cycle_seconds", "Latency of one scheduling cycle.");
  out +=
      MetricHeader("tianshu_placement_outcomes_total", "counter", "Placement attempts by outcome.");
  for (const char* k : {"placed", "does-not-fit-now", "can-never-fit"}) {
    auto it = metrics_.placement_outcomes.find(k);
    int64_t v = it == metrics_.placement_outcomes.end() ? 0 : it->second;
    out += std::string("tianshu_placement_outcomes_total{outcome=\"") + k + "\"} " +
           std::to_string(v) + "\n";
  }
  out += MetricHeader("tianshu_submissions_total", "counter", "Job submissions by result.");
  out += "tianshu_submissions_total{result=\"accepted\"} " +
         std::to_string(metrics_.submissions_accepted.load()) + "\n";
  out += "tianshu_submissions_total{result=\"rejected\"} " +
         std::to_string(metrics_.submissions_rejected.load()) + "\n";
  const CommitStats cs = committer_->Stats();
  // Counters: name, help, value.
  const std::pair<const char*, std::pair<const char*, int64_t>> counters[] = {
      {"tianshu_cycles_total", {"Scheduling cycles run.", metrics_.cycles}},
      {"tianshu_ledger_rebuilds_total",
       {"Times the scheduling ledger was rebuilt from the records (a node changed, the store was "
        "loaded).",
        ledger_stats_.rebuilds}},
      {"tianshu_ledger_synced_jobs_total",
       {"Jobs handed to the scheduling ledger again after their record changed.",
        ledger_stats_.synced_jobs}},
      {"tianshu_ledger_mismatches_total",
       {"Cycles at which the ledger differed from a replay of the records (checked only with "
        "TIANSHU_VERIFY_LEDGER=1).",
        ledger_stats_.mismatches}},
      {"tianshu_job_retries_total", {"Attempts restarted after a failure.", metrics_.retries}},
      {"tianshu_gang_timeouts_total",
       {"Gangs released because not every rank started within scheduler.gang_timeout.",
        metrics_.gang_timeouts}},
      {"tianshu_job_preemptions_total",
       {"Running jobs stopped (with a checkpoint) for a higher-priority job.",
        metrics_.preemptions}},
      {"tianshu_job_resizes_total",
       {"Elastic resizes begun (checkpoint, relaunch at the new size).", metrics_.resizes}},
      {"tianshu_job_migrations_total",
       {"Moves begun (checkpoint, relaunch on another placement).", metrics_.migrations}},
      {"tianshu_nodes_lost_total", {"Nodes declared lost or failed.", metrics_.nodes_lost}},
      {"tianshu_jobs_quarantined_total",
       {"Jobs failed at start because their stored record could not be read back.",
        metrics_.quarantined}},
      {"tianshu_mass_silences_total",
       {"Times more than half of the live nodes went silent at once (no node is declared lost "
        "while it lasts).",
        metrics_.mass_silences}},
      {"tianshu_idempotent_replays_total",
       {"Submissions answered with the job their Idempotency-Key made before.",
        metrics_.idempotent_replays}},
      {"tianshu_store_commits_total", {"Durable store transactions.", cs.commits}},
      {"tianshu_store_changes_total", {"State changes written.", cs.changes}},
      {"tianshu_store_written_bytes_total",
       {"Bytes of keys and documents handed to the store.", cs.bytes}},
  };
  for (const auto& [name, rest] : counters) {
    out += MetricHeader(name, "counter", rest.first);
    out += std::string(name) + " " + std::to_string(rest.second) + "\n";
  }
  out += MetricHeader("tianshu_store_commit_seconds_total", "counter",
                      "Time spent writing to the store.");
  std::snprintf(buf, sizeof buf, "%.6f", cs.commit_seconds);
  out += std::string("tianshu_store_commit_seconds_total ") + buf + "\n";
  return out;
}

}  // namespace tianshu::server
