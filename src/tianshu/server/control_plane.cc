#include "tianshu/server/control_plane.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "tianshu/base/strings.h"
#include "tianshu/comm/comm_plan.h"
#include "tianshu/engine/engine.h"
#include "tianshu/estimate/serving.h"
#include "tianshu/model/load.h"
#include "tianshu/placement/strategy.h"
#include "tianshu/policy/builtin.h"
#include "tianshu/policy/elastic.h"

namespace tianshu::server {

using nlohmann::json;

namespace {

constexpr const char* kOutstanding = "outstanding";
constexpr uint64_t kNotCommitted = UINT64_MAX;  // an order's ticket before its Enqueue

std::string OrderId(const std::string& job, int attempt, const std::string& what,
                    const std::string& node) {
  return job + ".a" + std::to_string(attempt) + "." + what + "." + node;
}

// "j-000001.a2.launch.node-0" -> 2; -1 when the id is not one of ours.
int AttemptOf(const std::string& order_id) {
  size_t dot = order_id.find(".a");
  if (dot == std::string::npos) return -1;
  size_t end = order_id.find('.', dot + 2);
  int64_t v = 0;
  if (!ParseInt64(std::string_view(order_id).substr(dot + 2, end - dot - 2), &v)) return -1;
  return static_cast<int>(v);
}

std::string HeldMessage(const std::string& id) {
  return "held: not scheduled until released (tianshu release " + id + ")";
}

std::string VisibleDevicesVar(const std::string& backend) {
  if (backend == "ascend") return "ASCEND_RT_VISIBLE_DEVICES";
  if (backend == "rocm") return "HIP_VISIBLE_DEVICES";
  if (backend == "musa") return "MUSA_VISIBLE_DEVICES";
  return "CUDA_VISIBLE_DEVICES";
}

std::string HostOf(const std::string& address) {
  if (address.empty()) return "127.0.0.1";
  if (address.front() == '[') return address.substr(0, address.find(']') + 1);
  size_t colon = address.rfind(':');
  if (colon != std::string::npos && address.find(':') == colon) return address.substr(0, colon);
  return address;
}

// Whether a job in state `s` holds its placement (launched, running, or not yet stopped).
bool HoldsPlacement(JobState s) {
  return s == JobState::kStarting || s == JobState::kRunning || s == JobState::kStopping;
}

// GPU-seconds of service a job has had: its ended runs, and the current one up to now_ms
// since its first rank started (the wait for the launch is no service).
double AttainedNow(const Job& j, int64_t now_ms) {
  if (!HoldsPlacement(j.state) || j.run_started_ms == 0) return j.attained_gpu_s;
  return j.attained_gpu_s + static_cast<double>(std::max<int64_t>(0, now_ms - j.run_started_ms)) /
                                1000.0 * j.run_gpus * j.spec.gpu_milli / model::kMilliPerGpu;
}

std::vector<RankPlace> PlacesFromJson(const json& a) {
  std::vector<RankPlace> out;
  for (const auto& p : a)
    out.push_back({p.value("rank", 0), p.value("node", ""), p.value("device", -1)});
  return out;
}

json PlacesJson(const std::vector<RankPlace>& places) {
  json out = json::array();
  for (const auto& p : places) {
    out.push_back({{"rank", p.rank}, {"node", p.node}, {"device", p.device}});
  }
  return out;
}

// Topology slots as the agents name them (node name, device index), in rank order.
std::vector<RankPlace> PlacesOf(const ClusterView& view,
                                const std::vector<placement::RankSlot>& ranks) {
  const model::Topology& topo = view.topology;
  std::vector<RankPlace> out;
  out.reserve(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& slot = ranks[r];
    const auto node = static_cast<size_t>(slot.node);
    int device = -1;
    if (slot.gpu >= 0) {
      device = view.device_index[node][static_cast<size_t>(slot.gpu - topo.nodes[node].first_gpu)];
    }
    out.push_back({static_cast<int>(r), view.node_names[node], device});
  }
  return out;
}

// The slots of `target` that `held` does not already have (what a resize or a move reserves
// on top of what the job holds).
std::vector<placement::RankSlot> AddedSlots(const std::vector<placement::RankSlot>& held,
                                            const std::vector<placement::RankSlot>& target) {
  std::vector<placement::RankSlot> out;
  for (const auto& slot : target) {
    if (std::find(held.begin(), held.end(), slot) == held.end()) out.push_back(slot);
  }
  return out;
}

// And back; nullopt when a node is not in the view (gone since).
std::optional<std::vector<placement::RankSlot>> SlotsOf(const ClusterView& view,
                                                        const std::vector<RankPlace>& places) {
  const model::Topology& topo = view.topology;
  std::vector<placement::RankSlot> out;
  out.reserve(places.size());
  for (const auto& p : places) {
    auto ni = view.index.find(p.node);
    if (ni == view.index.end()) return std::nullopt;
    const auto& devs = view.device_index[static_cast<size_t>(ni->second)];
    auto d = std::find(devs.begin(), devs.end(), p.device);
    int gpu = d == devs.end() ? -1
                              : topo.nodes[static_cast<size_t>(ni->second)].first_gpu +
                                    static_cast<int>(d - devs.begin());
    out.push_back({ni->second, gpu});
  }
  return out;
}

json RunJson(const RunSpec& r) {
  return {{"command", r.command}, {"env", r.env}, {"workdir", r.workdir}};
}

RunSpec RunFromJson(const json& j) {
  RunSpec r;
  if (!j.is_object()) return r;
  r.command = j.value("command", std::vector<std::string>{});
  r.env = j.value("env", std::map<std::string, std::string>{});
  r.workdir = j.value("workdir", std::string());
  return r;
}

}  // namespace

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
  std::vector<std::string> out;
  for (const auto& p : placement) {
    if (std::find(out.begin(), out.end(), p.node) == out.end()) out.push_back(p.node);
  }
  return out;
}

// The writes one call makes, gathered and serialised when it finishes.
struct ControlPlane::Txn {
  std::set<int64_t> jobs;
  std::set<std::string> nodes;
  std::vector<OrderRow> orders;
  std::vector<json> events;
  std::vector<int64_t> created;
  std::map<std::string, std::string> meta;
  std::set<std::string> wake_work;  // nodes whose Work waiters have new orders to see
  uint64_t wait_for = 0;            // a commit the answer depends on (a replayed submission's)
  bool Empty() const {
    return jobs.empty() && nodes.empty() && orders.empty() && events.empty() && meta.empty();
  }
};

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
  cp->committer_ = std::make_unique<Committer>(cp->store_.get(), cp->options_.commit_batch);
  if (auto s = cp->Quarantine(now_ms); !s) return std::unexpected(s.error());
  return cp;
}

