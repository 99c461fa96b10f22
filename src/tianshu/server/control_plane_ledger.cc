// The scheduling ledger: one long-lived engine::Engine over the registered nodes, kept equal to the
// job records by handing in again only the jobs a change touched (control_plane.h says when it
// is rebuilt instead). A cycle then costs what changed, not the size of the queue.
#include <cmath>
#include <cstdio>

#include "tianshu/base/log.h"
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

namespace {

double Seconds(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

bool Near(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)); }

std::vector<engine::JobId> Sorted(std::span<const engine::JobId> ids) {
  std::vector<engine::JobId> out(ids.begin(), ids.end());
  std::sort(out.begin(), out.end());
  return out;
}

// Where the indexes SetState and the fence code keep differ from a walk over every job ("" when
// they agree): pending, holding a placement, ended per terminal state, fenced and unfinished.
std::string IndexDiff(const std::map<int64_t, Job>& jobs, const std::set<int64_t>& pending,
                      const std::set<int64_t>& active,
                      const std::map<std::string, std::array<int64_t, 3>>& ended,
                      const std::set<int64_t>& fenced) {
  std::set<int64_t> p, a, f;
  std::map<std::string, std::array<int64_t, 3>> e;
  for (const auto& [queue, counts] : ended) e[queue];  // a queue kept at zero compares equal
  for (const auto& [seq, j] : jobs) {
    if (j.state == JobState::kPending) p.insert(seq);
    if (HoldsPlacement(j.state)) a.insert(seq);
    if (IsTerminal(j.state)) ++e[j.spec.queue][EndedIndex(j.state)];
    if (!j.fence_nodes.empty() && !IsTerminal(j.state)) f.insert(seq);
  }
  if (p != pending) return "the pending index differs from the records";
  if (a != active) return "the index of jobs holding a placement differs from the records";
  if (e != ended) return "the ended jobs counted per queue and state differ from the records";
  if (f != fenced) return "the fenced jobs differ from the unfinished records with fence nodes";
  return "";
}

}  // namespace

ControlPlane::LedgerStats ControlPlane::Ledger() const {
  std::lock_guard l(mu_);
  return ledger_stats_;
}

void ControlPlane::NoteLedgerChanges(const Txn& t) {
  ledger_dirty_.insert(t.jobs.begin(), t.jobs.end());
  if (!t.nodes.empty() || !t.nodes_removed.empty()) ledger_nodes_touched_ = nominal_dirty_ = true;
}

// The nodes a cluster view is built of: every registered node, in name order. A node that
// cannot run work (failed, lost) is in it, marked as taking nothing new (MarkSchedulable), so
// that what its jobs still hold elsewhere while they stop stays held, and its loss and return
// are marks, not rebuilds.
std::vector<NodeHardware> ControlPlane::ViewMembers() const {
  std::vector<NodeHardware> hw;
  hw.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) hw.push_back({name, &n.hardware});
  return hw;
}

int ControlPlane::MarkSchedulable(engine::Engine& e) const {
  int marked = 0;
  for (int i = 0; i < view_->topology.NumNodes(); ++i) {
    const bool takes = TakesNewWork(nodes_.at(view_->node_names[static_cast<size_t>(i)]));
    if (e.State().Healthy(i) != takes) marked += e.SetSchedulable(i, takes).has_value();
  }
  return marked;
}

