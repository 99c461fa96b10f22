// The ticker: failure detection, periodic checkpoints, and the scheduling cycle through the
// engine (placements, preemptions, resizes and moves turned into orders).
#include <cmath>

#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

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
    // being judged alone. One walk counts them and finds whether any is past lost_after.
    int live_nodes = 0, quiet_nodes = 0;
    bool any_silent = false;
    for (const auto& [name, n] : nodes_) {
      live_nodes += live(n);
      quiet_nodes += silent_for(n, options_.lost_after_ms / 2);
      any_silent = any_silent || silent_for(n, options_.lost_after_ms);
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
    if (!hold && any_silent) {
      for (auto& [name, n] : nodes_) {
        if (!silent_for(n, options_.lost_after_ms)) continue;
        LoseNode(t, n, NodeState::kLost,
                 "no heartbeat for " + std::to_string((now_ms - n.last_heartbeat_ms) / 1000) + " s",
                 now_ms);
      }
    }
    // Gang admission: a gang not entirely started within scheduler.gang_timeout releases what
    // it holds and goes to the retry path.
    const int64_t gang_timeout_ms = options_.config.gang_timeout_s * 1000;
    auto gang_timed_out = [&](const Job& j) {
      return j.state == JobState::kStarting && gang_timeout_ms > 0 &&
             now_ms - j.starting_since_ms >= gang_timeout_ms;
    };
    // time_limit: a job that has run for its limit (its attempts added up) is checkpointed,
    // stopped and failed, without a retry (Slurm's TIMEOUT).
    auto over_limit = [&](const Job& j) {
      return j.spec.time_limit_s > 0 &&
             (j.state == JobState::kStarting || j.state == JobState::kRunning) &&
             j.RanMs(now_ms) - j.limit_base_ms >= j.spec.time_limit_s * 1000;
    };
    auto checkpoint_due = [&](const Job& j) {
      const int64_t interval_s = j.spec.checkpoint_interval_s > 0
                                     ? j.spec.checkpoint_interval_s
                                     : options_.config.checkpoint_interval_s;
      return j.state == JobState::kRunning && interval_s > 0 &&
             now_ms - j.last_checkpoint_order_ms >= interval_s * 1000;
    };
    // One walk over the active jobs finds those due; each is judged again when its turn comes
    // (a gang that timed out is no longer over its limit), in the order the checks had when
    // each walked every active job.
    std::vector<Job*> due;
    for (int64_t seq : active_seqs_) {
      Job& j = jobs_.at(seq);
      if (gang_timed_out(j) || over_limit(j) || checkpoint_due(j)) due.push_back(&j);
    }
    for (Job* j : due) {
      if (!gang_timed_out(*j)) continue;
      metrics_.gang_timeouts++;
      FailAttempt(t, *j,
                  "gang admission timed out: " + std::to_string(j->started.size()) + " of " +
                      std::to_string(j->placement.size()) + " ranks started within " +
                      std::to_string(options_.config.gang_timeout_s) +
                      " s; the partial gang is released",
                  "", now_ms);
    }
    for (Job* j : due) {
      if (!over_limit(*j)) continue;
      const int64_t ran_ms = j->RanMs(now_ms) - j->limit_base_ms;
      BeginStop(t, *j, "failed",
                "time limit of " + FormatSeconds(static_cast<double>(j->spec.time_limit_s)) +
                    " reached (ran " + FormatSeconds(static_cast<double>(ran_ms) / 1000.0) +
                    "): checkpointed and stopped, not retried",
                "", /*checkpoint_first=*/true, now_ms);
    }
    for (Job* j : due) {  // adds orders only: no state changes
      if (!checkpoint_due(*j)) continue;
      j->last_checkpoint_order_ms = now_ms;
      j->checkpoint_orders++;
      t.jobs.insert(j->seq);
      for (const auto& node : j->Nodes()) {
        wire::WorkOrder o;
        o.id = OrderId(j->id, j->attempt, "ckpt." + std::to_string(j->checkpoint_orders), node);
        o.kind = wire::OrderKind::kCheckpoint;
        o.job_id = j->id;
        o.attempt = j->attempt;
        o.checkpoint = wire::CheckpointOrder{.reason = "periodic"};
        AddOrder(t, node, std::move(o));
      }
    }
    Schedule(t, now_ms);
    NetworkTick(t, now_ms);
    return true;
  });
  // The waiting jobs' new messages, once the cycle's orders are out (later_docs_).
  (void)Mutate<bool>([&](Txn& t) -> ApiResult<bool> {
    t.rewrite = std::exchange(later_docs_, {});
    return true;
  });
}