Status ControlPlane::Load(int64_t now_ms) {
  auto st = store_->Load(options_.events_kept);
  if (!st) return std::unexpected(st.error());
  for (const JobRow& row : st->jobs) {
    // A record that cannot be read back is quarantined, never fatal: the job is failed with
    // the reason (after Open, in one transaction) and the control plane starts.
    json d = json::parse(row.doc, nullptr, false);
    Job j;
    j.seq = row.seq;
    j.id = row.id;
    next_job_seq_ = std::max(next_job_seq_, j.seq + 1);
    if (!d.is_object()) {
      j.text = row.doc.substr(0, 4096);
      j.format = "unreadable";
      quarantined_.push_back({j.seq, "its stored record is not a JSON object"});
      jobs_.emplace(j.seq, std::move(j));
      continue;
    }
    j.text = d.value("text", "");
    j.format = d.value("format", "yaml");
    model::ValidationResult v = ValidateStoredSpec(j.id, j.format, j.text);
    j.state = ParseJobState(d.value("state", "pending")).value_or(JobState::kPending);
    const bool finished = IsTerminal(j.state);
    if (!v.document || v.document->kind != model::DocumentKind::kJob) {
      // A finished job keeps its outcome (one quarantined before stays failed, quietly).
      if (!finished) {
        quarantined_.push_back(
            {j.seq, "its stored spec no longer validates" +
                        (v.diagnostics.empty() ? "" : " (" + v.diagnostics[0].ToString() + ")")});
      }
    } else {
      j.spec = std::get<model::JobSpec>(v.document->value);
    }
    j.run = RunFromJson(d.value("run", json::object()));
    j.starting_since_ms = now_ms;  // a starting gang gets its whole timeout again
    j.attempt = d.value("attempt", 0);
    j.retries = d.value("retries", 0);
    j.max_retries = d.value("max_retries", 0);
    j.submitted_ms = d.value("submitted_ms", int64_t{0});
    j.updated_ms = d.value("updated_ms", int64_t{0});
    j.message = d.value("message", "");
    j.placement = PlacesFromJson(d.value("placement", json::array()));
    for (const auto& h : d.value("history", json::array())) {
      j.history.push_back({h.value("time_ms", int64_t{0}), h.value("from", ""), h.value("to", ""),
                           h.value("reason", "")});
    }
    j.last_step = d.value("last_step", int64_t{-1});
    j.last_checkpoint = d.value("last_checkpoint", "");
    j.last_checkpoint_order_ms = d.value("last_checkpoint_order_ms", int64_t{0});
    j.checkpoint_orders = d.value("checkpoint_orders", 0);
    j.started = d.value("started", std::set<int>{});
    for (const auto& e : d.value("exited", json::array())) {
      j.exited[e.value("rank", 0)] = {e.value("exit_code", 0), e.value("signal", 0)};
    }
    j.launch_accepted = d.value("launch_accepted", std::set<std::string>{});
    j.stop_pending = d.value("stop_pending", std::set<std::string>{});
    j.after_stop = d.value("after_stop", "");
    j.cancel_requested = d.value("cancel_requested", false);
    j.seen_reports = d.value("seen_reports", std::set<std::string>{});
    j.target = PlacesFromJson(d.value("target", json::array()));
    j.reshape = d.value("reshape", "");
    j.resizes = d.value("resizes", 0);
    j.migrations = d.value("migrations", 0);
    j.attained_gpu_s = d.value("attained_gpu_s", 0.0);
    j.run_started_ms = d.value("run_started_ms", j.updated_ms);
    j.run_gpus = d.value("run_gpus", static_cast<int>(j.placement.size()));
    j.colocated = d.value("colocated", false);
    j.master_port = d.value("master_port", 0);
    j.fence_nodes = d.value("fence_nodes", std::map<std::string, int>{});
    j.fence_until_ms = d.value("fence_until_ms", int64_t{0});
    j.held = d.value("held", false);
    j.idempotency_key = d.value("idempotency_key", "");
    j.owner = d.value("owner", "admin");  // jobs from before identities: the admin's
    j.run_as = d.value("run_as", "");
    if (!j.idempotency_key.empty()) idempotency_keys_[j.owner + "/" + j.idempotency_key] = j.seq;
    if (!j.fence_nodes.empty()) fenced_seqs_.insert(j.seq);
    jobs_.emplace(j.seq, std::move(j));
  }
  for (const NodeRow& row : st->nodes) {
    json d = json::parse(row.doc, nullptr, false);
    if (!d.is_object()) {  // its agent registers again
      skipped_records_.push_back("node " + row.name + ": its stored record is not a JSON object");
      continue;
    }
    NodeEntry n;
    n.name = row.name;
    n.agent_id = d.value("agent_id", "");
    n.address = d.value("address", "");
    auto hw = wire::ParseRegisterRequest(wire::Dump(
        json{{"node", "x"}, {"agent_id", "x"}, {"hardware", d.value("hardware", json::object())}}));
    if (hw) n.hardware = hw->hardware;
    std::string state = d.value("state", "ready");
    n.state = state == "lost"       ? NodeState::kLost
              : state == "failed"   ? NodeState::kFailed
              : state == "degraded" ? NodeState::kDegraded
                                    : NodeState::kReady;
    n.message = d.value("message", "");
    n.registered_ms = d.value("registered_ms", int64_t{0});
    n.credential_hash = d.value("credential_sha256", "");
    n.log_key = d.value("log_key", "");
    n.rejoin = d.value("rejoin", false);
    if (!n.credential_hash.empty()) node_by_credential_[n.credential_hash] = n.name;
    n.last_heartbeat_ms = now_ms;
    // Agents retry a lost server with a backoff of up to 30 s: after a restart no node known
    // before it is declared lost until its agent has had the time to come back.
    n.grace_until_ms = now_ms + std::max(options_.lost_after_ms, options_.restart_grace_ms);
    nodes_.emplace(n.name, std::move(n));
  }
  for (const OrderRow& row : st->orders) {
    if (row.status != kOutstanding) continue;
    auto o = wire::ParseWorkOrder(row.doc);
    if (!o) {  // the job it belongs to is reconciled from its agents' reports
      skipped_records_.push_back("order " + row.id + ": " + o.error().message);
      continue;
    }
    orders_[row.id] = {*o, row.node, next_order_seq_++, 0};
    node_orders_[row.node].push_back(row.id);
  }
  for (const EventRow& row : st->events) {
    json d = json::parse(row.doc, nullptr, false);
    if (d.is_discarded()) continue;
    events_.push_back({row.seq, 0, d});
    next_event_seq_ = std::max(next_event_seq_, row.seq + 1);
  }
  if (auto it = st->meta.find("next_event_seq"); it != st->meta.end()) {
    int64_t v = 0;
    if (ParseInt64(it->second, &v)) next_event_seq_ = std::max(next_event_seq_, v);
  }
  for (const auto& [key, value] : st->meta) {
    if (!key.starts_with("user/") || value.empty()) continue;  // "" = removed
    json d = json::parse(value, nullptr, false);
    auto role = d.is_object() ? ParseRole(d.value("role", "")) : std::nullopt;
    if (!role || !net::IsTokenHash(d.value("token_sha256", ""))) {
      skipped_records_.push_back(key + ": unreadable user record (the user cannot log in)");
      continue;
    }
    UserEntry u{*role, d.value("token_sha256", ""), d.value("unix_user", ""),
                d.value("created_ms", int64_t{0})};
    user_by_token_[u.token_hash] = key.substr(5);
    users_[key.substr(5)] = std::move(u);
  }
  if (auto it = st->meta.find("next_job_seq"); it != st->meta.end()) {
    int64_t v = 0;
    if (ParseInt64(it->second, &v)) next_job_seq_ = std::max(next_job_seq_, v);
  }
  if (options_.server_id.empty()) {
    if (auto it = st->meta.find("server_id"); it != st->meta.end()) {
      options_.server_id = it->second;
    } else {
      options_.server_id = "s-" + std::to_string(now_ms);
      Change c;
      c.meta["server_id"] = options_.server_id;
      if (auto s = store_->Write({&c}); !s) return s;
    }
  }
  // The learned runtime estimates start from the succeeded jobs, in completion order.
  std::vector<const Job*> done;
  for (const auto& [seq, j] : jobs_) {
    if (j.state == JobState::kSucceeded) done.push_back(&j);
  }
  std::sort(done.begin(), done.end(),
            [](const Job* a, const Job* b) { return a->updated_ms < b->updated_ms; });
  for (const Job* j : done) LearnRuntime(*j);
  schedule_dirty_ = true;
  return Ok();
}

Status ControlPlane::Quarantine(int64_t now_ms) {
  if (quarantined_.empty()) return Ok();
  auto r = Mutate<bool>([&](Txn& t) -> ApiResult<bool> {
    for (const auto& [seq, why] : quarantined_) {
      Job& j = jobs_.at(seq);
      const std::string reason = "quarantined at start: " + why;
      metrics_.quarantined++;
      if (HoldsPlacement(j.state) || j.state == JobState::kStopping) {
        j.cancel_requested = false;
        BeginStop(t, j, "failed", reason, "", false, now_ms);
      } else {
        SetState(t, j, JobState::kFailed, reason, now_ms);
      }
    }
    return true;
  });
  if (!r) return Fail("store: cannot record the quarantined jobs: ", r.error().message);
  return Ok();
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
  if (share > 0) runtimes_.Add(j.spec, gpus, j.attained_gpu_s / share);
}

// ---- writing ----

std::string ControlPlane::JobDoc(const Job& j) const {
  json history = json::array(), exited = json::array();
  for (const auto& h : j.history) {
    history.push_back(
        {{"time_ms", h.time_ms}, {"from", h.from}, {"to", h.to}, {"reason", h.reason}});
  }
  for (const auto& [rank, e] : j.exited) {
    exited.push_back({{"rank", rank}, {"exit_code", e.first}, {"signal", e.second}});
  }
  json d = {{"text", j.text},
            {"format", j.format},
            {"idempotency_key", j.idempotency_key},
            {"owner", j.owner},
            {"run_as", j.run_as},
            {"run", RunJson(j.run)},
            {"name", j.spec.name},
            {"queue", j.spec.queue},
            {"state", JobStateName(j.state)},
            {"attempt", j.attempt},
            {"retries", j.retries},
            {"max_retries", j.max_retries},
            {"submitted_ms", j.submitted_ms},
            {"updated_ms", j.updated_ms},
            {"message", j.message},
            {"placement", PlacesJson(j.placement)},
            {"history", history},
            {"last_step", j.last_step},
            {"last_checkpoint", j.last_checkpoint},
            {"last_checkpoint_order_ms", j.last_checkpoint_order_ms},
            {"checkpoint_orders", j.checkpoint_orders},
            {"started", j.started},
            {"exited", exited},
            {"launch_accepted", j.launch_accepted},
            {"stop_pending", j.stop_pending},
            {"after_stop", j.after_stop},
            {"cancel_requested", j.cancel_requested},
            {"seen_reports", j.seen_reports},
            {"target", PlacesJson(j.target)},
            {"reshape", j.reshape},
            {"resizes", j.resizes},
            {"migrations", j.migrations},
            {"attained_gpu_s", j.attained_gpu_s},
            {"run_started_ms", j.run_started_ms},
            {"run_gpus", j.run_gpus},
            {"colocated", j.colocated},
            {"master_port", j.master_port},
            {"fence_nodes", j.fence_nodes},
            {"fence_until_ms", j.fence_until_ms},
            {"held", j.held}};
  return wire::Dump(d);
}

template <typename T, typename F>
ApiResult<T> ControlPlane::Mutate(F&& f) {
  std::unique_lock lock(mu_);
  if (committer_->Failed()) {
    return Refuse(503, "the store failed to write; this server accepts no more changes");
  }
  Txn txn;
  ApiResult<T> r = f(txn);
  const bool wake_tick = schedule_dirty_;
  if (txn.Empty()) {
    lock.unlock();
    if (wake_tick) tick_cv_.notify_all();
    WakeWork(txn.wake_work);
    if (txn.wait_for != 0) {
      if (Status s = committer_->Wait(txn.wait_for); !s) {
        return Refuse(503, "the store failed to write: " + s.error().message);
      }
    }
    return r;
  }
  Change c;
  for (int64_t seq : txn.jobs) {
    const Job& j = jobs_.at(seq);
    c.jobs.push_back({j.id, j.seq, std::string(JobStateName(j.state)), JobDoc(j)});
  }
  for (const auto& name : txn.nodes) {
    const NodeEntry& n = nodes_.at(name);
    json d = {{"agent_id", n.agent_id},
              {"address", n.address},
              {"hardware", wire::ToJson(n.hardware)},
              {"state", NodeStateName(n.state)},
              {"message", n.message},
              {"registered_ms", n.registered_ms},
              {"credential_sha256", n.credential_hash},
              {"rejoin", n.rejoin},
              {"log_key", n.log_key}};
    c.nodes.push_back({name, wire::Dump(d)});
  }
  std::vector<OrderEntry*> added;  // orders of this change, durable with its ticket
  for (const auto& row : txn.orders) {
    if (auto o = orders_.find(row.id); o != orders_.end() && o->second.ticket == kNotCommitted) {
      added.push_back(&o->second);
    }
  }
  c.orders = std::move(txn.orders);
  for (const auto& e : txn.events) {
    c.events.push_back({e["seq"].get<int64_t>(), e["time_ms"].get<int64_t>(), wire::Dump(e)});
  }
  c.meta = std::move(txn.meta);
  c.meta["next_event_seq"] = std::to_string(next_event_seq_);
  c.meta["next_job_seq"] = std::to_string(next_job_seq_);
  uint64_t ticket = committer_->Enqueue(std::move(c));
  for (auto& e : txn.events) {
    int64_t seq = e["seq"].get<int64_t>();
    events_.push_back({seq, ticket, std::move(e)});
  }
  while (events_.size() > options_.events_kept) events_.pop_front();
  for (int64_t seq : txn.created) jobs_.at(seq).created_ticket = ticket;
  for (OrderEntry* o : added) o->ticket = ticket;
  lock.unlock();
  Status s = committer_->Wait(ticket);
  { std::lock_guard l(mu_); }  // orders the wake-up after a waiter's predicate check
  events_cv_.notify_all();
  if (wake_tick) tick_cv_.notify_all();
  WakeWork(txn.wake_work);
  if (!s) return Refuse(503, "the store failed to write: " + s.error().message);
  return r;
}

void ControlPlane::SetState(Txn& t, Job& j, JobState to, const std::string& reason,
                            int64_t now_ms) {
  JobState from = j.state;
  if (HoldsPlacement(from) &&
      !HoldsPlacement(to)) {  // a run ends: its GPU time is attained service
    j.attained_gpu_s = AttainedNow(j, now_ms);
    if (to == JobState::kSucceeded) LearnRuntime(j);
    j.run_gpus = 0;
  }
  std::string from_name = j.history.empty() ? "" : std::string(JobStateName(from));
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
  }
  if (IsTerminal(to) || to == JobState::kPending) schedule_dirty_ = true;
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
  t.orders.push_back({order.id, node, order.job_id, kOutstanding, wire::Dump(wire::ToJson(order))});
  std::string id = order.id;
  node_orders_[node].push_back(id);
  orders_[id] = OrderEntry{std::move(order), node, next_order_seq_++, kNotCommitted};
  t.wake_work.insert(node);
}

