// The control plane's core: opening it, the one place a change is written (SetState, orders,
// events), and the waits (WaitForChange, Work wake-ups). See control_plane.h.
#include "tianshu/server/control_plane_internal.h"

#include <unordered_set>

#include "tianshu/wire/json_writer.h"

namespace tianshu::server {

using namespace detail;

std::string_view JobStateName(JobState s) { return JobStateNames()[static_cast<size_t>(s)]; }

std::optional<JobState> ParseJobState(std::string_view s) {
  const auto& names = JobStateNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) return static_cast<JobState>(i);
  }
  return std::nullopt;
}

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kReady:
      return "ready";
    case NodeState::kDegraded:
      return "degraded";
    case NodeState::kFailed:
      return "failed";
    case NodeState::kLost:
      return "lost";
  }
  return "ready";
}

std::vector<std::string> Job::Nodes() const {
  // A node's ranks are mostly adjacent: most ranks match the last node found, and a set keeps
  // a large gang linear (1,024 ranks on 128 nodes were 65,000 string compares).
  std::vector<std::string> out;
  std::unordered_set<std::string_view> seen;
  for (const auto& p : placement) {
    if (!out.empty() && out.back() == p.node) continue;
    if (seen.insert(p.node).second) out.push_back(p.node);
  }
  return out;
}

bool Job::OnNode(std::string_view node) const {
  return std::any_of(placement.begin(), placement.end(),
                     [&](const auto& p) { return p.node == node; });
}

int64_t Job::RanMs(int64_t now_ms) const {
  int64_t ms = ended_runs_ms;
  const bool running =
      state == JobState::kStarting || state == JobState::kRunning || state == JobState::kStopping;
  if (running && run_started_ms > 0) ms += std::max<int64_t>(0, now_ms - run_started_ms);
  return ms;
}

// The writes one call makes, gathered and serialised when it finishes.
ControlPlane::ControlPlane(std::unique_ptr<Store> store, ControlPlaneOptions options)
    : store_(std::move(store)), options_(std::move(options)) {
  std::random_device rd;
  order_epoch_ = std::to_string(rd()) + std::to_string(rd() % 1000);
}

ControlPlane::~ControlPlane() {
  Shutdown();
  committer_.reset();  // drains the queue before the store goes
}

Result<std::unique_ptr<ControlPlane>> ControlPlane::Open(std::unique_ptr<Store> store,
                                                         ControlPlaneOptions options,
                                                         int64_t now_ms) {
  if (auto st = policy::RegisterBuiltinPolicies(); !st) return std::unexpected(st.error());
  // The cycle below carries out starts (co-located ones too), preemptions, rejections,
  // resizes and moves (a resize or a move is a stop with a checkpoint, then a relaunch on the
  // reserved target).
  auto engine_options = engine::OptionsFromConfig(options.config);
  if (!engine_options) return std::unexpected(engine_options.error());
  if (engine_options->binding != engine::Binding::kJob) {
    return Fail(model::DiagnosticAt(options.config, "scheduler.binding",
                                    options.config.binding +
                                        " binds a job's pods one at a time, which only `tianshu "
                                        "simulate` models; `tianshu serve` binds whole jobs "
                                        "(binding: job)")
                    .ToString());
  }
  if (!options.placement.empty()) engine_options->placement = options.placement;
  if (auto v = engine_options->Validate(); !v) return std::unexpected(v.error());
  {  // every policy the cycles will build must exist: build them once now
    const model::Topology none;
    if (auto e = engine::Engine::Create(none, *engine_options); !e) {
      return std::unexpected(e.error());
    }
  }
  auto cp = std::unique_ptr<ControlPlane>(new ControlPlane(std::move(store), std::move(options)));
  cp->engine_options_ = std::move(*engine_options);
  cp->admin_token_hash_ =
      cp->options_.admin_token.empty() ? "" : TokenHash(cp->options_.admin_token);
  if (auto s = cp->Load(now_ms); !s) return std::unexpected(s.error());
  cp->options_.earlier.reset();  // its specs are copied; its memory goes with its last reader
  cp->committer_ = std::make_unique<Committer>(cp->store_.get(), cp->options_.commit_batch);
  if (auto s = cp->Quarantine(now_ms); !s) return std::unexpected(s.error());
  return cp;
}

std::set<std::string> ControlPlane::NodeHosts() const {
  std::lock_guard l(mu_);
  std::set<std::string> out;
  for (const auto& [name, n] : nodes_) out.insert(HostOf(n.address));
  return out;
}

