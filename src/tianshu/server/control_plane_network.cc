// The network dimension, live (issue 18, docs/network.md): bandwidth probes on idle nodes,
// the measured matrix they fill (persisted, shown, aged out), the measured leaves placement
// sees and the matrix the communicator plan uses, and the congestion watch that moves a
// running job off a congested link when the cost model says the move pays.
#include <cmath>
#include <cstdio>
#include <limits>

#include "tianshu/comm/cost_model.h"
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

namespace {

constexpr const char* kProbePrefix = "probe-";

std::string Gbps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 10 ? "%.1f GB/s" : "%.3g GB/s", v);
  return buf;
}

}  // namespace

bool ControlPlane::IsProbeId(const std::string& job_id) { return job_id.starts_with(kProbePrefix); }

void ControlPlane::NetworkEvent(Txn& t, const std::string& id, const std::string& reason,
                                int64_t now_ms) {
  t.events.push_back({{"seq", next_event_seq_++},
                      {"time_ms", now_ms},
                      {"type", "network"},
                      {"id", id},
                      {"reason", reason}});
}

// ---- the nominal figures and the measured ones, as the scheduler uses them ----

NominalPair ControlPlane::NominalOf(const std::string& a, const std::string& b) const {
  if (!nominal_view_) return {};
  const model::Topology& topo = nominal_view_->topology;
  auto ia = nominal_view_->index.find(a), ib = nominal_view_->index.find(b);
  if (ia == nominal_view_->index.end() || ib == nominal_view_->index.end()) {
    return {0, "no accelerators"};
  }
  // nccl-tests' bus bandwidth of a 1 GiB all-reduce between one GPU of each node, with the
  // fabric to themselves: what a probe of a healthy pair should come near.
  constexpr int64_t kBytes = int64_t{1} << 30;
  const int gpus[2] = {topo.nodes[ia->second].first_gpu, topo.nodes[ib->second].first_gpu};
  comm::CostOptions alone;
  alone.contended = false;
  const double s = comm::CollectiveSeconds(topo, gpus, comm::Collective::kAllReduce, kBytes,
                                           comm::Algorithm::kAuto, alone);
  const double gbps = s > 0 ? static_cast<double>(kBytes) / s / 1e9 : 0;
  const bool same = topo.nodes[ia->second].leaf == topo.nodes[ib->second].leaf;
  return {gbps, std::string(same ? "same leaf, " : "across leaves, ") + Gbps(gbps)};
}

// The nodes probes are planned over: ready or degraded ones, with `failed_too` every node (the
// measured leaves keep a failed or lost node in its group, as the cluster view keeps it).
std::vector<ProbeNode> ControlPlane::ProbeNodes(bool failed_too) const {
  std::set<std::string> busy;
  auto hold = [&](const std::vector<RankPlace>& places) {
    for (const auto& p : places) busy.insert(p.node);
  };
  for (int64_t seq : active_seqs_) {
    hold(jobs_.at(seq).placement);
    hold(jobs_.at(seq).target);
  }
  for (int64_t seq : pending_seqs_) hold(jobs_.at(seq).target);
  std::vector<ProbeNode> out;
  for (const auto& [name, n] : nodes_) {
    if (n.hardware.devices.empty() ||
        (!failed_too && n.state != NodeState::kReady && n.state != NodeState::kDegraded)) {
      continue;
    }
    std::string leaf = "leaf0";
    if (auto it = n.hardware.labels.find("leaf"); it != n.hardware.labels.end()) leaf = it->second;
    const bool idle = n.state == NodeState::kReady && !n.cordoned && n.probing.empty() &&
                      !busy.contains(name) && n.last.running.empty();
    out.push_back({name, leaf, std::max(n.registered_ms, n.links_changed_ms), idle});
  }
  return out;
}

std::map<std::string, std::string> ControlPlane::MeasuredLeavesNow(int64_t now_ms) const {
  const model::NetworkConfig& c = options_.config.network;
  if (!c.use_measured || network_.size() == 0) return {};
  return network_.MeasuredLeaves(
      ProbeNodes(/*failed_too=*/true),
      [this](const std::string& a, const std::string& b) { return NominalOf(a, b); }, c, now_ms);
}

std::vector<PairView> ControlPlane::PairViews(int64_t now_ms) const {
  std::vector<std::string> names;
  for (const auto& [name, n] : nodes_) names.push_back(name);
  return network_.View(
      names, [this](const std::string& a, const std::string& b) { return NominalOf(a, b); },
      options_.config.network, now_ms);
}