void ControlPlane::FinishOrder(Txn& t, const std::string& id, const std::string& status) {
  auto it = orders_.find(id);
  if (it == orders_.end()) return;
  t.orders.push_back({id, it->second.node, it->second.order.job_id, status,
                      wire::Dump(wire::ToJson(it->second.order))});
  auto& list = node_orders_[it->second.node];
  list.erase(std::remove(list.begin(), list.end(), id), list.end());
  orders_.erase(it);
}

void ControlPlane::DropOrdersFor(Txn& t, const std::string& node) {
  auto list = node_orders_[node];
  for (const auto& id : list) FinishOrder(t, id, "done");
}

// ---- identities ----

std::optional<Identity> ControlPlane::Authenticate(std::string_view bearer) const {
  if (bearer.empty()) return std::nullopt;
  const std::string hash = TokenHash(bearer);
  std::lock_guard l(mu_);
  if (!admin_token_hash_.empty() && hash == admin_token_hash_) {
    return Identity{.name = "admin", .role = Role::kAdmin};
  }
  if (auto u = user_by_token_.find(hash); u != user_by_token_.end()) {
    const UserEntry& e = users_.at(u->second);
    return Identity{.name = u->second, .role = e.role, .unix_user = e.unix_user};
  }
  if (auto n = node_by_credential_.find(hash); n != node_by_credential_.end()) {
    return Identity{.name = "node:" + n->second, .role = Role::kNode, .node = n->second};
  }
  return std::nullopt;
}

namespace {

json UserJson(const std::string& name, Role role, const std::string& unix_user,
              int64_t created_ms) {
  return {{"name", name},
          {"role", RoleName(role)},
          {"unix_user", unix_user},
          {"created_ms", created_ms}};
}

}  // namespace

ApiResult<json> ControlPlane::CreateUser(const std::string& name, Role role,
                                         const std::string& unix_user, int64_t now_ms) {
  if (!IsValidUserName(name) || name == "admin") {
    return Refuse(400, "user name '" + name.substr(0, 64) +
                           "' must be 1-64 of a-z 0-9 . _ -, starting with a letter ('admin' "
                           "is the server's own token)");
  }
  if (!unix_user.empty() && !IsValidUserName(unix_user)) {
    return Refuse(400, "unix_user must be a login name (a-z 0-9 . _ -, starting with a letter)");
  }
  const std::string token = NewToken();
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    if (users_.contains(name)) return Refuse(409, "user " + name + " exists");
    // A user's ranks run as the Unix account of the same name unless told otherwise; join
    // tokens and admins run nothing of their own by default.
    const std::string run_as = !unix_user.empty() ? unix_user : role == Role::kUser ? name : "";
    UserEntry u{role, TokenHash(token), run_as, now_ms};
    t.meta["user/" + name] = wire::Dump(json{{"role", RoleName(role)},
                                             {"token_sha256", u.token_hash},
                                             {"unix_user", run_as},
                                             {"created_ms", now_ms}});
    user_by_token_[u.token_hash] = name;
    users_[name] = u;
    json out = UserJson(name, role, run_as, now_ms);
    out["token"] = token;  // shown this once; the store keeps its SHA-256
    return out;
  });
}

json ControlPlane::ListUsers() const {
  std::lock_guard l(mu_);
  json out = json::array();
  out.push_back(UserJson("admin", Role::kAdmin, "", 0));
  for (const auto& [name, u] : users_)
    out.push_back(UserJson(name, u.role, u.unix_user, u.created_ms));
  return {{"users", out}};
}

ApiResult<json> ControlPlane::RemoveUser(const std::string& name) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    auto it = users_.find(name);
    if (it == users_.end()) return Refuse(404, "no user " + name);
    json out = UserJson(name, it->second.role, it->second.unix_user, it->second.created_ms);
    user_by_token_.erase(it->second.token_hash);
    users_.erase(it);
    t.meta["user/" + name] = "";  // its token no longer works; its jobs keep their owner
    return out;
  });
}

ApiResult<json> ControlPlane::ForgetNode(const std::string& name) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return Refuse(404, "no node " + name);
    node_by_credential_.erase(it->second.credential_hash);
    it->second.credential_hash.clear();
    it->second.log_key.clear();
    it->second.rejoin = true;  // a join token may register it again
    t.nodes.insert(name);
    return json{
        {"node", name},
        {"credential", "forgotten: its next registration with a join token binds a new one"}};
  });
}

// ---- users ----

ApiResult<Submitted> ControlPlane::Submit(SubmitRequest request, int64_t now_ms) {
  auto r = Mutate<Submitted>([&](Txn& t) -> ApiResult<Submitted> {
    // Keys are per user: another user's equal key is another submission.
    const std::string key = request.owner + "/" + request.idempotency_key;
    if (!request.idempotency_key.empty()) {
      if (auto k = idempotency_keys_.find(key); k != idempotency_keys_.end()) {
        const Job& before = jobs_.at(k->second);
        if (before.text != request.text || before.format != request.format) {
          return Refuse(422, "Idempotency-Key " + request.idempotency_key + " was used for job " +
                                 before.id + " with a different body: use a new key");
        }
        metrics_.idempotent_replays++;
        t.wait_for = before.created_ticket;  // acknowledged only once the first try is durable
        return Submitted{JobJson(before, true), true};
      }
    }
    Job j;
    j.seq = next_job_seq_++;
    j.id = FormatJobId(j.seq);
    j.text = std::move(request.text);
    j.format = std::move(request.format);
    j.spec = std::move(request.spec);
    j.run = std::move(request.run);
    j.idempotency_key = std::move(request.idempotency_key);
    j.owner = std::move(request.owner);
    j.run_as = std::move(request.run_as);
    j.max_retries = j.spec.max_retries >= 0 ? j.spec.max_retries : options_.config.max_retries;
    j.submitted_ms = now_ms;
    j.held = request.hold;
    if (!j.idempotency_key.empty()) idempotency_keys_[key] = j.seq;
    auto [it, inserted] = jobs_.emplace(j.seq, std::move(j));
    SetState(t, it->second, JobState::kPending,
             request.hold ? HeldMessage(it->second.id) : "submitted", now_ms);
    t.created.push_back(it->first);
    schedule_dirty_ = true;
    return Submitted{JobJson(it->second, true), false};
  });
  if (r && !r->replayed) {
    metrics_.submissions_accepted++;
  } else if (!r) {
    metrics_.submissions_rejected++;
  }
  return r;
}

void ControlPlane::CountRejected() { metrics_.submissions_rejected++; }

ApiResult<json> ControlPlane::SetHeld(const std::vector<std::string>& ids, bool hold,
                                      const Identity& who, int64_t now_ms) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    std::vector<Job*> jobs;
    std::vector<std::string> refused;
    int status = 409;
    std::set<int64_t> seen;
    for (const auto& id : ids) {
      auto seq = ParseJobId(id);
      auto it = seq ? jobs_.find(*seq) : jobs_.end();
      if (it == jobs_.end() || !Visible(it->second)) {
        refused.push_back(id.substr(0, 64) + ": no such job");
        status = 404;
        continue;
      }
      Job& j = it->second;
      if (!who.ActsFor(j.owner)) {
        refused.push_back(id + ": belongs to " + j.owner);
        status = 403;
      } else if (j.state != JobState::kPending) {
        refused.push_back(id + ": is " + std::string(JobStateName(j.state)) +
                          (hold ? " (only pending jobs can be held)" : " (not held)"));
      } else if (!hold && !j.held) {
        refused.push_back(id + ": is not held");
      } else if (seen.insert(j.seq).second) {
        jobs.push_back(&j);
      }
    }
    if (!refused.empty()) {
      return Refuse(status, std::string(hold ? "hold" : "release") + ": nothing changed; " +
                                std::to_string(refused.size()) + " of " +
                                std::to_string(ids.size()) + " refused: " + Join(refused, "; "));
    }
    json out = json::array();
    for (Job* j : jobs) {
      if (j->held != hold) {
        j->held = hold;
        SetState(t, *j, JobState::kPending, hold ? HeldMessage(j->id) : "released by " + who.name,
                 now_ms);
      }
      out.push_back(JobJson(*j, false));
    }
    return json{{"jobs", out}};
  });
}

ApiResult<json> ControlPlane::Cancel(const std::string& id, const Identity& who, int64_t now_ms) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    auto seq = ParseJobId(id);
    auto it = seq ? jobs_.find(*seq) : jobs_.end();
    if (it == jobs_.end() || !Visible(it->second)) return Refuse(404, "no job " + id);
    Job& j = it->second;
    if (!who.ActsFor(j.owner)) {
      return Refuse(403, "job " + id + " belongs to " + j.owner +
                             ": only its owner or an admin may cancel it");
    }
    switch (j.state) {
      case JobState::kPending:
        SetState(t, j, JobState::kCancelled, "cancelled by user", now_ms);
        break;
      case JobState::kStarting:
      case JobState::kRunning:
        j.cancel_requested = true;
        BeginStop(t, j, "cancelled", "cancelled by user", "", false, now_ms);
        break;
      case JobState::kStopping:
        if (!j.cancel_requested) {
          j.cancel_requested = true;
          j.after_stop = "cancelled";
          t.jobs.insert(j.seq);
        }
        break;
      default:
        return Refuse(409, "job " + id + " is already " + std::string(JobStateName(j.state)) +
                               ": only pending, starting, running or stopping jobs can be "
                               "cancelled");
    }
    return JobJson(j, true);
  });
}

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
  out += MetricHeader("tianshu_cycles_total", "counter", "Scheduling cycles run.");
  out += "tianshu_cycles_total " + std::to_string(metrics_.cycles) + "\n";
  out +=
      MetricHeader("tianshu_job_retries_total", "counter", "Attempts restarted after a failure.");
  out += "tianshu_job_retries_total " + std::to_string(metrics_.retries) + "\n";
  out += MetricHeader("tianshu_gang_timeouts_total", "counter",
                      "Gangs released because not every rank started within "
                      "scheduler.gang_timeout.");
  out += "tianshu_gang_timeouts_total " + std::to_string(metrics_.gang_timeouts) + "\n";
  out += MetricHeader("tianshu_job_preemptions_total", "counter",
                      "Running jobs stopped (with a checkpoint) for a higher-priority job.");
  out += "tianshu_job_preemptions_total " + std::to_string(metrics_.preemptions) + "\n";
  out += MetricHeader("tianshu_job_resizes_total", "counter",
                      "Elastic resizes begun (checkpoint, relaunch at the new size).");
  out += "tianshu_job_resizes_total " + std::to_string(metrics_.resizes) + "\n";
  out += MetricHeader("tianshu_job_migrations_total", "counter",
                      "Moves begun (checkpoint, relaunch on another placement).");
  out += "tianshu_job_migrations_total " + std::to_string(metrics_.migrations) + "\n";
  out += MetricHeader("tianshu_nodes_lost_total", "counter", "Nodes declared lost or failed.");
  out += "tianshu_nodes_lost_total " + std::to_string(metrics_.nodes_lost) + "\n";
  out += MetricHeader("tianshu_jobs_quarantined_total", "counter",
                      "Jobs failed at start because their stored record could not be read back.");
  out += "tianshu_jobs_quarantined_total " + std::to_string(metrics_.quarantined) + "\n";
  out += MetricHeader("tianshu_mass_silences_total", "counter",
                      "Times more than half of the live nodes went silent at once (no node is "
                      "declared lost while it lasts).");
  out += "tianshu_mass_silences_total " + std::to_string(metrics_.mass_silences) + "\n";
  out += MetricHeader("tianshu_idempotent_replays_total", "counter",
                      "Submissions answered with the job their Idempotency-Key made before.");
  out += "tianshu_idempotent_replays_total " + std::to_string(metrics_.idempotent_replays) + "\n";
  CommitStats cs = committer_->Stats();
  out += MetricHeader("tianshu_store_commits_total", "counter", "Durable store transactions.");
  out += "tianshu_store_commits_total " + std::to_string(cs.commits) + "\n";
  out += MetricHeader("tianshu_store_changes_total", "counter", "State changes written.");
  out += "tianshu_store_changes_total " + std::to_string(cs.changes) + "\n";
  out += MetricHeader("tianshu_store_commit_seconds_total", "counter",
                      "Time spent writing to the store.");
  std::snprintf(buf, sizeof buf, "%.6f", cs.commit_seconds);
  out += std::string("tianshu_store_commit_seconds_total ") + buf + "\n";
  return out;
}

