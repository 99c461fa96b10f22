// The congestion watch (issue 18, docs/network.md): a running job's step time, from its
// progress file, against the baseline it set on its placement; the congestion signs its nodes'
// counters show; and, when both say the network slows it, the decision, priced with the cost
// model, between re-planning its collectives, moving it, and keeping it.
#include <cmath>
#include <cstdio>

#include "tianshu/comm/cost_model.h"
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

namespace {

// A re-plan in place must save at least this share of the job's all-reduce time.
constexpr double kMinReplanGain = 0.1;

std::string Num(double v, const char* fmt = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

void ControlPlane::RefreshNominalView() {
  if (!nominal_dirty_ && nominal_view_) return;
  if (auto v = BuildClusterView(ViewMembers())) {
    nominal_view_ = std::move(*v);
    nominal_dirty_ = false;
  }
}

std::string ControlPlane::CongestionEvidence(const std::vector<std::string>& nodes) const {
  // What a host sees of a congested fabric: TCP retransmitting (a socket fabric such as gloo's),
  // an RDMA port waiting for credits (port_xmit_wait), packets dropped, or a link at line rate.
  // 1% of segments: a loaded host's TCP retransmits under 1% (0.84% seen on this project's
  // 2-core test machine with nothing shaped); a dropping port sends it far past that.
  constexpr double kRetransShare = 0.01, kMinRetransPerS = 10, kLineRate = 0.9;
  std::vector<std::string> signs;
  for (const auto& name : nodes) {
    auto it = nodes_.find(name);
    if (it == nodes_.end() || !it->second.last.network) continue;
    const wire::NetworkSample& s = *it->second.last.network;
    if (s.window_ms <= 0) continue;
    if (s.tcp_retrans_per_s >= kMinRetransPerS &&
        s.tcp_retrans_per_s >= kRetransShare * std::max(1.0, s.tcp_out_segs_per_s)) {
      signs.push_back(name + ": " +
                      Num(100 * s.tcp_retrans_per_s / std::max(1.0, s.tcp_out_segs_per_s), "%.2g") +
                      "% of TCP segments retransmitted");
    }
    for (const wire::LinkSample& l : s.links) {
      if (l.xmit_wait_per_s > 0) {
        signs.push_back(name + " " + l.name + ": port_xmit_wait " + Num(l.xmit_wait_per_s) + "/s");
      }
      if (l.drops_per_s >= 1) {
        signs.push_back(name + " " + l.name + ": " + Num(l.drops_per_s) + " drops/s");
      }
      const double bits = 8 * std::max(l.rx_bytes_per_s, l.tx_bytes_per_s);
      if (l.speed_bps > 0 && bits >= kLineRate * static_cast<double>(l.speed_bps)) {
        signs.push_back(name + " " + l.name + " at " +
                        Num(100 * bits / static_cast<double>(l.speed_bps), "%.0f") +
                        "% of its line rate");
      }
    }
  }
  return Join(signs, "; ");
}

void ControlPlane::WatchCongestion(Txn& t, int64_t now_ms) {
  const model::NetworkConfig& c = options_.config.network;
  std::erase_if(watch_, [&](const auto& kv) {
    auto it = jobs_.find(kv.first);
    return it == jobs_.end() || !HoldsPlacement(it->second.state);
  });
  for (int64_t seq : ActiveSeqs()) {
    Job& j = jobs_.at(seq);
    if (j.state != JobState::kRunning || j.colocated || !j.target.empty()) continue;
    const std::vector<std::string> nodes = j.Nodes();
    if (nodes.size() < 2) continue;  // no fabric between its ranks
    const wire::JobProgress* prog = nullptr;
    for (const auto& name : nodes) {
      auto n = nodes_.find(name);
      if (n == nodes_.end()) continue;
      for (const auto& p : n->second.last.progress) {
        if (p.job_id == j.id && p.attempt == j.attempt && (!prog || p.rank < prog->rank)) {
          prog = &p;
        }
      }
    }
    JobWatch& w = watch_[seq];
    if (w.attempt != j.attempt) w = JobWatch{.attempt = j.attempt};
    if (!prog || prog->samples <= 0 || prog->step_time_s <= 0) continue;
    if (w.first_progress_ms == 0) w.first_progress_ms = now_ms;
    if (prog->samples < 5) continue;
    // A stalled job writes no line: a step still running counts as what it has run beyond the
    // report's own delay (two heartbeats).
    const double since_last = static_cast<double>(now_ms - prog->updated_ms) / 1000.0 -
                              2.0 * static_cast<double>(options_.heartbeat_interval_ms) / 1000.0;
    w.current_s = std::max(prog->step_time_s, since_last);
    // The baseline: the best median this attempt has shown (once 5 steps were timed), so that
    // slow warm-up steps set no low bar and a fast stretch sets the healthy speed.
    if (w.baseline_s <= 0 || w.current_s < w.baseline_s) w.baseline_s = w.current_s;
    const std::string evidence = CongestionEvidence(nodes);
    if (w.current_s < c.step_time_growth * w.baseline_s || evidence.empty()) {
      w.slow_since_ms = 0;
      continue;
    }
    // Seen at two heartbeats at least: one slow step next to a burst of retransmits is noise.
    if (w.slow_since_ms == 0) w.slow_since_ms = now_ms;
    if (now_ms - w.slow_since_ms < 2 * options_.heartbeat_interval_ms) continue;
    if (w.decided_ms > 0 && now_ms - w.decided_ms < c.replan_cooldown_s * 1000) continue;
    w.decided_ms = now_ms;
    DecideReplan(t, j, w, evidence, now_ms);
  }
}

void ControlPlane::DecideReplan(Txn& t, Job& j, JobWatch& w, const std::string& evidence,
                                int64_t now_ms) {
  const model::NetworkConfig& c = options_.config.network;
  const double t0 = w.baseline_s, t1 = w.current_s;
  std::string head = "network: step time " + Num(t0) + " s -> " + Num(t1) + " s (x" +
                     Num(t1 / t0, "%.2f") + ") with " + evidence;
  // Every decision is an event with its reason, counted by action on /metrics.
  auto decide = [&](const char* action, const std::string& reason) {
    NetworkEvent(t, j.id, reason, now_ms);
    ++metrics_.network_decisions[action];
  };
  if (!ledger_ || !view_) return decide("keep", head + "; kept: no ledger to plan with yet");
  const model::Topology& topo = view_->topology;
  const auto held = SlotsOf(*view_, j.placement);
  if (!held || held->empty()) return;
  // What a restart costs: this attempt's launch (to its first progress report), else the
  // configured restart overhead, plus the step in flight.
  const double launch_s =
      w.first_progress_ms > 0 && j.starting_since_ms > 0
          ? static_cast<double>(w.first_progress_ms - j.starting_since_ms) / 1000.0
          : static_cast<double>(options_.config.restart_overhead_s);
  const double restart_s = std::max(0.0, launch_s) + t1;
  const double horizon_s = static_cast<double>(c.replan_horizon_s);
  const double steps_stay = horizon_s / t1;
  // A pair's bandwidth: the effective figure where a fresh measurement has one (PairView), else
  // nominal; one scale for measured and unmeasured pairs.
  std::map<std::pair<std::string, std::string>, double> effective;
  if (c.use_measured) {
    for (const PairView& v : PairViews(now_ms)) {
      if (v.effective_gbps > 0) effective[{v.measured.a, v.measured.b}] = v.effective_gbps;
    }
  }
  auto pair_gbps = [&](const std::string& a, const std::string& b) {
    auto it = effective.find(a < b ? std::make_pair(a, b) : std::make_pair(b, a));
    return it != effective.end() ? it->second : NominalOf(a, b).gbps;
  };
  auto bottleneck = [&](const std::vector<std::string>& nodes) {
    double b = 0;
    for (size_t x = 0; x < nodes.size(); ++x) {
      for (size_t y = x + 1; y < nodes.size(); ++y) {
        const double g = pair_gbps(nodes[x], nodes[y]);
        b = b == 0 ? g : std::min(b, g);
      }
    }
    return b;
  };
  const std::vector<std::string> nodes = j.Nodes();
  const double b0 = bottleneck(nodes);
  // Re-planning the collectives in place: the cost model's all-reduce of the job's gradients
  // per step on its GPUs, with its links at the bandwidth the slowdown implies (b0 x t0/t1,
  // all of the growth put on the network). The algorithm it runs now is the one its launch was
  // planned with (the cost model's pick for the links as they were, or an earlier re-plan's),
  // priced on the degraded links against ring, tree and hierarchical.
  std::vector<int> gpus;
  for (const auto& s : *held) gpus.push_back(s.gpu);
  comm::BandwidthMatrix as_launched, degraded;
  for (size_t x = 0; x < nodes.size(); ++x) {
    for (size_t y = x + 1; y < nodes.size(); ++y) {
      const int ix = view_->index.at(nodes[x]), iy = view_->index.at(nodes[y]);
      const double gbps = pair_gbps(nodes[x], nodes[y]);
      as_launched.SetNodePair(ix, iy, gbps);
      degraded.SetNodePair(ix, iy, gbps * t0 / t1);
    }
  }
  comm::CostOptions cost, launch_cost;
  cost.measured = &degraded;
  launch_cost.measured = &as_launched;
  const int64_t bytes = placement::RequestFromJob(j.spec).comm_bytes;
  // What the launch runs: an earlier re-plan's pin, else the configured ALLREDUCE_ALGO, else
  // the cost model's pick for the links as they were.
  comm::Algorithm running = comm::Algorithm::kAuto;
  if (auto pinned = comm::ParseAlgorithm(j.replan.algorithm)) {
    running = *pinned;
  } else if (auto configured = comm::ParseAlgorithm(options_.config.allreduce_algo)) {
    running = *configured;
  }
  if (running == comm::Algorithm::kAuto) {
    running = comm::CostCollective(topo, gpus, comm::Collective::kAllReduce, bytes,
                                   comm::Algorithm::kAuto, launch_cost)
                  .algorithm;
  }
  const double now_algo =
      comm::CollectiveSeconds(topo, gpus, comm::Collective::kAllReduce, bytes, running, cost);
  // The candidates are what a launch can pin (NCCL_ALGO, HCCL_ALGO): ring and tree. The cost
  // model's hierarchical plan has no pin of its own (the libraries run it as their tree).
  std::string algos;
  double best_algo = 0;
  std::string best_name;
  for (comm::Algorithm a : {comm::Algorithm::kRing, comm::Algorithm::kTree}) {
    const double s =
        comm::CollectiveSeconds(topo, gpus, comm::Collective::kAllReduce, bytes, a, cost);
    algos += std::string(algos.empty() ? "" : ", ") + std::string(comm::AlgorithmName(a)) + " " +
             Num(s) + " s";
    if (best_name.empty() || s < best_algo) {
      best_algo = s;
      best_name = std::string(comm::AlgorithmName(a));
    }
  }
  // The all-reduce takes at most the whole step (the model's figure is for the profile's
  // gradients, the step is what the job measured): the better algorithm shrinks that part of the
  // step in the ratio of their costs. A pin that changes nothing, or saves less than
  // kMinReplanGain of the all-reduce, is no re-plan.
  const double comm_s = std::min(now_algo, t1);
  double ratio = now_algo > 0 ? std::min(1.0, best_algo / now_algo) : 1.0;
  if (best_name == comm::AlgorithmName(running) || ratio > 1 - kMinReplanGain) ratio = 1;
  const double replan_step = std::max(t1 - comm_s * (1 - ratio), 1e-3);
  const double steps_replan = std::max(0.0, horizon_s - restart_s) / replan_step;
  std::string replan = "re-plan in place (" + algos + " per all-reduce against " + Num(now_algo) +
                       " s by " + std::string(comm::AlgorithmName(running)) +
                       " now): " + Num(steps_replan, "%.0f") + " steps";
  // Moving: the same shape placed off the nodes that show congestion, priced by its bottleneck
  // against the one the job had when it set its baseline (t2 = t0 x b0 / b2 at worst).
  model::ClusterState state = ledger_->State();
  placement::PlacementRequest req = placement::RequestFromJob(j.spec);
  req.ranks = static_cast<int>(held->size());
  (void)placement::Release(&state, req, placement::PlacedOutcome(*held));
  for (const auto& name : nodes) {
    if (evidence.find(name + ":") != std::string::npos ||
        evidence.find(name + " ") != std::string::npos) {
      state.SetHealthy(view_->index.at(name), false);
    }
  }
  std::string move = "move: no placement free off the congested nodes";
  double steps_move = -1;
  std::optional<std::vector<placement::RankSlot>> target;
  if (auto strategy = placement::MakeStrategy(engine_options_.placement); strategy) {
    placement::Outcome o = (*strategy)->Place(state, req);
    if (o.placed()) {
      std::set<std::string> to;
      for (const auto& s : o.ranks) to.insert(view_->node_names[static_cast<size_t>(s.node)]);
      const std::vector<std::string> to_nodes(to.begin(), to.end());
      const double b2 = bottleneck(to_nodes);
      const double t2 = b2 > 0 && b0 > 0 ? t0 * std::max(1.0, b0 / b2) : t0;
      steps_move = std::max(0.0, horizon_s - restart_s) / t2;
      move = "move to " + Join(to_nodes, ",") + " (" + Num(b2) + " GB/s, step " + Num(t2) +
             " s predicted): " + Num(steps_move, "%.0f") + " steps";
      target = o.ranks;
    }
  }
  const std::string weigh = "over " + Num(horizon_s, "%.0f") + " s with a " + Num(restart_s) +
                            " s restart: " + replan + "; " + move +
                            "; staying: " + Num(steps_stay, "%.0f") + " steps";
  if (target && steps_move > steps_stay && steps_move >= steps_replan) {
    const std::string why = head + "; migrating, " + weigh;
    model::ClusterState held_state = ledger_->State();
    if (BeginReshape(t, j, "migrate", *target, placement::PlacedOutcome(*held), why, &held_state,
                     now_ms)) {
      return decide("migrate", why);
    }
    return decide("keep", head + "; kept: the move's target no longer fits; " + weigh);
  }
  if (steps_replan > steps_stay && steps_replan > steps_move) {
    // The gain pays for a restart: checkpoint now and relaunch on the same GPUs with the
    // collectives the cost model prefers on the degraded links (CommReplan, used by StartJob).
    const std::string why = head + "; re-planning in place (" + best_name + "), " + weigh;
    std::vector<std::string> sorted = nodes;
    std::sort(sorted.begin(), sorted.end());
    const CommReplan before = j.replan;
    j.replan = {.algorithm = best_name, .nodes = sorted};
    model::ClusterState held_state = ledger_->State();
    if (BeginReshape(t, j, "replan", *held, placement::PlacedOutcome(*held), why, &held_state,
                     now_ms)) {
      return decide("replan", why);
    }
    j.replan = before;
    return decide("keep", head + "; kept: the re-plan's restart could not begin; " + weigh);
  }
  decide("keep", head + "; kept: neither pays, " + weigh);
}

}  // namespace tianshu::server
