// What users and admins change: identities, submissions, holds, cancellations.
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

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

std::vector<int64_t> ControlPlane::ArrayTasks(const Job& first) const {
  std::vector<int64_t> out;
  if (first.array_index < 0 || first.array_id != first.id) return out;
  for (int i = 0; i < first.array_count; ++i) {  // made together: consecutive seqs
    auto it = jobs_.find(first.seq + i);
    if (it != jobs_.end() && it->second.array_id == first.id) out.push_back(it->first);
  }
  return out;
}

std::vector<int> ControlPlane::ArrayIndexesOf(const Job& first) const {
  std::vector<int> out;
  for (int64_t seq : ArrayTasks(first)) out.push_back(jobs_.at(seq).array_index);
  return out;
}

json ControlPlane::ArrayJson(const Job& first) const {
  json ids = json::array();
  for (int64_t seq : ArrayTasks(first)) ids.push_back(jobs_.at(seq).id);
  return {{"id", first.id},    {"array_id", first.id},    {"count", first.array_count},
          {"ids", ids},        {"name", first.spec.name}, {"state", JobStateName(first.state)},
          {"held", first.held}};
}

std::optional<ApiError> ControlPlane::OverStoreLimits(size_t ops, size_t bytes,
                                                      const std::string& what) const {
  const std::optional<StoreLimits> limits = store_->Limits();
  if (!limits || (ops <= limits->max_ops && bytes <= limits->max_bytes)) return std::nullopt;
  return ApiError{413, what + " would write about " + std::to_string(ops) + " records (" +
                           std::to_string(bytes / 1024) + " KiB) at once, more than the store (" +
                           store_->Describe() + ") takes in one transaction (" +
                           std::to_string(limits->max_ops) + " records, " +
                           std::to_string(limits->max_bytes / 1024) +
                           " KiB): make it smaller, or raise etcd's --max-txn-ops and "
                           "--max-request-bytes and the store URL's limits (docs/operations.md)"};
}

namespace {

// With `queues:` configured, a job must name one of its leaf queues (a queue no other names as
// its parent): a typo would otherwise wait for ever, or run unaccounted.
std::optional<ApiError> UnknownQueue(const std::vector<model::QueueConfig>& queues,
                                     const std::string& queue) {
  // With no queues, one pool: every name runs in it. A job that names none ("default") counts
  // against `default`, as before queues were checked.
  if (queues.empty() || queue == "default") return std::nullopt;
  std::set<std::string> parents;
  for (const auto& q : queues) parents.insert(q.parent);
  std::vector<std::string> leaves;
  bool known = false;
  for (const auto& q : queues) {
    if (parents.contains(q.name)) continue;
    leaves.push_back(q.name);
    known = known || q.name == queue;
  }
  if (known) return std::nullopt;
  const bool inner = std::any_of(queues.begin(), queues.end(),
                                 [&](const model::QueueConfig& q) { return q.name == queue; });
  return ApiError{400, "queue: '" + queue.substr(0, 64) + "' " +
                           (inner ? "has queues under it: submit to one of them"
                                  : "is not a queue of this cluster") +
                           " (known: " + Join(leaves, ", ") + ")"};
}

}  // namespace