// ---- the job state machine ----

namespace {

// The parallel layout a job's ranks run with: its own tensor and pipeline degrees where they
// divide the world (a resized job keeps them and changes the data-parallel degree); for
// automatic parallelism on GPUs, the cost model's plan for these GPUs (what an elastic resize
// was priced with); else data parallel.
comm::Layout LayoutFor(const model::EngineConfig& config, const model::JobSpec& spec,
                       const placement::Outcome& outcome, const model::Topology& topo) {
  const int world = static_cast<int>(outcome.ranks.size());
  const model::Parallelism& par = spec.parallelism;
  if (!par.automatic && par.tp * par.pp > 0 && world % (par.tp * par.pp) == 0) {
    return {.tp = par.tp, .pp = par.pp, .dp = world / (par.tp * par.pp), .ep = 1};
  }
  const bool on_gpus = std::none_of(outcome.ranks.begin(), outcome.ranks.end(),
                                    [](const placement::RankSlot& s) { return s.gpu < 0; });
  if (par.automatic && on_gpus && world > 1 && spec.model.layers > 0) {
    if (auto plan = policy::ReplanParallelism(topo, spec, outcome.ranks, config);
        plan && plan->Gpus() == world) {
      return {.tp = plan->tp, .pp = plan->pp, .dp = plan->dp, .ep = plan->ep};
    }
  }
  return {.tp = 1, .pp = 1, .dp = world};
}

// The collective library's environment for a job's placement (NCCL_ALGO, NCCL_PROTO,
// NCCL_BUFFSIZE from NETWORK_BUFFER_SIZE, the traffic class for its priority, ...; HCCL/RCCL/
// MCCL equivalents by backend), from the communicator plan of comm/ for `layout` (LayoutFor).
// Ranks keep the order the placement gave them.
std::map<std::string, std::string> CommEnvironmentFor(const model::EngineConfig& config,
                                                      const model::JobSpec& spec,
                                                      const placement::Outcome& outcome,
                                                      const model::Topology& topo,
                                                      const comm::Layout& layout) {
  std::vector<int> gpus;
  for (const auto& slot : outcome.ranks) {
    if (slot.gpu < 0) return {};  // CPU-only ranks: no collective library to tune
    gpus.push_back(slot.gpu);
  }
  const int world = static_cast<int>(gpus.size());
  if (world < 2) return {};
  const model::Backend backend = topo.TypeOf(outcome.ranks.front().node).backend;
  comm::CommOptions options = comm::CommOptionsFrom(config, backend, spec.priority);
  options.order = comm::RankOrder::kAsGiven;
  auto plan = comm::PlanCommunicators(topo, gpus, layout, options);
  return plan ? plan->env : std::map<std::string, std::string>{};
}

// How a GPU rank shares its device under scheduler.colocation (empty: it does not). With
// `priority` on CUDA every GPU rank is an MPS client (the agent starts the node's MPS control
// daemon): training at below-normal client priority, overlaid inference at normal, so that the
// service's kernels go first. `time-slice`, and `priority` on other backends (no equivalent of
// MPS client priorities), leave the device to the driver's time slicing.
std::map<std::string, std::string> SharingEnvironment(const std::string& mode,
                                                      const model::JobSpec& spec,
                                                      const std::string& backend, bool colocated) {
  if (mode == "none") return {};
  const bool service = spec.kind == model::JobKind::kInference;
  if (!colocated && service) return {};  // a service on GPUs of its own shares nothing
  std::map<std::string, std::string> env;
  const bool mps = mode == "priority" && backend == "cuda";
  env["TIANSHU_COLOCATION"] = mps ? "priority" : "time-slice";
  if (mps) env["CUDA_MPS_CLIENT_PRIORITY"] = service ? "0" : "1";  // 0 normal, 1 below normal
  return env;
}

}  // namespace

// The rendezvous port of a job's new attempt on `master_node`, from cluster.rendezvous_ports:
// it starts from a hash of the server, job and attempt (so a previous attempt still exiting, or
// another server's job, is unlikely to hold it) and skips the ports of every other job whose
// ranks still hold a placement with the same master node.
int ControlPlane::RendezvousPort(const Job& j, const std::string& master_node) const {
  const int low = options_.config.rendezvous_port_low;
  const int span = options_.config.rendezvous_port_high - low + 1;
  std::set<int> taken;
  for (const auto& [seq, other] : jobs_) {
    if (other.seq == j.seq || other.master_port == 0 || !HoldsPlacement(other.state)) continue;
    const std::vector<std::string> nodes = other.Nodes();
    if (!nodes.empty() && nodes.front() == master_node) taken.insert(other.master_port);
  }
  const size_t h =
      std::hash<std::string>{}(options_.server_id + "/" + j.id + "/" + std::to_string(j.attempt));
  const int start = static_cast<int>(h % static_cast<size_t>(span));
  for (int i = 0; i < span; ++i) {
    const int port = low + (start + i) % span;
    if (!taken.contains(port) && port != j.master_port) return port;  // not the last attempt's
  }
  return low + start;  // more jobs than ports on one node: share (the rendezvous may fail)
}

void ControlPlane::StartJob(Txn& t, Job& j, const placement::Outcome& outcome,
                            const model::Topology& topo, int64_t now_ms, bool colocated) {
  j.attempt++;
  if (!j.placement.empty()) j.last_placement = j.placement;
  j.placement.clear();
  j.started.clear();
  j.exited.clear();
  j.launch_accepted.clear();
  j.stop_pending.clear();
  j.after_stop.clear();
  j.seen_reports.clear();
  j.last_checkpoint_order_ms = now_ms;
  j.target.clear();
  j.reshape.clear();
  const ClusterView& view = *view_;
  j.placement = PlacesOf(view, outcome.ranks);
  j.run_started_ms = 0;  // service counts from the first rank's start
  j.run_gpus = static_cast<int>(j.placement.size());
  j.colocated = colocated;
  const std::map<std::string, std::string> sharing = SharingEnvironment(
      options_.config.colocation, j.spec,
      std::string(model::BackendName(topo.TypeOf(outcome.ranks.front().node).backend)), colocated);
  std::vector<std::string> nodes = j.Nodes();
  const NodeEntry& master = nodes_.at(nodes.front());
  const int world = static_cast<int>(j.placement.size());
  const int port = RendezvousPort(j, nodes.front());
  j.master_port = port;
  const std::string ckpt =
      options_.checkpoint_root.empty() ? "" : options_.checkpoint_root + "/" + j.id;
  const comm::Layout layout = LayoutFor(options_.config, j.spec, outcome, topo);
  const std::map<std::string, std::string> comm_env =
      CommEnvironmentFor(options_.config, j.spec, outcome, topo, layout);
  placement::PlacementRequest req = placement::RequestFromJob(j.spec);
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    const NodeEntry& node = nodes_.at(nodes[ni]);
    int topo_node = view.index.at(node.name);
    std::string backend = std::string(model::BackendName(topo.TypeOf(topo_node).backend));
    wire::LaunchOrder l;
    l.job_name = j.spec.name;
    l.backend = backend;
    l.world_size = world;
    l.master_addr = HostOf(master.address);
    l.master_port = port;
    l.checkpoint_dir = ckpt;
    l.workdir = j.run.workdir;
    l.run_as = j.run_as;
    int local_rank = 0;
    int local_world = 0;
    for (const auto& p : j.placement) local_world += p.node == node.name ? 1 : 0;
    std::set<int> numa;
    for (const auto& p : j.placement) {
      if (p.node != node.name) continue;
      wire::RankLaunch rl;
      rl.rank = p.rank;
      rl.local_rank = local_rank++;
      rl.node_rank = static_cast<int>(ni);
      if (p.device >= 0) rl.devices = {p.device};
      rl.gpu_milli = j.spec.gpu_milli;
      rl.command = j.run.command;
      rl.env = j.run.env;
      auto& e = rl.env;
      e["RANK"] = std::to_string(p.rank);
      e["WORLD_SIZE"] = std::to_string(world);
      e["LOCAL_RANK"] = std::to_string(rl.local_rank);
      e["LOCAL_WORLD_SIZE"] = std::to_string(local_world);
      e["NODE_RANK"] = std::to_string(ni);
      e["NNODES"] = std::to_string(nodes.size());
      e["MASTER_ADDR"] = l.master_addr;
      e["MASTER_PORT"] = std::to_string(port);
      e[VisibleDevicesVar(backend)] = p.device >= 0 ? std::to_string(p.device) : "";
      e["TIANSHU_JOB_ID"] = j.id;
      e["TIANSHU_JOB_NAME"] = j.spec.name;
      e["TIANSHU_ATTEMPT"] = std::to_string(j.attempt);
      e["TIANSHU_TP"] = std::to_string(layout.tp);
      e["TIANSHU_PP"] = std::to_string(layout.pp);
      e["TIANSHU_DP"] = std::to_string(layout.dp);
      if (j.last_step >= 0) e["TIANSHU_RESUME_STEP"] = std::to_string(j.last_step);
      if (j.spec.duration_s > 0) {
        e["TIANSHU_DURATION_S"] = std::to_string(static_cast<int64_t>(j.spec.duration_s));
      }
      if (j.spec.iterations > 0) e["TIANSHU_ITERATIONS"] = std::to_string(j.spec.iterations);
      for (const auto& [k, v] : comm_env) e.try_emplace(k, v);  // the job's run.env wins
      if (p.device >= 0) {
        for (const auto& [k, v] : sharing) e[k] = v;
      }
      for (const auto& d : node.hardware.devices) {
        if (d.index == p.device && d.numa >= 0) numa.insert(d.numa);
      }
      if (p.device >= 0) l.cgroup.devices.push_back(p.device);
      l.ranks.push_back(std::move(rl));
    }
    l.cgroup.numa_nodes.assign(numa.begin(), numa.end());
    l.cgroup.cpu_milli = req.cpu_milli_per_rank * local_world;
    l.cgroup.memory_bytes = req.memory_bytes_per_rank * local_world;
    wire::WorkOrder o;
    o.id = OrderId(j.id, j.attempt, "launch", node.name);
    o.kind = wire::OrderKind::kLaunch;
    o.job_id = j.id;
    o.attempt = j.attempt;
    o.launch = std::move(l);
    AddOrder(t, node.name, std::move(o));
  }
  j.starting_since_ms = now_ms;
  SetState(t, j, JobState::kStarting,
           "placed on " + Join(nodes, ",") + " (attempt " + std::to_string(j.attempt) + ")",
           now_ms);
}