comm::BandwidthMatrix ControlPlane::MeasuredMatrix(const ClusterView& view, int64_t now_ms) const {
  comm::BandwidthMatrix m;
  const model::NetworkConfig& c = options_.config.network;
  if (!c.use_measured || network_.size() == 0) return m;
  std::vector<std::string> names;  // the view's nodes: its best figures per class, not the API's
  for (const auto& [name, i] : view.index) names.push_back(name);
  for (const PairView& v : network_.View(
           names, [this](const std::string&a, const std::string&b) { return NominalOf(a, b); }, c,
           now_ms)) {
    if (v.effective_gbps > 0) {
      m.SetNodePair(view.index.at(v.measured.a), view.index.at(v.measured.b), v.effective_gbps);
    }
  }
  return m;
}

std::string ControlPlane::MeasuredNote(const std::vector<std::string>& nodes,
                                       int64_t now_ms) const {
  const model::NetworkConfig& c = options_.config.network;
  if (!c.use_measured || nodes.size() < 2) return "";
  double slowest = -1;
  for (size_t x = 0; x < nodes.size(); ++x) {
    for (size_t y = x + 1; y < nodes.size(); ++y) {
      const MeasuredPair* p = network_.Find(nodes[x], nodes[y]);
      if (!p || p->measured_ms <= 0 || now_ms - p->measured_ms > c.measured_ttl_s * 1000) continue;
      slowest = slowest < 0 ? p->busbw_gbps : std::min(slowest, p->busbw_gbps);
    }
  }
  if (slowest < 0) return "";
  std::set<std::string> leaves;
  for (const auto& n : nodes) {
    auto it = view_leaves_.find(n);
    if (it != view_leaves_.end()) leaves.insert(it->second);
  }
  return "; measured bandwidth between its nodes " + Gbps(slowest) + " at the slowest pair" +
         (leaves.size() == 1 ? ", in measured leaf " + *leaves.begin() : "");
}

nlohmann::json ControlPlane::MeasuredNetwork(int64_t now_ms) const {
  std::lock_guard l(mu_);
  const model::NetworkConfig& c = options_.config.network;
  json pairs = json::array();
  for (const PairView& v : PairViews(now_ms)) {
    pairs.push_back({{"a", v.measured.a},
                     {"b", v.measured.b},
                     {"measured_gbps", v.measured.busbw_gbps},
                     {"forward_gbps", v.measured.forward_gbps},
                     {"backward_gbps", v.measured.backward_gbps},
                     {"nominal_gbps", v.nominal.gbps},
                     {"class", v.nominal.klass},
                     {"class_best_gbps", v.class_best_gbps},
                     {"effective_gbps", v.effective_gbps},
                     {"slow", v.slow},
                     {"slow_confirmed", v.confirmed},
                     {"stale", v.stale},
                     {"method", v.measured.method},
                     {"measured_ms", v.measured.measured_ms},
                     {"age_s", v.age_s},
                     {"failures", v.measured.failures}});
  }
  std::map<std::string, std::vector<std::string>> by_leaf;
  for (const auto& [node, leaf] : MeasuredLeavesNow(now_ms)) by_leaf[leaf].push_back(node);
  json groups = json::array();
  for (const auto& [leaf, members] : by_leaf) groups.push_back(members);
  json running = json::array();
  for (const auto& [id, p] : probes_) {
    running.push_back({{"id", id}, {"a", p.a}, {"b", p.b}, {"started_ms", p.started_ms}});
  }
  return {{"pairs", pairs},
          {"groups", groups},
          {"probes",
           {{"enabled", c.probes},
            {"running", running.size()},
            {"in_flight", running},
            {"done", probes_done_},
            {"failed", probes_failed_},
            {"gave_way", probes_gave_way_}}},
          {"config",
           {{"probe_interval_s", c.probe_interval_s},
            {"measured_ttl_s", c.measured_ttl_s},
            {"slow_link_ratio", c.slow_link_ratio},
            {"use_measured", c.use_measured}}}};
}

// ---- probes ----

bool ControlPlane::IsRunningProbe(const std::string& job_id, const std::string& node) const {
  auto it = probes_.find(job_id);
  return it != probes_.end() && (it->second.a == node || it->second.b == node);
}