ApiResult<Submitted> ControlPlane::Submit(SubmitRequest request, int64_t now_ms) {
  if (auto bad = UnknownQueue(options_.config.queues, request.spec.queue)) {
    metrics_.submissions_rejected++;
    return std::unexpected(*bad);
  }
  // Each task keeps a copy of the body: an array's bodies are bounded together.
  constexpr size_t kMaxArrayBytes = size_t{16} << 20;
  if (request.array.size() * request.text.size() > kMaxArrayBytes) {
    metrics_.submissions_rejected++;
    return Refuse(413, "array of " + std::to_string(request.array.size()) + " tasks of a " +
                           std::to_string(request.text.size()) +
                           "-byte body: at most 16 MiB of bodies in one array");
  }
  {
    // The submission's own change (each task's record, written twice over: the body and the
    // spec, and its event), and the largest its launch can be: an order per node it spans (as
    // many as its ranks over the fewest GPUs a registered node has), each carrying its ranks'
    // command and environment.
    const size_t tasks = std::max<size_t>(1, request.array.size());
    size_t run_bytes = request.run.workdir.size() + 256;
    for (const auto& c : request.run.command) run_bytes += c.size() + 4;
    for (const auto& [k, v] : request.run.env) run_bytes += k.size() + v.size() + 8;
    const size_t ranks = static_cast<size_t>(std::max(1, request.spec.gpus));
    size_t per_node = request.spec.gpus_per_node > 0 ? size_t(request.spec.gpus_per_node) : 0;
    if (per_node == 0) {
      std::lock_guard l(mu_);
      for (const auto& [name, n] : nodes_) {
        const size_t g = n.hardware.devices.size();
        if (g > 0 && (per_node == 0 || g < per_node)) per_node = g;
      }
    }
    const size_t spans = request.spec.nodes > 0 ? size_t(request.spec.nodes)
                                                : (ranks + std::max<size_t>(1, per_node) - 1) /
                                                      std::max<size_t>(1, per_node);
    auto over = OverStoreLimits(
        tasks * 2 + 8, tasks * (2 * request.text.size() + 512),
        tasks > 1 ? "an array of " + std::to_string(tasks) + " tasks" : "the submission");
    if (!over) {
      over = OverStoreLimits(spans + 16, ranks * run_bytes + 4 * request.text.size() + 4096,
                             "launching this job (" + std::to_string(ranks) + " ranks on up to " +
                                 std::to_string(spans) + " nodes)");
    }
    if (over) {
      metrics_.submissions_rejected++;
      return std::unexpected(*over);
    }
  }
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
        const std::vector<int> indexes = ArrayIndexesOf(before);
        if (indexes != request.array) {
          return Refuse(422, "Idempotency-Key " + request.idempotency_key + " was used for job " +
                                 before.id + " with another array: use a new key");
        }
        metrics_.idempotent_replays++;
        t.wait_for = before.created_ticket;  // acknowledged only once the first try is durable
        return Submitted{before.array_index >= 0 ? ArrayJson(before) : JobJson(before, true), true};
      }
    }
    // One job, or one per task of an array, all in this change (all or none).
    const std::vector<int> tasks = request.array.empty() ? std::vector<int>{-1} : request.array;
    const int64_t first = next_job_seq_;
    for (int index : tasks) {
      Job j;
      j.seq = next_job_seq_++;
      j.id = FormatJobId(j.seq);
      j.text = request.text;
      j.format = request.format;
      j.spec = request.spec;
      j.run = request.run;
      j.idempotency_key = j.seq == first ? request.idempotency_key : "";
      j.owner = request.owner;
      j.run_as = request.run_as;
      j.max_retries = j.spec.max_retries >= 0 ? j.spec.max_retries : options_.config.max_retries;
      j.submitted_ms = now_ms;
      j.held = request.hold;
      if (index >= 0) {
        j.array_id = FormatJobId(first);
        j.array_index = index;
        j.array_count = static_cast<int>(tasks.size());
      }
      if (!j.idempotency_key.empty()) idempotency_keys_[key] = j.seq;
      auto [it, inserted] = jobs_.emplace(j.seq, std::move(j));
      SetState(t, it->second, JobState::kPending,
               request.hold ? HeldMessage(it->second.id) : "submitted", now_ms);
      t.created.push_back(it->first);
    }
    schedule_dirty_ = true;
    const Job& made = jobs_.at(first);
    return Submitted{request.array.empty() ? JobJson(made, true) : ArrayJson(made), false};
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
    size_t bytes = 0;
    for (const Job* j : jobs) bytes += 2 * j->text.size() + 512;
    if (auto over = OverStoreLimits(2 * jobs.size() + 4, bytes,
                                    std::string(hold ? "holding " : "releasing ") +
                                        std::to_string(jobs.size()) + " jobs")) {
      return std::unexpected(*over);
    }
    json out = json::array();
    for (Job* j : jobs) {
      if (j->held != hold) {
        j->held = hold;
        if (!hold) {  // queued from now, as one batch with the others released here
          j->eligible_ms = now_ms;
          j->batch = jobs.size() > 1;
        }
        SetState(t, *j, JobState::kPending, hold ? HeldMessage(j->id) : "released by " + who.name,
                 now_ms);
      }
      out.push_back(JobJson(*j, false));
    }
    return json{{"jobs", out}};
  });
}