void ControlPlane::BeginStop(Txn& t, Job& j, const std::string& after, const std::string& reason,
                             const std::string& exclude_node, bool checkpoint_first,
                             int64_t now_ms) {
  j.after_stop = after;
  j.stop_pending.clear();
  for (const auto& node : j.Nodes()) {
    // A launch of this attempt that no agent has accepted yet is withdrawn: otherwise it stays
    // in the node's work batch after the stop and could start the ranks of a stopped job. An
    // agent that fetched it already gets the stop order after it, as for a started launch.
    std::string launch = OrderId(j.id, j.attempt, "launch", node);
    if (orders_.contains(launch)) FinishOrder(t, launch, "withdrawn");
    if (node == exclude_node) continue;
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.state == NodeState::kLost ||
        it->second.state == NodeState::kFailed) {
      continue;
    }
    j.stop_pending.insert(node);
    wire::WorkOrder o;
    o.id = OrderId(j.id, j.attempt, "stop", node);
    o.kind = wire::OrderKind::kStop;
    o.job_id = j.id;
    o.attempt = j.attempt;
    o.stop = wire::StopOrder{.reason = after == "cancelled"   ? "cancel"
                                       : after == "preempted" ? "preempt"
                                       : after == "reshape"   ? j.reshape
                                                              : "retry",
                             .checkpoint_first = checkpoint_first,
                             .grace_ms = 30000};
    AddOrder(t, node, std::move(o));
  }
  SetState(t, j, JobState::kStopping, reason, now_ms);
  MaybeFinishStop(t, j, now_ms);
}

void ControlPlane::MaybeFinishStop(Txn& t, Job& j, int64_t now_ms) {
  if (j.state != JobState::kStopping || !j.stop_pending.empty()) return;
  std::string reason = j.message;
  std::string after = j.cancel_requested ? "cancelled" : j.after_stop;
  j.after_stop.clear();
  if (after == "pending") {
    j.retries++;
    metrics_.retries++;
    if (!j.placement.empty()) j.last_placement = j.placement;
    j.placement.clear();
    SetState(t, j, JobState::kPending,
             "retry " + std::to_string(j.retries) + " of " + std::to_string(j.max_retries) +
                 " after: " + reason,
             now_ms);
  } else if (after == "preempted") {
    // Not a failure: the retry budget is untouched; the next attempt resumes from the
    // checkpoint the stop order asked for.
    if (!j.placement.empty()) j.last_placement = j.placement;
    j.placement.clear();
    SetState(t, j, JobState::kPending, reason, now_ms);
  } else if (after == "reshape") {
    // Stopped with a checkpoint for a resize or a move: the next cycle relaunches it on its
    // target (kept reserved), from that checkpoint. Neither a failure nor a preemption.
    if (!j.placement.empty()) j.last_placement = j.placement;
    j.placement.clear();
    SetState(t, j, JobState::kPending,
             "checkpointed for the " + j.reshape + "; relaunching on " +
                 std::to_string(j.target.size()) + " GPUs",
             now_ms);
  } else if (after == "failed") {
    SetState(t, j, JobState::kFailed, reason, now_ms);
  } else {
    SetState(t, j, JobState::kCancelled, "cancelled by user", now_ms);
  }
}

void ControlPlane::FailAttempt(Txn& t, Job& j, const std::string& reason,
                               const std::string& lost_node, int64_t now_ms) {
  std::string after = j.cancel_requested          ? "cancelled"
                      : j.retries < j.max_retries ? "pending"
                                                  : "failed";
  std::string why = after == "failed" ? reason + " (no retries left: max_retries " +
                                            std::to_string(j.max_retries) + ")"
                                      : reason;
  BeginStop(t, j, after, why, lost_node, false, now_ms);
}

void ControlPlane::LoseNode(Txn& t, NodeEntry& n, NodeState to, const std::string& reason,
                            int64_t now_ms) {
  NodeEvent(t, n, to, reason, now_ms);
  metrics_.nodes_lost++;
  DropOrdersFor(t, n.name);
  for (auto& [seq, j] : jobs_) {
    if (!HoldsPlacement(j.state)) {
      continue;
    }
    auto nodes = j.Nodes();
    if (std::find(nodes.begin(), nodes.end(), n.name) == nodes.end()) continue;
    if (options_.node_lease_ms > 0) {
      // Its ranks there may live on until the node's lease runs out: fence the next attempt.
      j.fence_nodes[n.name] = j.attempt;
      fenced_seqs_.insert(j.seq);
      j.fence_until_ms =
          std::max(j.fence_until_ms, n.last_heartbeat_ms + options_.node_lease_ms + kFenceMarginMs);
      t.jobs.insert(j.seq);
    }
    if (j.state == JobState::kStopping) {
      if (j.stop_pending.erase(n.name)) {
        t.jobs.insert(j.seq);
        MaybeFinishStop(t, j, now_ms);
      }
    } else {
      FailAttempt(t, j, "node " + n.name + " " + std::string(NodeStateName(to)) + ": " + reason,
                  n.name, now_ms);
    }
  }
}

// A node that answers again reports the ranks it still runs: a fenced attempt's ranks still
// there keep the fence up for a lease from now (its agent renews the lease with every answered
// heartbeat; the stale stop order is on its way); once they are gone, that node's fence drops.
void ControlPlane::TrackFences(Txn& t, const std::string& node,
                               const std::vector<wire::RunningRank>& running, int64_t now_ms) {
  for (auto s = fenced_seqs_.begin(); s != fenced_seqs_.end();) {
    Job& j = jobs_.at(*s);
    auto it = j.fence_nodes.find(node);
    if (it == j.fence_nodes.end()) {
      ++s;
      continue;
    }
    const bool still_there = std::any_of(running.begin(), running.end(), [&](const auto& r) {
      return r.job_id == j.id && r.attempt == it->second;
    });
    if (still_there) {
      const int64_t until = now_ms + options_.node_lease_ms + kFenceMarginMs;
      if (until > j.fence_until_ms) {
        j.fence_until_ms = until;
        t.jobs.insert(j.seq);
      }
      ++s;
      continue;
    }
    j.fence_nodes.erase(it);
    t.jobs.insert(j.seq);
    if (j.fence_nodes.empty()) {
      j.fence_until_ms = 0;
      schedule_dirty_ = true;
      s = fenced_seqs_.erase(s);
    } else {
      ++s;
    }
  }
}

void ControlPlane::StopStale(Txn& t, const std::string& node,
                             const std::vector<wire::RunningRank>& running) {
  for (const auto& r : running) {
    auto seq = ParseJobId(r.job_id);
    auto it = seq ? jobs_.find(*seq) : jobs_.end();
    bool current = false;
    if (it != jobs_.end()) {
      const Job& j = it->second;
      auto nodes = j.Nodes();
      current = j.attempt == r.attempt && HoldsPlacement(j.state) &&
                std::find(nodes.begin(), nodes.end(), node) != nodes.end();
    }
    if (current) continue;
    std::string id = OrderId(r.job_id, r.attempt, "stop", node);
    if (orders_.contains(id) || stale_stops_.contains(id)) continue;
    stale_stops_.insert(id);
    wire::WorkOrder o;
    o.id = id;
    o.kind = wire::OrderKind::kStop;
    o.job_id = r.job_id;
    o.attempt = r.attempt;
    o.stop = wire::StopOrder{.reason = "stale", .checkpoint_first = false, .grace_ms = 10000};
    AddOrder(t, node, std::move(o));
  }
}