void ControlPlane::StartProbe(Txn& t, const std::string& a, const std::string& b, int64_t now_ms) {
  const model::NetworkConfig& c = options_.config.network;
  ProbeRun p{.id = kProbePrefix + order_epoch_ + "-" + std::to_string(next_probe_++),
             .a = a,
             .b = b,
             .started_ms = now_ms};
  const int low = options_.config.rendezvous_port_low;
  const int span = options_.config.rendezvous_port_high - low + 1;
  const int port = low + static_cast<int>(std::hash<std::string>{}(p.id) %
                                          static_cast<size_t>(std::max(span, 1)));
  const NodeEntry& master = nodes_.at(a);
  for (int rank = 0; rank < 2; ++rank) {
    NodeEntry& n = nodes_.at(rank == 0 ? a : b);
    n.probing = p.id;
    wire::LaunchOrder l;
    l.job_name = "probe";
    l.backend = n.hardware.backend.empty() ? "cuda" : n.hardware.backend;
    l.world_size = 2;
    l.master_addr = DataHostOf(master);
    l.master_port = port;
    l.probe = wire::ProbeSpec{.method = "auto", .bytes = c.probe_bytes, .seconds = c.probe_seconds};
    wire::RankLaunch rl{.rank = rank, .local_rank = 0, .node_rank = rank};
    l.ranks.push_back(std::move(rl));
    wire::WorkOrder o{.id = OrderId(p.id, 1, "launch", n.name),
                      .kind = wire::OrderKind::kLaunch,
                      .job_id = p.id,
                      .attempt = 1};
    o.launch = std::move(l);
    AddOrder(t, n.name, std::move(o));
  }
  ledger_nodes_touched_ = true;  // both nodes take no new work while it runs
  NetworkEvent(t, p.id, "network: probing " + a + " <-> " + b, now_ms);
  probes_.emplace(p.id, std::move(p));
}

void ControlPlane::StopProbe(Txn& t, ProbeRun& p, const std::string& why, int64_t now_ms) {
  if (p.stopping) return;
  p.stopping = true;
  p.failure = why;
  for (const std::string& node : {p.a, p.b}) {
    if (p.done.contains(node)) continue;
    if (std::string launch = OrderId(p.id, 1, "launch", node); orders_.contains(launch)) {
      FinishOrder(t, launch, "withdrawn");
    }
    wire::WorkOrder o{.id = OrderId(p.id, 1, "stop", node),
                      .kind = wire::OrderKind::kStop,
                      .job_id = p.id,
                      .attempt = 1};
    o.stop = wire::StopOrder{.reason = "cancel", .checkpoint_first = false, .grace_ms = 5000};
    AddOrder(t, node, std::move(o));
  }
  p.stop_sent_ms = now_ms;
}

void ControlPlane::ProbesGiveWay(Txn& t, int64_t now_ms) {
  for (auto& [id, p] : probes_) {
    // A probe whose node went away is over (NetworkTick), with no stop to send there.
    if (!NodeGone(nodes_, p.a) && !NodeGone(nodes_, p.b) && !p.stopping) {
      StopProbe(t, p, "gave way to a job waiting for capacity", now_ms);
      p.gave_way = true;
    }
  }
}

int64_t ControlPlane::FreeGpusOutsideProbes() const {
  if (!ledger_ || !view_) return std::numeric_limits<int64_t>::max();  // unknown: the cycle decides
  const model::ClusterState& s = ledger_->State();
  int64_t free = 0;
  for (size_t i = 0; i < view_->node_names.size(); ++i) {
    const int node = static_cast<int>(i);
    auto n = nodes_.find(view_->node_names[i]);
    if (n == nodes_.end() || !n->second.probing.empty() || !s.Healthy(node)) continue;
    free += s.FreeWholeGpus(node);
  }
  return free;
}

void ControlPlane::FinishProbe(Txn& t, const std::string& id, int64_t now_ms) {
  auto it = probes_.find(id);
  if (it == probes_.end()) return;
  ProbeRun& p = it->second;
  for (const std::string& node : {p.a, p.b}) {
    if (auto n = nodes_.find(node); n != nodes_.end() && n->second.probing == id) {
      n->second.probing.clear();
    }
  }
  const bool both = nodes_.contains(p.a) && nodes_.contains(p.b);  // a removed node is forgotten
  if (!p.recorded && p.gave_way) {
    // Not the pair's failure: it stays due, and is probed once both nodes are idle again.
    ++probes_gave_way_;
    NetworkEvent(t, id, "network: probe " + p.a + " <-> " + p.b + " " + p.failure, now_ms);
  } else if (!p.recorded) {
    if (both) network_.RecordFailure(p.a, p.b, now_ms);
    ++probes_failed_;
    NetworkEvent(t, id,
                 "network: probe " + p.a + " <-> " + p.b +
                     " failed: " + (p.failure.empty() ? "no result" : p.failure),
                 now_ms);
  }
  if (both) t.meta[NetworkMap::MetaKey(p.a, p.b)] = network_.MetaValue(p.a, p.b);
  ++network_version_;
  ledger_nodes_touched_ = true;
  schedule_dirty_ = true;
  probes_.erase(it);
}

