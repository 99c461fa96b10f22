// What the control plane shows on /metrics (read only): the cluster, each queue, the scheduling
// cycle, the store and the network, then each node and GPU, in the Prometheus text format;
// docs/api.md lists the families. The HTTP and process families are added by the /metrics route.
#include "tianshu/server/control_plane_internal.h"

namespace tianshu::server {

using namespace detail;

namespace {

std::string Gpu(int device) { return std::to_string(device); }

// The per-node and per-GPU families, from a copy of the nodes taken under the lock: with
// thousands of nodes these are most of a scrape, and are written after the lock is released.
void NodeFamilies(Exposition& out, const std::vector<NodeEntry>& nodes,
                  const std::map<std::string, int64_t>& node_states,
                  const std::map<std::pair<std::string, int>, int64_t>& gpu_milli) {
  const auto live = [](const NodeEntry& n) {
    return n.state == NodeState::kReady || n.state == NodeState::kDegraded;
  };
  // A heartbeat of this server run, from a node still alive: its usage figures are current.
  const auto heard = [&live](const NodeEntry& n) { return live(n) && !n.last.agent_id.empty(); };
  const double milli = model::kMilliPerGpu;
  // ---- per node ----
  out.Family("tianshu_node_state", "gauge", "1 for the state a registered node is in, else 0.");
  for (const NodeEntry& n : nodes) {
    for (const auto& [s, count] : node_states) {
      out.Sample({{"node", n.name}, {"state", s}}, s == NodeStateName(n.state) ? 1 : 0);
    }
  }
  out.Family("tianshu_node_gpus", "gauge", "Accelerators a node registered.");
  for (const NodeEntry& n : nodes) {
    out.Sample({{"node", n.name}}, static_cast<double>(n.hardware.devices.size()));
  }
  out.Family("tianshu_node_gpus_allocated", "gauge",
             "GPUs of a node allocated to jobs that hold a placement (whole-GPU equivalents).");
  for (const NodeEntry& n : nodes) {
    int64_t m = 0;
    for (auto it = gpu_milli.lower_bound({n.name, INT32_MIN});
         it != gpu_milli.end() && it->first.first == n.name; ++it) {
      m += it->second;
    }
    out.Sample({{"node", n.name}}, static_cast<double>(m) / milli);
  }
  out.Family("tianshu_node_memory_bytes", "gauge", "Host memory a node registered.");
  for (const NodeEntry& n : nodes) {
    out.Sample({{"node", n.name}}, static_cast<double>(n.hardware.memory_bytes));
  }
  out.Family("tianshu_node_cpu_utilization_ratio", "gauge",
             "Host CPU busy fraction (0-1) a live node reported in its last heartbeat.");
  for (const NodeEntry& n : nodes) {
    if (heard(n)) out.Sample({{"node", n.name}}, n.last.cpu_utilization);
  }
  out.Family("tianshu_node_memory_used_bytes", "gauge",
             "Host memory in use a live node reported in its last heartbeat.");
  for (const NodeEntry& n : nodes) {
    if (heard(n)) out.Sample({{"node", n.name}}, static_cast<double>(n.last.memory_used_bytes));
  }
  out.Family("tianshu_node_last_heartbeat_timestamp_seconds", "gauge",
             "When a live node's last heartbeat reached this server (seconds since the epoch).");
  for (const NodeEntry& n : nodes) {
    if (heard(n)) {
      out.Sample({{"node", n.name}}, static_cast<double>(n.last_heartbeat_ms) / 1000.0);
    }
  }

  // ---- per GPU ----
  out.Family("tianshu_gpu_info", "gauge", "1 for every accelerator a node registered: its model.");
  for (const NodeEntry& n : nodes) {
    for (const auto& d : n.hardware.devices) {
      out.Sample({{"node", n.name}, {"gpu", Gpu(d.index)}, {"model", d.model}, {"uuid", d.uuid}},
                 1);
    }
  }
  out.Family("tianshu_gpu_allocated_ratio", "gauge",
             "Share of an accelerator (0-1) allocated to jobs that hold a placement.");
  for (const NodeEntry& n : nodes) {
    for (const auto& d : n.hardware.devices) {
      auto it = gpu_milli.find({n.name, d.index});
      out.Sample({{"node", n.name}, {"gpu", Gpu(d.index)}},
                 it == gpu_milli.end() ? 0.0 : static_cast<double>(it->second) / milli);
    }
  }
  // The usage a heartbeat reports per device: only what the agent measured (NVML); a device
  // without a measurement has no sample (declared devices, no driver, MIG mode).
  auto usage = [](const NodeEntry& n, int index) -> const wire::DeviceUsage* {
    for (const auto& u : n.last.devices) {
      if (u.index == index) return &u;
    }
    return nullptr;
  };
  out.Family("tianshu_gpu_healthy", "gauge",
             "1 while an accelerator's node is ready or degraded and its agent does not report "
             "the device unhealthy, else 0.");
  for (const NodeEntry& n : nodes) {
    for (const auto& d : n.hardware.devices) {
      const wire::DeviceUsage* u = heard(n) ? usage(n, d.index) : nullptr;
      out.Sample({{"node", n.name}, {"gpu", Gpu(d.index)}}, live(n) && (!u || u->healthy) ? 1 : 0);
    }
  }
  out.Family("tianshu_gpu_utilization_ratio", "gauge",
             "Compute busy fraction (0-1) of an accelerator as NVML measured it on its node at "
             "the last heartbeat; no sample where the agent cannot measure it (declared devices, "
             "no NVIDIA driver, MIG mode).");
  for (const NodeEntry& n : nodes) {
    if (!heard(n)) continue;
    for (const auto& d : n.hardware.devices) {
      const auto* u = usage(n, d.index);
      if (u && u->healthy) out.Sample({{"node", n.name}, {"gpu", Gpu(d.index)}}, u->utilization);
    }
  }
  out.Family("tianshu_gpu_memory_used_bytes", "gauge",
             "Device memory in use as NVML measured it at the last heartbeat; no sample where "
             "the agent cannot measure it.");
  for (const NodeEntry& n : nodes) {
    if (!heard(n)) continue;
    for (const auto& d : n.hardware.devices) {
      if (const auto* u = usage(n, d.index); u && u->healthy) {
        out.Sample({{"node", n.name}, {"gpu", Gpu(d.index)}},
                   static_cast<double>(u->memory_used_bytes));
      }
    }
  }
}

}  // namespace

void ControlPlane::CountWait(const Job& j, int64_t now_ms) {
  // Since it last entered `pending` (its submission, or its return after a failed attempt or a
  // requeue); time held counts as waiting.
  int64_t since = j.submitted_ms;
  for (auto it = j.history.rbegin(); it != j.history.rend(); ++it) {
    if (it->to == JobStateName(JobState::kPending)) {
      since = it->time_ms;
      break;
    }
  }
  metrics_.ObserveWait(j.spec.queue,
                       static_cast<double>(std::max<int64_t>(0, now_ms - since)) / 1000.0);
}

std::string ControlPlane::Metrics() const {
  std::unique_lock l(mu_);
  std::map<std::string, int64_t> by_state;
  for (const auto& n : JobStateNames()) by_state[n] = 0;
  // Per queue: every configured queue (or "default" when none is), and any other an unfinished
  // job names, with a sample even when empty.
  struct QueueFigures {
    int64_t pending = 0, gpu_milli = 0;
  };
  std::map<std::string, QueueFigures> queues;
  if (options_.config.queues.empty()) queues["default"];
  for (const auto& q : options_.config.queues) queues[q.name];
  int64_t allocated_milli = 0;
  std::map<std::pair<std::string, int>, int64_t> gpu_milli;  // (node, device) -> allocated
  // The unfinished jobs alone; those that ended are counted by SetState.
  for (JobState s : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    int64_t& n = by_state[std::string(JobStateName(s))];
    for (const auto& [queue, counts] : ended_) n += counts[EndedIndex(s)];
  }
  auto unfinished = [&](const Job& j) {
    by_state[std::string(JobStateName(j.state))]++;
    QueueFigures& q = queues[j.spec.queue];
    if (j.state == JobState::kPending) q.pending++;
    if (HoldsPlacement(j.state) && !j.colocated) {  // an overlaid service holds no GPU share
      allocated_milli += static_cast<int64_t>(j.placement.size()) * j.spec.gpu_milli;
      q.gpu_milli += static_cast<int64_t>(j.placement.size()) * j.spec.gpu_milli;
      for (const RankPlace& p : j.placement) {
        if (p.device >= 0) gpu_milli[{p.node, p.device}] += j.spec.gpu_milli;
      }
    }
  };
  for (int64_t seq : pending_seqs_) unfinished(jobs_.at(seq));
  for (int64_t seq : active_seqs_) unfinished(jobs_.at(seq));
  std::map<std::string, int64_t> node_states = {
      {"ready", 0}, {"degraded", 0}, {"failed", 0}, {"lost", 0}};
  int64_t gpus = 0;
  for (const auto& [name, n] : nodes_) {
    node_states[std::string(NodeStateName(n.state))]++;
    if (n.state == NodeState::kReady || n.state == NodeState::kDegraded) {
      gpus += static_cast<int64_t>(n.hardware.devices.size());
    }
  }
  const double milli = model::kMilliPerGpu;

  Exposition out;
  out.Family("tianshu_queue_length", "gauge", "Jobs waiting for a placement.")
      .Sample(static_cast<double>(by_state["pending"]));
  out.Family("tianshu_jobs", "gauge", "Jobs by state.");
  for (const auto& [s, n] : by_state) out.Sample({{"state", s}}, static_cast<double>(n));
  out.Family("tianshu_jobs_fenced", "gauge",
             "Unfinished jobs whose next attempt waits until their ranks on a lost node are gone "
             "(that node's lease ran out, or it no longer lists them).")
      .Sample(static_cast<double>(fenced_seqs_.size()));
  out.Family("tianshu_nodes", "gauge", "Registered nodes by state.");
  for (const auto& [s, n] : node_states) out.Sample({{"state", s}}, static_cast<double>(n));
  const double alloc = static_cast<double>(allocated_milli) / milli;
  out.Family("tianshu_gpus", "gauge",
             "Accelerators of ready and degraded nodes, allocated or free.")
      .FixedSample({{"state", "allocated"}}, alloc, 3)
      .FixedSample({{"state", "free"}}, static_cast<double>(gpus) - alloc, 3);

  // ---- per queue ----
  out.Family("tianshu_queue_info", "gauge",
             "1 for every queue: its parent in the configured hierarchy (\"\" at the root).");
  for (const auto& [q, f] : queues) {
    std::string parent;
    for (const auto& c : options_.config.queues) {
      if (c.name == q) parent = c.parent;
    }
    out.Sample({{"queue", q}, {"parent", parent}}, 1);
  }
  out.Family("tianshu_queue_pending", "gauge", "Pending jobs per queue.");
  for (const auto& [q, f] : queues) out.Sample({{"queue", q}}, static_cast<double>(f.pending));
  out.Family("tianshu_queue_running_gpus", "gauge",
             "GPUs held by a queue's jobs that hold a placement (whole-GPU equivalents).");
  for (const auto& [q, f] : queues) {
    out.Sample({{"queue", q}}, static_cast<double>(f.gpu_milli) / milli);
  }
  out.Family("tianshu_queue_quota_gpus", "gauge",
             "GPUs a queue is guaranteed by the engine configuration (queues[].quota); no "
             "sample for a queue without a quota.");
  for (const auto& c : options_.config.queues) {
    if (c.quota_gpus > 0) out.Sample({{"queue", c.name}}, static_cast<double>(c.quota_gpus));
  }
  out.Family("tianshu_queue_wait_seconds", "histogram",
             "Seconds from entering the queue (submitted, or back after a failed attempt) to "
             "being placed, one observation per start.");
  const Histogram empty(kQueueWaitBuckets);
  std::set<std::string> waited;
  for (const auto& [q, f] : queues) waited.insert(q);
  for (const auto& [q, h] : metrics_.queue_wait_seconds) waited.insert(q);
  for (const auto& q : waited) {
    auto it = metrics_.queue_wait_seconds.find(q);
    out.HistogramSamples(it == metrics_.queue_wait_seconds.end() ? empty : it->second,
                         {{"queue", q}});
  }

  // ---- scheduling and the store ----
  out.Family("tianshu_cycle_seconds", "histogram", "Duration of one scheduling cycle in seconds.")
      .HistogramSamples(metrics_.cycle_seconds);
  out.Family("tianshu_placement_outcomes_total", "counter", "Placement attempts by outcome.");
  for (const char* k : {"placed", "does-not-fit-now", "can-never-fit"}) {
    auto it = metrics_.placement_outcomes.find(k);
    out.Sample({{"outcome", k}},
               static_cast<double>(it == metrics_.placement_outcomes.end() ? 0 : it->second));
  }
  out.Family("tianshu_submissions_total", "counter", "Job submissions by result.")
      .Sample({{"result", "accepted"}}, static_cast<double>(metrics_.submissions_accepted.load()))
      .Sample({{"result", "rejected"}}, static_cast<double>(metrics_.submissions_rejected.load()));
  const CommitStats cs = committer_->Stats();
  // Counters: name, help, value.
  const std::pair<const char*, std::pair<const char*, int64_t>> counters[] = {
      {"tianshu_cycles_total", {"Scheduling cycles run.", metrics_.cycles}},
      {"tianshu_ledger_rebuilds_total",
       {"Times the scheduling ledger was rebuilt from the records (the store was loaded, a node "
        "joined or left the cluster view, its hardware or measured leaf changed).",
        ledger_stats_.rebuilds}},
      {"tianshu_ledger_node_marks_total",
       {"Nodes marked in the scheduling ledger as taking new work or not (cordon, degraded, "
        "probe) without a rebuild.",
        ledger_stats_.node_marks}},
      {"tianshu_ledger_synced_jobs_total",
       {"Jobs handed to the scheduling ledger again after their record changed.",
        ledger_stats_.synced_jobs}},
      {"tianshu_ledger_mismatches_total",
       {"Cycles at which the ledger differed from a replay of the records (checked only with "
        "TIANSHU_VERIFY_LEDGER=1).",
        ledger_stats_.mismatches}},
      {"tianshu_job_retries_total", {"Attempts restarted after a failure.", metrics_.retries}},
      {"tianshu_gang_timeouts_total",
       {"Gangs released because not every rank started within scheduler.gang_timeout.",
        metrics_.gang_timeouts}},
      {"tianshu_job_preemptions_total",
       {"Running jobs stopped (with a checkpoint) for a higher-priority job.",
        metrics_.preemptions}},
      {"tianshu_job_resizes_total",
       {"Elastic resizes begun (checkpoint, relaunch at the new size).", metrics_.resizes}},
      {"tianshu_job_migrations_total",
       {"Moves begun (checkpoint, relaunch on another placement).", metrics_.migrations}},
      {"tianshu_nodes_lost_total", {"Nodes declared lost or failed.", metrics_.nodes_lost}},
      {"tianshu_jobs_quarantined_total",
       {"Jobs failed at start because their stored record could not be read back.",
        metrics_.quarantined}},
      {"tianshu_mass_silences_total",
       {"Times more than half of the live nodes went silent at once (no node is declared lost "
        "while it lasts).",
        metrics_.mass_silences}},
      {"tianshu_idempotent_replays_total",
       {"Submissions answered with the job their Idempotency-Key made before.",
        metrics_.idempotent_replays}},
      {"tianshu_store_commits_total", {"Durable store transactions.", cs.commits}},
      {"tianshu_store_changes_total", {"State changes written.", cs.changes}},
      {"tianshu_store_written_bytes_total",
       {"Bytes of keys and documents handed to the store.", cs.bytes}},
  };
  for (const auto& [name, rest] : counters) {
    out.Family(name, "counter", rest.first).Sample(static_cast<double>(rest.second));
  }
  out.Family("tianshu_store_commit_seconds_total", "counter",
             "Time spent writing to the store in seconds.")
      .Sample(cs.commit_seconds);
  NetworkMetrics(out);
  // The nodes and GPUs last, from a copy: the lock is not held while they are written.
  std::vector<NodeEntry> nodes;
  nodes.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) nodes.push_back(n);
  l.unlock();
  NodeFamilies(out, nodes, node_states, gpu_milli);
  return out.Take();
}