ControlPlane::LedgerEntry ControlPlane::EntryOf(const Job& j, int64_t now_ms) const {
  LedgerEntry e;
  if (IsTerminal(j.state) || j.held || !view_) return e;
  e.attained_gpu_s = j.attained_gpu_s;
  e.standing_since_ms = j.standing_since_ms;
  if (j.state == JobState::kPending) {
    // Fenced jobs wait for their lease; one stopped for a resize or a move relaunches on its
    // reserved target (Schedule), and is handed in only where that target is gone.
    if (!j.fence_nodes.empty() || !j.target.empty()) return e;
    e.kind = LedgerEntry::kQueued;
    e.eligible_ms = j.EligibleMs();
    e.batch = j.batch;
    // The consolidation wait counts from here, as the simulator counts it: a requeued job
    // (preempted, retried) waits from its requeue, not from its submission.
    e.queued_since_ms = j.submitted_ms;
    for (auto h = j.history.rbegin(); h != j.history.rend(); ++h) {
      if (h->to == JobStateName(JobState::kPending)) {
        e.queued_since_ms = std::max(e.queued_since_ms, h->time_ms);
        break;
      }
    }
    return e;
  }
  auto ranks = SlotsOf(*view_, j.placement);
  if (!ranks) {
    // A node of it was removed while the job stops: that node's share goes with it, the rest
    // stays held until the ranks there have stopped.
    std::vector<RankPlace> registered = j.placement;
    std::erase_if(registered, [&](const RankPlace& p) { return !view_->index.contains(p.node); });
    ranks = SlotsOf(*view_, registered);
    if (!ranks) return e;
  }
  if (j.state == JobState::kStopping && !j.target.empty()) {
    // Stopping for a resize or a move: it holds its target too, reserved for the relaunch.
    if (auto target = SlotsOf(*view_, j.target)) {
      for (const auto& slot : AddedSlots(*ranks, *target)) ranks->push_back(slot);
    }
  }
  if (ranks->empty()) return e;
  e.kind = LedgerEntry::kHolding;
  e.ranks = std::move(*ranks);
  // The current run accrues from its start (the elastic interval counts from it too); from
  // now while no rank has started, so the wait for the launch is never charged as service.
  e.run_start_ms = j.run_started_ms > 0 ? j.run_started_ms : now_ms;
  e.colocated = j.colocated;
  return e;
}

int ControlPlane::SyncLedger(engine::Engine& e, const std::vector<int64_t>& seqs, int64_t now_ms,
                             bool remember) {
  int entered = 0;
  std::vector<std::pair<Job*, LedgerEntry>> enter;
  for (int64_t seq : seqs) {
    auto it = jobs_.find(seq);
    LedgerEntry want = it == jobs_.end() ? LedgerEntry{} : EntryOf(it->second, now_ms);
    if (remember) {
      auto known = ledger_entries_.find(seq);
      if (known != ledger_entries_.end() ? known->second == want
                                         : want.kind == LedgerEntry::kNone && !e.Find(seq)) {
        continue;  // handed in as it is now (the change was elsewhere in the record)
      }
      ledger_entries_.erase(seq);
    }
    if (e.Find(seq)) (void)e.Withdraw(seq);
    if (want.kind != LedgerEntry::kNone) enter.emplace_back(&it->second, std::move(want));
  }
  // What jobs hold first, in job order (as a replay enters them), then the queue.
  std::stable_sort(enter.begin(), enter.end(), [](const auto& a, const auto& b) {
    return a.second.kind == LedgerEntry::kHolding && b.second.kind != LedgerEntry::kHolding;
  });
  for (auto& [j, want] : enter) {
    // Queued from when it became eligible (a released job from its release), in its batch.
    if (!e.Apply(engine::SubmitJob{.id = j->seq, .spec = j->spec, .batch = j->batch},
                 Seconds(j->EligibleMs()))) {
      if (want.kind == LedgerEntry::kQueued) j->message = "the engine refused the job";
      continue;
    }
    if (want.kind == LedgerEntry::kHolding &&
        !e.Restore(j->seq, want.ranks, Seconds(want.run_start_ms), want.colocated)) {
      // What it holds does not fit what the ledger knows (an overlay without room): it is left
      // out, and tried again at the next cycle.
      (void)e.Withdraw(j->seq);
      if (remember) ledger_dirty_.insert(j->seq);
      continue;
    }
    (void)e.SetAttainedService(j->seq, want.attained_gpu_s);
    if (want.standing_since_ms > 0) {
      (void)e.SetStandingSince(j->seq, Seconds(want.standing_since_ms));
    }
    if (want.kind == LedgerEntry::kQueued) {
      (void)e.SetPendingSince(j->seq, Seconds(want.queued_since_ms));
    }
    if (remember) ledger_entries_[j->seq] = std::move(want);
    ++entered;
  }
  return entered;
}