bool ControlPlane::BeginReshape(Txn& t, Job& j, const std::string& kind,
                                const std::vector<placement::RankSlot>& target,
                                const placement::Outcome& holding, const std::string& reason,
                                model::ClusterState* state, int64_t now_ms) {
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
  // New slots only on nodes that take new work now (the congestion watch may plan on a ledger
  // no cycle has marked since a node failed).
  if (std::any_of(added.begin(), added.end(), [&](const placement::RankSlot& s) {
        auto n = nodes_.find(view_->node_names[static_cast<size_t>(s.node)]);
        return n == nodes_.end() || !TakesNewWork(n->second);
      })) {
    return false;
  }
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
  } else if (kind == "replan") {
    why = "re-plan in place: " + reason + " (checkpoint, then relaunch on the same GPUs)";
  } else {
    ++j.migrations;
    ++metrics_.migrations;
    why = "migration: moving to ";
    std::set<std::string> nodes;
    for (const auto& p : j.target) nodes.insert(p.node);
    why += Join(std::vector<std::string>(nodes.begin(), nodes.end()), ",") + ": " +
           (reason.empty() ? "to make room for waiting work" : reason) +
           " (checkpoint, then relaunch)";
  }
  BeginStop(t, j, "reshape", why, "", /*checkpoint_first=*/true, now_ms);
  return true;
}