bool ControlPlane::CancelOne(Txn& t, Job& j, int64_t now_ms) {
  switch (j.state) {
    case JobState::kPending:
      SetState(t, j, JobState::kCancelled, "cancelled by user", now_ms);
      return true;
    case JobState::kStarting:
    case JobState::kRunning:
      j.cancel_requested = true;
      BeginStop(t, j, "cancelled", "cancelled by user", "", false, now_ms);
      return true;
    case JobState::kStopping:
      if (!j.cancel_requested) {
        j.cancel_requested = true;
        j.after_stop = "cancelled";
        t.jobs.insert(j.seq);
      }
      return true;
    default:
      return false;
  }
}

ApiResult<json> ControlPlane::Cancel(const std::string& id, const Identity& who, int64_t now_ms,
                                     bool whole_array) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    auto seq = ParseJobId(id);
    auto it = seq ? jobs_.find(*seq) : jobs_.end();
    if (it == jobs_.end() || !Visible(it->second)) return Refuse(404, "no job " + id);
    Job& j = it->second;
    if (whole_array) {
      const std::vector<int64_t> tasks = ArrayTasks(j);
      if (tasks.empty()) {
        return Refuse(400, "job " + id + " is not the id of a job array (its first task's)");
      }
      for (int64_t task : tasks) {
        const Job& k = jobs_.at(task);
        if (!who.ActsFor(k.owner)) {  // all or none
          return Refuse(403, "task " + k.id + " of array " + id + " belongs to " + k.owner +
                                 ": nothing cancelled");
        }
      }
      size_t bytes = 0;
      for (int64_t task : tasks) bytes += 2 * jobs_.at(task).text.size() + 512;
      if (auto over = OverStoreLimits(3 * tasks.size() + 4, bytes,
                                      "cancelling " + std::to_string(tasks.size()) + " tasks")) {
        return std::unexpected(*over);
      }
      json cancelled = json::array();
      int finished = 0;
      for (int64_t task_seq : tasks) {
        Job* task = &jobs_.at(task_seq);
        if (CancelOne(t, *task, now_ms)) {
          cancelled.push_back(task->id);
        } else {
          ++finished;
        }
      }
      return json{{"array_id", id}, {"cancelled", cancelled}, {"already_finished", finished}};
    }
    if (!who.ActsFor(j.owner)) {
      return Refuse(403, "job " + id + " belongs to " + j.owner +
                             ": only its owner or an admin may cancel it");
    }
    if (!CancelOne(t, j, now_ms)) {
      return Refuse(409, "job " + id + " is already " + std::string(JobStateName(j.state)) +
                             ": only pending, starting, running or stopping jobs can be "
                             "cancelled");
    }
    return JobJson(j, true);
  });
}

ApiResult<json> ControlPlane::Requeue(const std::string& id, const Identity& who, int64_t now_ms) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    auto seq = ParseJobId(id);
    auto it = seq ? jobs_.find(*seq) : jobs_.end();
    if (it == jobs_.end() || !Visible(it->second)) return Refuse(404, "no job " + id);
    Job& j = it->second;
    if (!who.ActsFor(j.owner)) {
      return Refuse(403, "job " + j.id + " belongs to " + j.owner +
                             ": only its owner or an admin may requeue it");
    }
    const std::string by = "requeued by " + who.name;
    switch (j.state) {
      case JobState::kStarting:
      case JobState::kRunning:
        // As a preemption: from a checkpoint, and no retry spent.
        BeginStop(t, j, "preempted", by + ": checkpointed, back in the queue", "",
                  /*checkpoint_first=*/true, now_ms);
        break;
      case JobState::kFailed:
      case JobState::kCancelled:
        j.retries = 0;
        j.cancel_requested = false;
        j.failed_rank = -1;
        j.held = false;          // to run again, not to wait for a release
        j.eligible_ms = now_ms;  // queued from now, behind the jobs submitted meanwhile
        j.batch = false;
        j.limit_base_ms = j.RanMs(now_ms);  // and a fresh time_limit
        if (!j.placement.empty()) j.last_placement = j.placement;
        j.placement.clear();
        SetState(t, j, JobState::kPending, by + " (its retries reset)", now_ms);
        break;
      default:
        return Refuse(409, "job " + j.id + " is " + std::string(JobStateName(j.state)) +
                               ": only a starting, running, failed or cancelled job can be "
                               "requeued");
    }
    return JobJson(j, true);
  });
}