Result<std::unique_ptr<engine::Engine>> ControlPlane::ReplayLedger(int64_t now_ms, bool remember) {
  const model::Topology& topo = view_->topology;
  engine::EngineOptions options = engine_options_;
  // As in the simulator: the speed model predicts how much slower a spread placement runs; a
  // job it cannot price (no model) is judged by its shape (0: unknown to the engine).
  options.placement_slowdown = [perf = perf_.get()](const model::JobSpec& spec,
                                                    std::span<const placement::RankSlot> ranks) {
    return estimate::PredictedSlowdown(*perf, spec, ranks).value_or(0.0);
  };
  // What a move costs a job beyond the restart: the checkpoint it writes before it stops.
  options.checkpoint_write_s = [perf = perf_.get()](const model::JobSpec& spec,
                                                    std::span<const placement::RankSlot> ranks) {
    return estimate::PredictedCheckpointWriteS(*perf, spec, ranks);
  };
  if (options_.config.colocation != "none") {
    // An overlay is taken only where the serving model (estimate/serving.h, as in the
    // simulator) admits it next to the services already there (overlay_taken_).
    const estimate::Colocation mode = estimate::ColocationFrom(options_.config.colocation);
    options.colocation_fits = [&topo, mode, taken = overlay_taken_](
                                  const model::JobSpec& spec,
                                  std::span<const placement::RankSlot> ranks) {
      std::vector<int> gpus;
      for (const auto& s : ranks) gpus.push_back(s.gpu);
      auto cost = estimate::CostOfService(topo, spec, gpus);
      if (!cost) return true;  // nothing to price (no model or rate): the budget decides
      return estimate::OverlayAdmits(estimate::ForecastOverlay(*cost, mode), gpus, [&](int g) {
        auto it = taken->find(g);
        return it == taken->end() ? 0.0 : it->second;
      });
    };
  }
  auto e = engine::Engine::Create(topo, options);
  if (!e) return std::unexpected(e.error());
  (void)MarkSchedulable(**e);  // degraded, cordoned, probed nodes keep their work, get nothing new
  (*e)->SetRuntimeHistory(runtimes_);
  std::vector<int64_t> seqs(active_seqs_.begin(), active_seqs_.end());
  seqs.insert(seqs.end(), pending_seqs_.begin(), pending_seqs_.end());
  std::sort(seqs.begin(), seqs.end());
  SyncLedger(**e, seqs, now_ms, remember);
  return e;
}

bool ControlPlane::PrepareLedger(int64_t now_ms, const std::vector<Job*>& pending) {
  auto tell = [&](const std::string& why) {
    for (Job* j : pending) j->message = why;
  };
  auto rebuild = [&]() -> bool {
    // The replay remembers each job's entry (and which to try again at the next cycle).
    ledger_entries_.clear();
    ledger_dirty_.clear();
    auto e = ReplayLedger(now_ms, /*remember=*/true);
    if (!e) {
      ledger_.reset();
      tell("engine: " + e.error().message);
      return false;
    }
    ledger_ = std::move(*e);
    runtimes_in_ledger_ = runtimes_added_;
    ++ledger_stats_.rebuilds;
    return true;
  };
  std::vector<NodeHardware> hw;
  if (ledger_nodes_touched_ && ledger_ && view_ && !ledger_nodes_changed_) {
    // A node's record changed: the view stands while its nodes and their hardware do.
    hw = ViewMembers();
    ledger_nodes_changed_ =
        hw.size() != view_members_.size() ||
        !std::equal(hw.begin(), hw.end(), view_members_.begin(), [](const auto& a, const auto& b) {
          return a.name == b.first && *a.hardware == b.second;
        });
    if (!ledger_nodes_changed_) ledger_stats_.node_marks += MarkSchedulable(*ledger_);
  }
  ledger_nodes_touched_ = false;
  if (ledger_nodes_changed_ || !ledger_ || !view_) {
    hw = ViewMembers();
    RefreshNominalView();
    // Placement sees the measured leaves (docs/network.md), where probes found any.
    std::map<std::string, std::string> leaves = MeasuredLeavesNow(now_ms);
    auto view = BuildClusterView(hw, &leaves);
    if (!view) {
      tell("cluster view: " + view.error().message);
      return false;
    }
    view_leaves_ = std::move(leaves);
    view_members_.clear();
    for (const NodeHardware& n : hw) view_members_.emplace_back(n.name, *n.hardware);
    ledger_.reset();  // its options point into the old view and speed model
    view_ = std::move(*view);
    perf_ = std::make_unique<estimate::PerfModel>(view_->topology, options_.config);
    ledger_nodes_changed_ = false;
    if (!rebuild()) return false;
  } else {
    // Jobs still launching: their run (and its service) starts when their first rank does.
    for (int64_t seq : active_seqs_) {
      const Job& j = jobs_.at(seq);
      if (j.run_started_ms == 0 && HoldsPlacement(j.state)) ledger_dirty_.insert(seq);
    }
    const std::vector<int64_t> seqs(ledger_dirty_.begin(), ledger_dirty_.end());
    ledger_dirty_.clear();
    ledger_stats_.synced_jobs += SyncLedger(*ledger_, seqs, now_ms, /*remember=*/true);
  }
  if (runtimes_in_ledger_ != runtimes_added_) {
    ledger_->SetRuntimeHistory(runtimes_);
    runtimes_in_ledger_ = runtimes_added_;
  }
  if (options_.verify_ledger) {
    const std::string bad = IndexDiff(jobs_, pending_seqs_, active_seqs_, ended_, fenced_seqs_);
    if (!bad.empty()) {
      ++ledger_stats_.mismatches;
      ledger_stats_.last_mismatch = bad;
      LogError("ledger", bad);
    }
    auto fresh = ReplayLedger(now_ms, /*remember=*/false);
    const std::string diff = fresh ? CompareLedgers(*ledger_, **fresh, now_ms) : "";
    if (!diff.empty()) {
      ++ledger_stats_.mismatches;
      ledger_stats_.last_mismatch = diff;
      LogError("ledger", "the ledger differs from the records (" + diff + "); rebuilt");
      return rebuild();
    }
  }
  return true;
}

