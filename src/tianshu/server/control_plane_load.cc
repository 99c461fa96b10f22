// Rebuilding the control plane from its store at start, and quarantining what cannot be read.
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

namespace {

// Applies one progress row (see ProgressRow) to the job; false if the row cannot be read.
bool ApplyProgress(Job& j, const std::string& key, const std::string& value) {
  if (key.size() < 3 || key[1] != '/') return false;
  const std::string rest = key.substr(2);
  int64_t rank = 0;
  // The highest rank the attempt has (a job that lost its placement to a retry keeps its rows
  // until its next attempt starts, which deletes them).
  const int64_t ranks =
      j.placement.empty() ? INT32_MAX : static_cast<int64_t>(j.placement.size()) - 1;
  switch (key[0]) {
    case 'a':
      j.launch_accepted.insert(rest);
      return true;
    case 'r':
      j.seen_reports.insert(rest);
      return true;
    case 's':
      if (!ParseInt64(rest, &rank) || rank < 0 || rank > ranks) {
        return false;  // a rank the attempt does not have
      }
      j.started.insert(static_cast<int>(rank));
      return true;
    case 'x': {
      const size_t space = value.find(' ');
      int64_t code = 0, signal = 0;
      if (!ParseInt64(rest, &rank) || rank < 0 || rank > ranks || space == std::string::npos ||
          !ParseInt64(value.substr(0, space), &code) ||
          !ParseInt64(value.substr(space + 1), &signal) || code < INT32_MIN || code > INT32_MAX ||
          signal < 0 || signal > INT32_MAX) {
        return false;
      }
      j.exited[static_cast<int>(rank)] = {static_cast<int>(code), static_cast<int>(signal)};
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

Status ControlPlane::Load(int64_t now_ms) {
  auto st = store_->Load(options_.events_kept);
  if (!st) return std::unexpected(st.error());
  // Per-rank progress stored inside job documents (schema v2) moves to progress rows, written
  // once below; the documents lose it on their next write.
  Change legacy;
  std::vector<int64_t> legacy_seqs;  // their records are rewritten without it, once
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
    j.state = ParseJobState(d.value("state", "pending")).value_or(JobState::kPending);
    const bool finished = IsTerminal(j.state);
    std::optional<model::JobSpec> reused;
    if (options_.earlier) reused = options_.earlier->ParsedSpec(j.seq, j.format, j.text);
    ++loaded_.jobs;
    if (reused) {  // parsed and validated by the earlier load
      j.spec = std::move(*reused);
      ++loaded_.specs_reused;
    } else if (model::ValidationResult v = ValidateStoredSpec(j.id, j.format, j.text);
               !v.document || v.document->kind != model::DocumentKind::kJob) {
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
    const bool legacy_record = d.contains("started") || d.contains("exited") ||
                               d.contains("launch_accepted") || d.contains("seen_reports");
    if (legacy_record) legacy_seqs.push_back(j.seq);
    for (int rank : j.started) legacy.progress.push_back({j.id, j.attempt, StartedKey(rank), ""});
    for (const auto& [rank, e] : j.exited) {
      legacy.progress.push_back({j.id, j.attempt, ExitedKey(rank), ExitedValue(e.first, e.second)});
    }
    for (const auto& node : j.launch_accepted) {
      legacy.progress.push_back({j.id, j.attempt, AcceptedKey(node), ""});
    }
    for (const auto& key : j.seen_reports) {
      legacy.progress.push_back({j.id, j.attempt, SeenKey(key), ""});
    }
    j.target = PlacesFromJson(d.value("target", json::array()));
    j.reshape = d.value("reshape", "");
    j.resizes = d.value("resizes", 0);
    j.migrations = d.value("migrations", 0);
    if (const json r = d.value("replan", json::object());
        r.is_object() && r.value("algorithm", json()).is_string() &&
        (r["algorithm"] == "ring" || r["algorithm"] == "tree")) {
      j.replan.algorithm = r["algorithm"].get<std::string>();
      for (const json& n : r.value("nodes", json::array())) {
        if (n.is_string()) j.replan.nodes.push_back(n.get<std::string>());
      }
    }
    j.attained_gpu_s = d.value("attained_gpu_s", 0.0);
    j.run_started_ms = d.value("run_started_ms", j.updated_ms);
    j.run_gpus = d.value("run_gpus", static_cast<int>(j.placement.size()));
    j.standing_since_ms = d.value("standing_since_ms", int64_t{0});
    for (const auto& r : d.value("runs", json::array())) {
      if (r.is_array() && r.size() == 3 && r[0].is_number_integer() && r[1].is_number_integer() &&
          r[2].is_number()) {
        j.runs.push_back({r[0].get<int64_t>(), r[1].get<int64_t>(), r[2].get<double>()});
      }
    }
    j.failed_rank = d.value("failed_rank", -1);
    j.limit_base_ms = d.value("limit_base_ms", int64_t{0});
    j.ended_runs_ms = d.value("ended_runs_ms", int64_t{0});
    j.colocated = d.value("colocated", false);
    j.master_port = d.value("master_port", 0);
    j.fence_nodes = d.value("fence_nodes", std::map<std::string, int>{});
    j.fence_until_ms = d.value("fence_until_ms", int64_t{0});
    j.held = d.value("held", false);
    j.eligible_ms = d.value("eligible_ms", int64_t{0});
    j.batch = d.value("batch", false);
    j.array_id = d.value("array_id", "");
    j.array_index = d.value("array_index", -1);
    j.array_count = d.value("array_count", 0);
    j.idempotency_key = d.value("idempotency_key", "");
    j.owner = d.value("owner", "admin");  // jobs from before identities: the admin's
    j.run_as = d.value("run_as", "");
    if (!j.idempotency_key.empty()) idempotency_keys_[j.owner + "/" + j.idempotency_key] = j.seq;
    if (!j.fence_nodes.empty() && !finished) fenced_seqs_.insert(j.seq);
    jobs_.emplace(j.seq, std::move(j));
  }
  for (const ProgressRow& p : st->progress) {
    auto seq = ParseJobId(p.job_id);
    auto it = seq ? jobs_.find(*seq) : jobs_.end();
    if (it == jobs_.end() || it->second.attempt != p.attempt) continue;  // of an ended attempt
    if (!ApplyProgress(it->second, p.key, p.value)) {
      skipped_records_.push_back("progress of " + p.job_id + ": unreadable row " + p.key);
    }
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
    n.data_address = d.value("data_address", "");
    n.data_interface = d.value("data_interface", "");
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
    n.cordoned = d.value("cordoned", false);
    n.draining = d.value("draining", false);
    if (!n.credential_hash.empty()) node_by_credential_[n.credential_hash] = n.name;
    n.last_heartbeat_ms = now_ms;
    // Agents retry a lost server with a backoff of up to 30 s: after a restart no node known
    // before it is declared lost until its agent has had the time to come back.
    n.grace_until_ms = now_ms + std::max(options_.lost_after_ms, options_.restart_grace_ms);
    outbox_.SetAgent(n.name, n.agent_id);
    nodes_.emplace(n.name, std::move(n));
  }
  for (const OrderRow& row : st->orders) {
    if (row.status != kOutstanding) continue;
    auto o = wire::ParseWorkOrder(row.doc);
    if (!o) {  // the job it belongs to is reconciled from its agents' reports
      skipped_records_.push_back("order " + row.id + ": " + o.error().message);
      continue;
    }
    auto text = std::make_shared<const std::string>(wire::OrderText(*o));
    const uint64_t seq = next_order_seq_++;
    outbox_.Add(row.node, {.id = row.id, .seq = seq, .ticket = 0, .text = text});
    orders_[row.id] = {*o, row.node, seq, std::move(text)};
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
  for (const std::string& key : network_.Load(st->meta)) {
    skipped_records_.push_back(key + ": unreadable measured bandwidth (probed again)");
  }
  if (auto it = st->meta.find("next_job_seq"); it != st->meta.end()) {
    int64_t v = 0;
    if (ParseInt64(it->second, &v)) next_job_seq_ = std::max(next_job_seq_, v);
  }
  if (options_.server_id.empty()) {
    if (auto it = st->meta.find("server_id"); it != st->meta.end()) {
      options_.server_id = it->second;
    } else if (!options_.read_only) {
      // Unique even for two servers started in the same millisecond on one host: jobs'
      // rendezvous ports are drawn from it (RendezvousPort), and two servers with one id drew
      // the same port for their first job.
      options_.server_id = "s-" + std::to_string(now_ms) + "-" + NewToken().substr(0, 8);
      Change c;
      c.meta["server_id"] = options_.server_id;
      if (auto s = store_->Write({&c}); !s) return s;
    }
  }
  for (int64_t seq : legacy_seqs) {
    const Job& j = jobs_.at(seq);
    legacy.jobs.push_back({j.id, j.seq, std::string(JobStateName(j.state)), JobDoc(j)});
  }
  if (!options_.read_only && (!legacy.jobs.empty() || !legacy.progress.empty())) {
    if (auto s = store_->Write({&legacy}); !s) return s;
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
  active_seqs_.clear();
  pending_seqs_.clear();
  // As if each job came from a terminal state: IndexState then only inserts.
  ended_.clear();
  for (const auto& [seq, j] : jobs_) {
    IndexState(seq, JobState::kSucceeded, j.state);
    if (IsTerminal(j.state)) ++ended_[j.spec.queue][EndedIndex(j.state)];
  }
  return Ok();
}

std::optional<model::JobSpec> ControlPlane::ParsedSpec(int64_t seq, const std::string& format,
                                                       const std::string& text) const {
  std::lock_guard l(mu_);
  auto it = jobs_.find(seq);
  if (it == jobs_.end() || it->second.format != format || it->second.text != text) {
    return std::nullopt;
  }
  // A spec that did not validate was quarantined when its job was unfinished: validated again.
  // A finished job's that did not validate was left empty, and is reused empty, as a fresh
  // load would leave it (a finished job never runs again).
  if (it->second.format == "unreadable") return std::nullopt;
  for (const auto& [q, why] : quarantined_) {
    if (q == seq) return std::nullopt;
  }
  return it->second.spec;
}

Status ControlPlane::Quarantine(int64_t now_ms) {
  if (quarantined_.empty() || options_.read_only) return Ok();
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

}  // namespace tianshu::server
