// What the API shows: jobs, nodes, queues, events (read only); /metrics is in
// control_plane_metrics.cc.
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
              {"owner", j.owner},
              {"ran_s", static_cast<double>(j.RanMs(last_tick_ms_)) / 1000.0}};
  if (j.spec.time_limit_s > 0) out["time_limit_s"] = j.spec.time_limit_s;
  if (j.failed_rank >= 0) out["failed_rank"] = j.failed_rank;
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
  if (!j.replan.algorithm.empty()) {  // the network watch's re-plan in place (docs/network.md)
    out["replan"] = {{"algorithm", j.replan.algorithm}, {"nodes", j.replan.nodes}};
  }
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
  auto matches = [&](const Job& j) {
    if (j.created_ticket > durable) return false;
    if (!filter.queue.empty() && j.spec.queue != filter.queue) return false;
    if (!filter.owner.empty() && j.owner != filter.owner) return false;
    if (!filter.node.empty() && !j.OnNode(filter.node)) return false;
    if (filter.states.empty()) return true;
    const bool held = j.held && j.state == JobState::kPending;
    const std::string_view state = held ? "held" : JobStateName(j.state);
    return std::any_of(filter.states.begin(), filter.states.end(), [&](const std::string& s) {
      return s == state || s == JobStateName(j.state);
    });
  };
  auto visit = [&](const Job& j) {
    if (!matches(j)) return;
    ++total;
    if (static_cast<int64_t>(out.size()) < filter.limit) out.push_back(JobJson(j, false));
  };
  // Asked for unfinished states alone (the console's poll of the queue): the jobs of the state
  // indexes, not every job the store keeps, in the same order.
  const bool unfinished =
      !filter.states.empty() &&
      std::all_of(filter.states.begin(), filter.states.end(), [](const auto& s) {
        auto state = ParseJobState(s);
        return s == "held" || (state && !IsTerminal(*state));
      });
  const bool everything =
      filter.states.empty() && filter.queue.empty() && filter.owner.empty() && filter.node.empty();
  if (everything) {
    // Every job acknowledged matches: all but those of the newest commits not yet durable,
    // which are the newest jobs (a commit's ticket grows with the seqs it made). The total
    // needs no walk of every job the store keeps (the console polls the newest 500).
    int64_t unseen = 0;
    for (auto it = jobs_.rbegin(); it != jobs_.rend() && it->second.created_ticket > durable;
         ++it) {
      ++unseen;
    }
    total = static_cast<int64_t>(jobs_.size()) - unseen;
    const auto shown = static_cast<size_t>(std::clamp<int64_t>(filter.limit, 0, total));
    if (filter.newest_first) {
      for (auto it = std::next(jobs_.rbegin(), unseen); out.size() < shown; ++it) {
        out.push_back(JobJson(it->second, false));
      }
    } else {
      for (auto it = jobs_.begin(); out.size() < shown; ++it) {
        out.push_back(JobJson(it->second, false));
      }
    }
  } else if (unfinished) {
    std::vector<int64_t> seqs = UnfinishedSeqs(pending_seqs_, active_seqs_);
    if (filter.newest_first) std::reverse(seqs.begin(), seqs.end());
    for (int64_t seq : seqs) visit(jobs_.at(seq));
  } else if (filter.newest_first) {
    for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) visit(it->second);
  } else {
    for (const auto& [seq, j] : jobs_) visit(j);
  }
  return {{"jobs", out}, {"total", total}, {"shown", out.size()}};
}