std::string ControlPlane::CompareLedgers(const engine::Engine& a, const engine::Engine& b,
                                         int64_t now_ms) const {
  const double now_s = Seconds(now_ms);
  const model::Topology& topo = a.Topology();
  for (int g = 0; g < topo.NumGpus(); ++g) {
    if (a.State().GpuFreeMilli(g) != b.State().GpuFreeMilli(g)) {
      return "GPU " + std::to_string(g) + " free " + std::to_string(a.State().GpuFreeMilli(g)) +
             " vs " + std::to_string(b.State().GpuFreeMilli(g));
    }
    if (a.OverlayMilli(g) != b.OverlayMilli(g)) return "GPU " + std::to_string(g) + " overlay";
  }
  for (int n = 0; n < topo.NumNodes(); ++n) {
    if (a.State().Healthy(n) != b.State().Healthy(n))
      return "node " + std::to_string(n) + " health";
  }
  auto ids = [](const std::vector<engine::JobId>& v) {
    std::string s;
    for (engine::JobId id : v) s += (s.empty() ? "" : ",") + std::to_string(id);
    return s;
  };
  const auto pa = Sorted(a.Pending()), pb = Sorted(b.Pending());
  if (pa != pb) return "queue [" + ids(pa) + "] vs [" + ids(pb) + "]";
  const auto ra = Sorted(a.Running()), rb = Sorted(b.Running());
  if (ra != rb) return "holding [" + ids(ra) + "] vs [" + ids(rb) + "]";
  for (const std::vector<engine::JobId>* list : {&pa, &ra}) {
    for (engine::JobId id : *list) {
      const engine::JobRecord& x = *a.Find(id);
      const engine::JobRecord& y = *b.Find(id);
      const std::string job = "job " + jobs_.at(id).id + ": ";
      if (x.placement != y.placement) return job + "placement";
      if (x.colocated != y.colocated) return job + "co-location";
      if (x.request.ranks != y.request.ranks) return job + "ranks";
      if (!Near(x.submit_s, y.submit_s)) return job + "submit time";
      if (x.batch_key != y.batch_key) return job + "batch";
      if (!Near(x.start_s, y.start_s)) return job + "run start";
      if (x.state == engine::JobState::kPending && !Near(x.pending_since_s, y.pending_since_s)) {
        return job + "queued since";
      }
      if (!Near(engine::ServiceAt(x, now_s), engine::ServiceAt(y, now_s))) {
        return job + "service " + std::to_string(engine::ServiceAt(x, now_s)) + " vs " +
               std::to_string(engine::ServiceAt(y, now_s));
      }
    }
  }
  return "";
}

}  // namespace tianshu::server