void ControlPlane::ApplyReport(Txn& t, const std::string& node, const wire::Report& r,
                               int64_t now_ms) {
  if (r.kind == wire::ReportKind::kAccepted) {
    bool was_launch = false;
    if (auto it = orders_.find(r.order_id); it != orders_.end()) {
      if (it->second.node != node) return;
      was_launch = it->second.order.kind == wire::OrderKind::kLaunch;
      FinishOrder(t, r.order_id, "accepted");
    }
    if (!was_launch) return;
  }
  std::string job_id = r.job_id;
  if (job_id.empty()) job_id = r.order_id.substr(0, r.order_id.find('.'));
  auto seq = ParseJobId(job_id);
  auto it = seq ? jobs_.find(*seq) : jobs_.end();
  if (it == jobs_.end()) return;
  Job& j = it->second;
  if (AttemptOf(r.order_id) != j.attempt) return;  // about an attempt that is over
  // A duplicate changes nothing. The per-rank kinds are recorded by what they set (a rank in
  // started or exited, a node in launch_accepted: the job's record stays small for a gang of
  // a thousand ranks); the rest by key, with the reporting node in it, so that a node cannot
  // pre-empt another node's report with a forged one about the same order and rank.
  bool duplicate = false;
  switch (r.kind) {
    case wire::ReportKind::kAccepted:
      duplicate = j.launch_accepted.contains(node);
      break;
    case wire::ReportKind::kStarted:
      duplicate = j.started.contains(r.rank);
      break;
    case wire::ReportKind::kExited:
      duplicate = j.exited.contains(r.rank);
      break;
    default:
      duplicate =
          !j.seen_reports
               .insert(r.order_id + "|" + node + "|" + std::string(wire::ReportKindName(r.kind)) +
                       "|" + std::to_string(r.rank))
               .second;
  }
  if (duplicate) return;
  t.jobs.insert(j.seq);
  const bool active = j.state == JobState::kStarting || j.state == JobState::kRunning;
  auto on_node = [&](int rank) {
    for (const auto& p : j.placement) {
      if (p.rank == rank) return p.node == node;
    }
    return false;
  };
  switch (r.kind) {
    case wire::ReportKind::kAccepted:
      j.launch_accepted.insert(node);
      break;
    case wire::ReportKind::kStarted:
      if (!on_node(r.rank)) return;
      j.started.insert(r.rank);
      if (active && j.run_started_ms == 0) j.run_started_ms = now_ms;
      if (j.state == JobState::kStarting && j.started.size() == j.placement.size()) {
        SetState(t, j, JobState::kRunning,
                 "all " + std::to_string(j.placement.size()) + " ranks started", now_ms);
      }
      break;
    case wire::ReportKind::kExited: {
      if (!on_node(r.rank)) return;
      j.exited[r.rank] = {r.exit_code, r.signal};
      if (!active) break;
      if (r.exit_code != 0 || r.signal != 0) {
        // The agent's word on how, when it has one ("killed by SIGKILL (the job's memory limit:
        // 1 OOM kill(s))", a rank it could not start and why), else the codes.
        std::string how = !r.message.empty() ? ForTerminal(r.message.substr(0, 300))
                          : r.signal != 0    ? "was killed by signal " + std::to_string(r.signal)
                                             : "exited with code " + std::to_string(r.exit_code);
        FailAttempt(t, j, "rank " + std::to_string(r.rank) + " on " + node + " " + how, "", now_ms);
      } else if (j.exited.size() == j.placement.size()) {
        bool all_zero = true;
        for (const auto& [rank, e] : j.exited) all_zero = all_zero && e.first == 0 && e.second == 0;
        if (all_zero) SetState(t, j, JobState::kSucceeded, "all ranks exited 0", now_ms);
      }
      break;
    }
    case wire::ReportKind::kCheckpointed:
      if (r.step > j.last_step) {
        j.last_step = r.step;
        j.last_checkpoint = r.path;
      }
      break;
    case wire::ReportKind::kStopped:
      FinishOrder(t, r.order_id, "done");
      if (j.stop_pending.erase(node)) MaybeFinishStop(t, j, now_ms);
      break;
    case wire::ReportKind::kRejected: {
      auto oit = orders_.find(r.order_id);
      bool launch = r.order_id.find(".launch.") != std::string::npos;
      bool stop = r.order_id.find(".stop.") != std::string::npos;
      if (oit != orders_.end()) FinishOrder(t, r.order_id, "done");
      if (launch && active) {
        FailAttempt(t, j, "node " + node + " rejected the launch: " + r.message, "", now_ms);
      } else if (stop && j.stop_pending.erase(node)) {
        MaybeFinishStop(t, j, now_ms);
      }
      break;
    }
  }
}

// ---- agents ----

ApiResult<wire::RegisterResponse> ControlPlane::Register(const wire::RegisterRequest& req,
                                                         const Identity& who, int64_t now_ms) {
  const auto& allowed = options_.static_nodes;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), req.node) == allowed.end()) {
    return Refuse(403, "node " + req.node + " is not in the static cluster " +
                           options_.static_source +
                           " (cluster.node_discovery: static); register it under one of its "
                           "node names, or use dynamic discovery");
  }
  if (who.role == Role::kUser) {
    return Refuse(403,
                  "a user token cannot register a node: agents use a join token (tianshu "
                  "users add NAME --role join) and then their node's own credential");
  }
  if (who.role == Role::kNode && who.node != req.node) {
    return Refuse(403, "this credential belongs to node " + who.node + ", not " + req.node);
  }
  return Mutate<wire::RegisterResponse>([&](Txn& t) -> ApiResult<wire::RegisterResponse> {
    auto known = nodes_.find(req.node);
    if (who.role == Role::kJoin && known != nodes_.end() && known->second.credential_hash.empty() &&
        !known->second.rejoin) {
      // A node stored before credentials existed (or forgotten): its agent held the admin
      // token; a join token only makes new names.
      return Refuse(403, "node " + req.node +
                             " is known from before node credentials: its first registration "
                             "needs the admin token (or a new name)");
    }
    if (auto held = known;
        who.role != Role::kNode && held != nodes_.end() && !held->second.credential_hash.empty()) {
      // An impostor with the join (or admin) token cannot take over a registered name.
      return Refuse(403, "node " + req.node +
                             " is registered with its own credential: its agent registers with "
                             "it (WORKDIR/credential); an agent that lost it needs an admin to "
                             "run `tianshu nodes forget " +
                             req.node + "` first");
    }
    auto [it, is_new] = nodes_.try_emplace(req.node);
    NodeEntry& n = it->second;
    std::string minted;
    if (n.credential_hash.empty()) {
      // The agent's own credential (it sent the hash; a lost answer then costs nothing: its
      // retry authenticates with it), else one minted here and returned.
      if (net::IsTokenHash(req.credential_sha256)) {
        n.credential_hash = req.credential_sha256;
      } else {
        minted = NewToken();
        n.credential_hash = TokenHash(minted);
      }
      n.rejoin = false;
      n.log_key = NewToken();
      node_by_credential_[n.credential_hash] = req.node;
    }
    const bool restarted = !is_new && n.agent_id != req.agent_id;
    const NodeState old_state = n.state;
    n.name = req.node;
    n.agent_id = req.agent_id;
    n.address = req.address;
    n.hardware = req.hardware;
    n.registered_ms = now_ms;
    n.last_heartbeat_ms = now_ms;
    n.last = wire::Heartbeat{.agent_id = req.agent_id};
    n.last.running = req.running;
    t.nodes.insert(n.name);
    if (is_new) {
      n.state = NodeState::kLost;  // so the event reads "" -> ready
      NodeEvent(t, n, NodeState::kReady,
                "registered with " + std::to_string(req.hardware.devices.size()) + " devices",
                now_ms);
      t.events.back()["from"] = "";
    } else if (old_state != NodeState::kReady || restarted) {
      NodeEvent(t, n, NodeState::kReady,
                restarted ? "re-registered (agent " + req.agent_id + ")" : "re-registered", now_ms);
    }
    schedule_dirty_ = true;
    // Ranks the previous agent had started that this one does not run are lost: their
    // attempt fails. Jobs stopping there have nothing left to stop.
    if (restarted || old_state == NodeState::kLost || old_state == NodeState::kFailed) {
      std::set<std::pair<std::string, int>> running;
      for (const auto& r : req.running) running.insert({r.job_id, r.rank});
      for (auto& [seq, j] : jobs_) {
        auto nodes = j.Nodes();
        if (std::find(nodes.begin(), nodes.end(), n.name) == nodes.end()) continue;
        if (j.state == JobState::kStopping && j.stop_pending.contains(n.name)) {
          bool any = false;
          for (const auto& p : j.placement) {
            any = any || (p.node == n.name && running.contains({j.id, p.rank}));
          }
          if (!any && !orders_.contains(OrderId(j.id, j.attempt, "stop", n.name))) {
            j.stop_pending.erase(n.name);
            t.jobs.insert(j.seq);
            MaybeFinishStop(t, j, now_ms);
          }
          continue;
        }
        if ((j.state != JobState::kStarting && j.state != JobState::kRunning) ||
            !j.launch_accepted.contains(n.name)) {
          continue;
        }
        std::vector<std::string> lost;
        for (const auto& p : j.placement) {
          if (p.node == n.name && !running.contains({j.id, p.rank}) && !j.exited.contains(p.rank)) {
            lost.push_back(std::to_string(p.rank));
          }
        }
        if (!lost.empty()) {
          FailAttempt(t, j,
                      "rank(s) " + Join(lost, ",") + " on " + n.name +
                          " were lost (the agent restarted without them)",
                      "", now_ms);
        }
      }
    }
    StopStale(t, n.name, req.running);
    TrackFences(t, n.name, req.running, now_ms);
    t.wake_work.insert(n.name);
    return wire::RegisterResponse{.node = n.name,
                                  .credential = minted,
                                  .log_key = n.log_key,
                                  .heartbeat_interval_ms = options_.heartbeat_interval_ms,
                                  .lost_after_ms = options_.lost_after_ms,
                                  .server_id = options_.server_id,
                                  .lease_ms = options_.node_lease_ms};
  });
}

ApiResult<wire::HeartbeatResponse> ControlPlane::Heartbeat(const std::string& node,
                                                           const wire::Heartbeat& hb,
                                                           int64_t now_ms) {
  return Mutate<wire::HeartbeatResponse>([&](Txn& t) -> ApiResult<wire::HeartbeatResponse> {
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.agent_id != hb.agent_id ||
        it->second.state == NodeState::kLost) {
      return wire::HeartbeatResponse{.reregister = true};
    }
    NodeEntry& n = it->second;
    n.last_heartbeat_ms = now_ms;
    n.last = hb;
    NodeState want = hb.health == wire::Health::kOk         ? NodeState::kReady
                     : hb.health == wire::Health::kDegraded ? NodeState::kDegraded
                                                            : NodeState::kFailed;
    if (want != n.state) {
      std::string why =
          hb.message.empty() ? "reported " + std::string(wire::HealthName(hb.health)) : hb.message;
      if (want == NodeState::kFailed) {
        LoseNode(t, n, want, why, now_ms);
      } else {
        NodeEvent(t, n, want, why, now_ms);
      }
    }
    StopStale(t, node, hb.running);
    TrackFences(t, node, hb.running, now_ms);
    auto oit = node_orders_.find(node);
    return wire::HeartbeatResponse{
        .reregister = false,
        .pending_orders = oit == node_orders_.end() ? 0 : static_cast<int64_t>(oit->second.size())};
  });
}

ApiResult<wire::WorkBatch> ControlPlane::Work(const std::string& node, const std::string& agent_id,
                                              int64_t wait_ms, const std::string& after) {
  // The cursor: "<this run's epoch>.<order seq>"; one of another run (or none) is 0.
  uint64_t after_seq = 0;
  if (!after.empty()) {
    const auto dot = after.rfind('.');
    int64_t v = 0;
    if (dot == std::string::npos || !ParseInt64(after.substr(dot + 1), &v) || v < 0) {
      return Refuse(
          400, "after: expected a cursor from an earlier batch, got '" + after.substr(0, 64) + "'");
    }
    if (after.substr(0, dot) == order_epoch_) after_seq = static_cast<uint64_t>(v);
  }
  std::unique_lock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return Refuse(404, "unknown node " + node + ": register first");
  auto registered_agent = [&] { return agent_id.empty() || it->second.agent_id == agent_id; };
  if (!registered_agent()) {
    return Refuse(409, "agent " + agent_id + " is not the registered agent of node " + node +
                           ": register again");
  }
  // Only durable orders go out: an order a crash could lose must never start a rank.
  auto durable_since = [&](uint64_t seq) {
    const uint64_t durable = committer_->Durable();
    if (auto o = node_orders_.find(node); o != node_orders_.end()) {
      for (const auto& id : o->second) {
        const OrderEntry& e = orders_.at(id);
        if (e.seq > seq && e.ticket <= durable) return true;
      }
    }
    return false;
  };
  if (wait_ms > 0) {
    std::condition_variable& cv = work_cvs_[node];
    const uint64_t since = after.empty() ? 0 : after_seq;
    cv.wait_for(lock, std::chrono::milliseconds(wait_ms),
                [&] { return shutdown_ || !registered_agent() || durable_since(since); });
  }
  wire::WorkBatch batch;
  uint64_t last = after_seq;
  const uint64_t durable = committer_->Durable();
  if (auto o = node_orders_.find(node); o != node_orders_.end()) {
    for (const auto& id : o->second) {
      const OrderEntry& e = orders_.at(id);
      if (e.ticket > durable) continue;
      batch.orders.push_back(e.order);
      last = std::max(last, e.seq);
    }
  }
  batch.cursor = order_epoch_ + "." + std::to_string(last);
  return batch;
}

