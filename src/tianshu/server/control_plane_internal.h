// Inside the control plane: what its parts (control_plane*.cc) share. Not for other users.
//   the transaction of one change (Txn), Mutate (run a change under the lock, write it, wait
//   until durable), and small helpers on jobs, placements and order ids.
#pragma once

#include "tianshu/server/control_plane.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/comm/comm_plan.h"
#include "tianshu/engine/engine.h"
#include "tianshu/estimate/serving.h"
#include "tianshu/model/load.h"
#include "tianshu/placement/strategy.h"
#include "tianshu/policy/builtin.h"
#include "tianshu/policy/elastic.h"

namespace tianshu::server {

using nlohmann::json;

namespace detail {

constexpr const char* kOutstanding = "outstanding";
constexpr int64_t kLinkChangeQuietMs = 60'000;  // a node's link-rate changes: one a minute

inline std::string OrderId(const std::string& job, int attempt, const std::string& what,
                           const std::string& node) {
  return job + ".a" + std::to_string(attempt) + "." + what + "." + node;
}

// "j-000001.a2.launch.node-0" -> 2; -1 when the id is not one of ours.
inline int AttemptOf(const std::string& order_id) {
  size_t dot = order_id.find(".a");
  if (dot == std::string::npos) return -1;
  size_t end = order_id.find('.', dot + 2);
  int64_t v = 0;
  if (!ParseInt64(std::string_view(order_id).substr(dot + 2, end - dot - 2), &v)) return -1;
  return static_cast<int>(v);
}

// Whether `order_id` is an order OrderId made for job `job`'s attempt `attempt` on `node`:
// "launch", "stop" or "ckpt.N" with 1 <= N <= max_ckpt. Node names may hold dots, so the node is
// matched whole, not as a suffix of another.
inline bool IsOrderOf(const std::string& order_id, const std::string& job, int attempt,
                      const std::string& node, int max_ckpt) {
  const std::string prefix = job + ".a" + std::to_string(attempt) + ".";
  const std::string tail = "." + node;
  if (!order_id.starts_with(prefix) || !order_id.ends_with(tail) ||
      order_id.size() < prefix.size() + tail.size()) {
    return false;
  }
  std::string_view what = std::string_view(order_id).substr(
      prefix.size(), order_id.size() - prefix.size() - tail.size());
  if (what == "launch" || what == "stop") return true;
  int64_t n = 0;
  return what.starts_with("ckpt.") && ParseInt64(what.substr(5), &n) && n >= 1 && n <= max_ckpt;
}

// The keys and values of a job's progress rows (store.h ProgressRow), written by ApplyReport
// (and by Load for a v2 record) and read back by Load.
inline std::string AcceptedKey(const std::string& node) { return "a/" + node; }
inline std::string StartedKey(int rank) { return "s/" + std::to_string(rank); }
inline std::string ExitedKey(int rank) { return "x/" + std::to_string(rank); }
inline std::string ExitedValue(int code, int signal) {
  return std::to_string(code) + " " + std::to_string(signal);
}
inline std::string SeenKey(const std::string& report) { return "r/" + report; }

inline std::string HeldMessage(const std::string& id) {
  return "held: not scheduled until released (tianshu release " + id + ")";
}

inline std::string HostOf(const std::string& address) {
  if (address.empty()) return "127.0.0.1";
  if (address.front() == '[') return address.substr(0, address.find(']') + 1);
  size_t colon = address.rfind(':');
  if (colon != std::string::npos && address.find(':') == colon) return address.substr(0, colon);
  return address;
}

// The host a node's ranks are reached on: its data address, else its address's host.
inline std::string DataHostOf(const NodeEntry& n) {
  return HostOf(n.data_address.empty() ? n.address : n.data_address);
}

// Whether node `name` can no longer run what it was given: removed, failed or lost.
inline bool NodeGone(const std::map<std::string, NodeEntry>& nodes, const std::string& name) {
  auto it = nodes.find(name);
  return it == nodes.end() || it->second.state == NodeState::kLost ||
         it->second.state == NodeState::kFailed;
}

// A node new work may go to: ready, not cordoned, not being probed (the others keep theirs).
inline bool TakesNewWork(const NodeEntry& n) {
  return n.state == NodeState::kReady && !n.cordoned && n.probing.empty();
}

// One rank of a job that holds a placement, on one device of a node.
struct DeviceHold {
  std::string node, job;
  int device = 0, rank = 0, gpu_milli = 0;
};
// The ranks the jobs `holding` names (those that hold a placement) have on devices; with
// `node`, on that node's alone. Cheap enough to take under the lock; the JSON comes after.
std::vector<DeviceHold> DeviceHolds(const std::map<int64_t, Job>& jobs,
                                    const std::set<int64_t>& holding, const std::string& node = "");
// Per node, per device index: those ranks as node views list them.
std::map<std::string, std::map<int, json>> AllocationsByNode(const std::vector<DeviceHold>& holds);
// A node's view, with the ranks on each of its devices (`allocations`, from AllocationsByNode).
json NodeJson(const NodeEntry& n, const std::map<int, json>& allocations, int64_t now_ms);

// The unfinished jobs in job order: the pending ones and those holding a placement (the two
// state indexes, which never share a job), for reads that need not walk every job kept.
inline std::vector<int64_t> UnfinishedSeqs(const std::set<int64_t>& pending,
                                           const std::set<int64_t>& placed) {
  std::vector<int64_t> out;
  out.reserve(pending.size() + placed.size());
  std::merge(pending.begin(), pending.end(), placed.begin(), placed.end(), std::back_inserter(out));
  return out;
}

// Whether a job in state `s` holds its placement (launched, running, or not yet stopped).
inline bool HoldsPlacement(JobState s) {
  return s == JobState::kStarting || s == JobState::kRunning || s == JobState::kStopping;
}
// A terminal state's place in ControlPlane::ended_ (per queue: succeeded, failed, cancelled).
inline size_t EndedIndex(JobState s) {
  return static_cast<size_t>(s) - static_cast<size_t>(JobState::kSucceeded);
}

// GPU-seconds of service a job has had: its ended runs, and the current one up to now_ms
// since its first rank started (the wait for the launch is no service).
inline double AttainedNow(const Job& j, int64_t now_ms) {
  if (!HoldsPlacement(j.state) || j.run_started_ms == 0) return j.attained_gpu_s;
  return j.attained_gpu_s + static_cast<double>(std::max<int64_t>(0, now_ms - j.run_started_ms)) /
                                1000.0 * j.run_gpus * j.spec.gpu_milli / model::kMilliPerGpu;
}

inline std::vector<RankPlace> PlacesFromJson(const json& a) {
  std::vector<RankPlace> out;
  for (const auto& p : a)
    out.push_back({p.value("rank", 0), p.value("node", ""), p.value("device", -1)});
  return out;
}

inline json PlacesJson(const std::vector<RankPlace>& places) {
  json out = json::array();
  for (const auto& p : places) {
    out.push_back({{"rank", p.rank}, {"node", p.node}, {"device", p.device}});
  }
  return out;
}

// A job's ended runs as stored: [[start_ms, end_ms, gpus], ...].
inline json RunsJson(const std::vector<Job::Run>& runs) {
  json out = json::array();
  for (const auto& r : runs) out.push_back(json::array({r.start_ms, r.end_ms, r.gpus}));
  return out;
}

// Topology slots as the agents name them (node name, device index), in rank order.
inline std::vector<RankPlace> PlacesOf(const ClusterView& view,
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
inline std::vector<placement::RankSlot> AddedSlots(const std::vector<placement::RankSlot>& held,
                                                   const std::vector<placement::RankSlot>& target) {
  std::vector<placement::RankSlot> out;
  for (const auto& slot : target) {
    if (std::find(held.begin(), held.end(), slot) == held.end()) out.push_back(slot);
  }
  return out;
}

// And back; nullopt when a node is not in the view (gone since).
inline std::optional<std::vector<placement::RankSlot>> SlotsOf(
    const ClusterView& view, const std::vector<RankPlace>& places) {
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

inline json RunJson(const RunSpec& r) {
  return {{"command", r.command}, {"env", r.env}, {"workdir", r.workdir}};
}

inline RunSpec RunFromJson(const json& j) {
  RunSpec r;
  if (!j.is_object()) return r;
  r.command = j.value("command", std::vector<std::string>{});
  r.env = j.value("env", std::map<std::string, std::string>{});
  r.workdir = j.value("workdir", std::string());
  return r;
}

}  // namespace detail

struct ControlPlane::Txn {
  std::set<int64_t> jobs;
  // Records to write in this change whose ledger state did not change (later_docs_: waiting
  // jobs' new messages); unlike `jobs`, they are not handed to the ledger again.
  std::set<int64_t> rewrite;
  std::set<std::string> nodes;
  std::set<std::string> nodes_removed;  // deleted from the store (and gone from nodes_)
  std::vector<OrderRow> orders;
  std::vector<json> events;
  std::vector<int64_t> created;
  std::map<std::string, std::string> meta;
  std::vector<ProgressRow> progress;        // facts of current attempts, written on their own
  std::vector<std::string> progress_reset;  // jobs starting a new attempt: old rows go
  std::set<std::string> wake_work;          // nodes whose Work waiters have new orders to see
  uint64_t wait_for = 0;  // a commit the answer depends on (a replayed submission's)
  int64_t waiting_gpus = 0, waiting_ms = 0;  // the GPUs of work that started waiting (SetState)
  // The rendezvous ports held per master node: (port, job seq), gathered by the change's first
  // RendezvousPort and kept up to date by the rest.
  std::optional<std::map<std::string, std::set<std::pair<int, int64_t>>>> ports_taken;
  bool Empty() const {
    return jobs.empty() && rewrite.empty() && nodes.empty() && nodes_removed.empty() &&
           orders.empty() && events.empty() && meta.empty() && progress.empty() &&
           progress_reset.empty();
  }
};

template <typename T, typename F>
ApiResult<T> ControlPlane::Mutate(F&& f) {
  std::unique_lock lock(mu_);
  if (options_.read_only) {  // a follower's view: nothing changes, in memory or in the store
    return Refuse(503,
                  "this is a follower's read-only view of the store: send changes to the "
                  "leader");
  }
  if (committer_->Failed()) {
    return Refuse(503, "the store failed to write; this server accepts no more changes");
  }
  Txn txn;
  ApiResult<T> r = f(txn);
  NoteLedgerChanges(txn);
  // Work that cannot all fit outside a running probe stops it now: its stop orders are then
  // durable with this change, not with the cycle that places what fits (for a release of
  // thousands of jobs, hundreds of milliseconds later), while the probe's processes compete
  // with the launches. Work that fits elsewhere leaves it running; what still waits after the
  // cycle stops it there (NetworkTick).
  if (txn.waiting_gpus > 0 && !probes_.empty() && txn.waiting_gpus > FreeGpusOutsideProbes()) {
    ProbesGiveWay(txn, txn.waiting_ms);
  }
  const bool wake_tick = schedule_dirty_;
  if (txn.Empty()) {
    lock.unlock();
    if (wake_tick) tick_cv_.notify_all();
    outbox_.Wake(txn.wake_work);
    if (txn.wait_for != 0) {
      if (Status s = committer_->Wait(txn.wait_for); !s) {
        return Refuse(503, "the store failed to write: " + s.error().message);
      }
    }
    return r;
  }
  Change c;
  auto write = [&](const Job& j) {
    c.jobs.push_back({j.id, j.seq, std::string(JobStateName(j.state)), JobDoc(j)});
  };
  for (int64_t seq : txn.jobs) write(jobs_.at(seq));
  for (int64_t seq : txn.rewrite) {
    auto it = jobs_.find(seq);
    if (it != jobs_.end() && !txn.jobs.contains(seq)) write(it->second);
  }
  for (const auto& name : txn.nodes) {
    if (txn.nodes_removed.contains(name)) continue;
    const NodeEntry& n = nodes_.at(name);
    json d = {{"agent_id", n.agent_id},
              {"address", n.address},
              {"hardware", wire::ToJson(n.hardware)},
              {"state", NodeStateName(n.state)},
              {"message", n.message},
              {"registered_ms", n.registered_ms},
              {"credential_sha256", n.credential_hash},
              {"rejoin", n.rejoin},
              {"cordoned", n.cordoned},
              {"draining", n.draining},
              {"data_address", n.data_address},
              {"data_interface", n.data_interface},
              {"log_key", n.log_key}};
    c.nodes.push_back({name, wire::Dump(d)});
  }
  c.nodes_removed.assign(txn.nodes_removed.begin(), txn.nodes_removed.end());
  // The orders this change added (AddOrder alone writes outstanding rows; one also finished
  // in it is gone), durable with its ticket.
  std::vector<const OrderEntry*> added;
  for (const auto& row : txn.orders) {
    if (row.status != detail::kOutstanding) continue;
    if (auto o = orders_.find(row.id); o != orders_.end()) added.push_back(&o->second);
  }
  c.orders = std::move(txn.orders);
  for (const auto& e : txn.events) {
    c.events.push_back({e["seq"].get<int64_t>(), e["time_ms"].get<int64_t>(), wire::Dump(e)});
  }
  c.progress_reset = std::move(txn.progress_reset);
  c.progress = std::move(txn.progress);
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
  for (const OrderEntry* o : added) outbox_.SetTicket(o->node, o->seq, ticket);
  lock.unlock();
  Status s = committer_->Wait(ticket);
  // The agents' held-open requests first: the outbox orders its wake-ups with its own lock.
  outbox_.Wake(txn.wake_work);
  if (wake_tick) tick_cv_.notify_all();  // schedule_dirty_ was set under the lock
  // A long poll of the events (WaitEvents) looks at what is durable under the lock: taking it
  // orders this wake-up after that look. With no such poll (each counts itself before it
  // looks) the lock, which a scheduling cycle may hold for a while, is not waited for: the
  // answer to this change, and the next change of the caller (an agent's reports), would wait
  // for the cycle.
  if (event_waiters_.load() > 0) {
    std::lock_guard l(mu_);
  }
  events_cv_.notify_all();
  if (!s) return Refuse(503, "the store failed to write: " + s.error().message);
  return r;
}

}  // namespace tianshu::server
