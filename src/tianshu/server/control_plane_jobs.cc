// The job state machine: launching an attempt, stopping, failing, losing a node, fences, and
// applying the agents' reports.
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

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
std::map<std::string, std::string> CommEnvironmentFor(
    const model::EngineConfig& config, const model::JobSpec& spec,
    const placement::Outcome& outcome, const model::Topology& topo, const comm::Layout& layout,
    const comm::BandwidthMatrix& measured, const std::string& algorithm) {
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
  // The links the job actually got: measured figures where probes have them.
  if (measured.size() > 0) options.cost.measured = &measured;
  // A re-plan in place the network watch decided (CommReplan) outranks the configured one.
  if (auto a = comm::ParseAlgorithm(algorithm)) options.allreduce_algo = *a;
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
// ranks still hold a placement with the same master node. The ports taken per master node are
// gathered once per change (a cycle may start hundreds of jobs) and kept up to date as this
// change starts jobs; a job that stops holding in the same change only leaves its port
// skipped until the next.
int ControlPlane::RendezvousPort(Txn& t, const Job& j, const std::string& master_node) const {
  if (!t.ports_taken) {
    t.ports_taken.emplace();
    for (int64_t seq : active_seqs_) {
      const Job& other = jobs_.at(seq);
      // Its master is its first rank's node (the first of Nodes()).
      if (other.master_port != 0 && !other.placement.empty()) {
        (*t.ports_taken)[other.placement.front().node].insert({other.master_port, other.seq});
      }
    }
  }
  std::set<std::pair<int, int64_t>>& on_node = (*t.ports_taken)[master_node];
  auto taken = [&](int port) {  // by a job other than this one
    auto it = on_node.lower_bound({port, std::numeric_limits<int64_t>::min()});
    for (; it != on_node.end() && it->first == port; ++it) {
      if (it->second != j.seq) return true;
    }
    return false;
  };
  const int low = options_.config.rendezvous_port_low;
  const int span = options_.config.rendezvous_port_high - low + 1;
  const size_t h =
      std::hash<std::string>{}(options_.server_id + "/" + j.id + "/" + std::to_string(j.attempt));
  const int start = static_cast<int>(h % static_cast<size_t>(span));
  int chosen = low + start;  // more jobs than ports on one node: share (the rendezvous may fail)
  for (int i = 0; i < span; ++i) {
    const int port = low + (start + i) % span;
    if (!taken(port) && port != j.master_port) {  // not the last attempt's
      chosen = port;
      break;
    }
  }
  on_node.insert({chosen, j.seq});
  return chosen;
}

void ControlPlane::StartJob(Txn& t, Job& j, const placement::Outcome& outcome,
                            const model::Topology& topo, int64_t now_ms, bool colocated) {
  j.attempt++;
  j.failed_rank = -1;  // of the attempt before: not this one's
  if (!j.placement.empty()) j.last_placement = j.placement;
  j.placement.clear();
  j.started.clear();
  j.exited.clear();
  j.launch_accepted.clear();
  j.stop_pending.clear();
  j.after_stop.clear();
  j.seen_reports.clear();
  // The last attempt's progress rows go with it (any queued in this change too).
  std::erase_if(t.progress, [&](const ProgressRow& p) { return p.job_id == j.id; });
  t.progress_reset.push_back(j.id);
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
  const int port = RendezvousPort(t, j, nodes.front());
  j.master_port = port;
  const std::string ckpt =
      options_.checkpoint_root.empty() ? "" : options_.checkpoint_root + "/" + j.id;
  const comm::Layout layout = LayoutFor(options_.config, j.spec, outcome, topo);
  // Measured figures are between nodes: a job on one node has no use for them (and building
  // the matrix walks every measured pair, for each of the hundreds of jobs a cycle may start).
  const comm::BandwidthMatrix measured =
      nodes.size() > 1 ? MeasuredMatrix(view, now_ms) : comm::BandwidthMatrix{};
  std::vector<std::string> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  if (!j.replan.algorithm.empty() && j.replan.nodes != sorted) j.replan = {};  // it moved since
  const std::map<std::string, std::string> comm_env = CommEnvironmentFor(
      options_.config, j.spec, outcome, topo, layout, measured, j.replan.algorithm);
  placement::PlacementRequest req = placement::RequestFromJob(j.spec);
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    const NodeEntry& node = nodes_.at(nodes[ni]);
    int topo_node = view.index.at(node.name);
    std::string backend = std::string(model::BackendName(topo.TypeOf(topo_node).backend));
    wire::LaunchOrder l;
    l.job_name = j.spec.name;
    l.backend = backend;
    l.world_size = world;
    l.master_addr = DataHostOf(master);
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
      // The rendezvous, the visible devices and the job's identity follow from the order's
      // fields (wire::RankEnvironment, where the agent builds them); only the rest is sent.
      auto& e = rl.env;
      e["NNODES"] = std::to_string(nodes.size());
      if (j.array_index >= 0) {
        e["TIANSHU_ARRAY_JOB_ID"] = j.array_id;
        e["TIANSHU_ARRAY_TASK_ID"] = std::to_string(j.array_index);
        e["TIANSHU_ARRAY_TASK_COUNT"] = std::to_string(j.array_count);
      }
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
           "placed on " + Join(nodes, ",") + " (attempt " + std::to_string(j.attempt) + ")" +
               MeasuredNote(nodes, now_ms),
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
    if (NodeGone(nodes_, node)) continue;
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
  for (int64_t seq : ActiveSeqs()) {
    Job& j = jobs_.at(seq);
    if (!j.OnNode(n.name)) continue;
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
  // An agent runs several ranks of a job: its placement is searched once per job.
  int64_t last_seq = -1;
  bool last_on_node = false;
  for (const auto& r : running) {
    auto seq = ParseJobId(r.job_id);
    auto it = seq ? jobs_.find(*seq) : jobs_.end();
    bool current = false;
    if (it != jobs_.end()) {
      const Job& j = it->second;
      if (j.seq != last_seq) {
        last_seq = j.seq;
        last_on_node = j.OnNode(node);
      }
      current = j.attempt == r.attempt && HoldsPlacement(j.state) && last_on_node;
    }
    if (current || IsRunningProbe(r.job_id, node)) continue;
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

void ControlPlane::Progress(Txn& t, const Job& j, std::string key, std::string value) {
  t.progress.push_back({j.id, j.attempt, std::move(key), std::move(value)});
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
  if (IsProbeId(job_id)) return ApplyProbeReport(t, node, r, now_ms);
  auto seq = ParseJobId(job_id);
  auto it = seq ? jobs_.find(*seq) : jobs_.end();
  if (it == jobs_.end()) return;
  Job& j = it->second;
  if (AttemptOf(r.order_id) != j.attempt) return;  // about an attempt that is over
  // Only about an order this node got for this attempt, and a rank of its own: a node cannot
  // fail, stop or re-point another node's job with a forged report.
  if (!IsOrderOf(r.order_id, j.id, j.attempt, node, j.checkpoint_orders)) return;
  if (!j.OnNode(node)) return;  // the attempt's orders went to its placement's nodes only
  auto on_node = [&](int rank) {
    for (const auto& p : j.placement) {
      if (p.rank == rank) return p.node == node;
    }
    return false;
  };
  if (r.rank != -1 && !on_node(r.rank)) return;  // -1: about the whole order
  // A duplicate changes nothing. The per-rank kinds are recorded by what they set (a rank in
  // started or exited, a node in launch_accepted: the job's record stays small for a gang of
  // a thousand ranks); a checkpoint by its step (only a newer one counts); stopped and rejected
  // by key, with the reporting node in it.
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
    case wire::ReportKind::kCheckpointed:
      break;
    default: {
      std::string key = r.order_id + "|" + node + "|" + std::string(wire::ReportKindName(r.kind)) +
                        "|" + std::to_string(r.rank);
      duplicate = j.seen_reports.contains(key);
      if (!duplicate) {
        j.seen_reports.insert(key);
        Progress(t, j, SeenKey(key));
      }
    }
  }
  if (duplicate) return;
  // Below, a fact about one rank or node is a progress row; the job's record is rewritten
  // (t.jobs) only when the job itself changes (SetState does that on its own).
  const bool active = j.state == JobState::kStarting || j.state == JobState::kRunning;
  switch (r.kind) {
    case wire::ReportKind::kAccepted:
      j.launch_accepted.insert(node);
      Progress(t, j, AcceptedKey(node));
      break;
    case wire::ReportKind::kStarted:
      if (!on_node(r.rank)) return;
      j.started.insert(r.rank);
      Progress(t, j, StartedKey(r.rank));
      if (active && j.run_started_ms == 0) {
        j.run_started_ms = now_ms;
        t.jobs.insert(j.seq);
      }
      if (j.state == JobState::kStarting && j.started.size() == j.placement.size()) {
        SetState(t, j, JobState::kRunning,
                 "all " + std::to_string(j.placement.size()) + " ranks started", now_ms);
      }
      break;
    case wire::ReportKind::kExited: {
      if (!on_node(r.rank)) return;
      j.exited[r.rank] = {r.exit_code, r.signal};
      Progress(t, j, ExitedKey(r.rank), ExitedValue(r.exit_code, r.signal));
      if (!active) break;
      if (r.exit_code != 0 || r.signal != 0) {
        // The agent's word on how, when it has one ("killed by SIGKILL (the job's memory limit:
        // 1 OOM kill(s))", a rank it could not start and why), else the codes.
        std::string how = !r.message.empty() ? ForTerminal(r.message.substr(0, 300))
                          : r.signal != 0    ? "was killed by signal " + std::to_string(r.signal)
                                             : "exited with code " + std::to_string(r.exit_code);
        const std::string what = "rank " + std::to_string(r.rank) + " on " + node + " " + how;
        j.failed_rank = r.rank;
        t.jobs.insert(j.seq);
        const auto& final_codes = options_.config.no_retry_exit_codes;
        if (r.signal == 0 &&
            std::find(final_codes.begin(), final_codes.end(), r.exit_code) != final_codes.end()) {
          // A deterministic failure (a usage error, a file or command not found): a retry
          // would fail the same way, so none is spent.
          BeginStop(t, j, "failed",
                    what + " (exit code " + std::to_string(r.exit_code) +
                        " is not retried: scheduler.no_retry_exit_codes)",
                    "", false, now_ms);
        } else {
          FailAttempt(t, j, what, "", now_ms);
        }
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
        t.jobs.insert(j.seq);
      }
      break;
    case wire::ReportKind::kStopped:
      FinishOrder(t, r.order_id, "done");
      if (j.stop_pending.erase(node)) {
        t.jobs.insert(j.seq);
        MaybeFinishStop(t, j, now_ms);
      }
      break;
    case wire::ReportKind::kRejected: {
      auto oit = orders_.find(r.order_id);
      bool launch = r.order_id.find(".launch.") != std::string::npos;
      bool stop = r.order_id.find(".stop.") != std::string::npos;
      if (oit != orders_.end()) FinishOrder(t, r.order_id, "done");
      if (launch && active) {
        FailAttempt(t, j, "node " + node + " rejected the launch: " + r.message, "", now_ms);
      } else if (stop && j.stop_pending.erase(node)) {
        t.jobs.insert(j.seq);
        MaybeFinishStop(t, j, now_ms);
      }
      break;
    }
  }
}

}  // namespace tianshu::server