ApiResult<int> ControlPlane::Reports(const std::string& node, const wire::ReportBatch& batch,
                                     int64_t now_ms) {
  return Mutate<int>([&](Txn& t) -> ApiResult<int> {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return Refuse(404, "unknown node " + node + ": register first");
    if (it->second.agent_id != batch.agent_id) {
      return Refuse(409, "agent " + batch.agent_id + " is not the registered agent of node " +
                             node + ": register again");
    }
    for (const auto& r : batch.reports) ApplyReport(t, node, r, now_ms);
    return static_cast<int>(batch.reports.size());
  });
}

// ---- the ticker ----

void ControlPlane::Tick(int64_t now_ms) {
  (void)Mutate<bool>([&](Txn& t) -> ApiResult<bool> {
    last_tick_ms_ = now_ms;
    auto live = [](const NodeEntry& n) {
      return n.state == NodeState::kReady || n.state == NodeState::kDegraded;
    };
    auto silent_for = [&](const NodeEntry& n, int64_t ms) {
      return live(n) && now_ms - n.last_heartbeat_ms > ms && now_ms >= n.grace_until_ms;
    };
    // Quiet: silent for half of lost_after. Nodes cut off together cross lost_after a
    // heartbeat interval or so apart; counting the quiet ones keeps the first to cross from
    // being judged alone.
    int live_nodes = 0, quiet_nodes = 0;
    for (const auto& [name, n] : nodes_) {
      live_nodes += live(n);
      quiet_nodes += silent_for(n, options_.lost_after_ms / 2);
    }
    // Most nodes quiet at once: the server was starved or cut off, not the nodes. Hold off
    // until the silence ends (then give the rest the restart window) or has lasted too long.
    const bool mass = quiet_nodes >= 2 && 2 * quiet_nodes > live_nodes;
    if (mass && mass_silence_since_ms_ == 0) {
      mass_silence_since_ms_ = now_ms;
      metrics_.mass_silences++;
    } else if (!mass && mass_silence_since_ms_ != 0) {
      mass_silence_since_ms_ = 0;
      HoldLossesForRestartWindow(now_ms);  // the rest may still be in their backoff
    }
    const bool hold = now_ms < losses_not_before_ms_ ||
                      (mass && now_ms - mass_silence_since_ms_ < options_.mass_silence_max_ms);
    for (auto& [name, n] : nodes_) {
      if (!hold && silent_for(n, options_.lost_after_ms)) {
        LoseNode(t, n, NodeState::kLost,
                 "no heartbeat for " + std::to_string((now_ms - n.last_heartbeat_ms) / 1000) + " s",
                 now_ms);
      }
    }
    // Gang admission: a gang not entirely started within scheduler.gang_timeout releases what
    // it holds and goes to the retry path.
    const int64_t gang_timeout_ms = options_.config.gang_timeout_s * 1000;
    for (auto& [seq, j] : jobs_) {
      if (j.state != JobState::kStarting || gang_timeout_ms <= 0 ||
          now_ms - j.starting_since_ms < gang_timeout_ms) {
        continue;
      }
      metrics_.gang_timeouts++;
      FailAttempt(t, j,
                  "gang admission timed out: " + std::to_string(j.started.size()) + " of " +
                      std::to_string(j.placement.size()) + " ranks started within " +
                      std::to_string(options_.config.gang_timeout_s) +
                      " s; the partial gang is released",
                  "", now_ms);
    }
    for (auto& [seq, j] : jobs_) {
      if (j.state != JobState::kRunning) continue;
      int64_t interval_s = j.spec.checkpoint_interval_s > 0 ? j.spec.checkpoint_interval_s
                                                            : options_.config.checkpoint_interval_s;
      if (interval_s <= 0 || now_ms - j.last_checkpoint_order_ms < interval_s * 1000) continue;
      j.last_checkpoint_order_ms = now_ms;
      j.checkpoint_orders++;
      t.jobs.insert(j.seq);
      for (const auto& node : j.Nodes()) {
        wire::WorkOrder o;
        o.id = OrderId(j.id, j.attempt, "ckpt." + std::to_string(j.checkpoint_orders), node);
        o.kind = wire::OrderKind::kCheckpoint;
        o.job_id = j.id;
        o.attempt = j.attempt;
        o.checkpoint = wire::CheckpointOrder{.reason = "periodic"};
        AddOrder(t, node, std::move(o));
      }
    }
    Schedule(t, now_ms);
    return true;
  });
}

bool ControlPlane::ReshapeDue(int64_t now_ms) const {
  if (engine_options_.policies.elastic == "none" || now_ms < next_reshape_check_ms_) return false;
  return std::any_of(jobs_.begin(), jobs_.end(), [](const auto& kv) {
    return kv.second.state == JobState::kRunning && kv.second.spec.elastic.enabled;
  });
}

bool ControlPlane::BeginReshape(Txn& t, Job& j, const std::string& kind,
                                const std::vector<placement::RankSlot>& target,
                                const placement::Outcome& holding, model::ClusterState* state,
                                int64_t now_ms) {
  if (j.state != JobState::kRunning || target.empty()) return false;
  // What the engine decided must still fit what the server knows: free the job's GPUs on a
  // copy, take the target.
  model::ClusterState trial = *state;
  placement::PlacementRequest req = placement::RequestFromJob(j.spec);
  req.ranks = static_cast<int>(holding.ranks.size());
  if (!placement::Release(&trial, req, holding)) return false;
  req.ranks = static_cast<int>(target.size());
  if (!placement::Apply(&trial, req, placement::PlacedOutcome(target))) return false;
  // Both placements stay held until the relaunch: the old one until its ranks have stopped,
  // the new slots as a reservation (all of them or none).
  const std::vector<placement::RankSlot> added = AddedSlots(holding.ranks, target);
  if (!added.empty()) {
    model::ClusterState reserved = *state;
    req.ranks = static_cast<int>(added.size());
    if (!placement::Apply(&reserved, req, placement::PlacedOutcome(added))) return false;
    *state = std::move(reserved);
  }
  j.target = PlacesOf(*view_, target);
  j.reshape = kind;
  std::string why;
  if (kind == "resize") {
    ++j.resizes;
    ++metrics_.resizes;
    why = "elastic scaling: resizing from " + std::to_string(holding.ranks.size()) + " to " +
          std::to_string(target.size()) + " GPUs (checkpoint, then relaunch)";
  } else {
    ++j.migrations;
    ++metrics_.migrations;
    why = "migration: moving to ";
    std::set<std::string> nodes;
    for (const auto& p : j.target) nodes.insert(p.node);
    why += Join(std::vector<std::string>(nodes.begin(), nodes.end()), ",") +
           " to make room for waiting work (checkpoint, then relaunch)";
  }
  BeginStop(t, j, "reshape", why, "", /*checkpoint_first=*/true, now_ms);
  return true;
}