void ControlPlane::Schedule(Txn& t, int64_t now_ms) {
  // The ledger's own wake-up (engine::Engine::NextWakeup, as the simulator's): a running job
  // crossing a 2D-LAS threshold while others wait, the next scaling interval of an elastic job.
  const bool woke = ledger_wake_ms_ > 0 && now_ms >= ledger_wake_ms_;
  if (woke) ledger_wake_ms_ = 0;
  if (fence_wake_ms_ > 0 && now_ms >= fence_wake_ms_) schedule_dirty_ = true;
  if (!schedule_dirty_ && !woke) return;
  schedule_dirty_ = false;
  // Elastic growth and moves need a cycle even when nothing waits: at the ledger's wake-up, and
  // after a change (a job that ended may have freed the compact placement a spread job waits
  // for), as the simulator runs one at every event. Before the ledger is built (a restart) the
  // first change builds it, as the options may call for either. Only running jobs reshape: with
  // none (nodes registering at start-up), a change needs no cycle and no ledger rebuild.
  const bool reshape_due = !active_seqs_.empty() && (!ledger_ || ledger_->Reshapes());
  std::vector<Job*> pending;
  fence_wake_ms_ = 0;
  for (int64_t seq : pending_seqs_) {  // no state changes in this loop
    Job& j = jobs_.at(seq);
    if (j.held) continue;
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
  NoteLedgerChanges(t);  // this tick's changes so far
  if (!PrepareLedger(now_ms, pending)) return;
  const model::Topology& topo = view_->topology;
  metrics_.cycles++;
  if (topo.NumNodes() == 0) {
    return;
  }
  // What the server knows is held (the ledger, equal to the records): each decision is carried
  // out only if it still fits this, updated as they are (a preemptor waits until its victims
  // have stopped; they still hold their GPUs).
  model::ClusterState state = ledger_->State();
  bool preemption_in_flight = false;
  bool reshape_in_flight = false;
  overlay_taken_->clear();
  std::map<int64_t, OverlayLoss> kept;  // priced once per attempt, not every cycle
  const estimate::Colocation mode = estimate::ColocationFrom(options_.config.colocation);
  for (int64_t seq : active_seqs_) {  // no state changes in this loop
    Job& j = jobs_.at(seq);
    if (j.state == JobState::kStopping && j.after_stop == "preempted") preemption_in_flight = true;
    if (!j.target.empty()) reshape_in_flight = true;
    const engine::JobRecord* held = ledger_->Find(seq);
    if (options_.config.colocation == "none" || !j.colocated || !held || held->placement.empty()) {
      continue;
    }
    // The share of training each overlaid service takes (the serving model, as in the
    // simulator), for the ledger's co-location check (estimate::OverlayAdmits).
    std::vector<int> gpus;
    for (const auto& slot : held->placement) gpus.push_back(slot.gpu);
    OverlayLoss known = overlay_loss_[seq];
    if (known.attempt != j.attempt) {
      auto cost = estimate::CostOfService(topo, j.spec, gpus);
      known = {j.attempt, cost ? estimate::ForecastOverlay(*cost, mode).training_loss : 0.0};
    }
    kept[seq] = known;
    for (int g : gpus) (*overlay_taken_)[g] += known.loss;
  }
  overlay_loss_ = std::move(kept);
  // Jobs stopped for a resize or a move relaunch on their reserved target first; where it is
  // gone (a node of it failed, was lost or removed), the ledger places them like any waiting
  // job.
  std::vector<int64_t> relaunched;
  std::erase_if(pending, [&](Job* j) {
    if (j->target.empty()) return false;
    auto target = SlotsOf(*view_, j->target);
    if (std::any_of(j->target.begin(), j->target.end(),
                    [&](const RankPlace& p) { return NodeGone(nodes_, p.node); })) {
      target.reset();
    }
    placement::PlacementRequest req = placement::RequestFromJob(j->spec);
    req.ranks = target ? static_cast<int>(target->size()) : 0;
    placement::Outcome o = target ? placement::PlacedOutcome(*target) : placement::Outcome{};
    if (target && placement::Apply(&state, req, o)) {
      StartJob(t, *j, o, topo, now_ms);
      relaunched.push_back(j->seq);
      return true;
    }
    j->message = "the " + j->reshape + "'s target is gone; waiting to be placed again";
    j->target.clear();
    j->reshape.clear();
    t.jobs.insert(j->seq);
    relaunched.push_back(j->seq);
    return false;
  });
  ledger_stats_.synced_jobs += SyncLedger(*ledger_, relaunched, now_ms, /*remember=*/true);
  // The ledger decides (issue 5's cycle: order, admit, place, backfill, preempt, resize, move)
  // and applies its decisions to itself; every job a decision names is handed in again from
  // its record before the next cycle, as the server carried the decision out (or not).
  const double now_s = static_cast<double>(now_ms) / 1000.0;
  engine::CycleResult cycle = ledger_->Cycle(now_s);
  if (auto wake = ledger_->NextWakeup(now_s)) {
    const auto wake_ms = static_cast<int64_t>(std::ceil(*wake * 1000.0));
    if (ledger_wake_ms_ == 0 || wake_ms < ledger_wake_ms_) ledger_wake_ms_ = wake_ms;
  }
  for (const engine::Decision& d : cycle.decisions) {
    ledger_dirty_.insert(engine::DecisionJob(d));
    ledger_entries_.erase(engine::DecisionJob(d));
  }
  std::unordered_map<int64_t, Job*> waiting;
  for (Job* j : pending) {
    if (ledger_->Find(j->seq)) waiting[j->seq] = j;  // not refused by the engine
  }
  std::map<int64_t, std::string> why;
  // This cycle's victims (one round of preemptions at a time): what stopping them frees is
  // reserved for the starts the engine planned on it, which launch once the victims stopped,
  // on the planned slots (Job::target, kind "preemption"), as the simulator starts them at once.
  std::vector<Job*> victims;
  for (const engine::Decision& d : cycle.decisions) {
    const auto* stop = std::get_if<engine::StopJob>(&d);
    if (!stop || stop->reason != engine::StopReason::kPreempted || preemption_in_flight) continue;
    auto it = jobs_.find(stop->id);
    if (it == jobs_.end()) continue;
    Job& v = it->second;
    if (v.state == JobState::kRunning || v.state == JobState::kStarting) victims.push_back(&v);
  }
  model::ClusterState after_victims = state;
  for (Job* v : victims) {
    auto ranks = SlotsOf(*view_, v->placement);
    if (!ranks || v->colocated) continue;
    placement::PlacementRequest req = placement::RequestFromJob(v->spec);
    req.ranks = static_cast<int>(ranks->size());
    (void)placement::Release(&after_victims, req, placement::PlacedOutcome(*ranks));
  }
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
        if (!go->colocated) (void)placement::Apply(&after_victims, req, o);
        StartJob(t, *j, o, topo, now_ms, go->colocated);
        waiting.erase(it);
      } else if (!go->colocated && !victims.empty() && placement::Apply(&after_victims, req, o)) {
        j->target = PlacesOf(*view_, go->ranks);
        j->reshape = "preemption";
        t.jobs.insert(j->seq);
        why[j->seq] =
            "placed where lower-priority jobs are being preempted: starts once they "
            "have checkpointed and stopped";
      } else {
        why[j->seq] =
            "placed where jobs being preempted or moved still hold GPUs: waiting for them to stop";
      }
    } else if (std::holds_alternative<engine::ResizeJob>(d) ||
               std::holds_alternative<engine::MigrateJob>(d)) {
      // One round of resizes and moves at a time: the next waits for this one's relaunches.
      if (reshape_in_flight || preemption_in_flight) continue;
      const auto* resize = std::get_if<engine::ResizeJob>(&d);
      const auto* move = std::get_if<engine::MigrateJob>(&d);
      const auto& ranks = resize ? resize->ranks : move->ranks;
      auto it = jobs_.find(engine::DecisionJob(d));
      if (it == jobs_.end() || it->second.colocated) continue;
      auto held = SlotsOf(*view_, it->second.placement);
      if (!held || held->empty()) continue;
      reshaped |=
          BeginReshape(t, it->second, resize ? "resize" : "migrate", ranks,
                       placement::PlacedOutcome(*held), move ? move->reason : "", &state, now_ms);
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
  // Where no node takes new work, the waiting jobs say so instead of "waiting for capacity"
  // (a fixed text: node counts in it would rewrite every waiting job's record as they change).
  const bool no_node = std::none_of(nodes_.begin(), nodes_.end(),
                                    [](const auto& n) { return TakesNewWork(n.second); });
  for (auto& [seq, j] : waiting) {
    std::string w;
    if (auto it = why.find(seq); it != why.end()) {
      w = it->second;
    } else {
      const engine::JobRecord* r = ledger_->Find(seq);
      metrics_.placement_outcomes["does-not-fit-now"]++;
      w = "waiting for capacity" +
          (r && r->spec.max_leaves != 0
               ? " within topology.leaves: " + model::LeafBoundName(r->spec.max_leaves)
               : std::string()) +
          (r && !r->reason.empty() ? ": " + r->reason : std::string());
      if (no_node) {
        w = "waiting: no node takes new work (each is failed, lost, cordoned or being probed; "
            "tianshu nodes says which)";
      }
      if (!victims.empty()) w = "waiting while lower-priority jobs checkpoint and stop";
      if (reshaped || reshape_in_flight) w = "waiting while running jobs are resized or moved";
    }
    if (w != j->message) {
      j->message = w;
      if (!t.jobs.contains(j->seq)) later_docs_.insert(j->seq);  // else written in this change
    }
  }
  metrics_.cycle_seconds.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace tianshu::server
