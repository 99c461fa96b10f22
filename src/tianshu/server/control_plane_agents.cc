// The agents' side of the API: registration (reconciling what runs), heartbeats, the work
// channel and reports.
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

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
    outbox_.SetAgent(req.node, req.agent_id);
    n.address = req.address;
    n.data_address = req.data_address;
    n.data_interface = req.data_interface;
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
      for (int64_t seq : ActiveSeqs()) {  // starting, running, stopping: not every job kept
        Job& j = jobs_.at(seq);
        if (!j.OnNode(n.name)) continue;
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
    return ApplyHeartbeat(t, node, hb, now_ms);
  });
}

wire::HeartbeatResponse ControlPlane::ApplyHeartbeat(Txn& t, const std::string& node,
                                                     const wire::Heartbeat& hb, int64_t now_ms) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.agent_id != hb.agent_id ||
      it->second.state == NodeState::kLost) {
    return wire::HeartbeatResponse{.reregister = true};
  }
  NodeEntry& n = it->second;
  n.last_heartbeat_ms = now_ms;
  // A link whose rate changed makes the node's pairs due again: at most once a minute, so a
  // flapping port neither floods the events nor holds the probe slot.
  if (auto changed = LinkRateChanges(n.last.network, hb.network);
      !changed.empty() && now_ms - n.links_changed_ms >= kLinkChangeQuietMs) {
    n.links_changed_ms = now_ms;
    if (changed.size() > 4) {
      const size_t more = changed.size() - 4;
      changed.resize(4);
      changed.push_back("and " + std::to_string(more) + " more");
    }
    NetworkEvent(t, node,
                 "network: " + node + ": " + Join(changed, ", ") +
                     (options_.config.network.probes ? "; its pairs will be probed again" : ""),
                 now_ms);
  }
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
  return wire::HeartbeatResponse{.reregister = false,
                                 .pending_orders = static_cast<int64_t>(outbox_.Count(node))};
}

ApiResult<std::string> ControlPlane::Work(const std::string& node, const std::string& agent_id,
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
  // Without the control plane's lock (OrderOutbox): the held requests a commit wakes are
  // answered at once, not one at a time between scheduling cycles.
  using Result = OrderOutbox::Batch::Result;
  OrderOutbox::Batch batch = outbox_.Take(node, agent_id, after_seq, wait_ms);
  switch (batch.result) {
    case Result::kUnknownNode:
      return Refuse(404, "unknown node " + node + ": register first");
    case Result::kOtherAgent:
      return Refuse(409, "agent " + agent_id + " is not the registered agent of node " + node +
                             ": register again");
    case Result::kRemoved:
      return Refuse(404, "node " + node + " was removed");
    case Result::kOk:
      break;
  }
  const std::string cursor = order_epoch_ + "." + std::to_string(batch.last_seq);
  std::vector<const std::string*> parts;
  parts.reserve(batch.texts.size());
  for (const auto& t : batch.texts) parts.push_back(t.get());
  return wire::WorkBatchText(parts, cursor);
}

ApiResult<wire::ReportsAnswer> ControlPlane::Reports(const std::string& node,
                                                     const wire::ReportBatch& batch,
                                                     int64_t now_ms) {
  return Mutate<wire::ReportsAnswer>([&](Txn& t) -> ApiResult<wire::ReportsAnswer> {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return Refuse(404, "unknown node " + node + ": register first");
    if (it->second.agent_id != batch.agent_id) {
      return Refuse(409, "agent " + batch.agent_id + " is not the registered agent of node " +
                             node + ": register again");
    }
    for (const auto& r : batch.reports) ApplyReport(t, node, r, now_ms);
    wire::ReportsAnswer answer{.accepted = static_cast<int64_t>(batch.reports.size())};
    if (batch.heartbeat) answer.heartbeat = ApplyHeartbeat(t, node, *batch.heartbeat, now_ms);
    return answer;
  });
}

}  // namespace tianshu::server