void ControlPlane::Schedule(Txn& t, int64_t now_ms) {
  const bool reshape_due = ReshapeDue(now_ms);
  if (fence_wake_ms_ > 0 && now_ms >= fence_wake_ms_) schedule_dirty_ = true;
  if (!schedule_dirty_ && !reshape_due) return;
  schedule_dirty_ = false;
  if (reshape_due) {
    // Elastic growth needs a cycle even when nothing waits; a job becomes eligible one
    // scaling_interval after its last (re)start, so a quarter of that bounds the delay.
    next_reshape_check_ms_ =
        now_ms + std::max<int64_t>(1000, options_.config.scaling_interval_s * 1000 / 4);
  }
  std::vector<Job*> pending;
  fence_wake_ms_ = 0;
  for (auto& [seq, j] : jobs_) {
    if (j.state != JobState::kPending || j.held) continue;
    if (!j.fence_nodes.empty() && j.fence_until_ms > now_ms) {
      // Not before the ranks of its last attempt on a lost node are surely dead.
      std::vector<std::string> fenced;
      for (const auto& [node, attempt] : j.fence_nodes) fenced.push_back(node);
      j.message = "fenced until " + std::to_string((j.fence_until_ms - now_ms + 999) / 1000) +
                  " s from now: ranks of attempt " + std::to_string(j.attempt) +
                  " may still run on " + Join(fenced, ",") + " until its lease runs out";
      fence_wake_ms_ =
          fence_wake_ms_ == 0 ? j.fence_until_ms : std::min(fence_wake_ms_, j.fence_until_ms);
      continue;
    }
    if (!j.fence_nodes.empty()) {  // the lease ran out: those ranks are gone
      j.fence_nodes.clear();
      j.fence_until_ms = 0;
      fenced_seqs_.erase(j.seq);
      t.jobs.insert(j.seq);
    }
    pending.push_back(&j);
  }
  if (pending.empty() && !reshape_due) return;
  auto start = std::chrono::steady_clock::now();
  std::vector<NodeHardware> hw;
  for (const auto& [name, n] : nodes_) {
    if (n.state == NodeState::kReady || n.state == NodeState::kDegraded) {
      hw.push_back({name, &n.hardware});
    }
  }
  auto view = BuildClusterView(hw);
  if (!view) {
    for (Job* j : pending) j->message = "cluster view: " + view.error().message;
    return;
  }
  view_ = std::move(*view);
  const model::Topology& topo = view_->topology;
  metrics_.cycles++;
  if (topo.NumNodes() == 0) {
    return;
  }
  model::ClusterState state(topo);
  for (int i = 0; i < topo.NumNodes(); ++i) {
    const NodeEntry& n = nodes_.at(view_->node_names[static_cast<size_t>(i)]);
    for (const auto& [k, v] : n.hardware.labels) state.SetLabel(i, k, v);
    if (n.state != NodeState::kReady) state.SetHealthy(i, false);
  }
  // What running jobs hold (kept for preemption: what stopping each would free). A job
  // stopping for a resize or a move also holds its target, reserved for its relaunch.
  struct Held {
    Job* job;
    placement::PlacementRequest request;
    placement::Outcome outcome;
    bool colocated = false;  // an overlaid service: in the engine's overlay budget only
  };
  std::vector<Held> holding;
  bool preemption_in_flight = false;
  bool reshape_in_flight = false;
  for (auto& [seq, j] : jobs_) {
    if (j.state == JobState::kStopping && j.after_stop == "preempted") preemption_in_flight = true;
    if (!j.target.empty()) reshape_in_flight = true;
    if (!HoldsPlacement(j.state)) {
      continue;
    }
    placement::PlacementRequest req = placement::RequestFromJob(j.spec);
    auto ranks = SlotsOf(*view_, j.placement);
    if (!ranks) continue;
    if (j.state == JobState::kStopping && !j.target.empty()) {
      if (auto target = SlotsOf(*view_, j.target)) {
        for (const auto& slot : AddedSlots(*ranks, *target)) ranks->push_back(slot);
      }
    }
    placement::Outcome held = placement::PlacedOutcome(*ranks);
    req.ranks = static_cast<int>(held.ranks.size());
    if (j.colocated && !held.ranks.empty()) {
      holding.push_back({&j, req, std::move(held), true});
    } else if (!held.ranks.empty() && placement::Apply(&state, req, held)) {
      holding.push_back({&j, req, std::move(held)});
    }
  }
  // Jobs stopped for a resize or a move relaunch on their reserved target first; where it is
  // gone (a node left), the engine places them like any waiting job.
  std::erase_if(pending, [&](Job* j) {
    if (j->target.empty()) return false;
    auto target = SlotsOf(*view_, j->target);
    placement::PlacementRequest req = placement::RequestFromJob(j->spec);
    req.ranks = target ? static_cast<int>(target->size()) : 0;
    placement::Outcome o = target ? placement::PlacedOutcome(*target) : placement::Outcome{};
    if (target && placement::Apply(&state, req, o)) {
      StartJob(t, *j, o, topo, now_ms);
      holding.push_back({j, req, std::move(o)});
      return true;
    }
    j->message = "the " + j->reshape + "'s target is gone; waiting to be placed again";
    j->target.clear();
    j->reshape.clear();
    t.jobs.insert(j->seq);
    return false;
  });
  // The engine decides (issue 5's cycle: order, admit, place, backfill, preempt, resize,
  // move) on a fresh copy of the state: what runs is restored into it, what waits is
  // submitted. Jobs stopping still hold their GPUs. Each decision is then carried out here,
  // and only if it still fits what the server knows (a preemptor waits until its victims have
  // stopped).
  engine::EngineOptions cycle_options = engine_options_;
  if (options_.config.colocation != "none") {
    // An overlay is taken only where the serving model (sim/serving.h, the simulator's) predicts
    // the service keeps its objective next to training and training loses at most
    // kMaxTrainingLoss of each GPU to all the services on it.
    const estimate::Colocation mode = estimate::ColocationFrom(options_.config.colocation);
    auto gpus_of = [](std::span<const placement::RankSlot> ranks) {
      std::vector<int> g;
      for (const auto& s : ranks) g.push_back(s.gpu);
      return g;
    };
    auto taken = std::make_shared<std::map<int, double>>();  // GPU -> training share lost
    std::map<int64_t, OverlayLoss> kept;  // priced once per attempt, not every cycle
    for (const Held& h : holding) {
      if (!h.colocated) continue;
      const std::vector<int> gpus = gpus_of(h.outcome.ranks);
      OverlayLoss known = overlay_loss_[h.job->seq];
      if (known.attempt != h.job->attempt) {
        auto cost = estimate::CostOfService(topo, h.job->spec, gpus);
        known = {h.job->attempt, cost ? estimate::ForecastOverlay(*cost, mode).training_loss : 0.0};
      }
      kept[h.job->seq] = known;
      for (int g : gpus) (*taken)[g] += known.loss;
    }
    overlay_loss_ = std::move(kept);
    cycle_options.colocation_fits = [&topo, mode, taken, gpus_of](
                                        const model::JobSpec& spec,
                                        std::span<const placement::RankSlot> ranks) {
      const std::vector<int> gpus = gpus_of(ranks);
      auto cost = estimate::CostOfService(topo, spec, gpus);
      if (!cost) return true;  // nothing to price (no model or rate): the budget decides
      const estimate::OverlayForecast f = estimate::ForecastOverlay(*cost, mode);
      if (f.latency.attainment < estimate::kSloTarget) return false;
      return std::none_of(gpus.begin(), gpus.end(), [&](int g) {
        auto it = taken->find(g);
        return (it == taken->end() ? 0.0 : it->second) + f.training_loss >
               estimate::kMaxTrainingLoss;
      });
    };
  }
  auto engine = engine::Engine::Create(topo, cycle_options);
  if (!engine) {
    for (Job* j : pending) j->message = "engine: " + engine.error().message;
    return;
  }
  auto seconds = [](int64_t ms) { return static_cast<double>(ms) / 1000.0; };
  (*engine)->SetRuntimeHistory(runtimes_);
  for (int i = 0; i < topo.NumNodes(); ++i) {  // degraded nodes keep their work, get nothing new
    if (nodes_.at(view_->node_names[static_cast<size_t>(i)]).state != NodeState::kReady) {
      (void)(*engine)->Apply(engine::NodeFailed{.node = i, .reason = "degraded"}, seconds(now_ms));
    }
  }
  std::map<int64_t, const Held*> held_by;
  for (const Held& h : holding) {
    if (!(*engine)->Apply(engine::SubmitJob{.id = h.job->seq, .spec = h.job->spec},
                          seconds(h.job->submitted_ms))) {
      continue;
    }
    // The current run accrues from its start (the elastic interval counts from it too).
    // (from now while no rank has started: the engine charges nothing for the launch).
    const int64_t run_start = h.job->run_started_ms > 0 ? h.job->run_started_ms : now_ms;
    (void)(*engine)->Restore(h.job->seq, h.outcome.ranks, seconds(run_start), h.colocated);
    (void)(*engine)->SetAttainedService(h.job->seq, h.job->attained_gpu_s);
    held_by[h.job->seq] = &h;
  }
  std::map<int64_t, Job*> waiting;
  for (Job* j : pending) {
    if ((*engine)->Apply(engine::SubmitJob{.id = j->seq, .spec = j->spec},
                         seconds(j->submitted_ms))) {
      (void)(*engine)->SetAttainedService(j->seq, j->attained_gpu_s);
      waiting[j->seq] = j;
    } else {
      j->message = "the engine refused the job";
    }
  }
  engine::CycleResult cycle = (*engine)->Cycle(seconds(now_ms));
  std::map<int64_t, std::string> why;
  std::vector<Job*> victims;
  bool reshaped = false;
  for (const engine::Decision& d : cycle.decisions) {
    if (const auto* go = std::get_if<engine::StartJob>(&d)) {
      auto it = waiting.find(go->id);
      if (it == waiting.end()) continue;
      Job* j = it->second;
      placement::PlacementRequest req = placement::RequestFromJob(j->spec);
      placement::Outcome o = placement::PlacedOutcome(go->ranks);
      metrics_.placement_outcomes["placed"]++;
      // An overlay takes no GPU share: its GPUs must be held (by the training it joins).
      const bool fits =
          go->colocated
              ? std::all_of(go->ranks.begin(), go->ranks.end(),
                            [&](const placement::RankSlot& s) {
                              return s.gpu >= 0 && state.GpuFreeMilli(s.gpu) < model::kMilliPerGpu;
                            })
              : static_cast<bool>(placement::Apply(&state, req, o));
      if (fits) {
        StartJob(t, *j, o, topo, now_ms, go->colocated);
        waiting.erase(it);
      } else {
        why[j->seq] =
            "placed where jobs being preempted or moved still hold GPUs: waiting for them to stop";
      }
    } else if (const auto* stop = std::get_if<engine::StopJob>(&d)) {
      if (stop->reason != engine::StopReason::kPreempted || preemption_in_flight) continue;
      auto it = jobs_.find(stop->id);
      if (it == jobs_.end()) continue;
      Job& v = it->second;
      if (v.state == JobState::kRunning || v.state == JobState::kStarting) victims.push_back(&v);
    } else if (std::holds_alternative<engine::ResizeJob>(d) ||
               std::holds_alternative<engine::MigrateJob>(d)) {
      // One round of resizes and moves at a time: the next waits for this one's relaunches.
      if (reshape_in_flight || preemption_in_flight) continue;
      const auto* resize = std::get_if<engine::ResizeJob>(&d);
      const auto& ranks = resize ? resize->ranks : std::get<engine::MigrateJob>(d).ranks;
      auto it = jobs_.find(engine::DecisionJob(d));
      auto h = held_by.find(engine::DecisionJob(d));
      if (it == jobs_.end() || h == held_by.end()) continue;
      reshaped |= BeginReshape(t, it->second, resize ? "resize" : "migrate", ranks,
                               h->second->outcome, &state, now_ms);
    } else if (const auto* reject = std::get_if<engine::RejectJob>(&d)) {
      // Nodes may still join: the job waits, saying why.
      metrics_.placement_outcomes["can-never-fit"]++;
      why[reject->id] = "cannot fit on the registered nodes: " + reject->reason;
    }
  }
  for (Job* v : victims) {
    metrics_.preemptions++;
    BeginStop(t, *v, "preempted",
              "preempted for a job of higher priority (its priority " +
                  std::to_string(v->spec.priority) + ")",
              "", /*checkpoint_first=*/true, now_ms);
  }
  for (auto& [seq, j] : waiting) {
    std::string w;
    if (auto it = why.find(seq); it != why.end()) {
      w = it->second;
    } else {
      const engine::JobRecord* r = (*engine)->Find(seq);
      metrics_.placement_outcomes["does-not-fit-now"]++;
      w = "waiting for capacity" + (r && !r->reason.empty() ? ": " + r->reason : std::string());
      if (!victims.empty()) w = "waiting while lower-priority jobs checkpoint and stop";
      if (reshaped || reshape_in_flight) w = "waiting while running jobs are resized or moved";
    }
    if (w != j->message) {
      j->message = w;
      t.jobs.insert(j->seq);
    }
  }
  metrics_.cycle_seconds.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void ControlPlane::Shutdown() {
  {
    std::lock_guard l(mu_);
    shutdown_ = true;
  }
  events_cv_.notify_all();
  tick_cv_.notify_all();
  std::lock_guard l(mu_);
  for (auto& [node, cv] : work_cvs_) cv.notify_all();
}

void ControlPlane::WaitForChange(int64_t max_ms, int64_t min_ms) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  tick_cv_.wait_until(lock, start + std::chrono::milliseconds(std::min(min_ms, max_ms)),
                      [&] { return shutdown_; });
  tick_cv_.wait_until(lock, start + std::chrono::milliseconds(max_ms),
                      [&] { return shutdown_ || schedule_dirty_; });
}

void ControlPlane::WakeWork(const std::set<std::string>& nodes) {
  if (nodes.empty()) return;
  std::lock_guard l(mu_);
  for (const auto& node : nodes) {
    if (auto it = work_cvs_.find(node); it != work_cvs_.end()) it->second.notify_all();
  }
}

}  // namespace tianshu::server