// The measured network (docs/network.md): one series per measured pair (the probes keep O(N)
// of them, not N^2), the probes and the watch's decisions.
void ControlPlane::NetworkMetrics(Exposition& out) const {
  const std::vector<PairView> pairs =
      PairViews(std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count());
  out.Family("tianshu_network_pair_bandwidth_gbps", "gauge",
             "All-reduce bus bandwidth the probes measured between two nodes (GB/s); fresh "
             "figures only.");
  for (const PairView& v : pairs) {
    if (!v.stale) out.Sample({{"a", v.measured.a}, {"b", v.measured.b}}, v.measured.busbw_gbps);
  }
  out.Family("tianshu_network_pair_nominal_gbps", "gauge",
             "What the topology promises between two measured nodes (GB/s, the cost model's).");
  for (const PairView& v : pairs) {
    if (!v.stale) out.Sample({{"a", v.measured.a}, {"b", v.measured.b}}, v.nominal.gbps);
  }
  out.Family("tianshu_network_pair_slow", "gauge",
             "1 for a pair below network.slow_link_ratio x the best fresh figure of its class.");
  for (const PairView& v : pairs) {
    if (!v.stale) out.Sample({{"a", v.measured.a}, {"b", v.measured.b}}, v.slow ? 1 : 0);
  }
  out.Family("tianshu_network_probes_total", "counter", "Bandwidth probes ended, by result.")
      .Sample({{"result", "done"}}, static_cast<double>(probes_done_))
      .Sample({{"result", "failed"}}, static_cast<double>(probes_failed_))
      .Sample({{"result", "gave_way"}}, static_cast<double>(probes_gave_way_));
  out.Family("tianshu_network_probes_running", "gauge", "Bandwidth probes running now.")
      .Sample(static_cast<double>(probes_.size()));
  out.Family("tianshu_network_decisions_total", "counter",
             "The congestion watch's decisions about running jobs, by action.");
  for (const char* k : {"migrate", "replan", "keep"}) {
    auto it = metrics_.network_decisions.find(k);
    out.Sample({{"action", k}},
               static_cast<double>(it == metrics_.network_decisions.end() ? 0 : it->second));
  }
}

}  // namespace tianshu::server