void ControlPlane::ApplyProbeReport(Txn& t, const std::string& node, const wire::Report& r,
                                    int64_t now_ms) {
  auto it = probes_.find(r.job_id.empty() ? r.order_id.substr(0, r.order_id.find('.')) : r.job_id);
  if (it == probes_.end()) return;  // of a probe that ended (or of an earlier server run)
  ProbeRun& p = it->second;
  if (node != p.a && node != p.b) return;
  const int rank = node == p.a ? 0 : 1;
  if (r.rank != -1 && r.rank != rank) return;
  switch (r.kind) {
    case wire::ReportKind::kExited:
      if (rank == 0 && r.probe && r.exit_code == 0 && r.signal == 0 && !p.recorded) {
        const wire::ProbeResult& x = *r.probe;
        network_.Record({.a = p.a,
                         .b = p.b,
                         .busbw_gbps = x.busbw_gbps,
                         .forward_gbps = x.forward_gbps,
                         .backward_gbps = x.backward_gbps,
                         .method = x.method,
                         .measured_ms = now_ms});
        p.recorded = true;
        ++probes_done_;
        NetworkEvent(t, p.id,
                     "network: " + p.a + " <-> " + p.b + " measured " + Gbps(x.busbw_gbps) +
                         " all-reduce bus bandwidth (" + x.method + "; nominal " +
                         Gbps(NominalOf(p.a, p.b).gbps) + ")",
                     now_ms);
      } else if (r.exit_code != 0 || r.signal != 0) {
        StopProbe(t, p,
                  "rank " + std::to_string(rank) + " on " + node + " exited with " +
                      (r.signal ? "signal " + std::to_string(r.signal)
                                : "code " + std::to_string(r.exit_code)) +
                      (r.message.empty() ? "" : ": " + r.message.substr(0, 200)),
                  now_ms);
      }
      p.done.insert(node);
      break;
    case wire::ReportKind::kRejected:
      StopProbe(t, p, node + " refused it: " + r.message.substr(0, 200), now_ms);
      p.done.insert(node);
      break;
    case wire::ReportKind::kStopped:
      p.done.insert(node);
      break;
    default:
      break;
  }
  if (p.done.size() == 2) FinishProbe(t, p.id, now_ms);
}

void ControlPlane::NetworkTick(Txn& t, int64_t now_ms) {
  const model::NetworkConfig& c = options_.config.network;
  // Probes give way: a job waiting for capacity stops them; one over its time is stopped; one
  // whose node went away (or whose stop got no answer) is over.
  bool waiting = false;
  for (int64_t seq : pending_seqs_) {
    const Job& j = jobs_.at(seq);
    if ((waiting = !j.held && j.fence_nodes.empty())) break;
  }
  if (waiting) ProbesGiveWay(t, now_ms);
  std::vector<std::string> over;
  for (auto& [id, p] : probes_) {
    const bool gone = NodeGone(nodes_, p.a) || NodeGone(nodes_, p.b);
    if (gone || (p.stopping && now_ms - p.stop_sent_ms > 30'000)) {
      if (p.failure.empty() || p.gave_way) {
        p.failure = gone ? "a node of the probe was lost" : "its stop got no answer in 30 s";
      }
      p.gave_way = false;  // a failure after all
      over.push_back(id);
    } else if (now_ms - p.started_ms > c.probe_timeout_s * 1000) {
      StopProbe(t, p, "still running after " + std::to_string(c.probe_timeout_s) + " s", now_ms);
    }
  }
  for (const auto& id : over) FinishProbe(t, id, now_ms);
  // At most once a second: planning walks the nodes and the pairs that cover them.
  const bool plan = now_ms - network_planned_ms_ >= 1000;
  if (plan) network_planned_ms_ = now_ms;
  RefreshNominalView();  // the nominal figures probes are judged against
  if (plan && c.probes && !waiting && probes_.empty()) {
    if (auto next = network_.NextProbe(
            ProbeNodes(),
            [this](const std::string& a, const std::string& b) { return NominalOf(a, b); }, c,
            now_ms)) {
      StartProbe(t, next->first, next->second, now_ms);
    }
  }
  // The measured leaves placement sees: rebuilt when the figures changed them (a probe, or
  // figures ageing out).
  if (now_ms - leaves_checked_ms_ >= 10'000 || leaves_version_ != network_version_) {
    leaves_checked_ms_ = now_ms;
    leaves_version_ = network_version_;
    if (MeasuredLeavesNow(now_ms) != view_leaves_) ledger_nodes_changed_ = true;
  }
  if (c.watch && plan) WatchCongestion(t, now_ms);
}

}  // namespace tianshu::server