ApiResult<json> ControlPlane::AdminNode(const std::string& name, const std::string& action,
                                        const Identity& who, int64_t now_ms) {
  return Mutate<json>([&](Txn& t) -> ApiResult<json> {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return Refuse(404, "no node " + name);
    NodeEntry& n = it->second;
    auto view = [&] {
      return NodeJson(n, AllocationsByNode(DeviceHolds(jobs_, active_seqs_, name))[name], now_ms);
    };
    auto jobs_here = [&] {
      std::vector<int64_t> out;
      for (int64_t seq : active_seqs_) {
        if (jobs_.at(seq).OnNode(name)) out.push_back(seq);
      }
      return out;
    };
    auto note = [&](const std::string& what) {
      t.nodes.insert(name);
      t.events.push_back({{"seq", next_event_seq_++},
                          {"time_ms", now_ms},
                          {"type", "node"},
                          {"id", name},
                          {"from", NodeStateName(n.state)},
                          {"to", NodeStateName(n.state)},
                          {"reason", what + " by " + who.name}});
      schedule_dirty_ = true;
    };
    if (action == "cordon" || action == "drain") {
      const bool drain = action == "drain";
      if (n.cordoned && (n.draining || !drain)) {
        if (!drain) return view();  // no change
      } else {
        n.cordoned = true;
        n.draining = n.draining || drain;
        note(drain ? "drained" : "cordoned");
      }
      // A relaunch reserved on the node (a resize's or a move's target) is given up: the job
      // queues again and is placed elsewhere.
      // Targets are held by stopping and pending jobs alone.
      for (int64_t seq : UnfinishedSeqs(pending_seqs_, active_seqs_)) {
        Job& j = jobs_.at(seq);
        if (std::none_of(j.target.begin(), j.target.end(),
                         [&](const RankPlace& p) { return p.node == name; })) {
          continue;
        }
        j.target.clear();
        t.jobs.insert(seq);
      }
      if (drain) {
        for (int64_t seq : jobs_here()) {
          Job& j = jobs_.at(seq);
          if (j.state != JobState::kStarting && j.state != JobState::kRunning) continue;
          BeginStop(
              t, j, "preempted",
              "node " + name + " drained by " + who.name + ": checkpointed, back in the queue", "",
              /*checkpoint_first=*/true, now_ms);
        }
      }
      return view();
    }
    if (action == "uncordon") {
      if (!n.cordoned && !n.draining) return view();
      n.cordoned = false;
      n.draining = false;
      note("uncordoned");
      return view();
    }
    if (action == "remove") {
      // Only a node whose agent is gone: a live agent would register again at once (with the
      // join token it holds) as a new, schedulable node, which is not what removing means.
      if (n.state != NodeState::kLost && n.state != NodeState::kFailed) {
        return Refuse(409, "node " + name + " is " + std::string(NodeStateName(n.state)) +
                               ": drain it, stop its agent and remove it once it is lost (or "
                               "failed)");
      }
      note("removed");
      node_by_credential_.erase(n.credential_hash);
      DropOrdersFor(t, name);
      t.nodes_removed.insert(name);
      for (const std::string& key : network_.ForgetNode(name)) t.meta[key] = "";  // "" = gone
      ++network_version_;
      nodes_.erase(it);
      outbox_.RemoveNode(name);  // a waiting Work call answers 404 now
      return json{{"node", name}, {"removed", true}};
    }
    return Refuse(400, "unknown node action '" + action.substr(0, 32) +
                           "' (expected cordon, drain, uncordon or remove)");
  });
}

}  // namespace tianshu::server