void ControlPlane::DeferLosses(int64_t now_ms) {
  std::lock_guard l(mu_);
  if (starved_since_ms_ == 0 || now_ms - last_starved_ms_ > 5000) starved_since_ms_ = now_ms;
  last_starved_ms_ = now_ms;
  // Bounded: clients that keep every worker busy cannot keep a dead node alive for ever.
  if (now_ms - starved_since_ms_ > options_.mass_silence_max_ms) return;
  HoldLossesForRestartWindow(now_ms);  // agents whose heartbeats timed out are backing off
}

void ControlPlane::HoldLossesForRestartWindow(int64_t now_ms) {
  // An agent that lost the server backs off up to 30 s: as long as after a restart.
  losses_not_before_ms_ = std::max(
      losses_not_before_ms_, now_ms + std::max(options_.lost_after_ms, options_.restart_grace_ms));
}

std::vector<std::string> ControlPlane::StartupWarnings() const {
  std::lock_guard l(mu_);
  std::vector<std::string> out = skipped_records_;
  for (const auto& [seq, why] : quarantined_) {
    out.push_back("job " + jobs_.at(seq).id + " quarantined (failed): " + why);
  }
  return out;
}

void ControlPlane::LearnRuntime(const Job& j) {
  // What its runs held, per GPU it last held (run_gpus is kept until the run's end is
  // accounted; a loaded job has 0 and uses its request).
  const int gpus = j.run_gpus > 0 ? j.run_gpus : j.spec.TotalGpus();
  const double share = gpus * j.spec.gpu_milli / static_cast<double>(model::kMilliPerGpu);
  if (share > 0) {
    runtimes_.Add(j.spec, gpus, j.attained_gpu_s / share);
    ++runtimes_added_;
  }
}

// ---- writing ----

std::string ControlPlane::JobDoc(const Job& j) const {
  // Written straight as text: a release or a cycle writes thousands of these under the lock.
  // Keys in sorted order, so the text is what wire::Dump of the same document gives.
  std::string out;
  out.reserve(1024 + j.text.size() + 48 * (j.placement.size() + j.target.size()) +
              128 * j.history.size());
  wire::JsonWriter w(&out);
  auto places = [&w](const std::vector<RankPlace>& v) {
    w.BeginArray();
    for (const auto& p : v) {
      w.BeginObject();
      w.Key("device"), w.Int(p.device);
      w.Key("node"), w.String(p.node);
      w.Key("rank"), w.Int(p.rank);
      w.EndObject();
    }
    w.EndArray();
  };
  w.BeginObject();
  w.Key("after_stop"), w.String(j.after_stop);
  w.Key("array_count"), w.Int(j.array_count);
  w.Key("array_id"), w.String(j.array_id);
  w.Key("array_index"), w.Int(j.array_index);
  w.Key("attained_gpu_s"), w.Double(j.attained_gpu_s);
  w.Key("attempt"), w.Int(j.attempt);
  w.Key("batch"), w.Bool(j.batch);
  w.Key("cancel_requested"), w.Bool(j.cancel_requested);
  w.Key("checkpoint_orders"), w.Int(j.checkpoint_orders);
  w.Key("colocated"), w.Bool(j.colocated);
  w.Key("eligible_ms"), w.Int(j.eligible_ms);
  w.Key("ended_runs_ms"), w.Int(j.ended_runs_ms);
  w.Key("failed_rank"), w.Int(j.failed_rank);
  w.Key("fence_nodes"), w.Object(j.fence_nodes);
  w.Key("fence_until_ms"), w.Int(j.fence_until_ms);
  w.Key("format"), w.String(j.format);
  w.Key("held"), w.Bool(j.held);
  w.Key("history"), w.BeginArray();
  for (const auto& h : j.history) {
    w.BeginObject();
    w.Key("from"), w.String(h.from);
    w.Key("reason"), w.String(h.reason);
    w.Key("time_ms"), w.Int(h.time_ms);
    w.Key("to"), w.String(h.to);
    w.EndObject();
  }
  w.EndArray();
  w.Key("idempotency_key"), w.String(j.idempotency_key);
  w.Key("last_checkpoint"), w.String(j.last_checkpoint);
  w.Key("last_checkpoint_order_ms"), w.Int(j.last_checkpoint_order_ms);
  w.Key("last_step"), w.Int(j.last_step);
  w.Key("limit_base_ms"), w.Int(j.limit_base_ms);
  w.Key("master_port"), w.Int(j.master_port);
  w.Key("max_retries"), w.Int(j.max_retries);
  w.Key("message"), w.String(j.message);
  w.Key("migrations"), w.Int(j.migrations);
  w.Key("name"), w.String(j.spec.name);
  w.Key("owner"), w.String(j.owner);
  // The attempt's per-rank progress (started, exited, launch_accepted, seen reports) is not
  // here: it is written as progress rows, one per fact (see Progress).
  w.Key("placement"), places(j.placement);
  w.Key("queue"), w.String(j.spec.queue);
  if (!j.replan.algorithm.empty()) {
    w.Key("replan"), w.BeginObject();
    w.Key("algorithm"), w.String(j.replan.algorithm);
    w.Key("nodes"), w.Array(j.replan.nodes);
    w.EndObject();
  }
  w.Key("reshape"), w.String(j.reshape);
  w.Key("resizes"), w.Int(j.resizes);
  w.Key("retries"), w.Int(j.retries);
  w.Key("run"), w.BeginObject();
  w.Key("command"), w.Array(j.run.command);
  w.Key("env"), w.Object(j.run.env);
  w.Key("workdir"), w.String(j.run.workdir);
  w.EndObject();
  w.Key("run_as"), w.String(j.run_as);
  w.Key("run_gpus"), w.Int(j.run_gpus);
  w.Key("run_started_ms"), w.Int(j.run_started_ms);
  w.Key("runs"), w.BeginArray();  // [[start_ms, end_ms, gpus], ...]
  for (const auto& r : j.runs) {
    w.BeginArray();
    w.Int(r.start_ms), w.Int(r.end_ms), w.Double(r.gpus);
    w.EndArray();
  }
  w.EndArray();
  w.Key("standing_since_ms"), w.Int(j.standing_since_ms);
  w.Key("state"), w.String(JobStateName(j.state));
  w.Key("stop_pending"), w.Array(j.stop_pending);
  w.Key("submitted_ms"), w.Int(j.submitted_ms);
  w.Key("target"), places(j.target);
  w.Key("text"), w.String(j.text);
  w.Key("updated_ms"), w.Int(j.updated_ms);
  w.EndObject();
  return out;
}