namespace detail {

std::vector<DeviceHold> DeviceHolds(const std::map<int64_t, Job>& jobs,
                                    const std::set<int64_t>& holding, const std::string& node) {
  std::vector<DeviceHold> out;
  for (int64_t seq : holding) {
    const Job& j = jobs.at(seq);
    for (const auto& p : j.placement) {
      if (!node.empty() && p.node != node) continue;
      out.push_back({p.node, j.id, p.device, p.rank, j.spec.gpu_milli});
    }
  }
  return out;
}

std::map<std::string, std::map<int, json>> AllocationsByNode(const std::vector<DeviceHold>& holds) {
  std::map<std::string, std::map<int, json>> out;
  for (const DeviceHold& h : holds) {
    out[h.node][h.device].push_back({{"job", h.job}, {"rank", h.rank}, {"gpu_milli", h.gpu_milli}});
  }
  return out;
}

json NodeJson(const NodeEntry& n, const std::map<int, json>& allocations, int64_t now_ms) {
  json devices = json::array();
  for (const auto& d : n.hardware.devices) {
    json dj = wire::ToJson(d);
    auto mine = allocations.find(d.index);
    dj["allocations"] = mine != allocations.end() ? mine->second : json::array();
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
          {"cordoned", n.cordoned},
          {"draining", n.draining},
          {"schedulable", TakesNewWork(n)},
          {"probing", n.probing},
          {"message", n.message},
          {"address", n.address},
          {"data_address", n.data_address},
          {"data_interface", n.data_interface},
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

}  // namespace detail

json ControlPlane::ListNodes(int64_t now_ms) const {
  // Under the lock, copies only (a listing of thousands of nodes is mostly JSON, which would
  // hold up heartbeats and the tick): the nodes, one pass over the placed jobs' ranks, and the
  // static cluster's nodes whose agent has not registered.
  std::vector<NodeEntry> nodes;
  std::vector<DeviceHold> holds;
  std::vector<std::string> waiting;
  {
    std::lock_guard l(mu_);
    nodes.reserve(nodes_.size());
    for (const auto& [name, n] : nodes_) nodes.push_back(n);
    holds = DeviceHolds(jobs_, active_seqs_);
    for (const auto& name : options_.static_nodes) {
      if (!nodes_.contains(name)) waiting.push_back(name);
    }
  }
  json out = json::array();
  const auto allocations = AllocationsByNode(holds);
  static const std::map<int, json> kNone;
  for (const NodeEntry& n : nodes) {
    auto mine = allocations.find(n.name);
    out.push_back(NodeJson(n, mine != allocations.end() ? mine->second : kNone, now_ms));
  }
  for (const auto& name : waiting) {
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
  if (rank < 0) rank = j.state == JobState::kFailed && j.failed_rank >= 0 ? j.failed_rank : 0;
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
    return LogSource{n->second.address, n->second.log_key, j.id, rank};
  }
  return Refuse(404, "job " + id + " has no rank " + std::to_string(rank) + " (" +
                         std::to_string(places.size()) + " ranks)");
}

ApiResult<json> ControlPlane::GetNode(const std::string& name, int64_t now_ms) const {
  std::lock_guard l(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Refuse(404, "no node " + name);
  return NodeJson(it->second, AllocationsByNode(DeviceHolds(jobs_, active_seqs_, name))[name],
                  now_ms);
}

json ControlPlane::ListQueues(bool count_finished) const {
  std::lock_guard l(mu_);
  struct Q {
    int64_t pending = 0, active = 0, done = 0, gpu_milli = 0;
    const model::QueueConfig* config = nullptr;
  };
  // Every configured queue (or "default" when none is), with or without jobs; a job of a queue
  // the configuration no longer names is counted under its own name.
  std::map<std::string, Q> queues;
  for (const auto& q : options_.config.queues) queues[q.name].config = &q;
  if (options_.config.queues.empty()) queues["default"];
  uint64_t durable = committer_->Durable();
  // The unfinished jobs alone (the state indexes), not every job the store keeps (about 20 ms
  // per 100,000 jobs under the lock); the finished ones are counted per queue as they end. A
  // queue no longer configured has a row while it has unfinished jobs, or finished ones counted.
  auto count = [&](const Job& j) {
    if (j.created_ticket > durable) return;
    Q& q = queues[j.spec.queue];
    if (j.state == JobState::kPending) {
      q.pending++;
    } else {
      q.active++;
      q.gpu_milli += static_cast<int64_t>(j.placement.size()) * j.spec.gpu_milli;
    }
  };
  for (int64_t seq : pending_seqs_) count(jobs_.at(seq));  // in any order: counts
  for (int64_t seq : active_seqs_) count(jobs_.at(seq));
  if (count_finished) {
    for (const auto& [queue, counts] : ended_) {
      queues[queue].done += counts[0] + counts[1] + counts[2];
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
    json row = {{"name", name},
                {"pending", q.pending},
                {"active", q.active},
                {"finished", count_finished ? json(q.done) : json(nullptr)},
                {"gpus_in_use", used},
                {"share_of_cluster", total_gpus ? used / static_cast<double>(total_gpus) : 0.0},
                {"configured", q.config != nullptr || options_.config.queues.empty()},
                {"quota_gpus", nullptr}};
    if (q.config) {
      row["parent"] = q.config->parent;
      row["weight"] = q.config->weight;
      row["borrow"] = q.config->borrow;
      if (q.config->quota_gpus > 0) row["quota_gpus"] = q.config->quota_gpus;
    }
    out.push_back(std::move(row));
  }
  return {{"queues", out}, {"cluster_gpus", total_gpus}};
}

json ControlPlane::Accounting(int64_t since_ms, int64_t until_ms, int64_t now_ms) const {
  std::lock_guard l(mu_);
  struct Row {
    double gpu_s = 0;
    int64_t jobs = 0;
  };
  std::map<std::string, Row> users, queues;
  double total_gpu_s = 0;
  const uint64_t durable = committer_->Durable();
  for (const auto& [seq, j] : jobs_) {
    if (j.created_ticket > durable) continue;
    std::vector<Job::Run> runs = j.runs;
    if (HoldsPlacement(j.state) && j.run_started_ms > 0) {  // the run going on: up to now
      runs.push_back({j.run_started_ms, std::max(j.run_started_ms, now_ms),
                      static_cast<double>(j.run_gpus) * j.spec.gpu_milli / model::kMilliPerGpu});
    }
    double gpu_s = 0;
    for (const auto& r : runs) {
      const int64_t from = std::max(r.start_ms, since_ms), to = std::min(r.end_ms, until_ms);
      if (to > from) gpu_s += static_cast<double>(to - from) / 1000.0 * r.gpus;
    }
    if (gpu_s <= 0) continue;
    total_gpu_s += gpu_s;
    for (Row* row : {&users[j.owner], &queues[j.spec.queue]}) {
      row->gpu_s += gpu_s;
      row->jobs++;
    }
  }
  auto rows = [&](const std::map<std::string, Row>& by) {
    json out = json::array();
    for (const auto& [name, r] : by) {
      out.push_back({{"name", name}, {"gpu_hours", r.gpu_s / 3600.0}, {"jobs", r.jobs}});
    }
    std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
      return a["gpu_hours"].get<double>() > b["gpu_hours"].get<double>();
    });
    return out;
  };
  return {{"since_ms", since_ms},
          {"until_ms", until_ms},
          {"total_gpu_hours", total_gpu_s / 3600.0},
          {"users", rows(users)},
          {"queues", rows(queues)}};
}

json ControlPlane::WaitEvents(const EventQuery& q) {
  std::unique_lock lock(mu_);
  // Counted before the first look at what is durable (Mutate's wake-up relies on it).
  const bool may_wait = q.wait_ms > 0;
  if (may_wait) ++event_waiters_;
  struct Uncount {
    std::atomic<int>* n;
    ~Uncount() {
      if (n != nullptr) --*n;
    }
  } uncount{may_wait ? &event_waiters_ : nullptr};
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
  // The newest durable event: where a client that only wants what happens from now on starts.
  int64_t latest = 0;
  const uint64_t durable = committer_->Durable();
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->ticket <= durable) {
      latest = it->seq;
      break;
    }
  }
  return {{"events", events}, {"next", next}, {"latest", latest}};
}

}  // namespace tianshu::server