void ControlPlane::SetState(Txn& t, Job& j, JobState to, const std::string& reason,
                            int64_t now_ms) {
  JobState from = j.state;
  if (from == JobState::kPending && to == JobState::kStarting) CountWait(j, now_ms);
  if (HoldsPlacement(from) &&
      !HoldsPlacement(to)) {  // a run ends: its GPU time is attained service
    // A 2D-LAS threshold passed during the run is dated when it was passed, at the run's rate.
    const double before = j.attained_gpu_s;
    j.attained_gpu_s = AttainedNow(j, now_ms);
    const double per_ms = (j.attained_gpu_s - before) /
                          static_cast<double>(std::max<int64_t>(1, now_ms - j.run_started_ms));
    for (int threshold : options_.config.las_thresholds_gpu_s) {
      if (per_ms > 0 && j.run_started_ms > 0 && threshold > before &&
          threshold <= j.attained_gpu_s) {
        j.standing_since_ms =
            j.run_started_ms + static_cast<int64_t>(std::llround((threshold - before) / per_ms));
      }
    }
    if (j.run_started_ms > 0 && now_ms > j.run_started_ms) {
      j.ended_runs_ms += now_ms - j.run_started_ms;
      j.runs.push_back({j.run_started_ms, now_ms,
                        static_cast<double>(j.run_gpus) * j.spec.gpu_milli / model::kMilliPerGpu});
      if (j.runs.size() > Job::kMaxRuns) {
        // The record stays bounded however often the job is preempted: the two oldest runs
        // become one over their span, with their GPU-seconds (exact in any window that holds
        // both; spread evenly over the gap in one that cuts it).
        const Job::Run a = j.runs[0], b = j.runs[1];
        const double gpu_ms = static_cast<double>(a.end_ms - a.start_ms) * a.gpus +
                              static_cast<double>(b.end_ms - b.start_ms) * b.gpus;
        j.runs[1] = {a.start_ms, b.end_ms, gpu_ms / static_cast<double>(b.end_ms - a.start_ms)};
        j.runs.erase(j.runs.begin());
      }
    }
    if (to == JobState::kSucceeded) LearnRuntime(j);
    j.run_gpus = 0;
  }
  std::string from_name = j.history.empty() ? "" : std::string(JobStateName(from));
  IndexState(j.seq, from, to);
  if (from != to && IsTerminal(from)) --ended_[j.spec.queue][EndedIndex(from)];
  if (from != to && IsTerminal(to)) ++ended_[j.spec.queue][EndedIndex(to)];
  j.state = to;
  j.updated_ms = now_ms;
  j.message = reason;
  j.history.push_back({now_ms, from_name, std::string(JobStateName(to)), reason});
  t.jobs.insert(j.seq);
  t.events.push_back({{"seq", next_event_seq_++},
                      {"time_ms", now_ms},
                      {"type", "job"},
                      {"id", j.id},
                      {"name", j.spec.name},
                      {"from", from_name},
                      {"to", JobStateName(to)},
                      {"reason", reason}});
  if (IsTerminal(to)) {
    j.target.clear();
    j.reshape.clear();
    // Heartbeats track the fences of unfinished jobs alone. The record keeps its fence: a
    // requeue (below) within the lease must still wait for the old ranks.
    fenced_seqs_.erase(j.seq);
  } else if (IsTerminal(from) && !j.fence_nodes.empty()) {
    fenced_seqs_.insert(j.seq);
  }
  if (IsTerminal(to) || to == JobState::kPending) schedule_dirty_ = true;
  // Work that starts waiting (not held, not fenced, not relaunching on a reserved target):
  // where it needs more GPUs than are free outside a running probe, the probe gives way in
  // this change (Mutate), before the cycle that places the rest.
  if (to == JobState::kPending && !j.held && j.fence_nodes.empty() && j.target.empty()) {
    t.waiting_gpus += std::max(1, j.spec.gpus);
    t.waiting_ms = now_ms;
  }
}

void ControlPlane::IndexState(int64_t seq, JobState from, JobState to) {
  if (HoldsPlacement(from)) active_seqs_.erase(seq);
  if (from == JobState::kPending) pending_seqs_.erase(seq);
  if (HoldsPlacement(to)) active_seqs_.insert(seq);
  if (to == JobState::kPending) pending_seqs_.insert(seq);
}

void ControlPlane::NodeEvent(Txn& t, NodeEntry& n, NodeState to, const std::string& reason,
                             int64_t now_ms) {
  std::string from = std::string(NodeStateName(n.state));
  n.state = to;
  n.message = reason;
  t.nodes.insert(n.name);
  t.events.push_back({{"seq", next_event_seq_++},
                      {"time_ms", now_ms},
                      {"type", "node"},
                      {"id", n.name},
                      {"from", from},
                      {"to", NodeStateName(to)},
                      {"reason", reason}});
  schedule_dirty_ = true;
}

void ControlPlane::AddOrder(Txn& t, const std::string& node, wire::WorkOrder order) {
  if (orders_.contains(order.id)) return;  // the same order is never sent twice
  auto text = std::make_shared<const std::string>(wire::OrderText(order));
  t.orders.push_back({order.id, node, order.job_id, kOutstanding, wire::OrderMessageText(*text)});
  std::string id = order.id;
  const uint64_t seq = next_order_seq_++;
  outbox_.Add(node, {.id = id, .seq = seq, .ticket = OrderOutbox::kPending, .text = text});
  orders_[id] =
      OrderEntry{.order = std::move(order), .node = node, .seq = seq, .text = std::move(text)};
  t.wake_work.insert(node);
}

void ControlPlane::FinishOrder(Txn& t, const std::string& id, const std::string& status) {
  auto it = orders_.find(id);
  if (it == orders_.end()) return;
  t.orders.push_back({id, it->second.node, it->second.order.job_id, status,
                      wire::OrderMessageText(*it->second.text)});
  outbox_.Remove(it->second.node, it->second.seq);
  orders_.erase(it);
}

void ControlPlane::DropOrdersFor(Txn& t, const std::string& node) {
  for (const auto& id : outbox_.Ids(node)) FinishOrder(t, id, "done");
}

void ControlPlane::Shutdown() {
  {
    std::lock_guard l(mu_);
    shutdown_ = true;
    events_cv_.notify_all();
    tick_cv_.notify_all();
  }
  outbox_.Shutdown();
}

void ControlPlane::WaitForChange(int64_t max_ms, int64_t min_ms) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  tick_cv_.wait_until(lock, start + std::chrono::milliseconds(std::min(min_ms, max_ms)),
                      [&] { return shutdown_; });
  tick_cv_.wait_until(lock, start + std::chrono::milliseconds(max_ms),
                      [&] { return shutdown_ || schedule_dirty_; });
}

}  // namespace tianshu::server
