// The measured network (issue 18, docs/network.md): what bandwidth probes found between node
// pairs and when, which pairs to probe next, and what the figures mean for the scheduler: the
// pairs slower than their nominal peers, the groups of nodes that reach each other at full
// speed (the leaves placement sees), and a comm::BandwidthMatrix for the communicator plan.
// A value owned by the control plane (under its lock); pure: time and the nominal figures are
// passed in.
//   NetworkMap m;
//   m.Record({.a = "n1", .b = "n3", .busbw_gbps = 1.1, .method = "gloo", .measured_ms = now});
//   auto next = m.NextProbe(nodes, nominal, config.network, now);  // {"n1", "n2"}
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/wire/wire.h"

namespace tianshu::server {

// What one probe measured between two nodes (a < b by name).
struct MeasuredPair {
  std::string a, b;
  double busbw_gbps = 0;     // all-reduce bus bandwidth, GB/s
  double forward_gbps = 0;   // send/recv a -> b (0: not measured)
  double backward_gbps = 0;  // b -> a
  std::string method;        // "gloo", "nccl-tests", ...
  int64_t measured_ms = 0;   // when the probe ended (0: never succeeded)
  // The bus bandwidth the success before this one measured (kNoFigure: none): a pair is
  // confirmed slow only when both are, so one disturbed probe does not reshape the leaves
  // placement sees.
  static constexpr double kNoFigure = -1;
  double previous_gbps = kNoFigure;
  int failures = 0;       // probes that failed since the last success
  int64_t failed_ms = 0;  // when the last one failed
};

// A node as the probe planner sees it.
struct ProbeNode {
  std::string name;
  std::string leaf;        // nominal leaf (the `leaf` label; "leaf0" without one)
  int64_t changed_ms = 0;  // (re-)registered or a link's rate changed: its pairs are due again
  bool idle = false;       // ready, not cordoned, nothing placed or probing there
};

// The interfaces whose line rate changed between two heartbeats' samples, as
// "eth0 100 Gbit/s -> 25 Gbit/s": a port that had a rate and renegotiated or went down. An
// interface that appeared, went away or came up from no rate is not a change (container hosts
// make, start and remove virtual ones all the time). Empty when there is none or either sample
// is missing.
std::vector<std::string> LinkRateChanges(const std::optional<wire::NetworkSample>& before,
                                         const std::optional<wire::NetworkSample>& after);

// The nominal figure and class of a pair: pairs of one class should measure alike.
struct NominalPair {
  double gbps = 0;    // what the topology promises (cost model, GB/s bus bandwidth)
  std::string klass;  // e.g. "same-leaf 12.5 GB/s"
};
using NominalOf = std::function<NominalPair(const std::string& a, const std::string& b)>;

// One pair as shown to users (GET /v1/topology/measured).
struct PairView {
  MeasuredPair measured;
  NominalPair nominal;
  double class_best_gbps = 0;  // best fresh figure of its nominal class
  bool slow = false;           // fresh and below slow_link_ratio x class_best
  bool confirmed = false;      // slow, and its previous figure was below that line too
  bool stale = false;          // older than measured_ttl: shown, not used
  // What the scheduler uses (fresh pairs; else 0): the nominal figure x measured / class best.
  // Probes measure a path of their own (gloo over TCP, even where jobs use RDMA), so a figure is
  // taken for how far a pair falls short of its peers, on the scale the cost model knows.
  double effective_gbps = 0;
  double age_s = 0;
};

// A re-plan in place the network watch decided for a job (control_plane_watch.cc): its launches
// on exactly these nodes take this all-reduce algorithm, where the cost model would pick one for
// the probes' figures, which do not know that a link got slower since.
struct CommReplan {
  std::string algorithm;  // "ring" | "tree" | "hierarchical"; "" = none
  std::vector<std::string> nodes;
};

// A bandwidth probe the control plane runs (control_plane_network.cc).
struct ProbeRun {
  std::string id, a, b;  // a runs rank 0 (the rendezvous), b rank 1
  int64_t started_ms = 0;
  bool stopping = false;
  int64_t stop_sent_ms = 0;
  bool recorded = false;       // rank 0 reported a result
  std::set<std::string> done;  // nodes whose rank exited, refused or stopped
  std::string failure;         // why it is being stopped
  bool gave_way = false;       // stopped for waiting work: not a failure of the pair
};

// What the watch knows of a running job's attempt (not persisted: a restarted server
// measures the baseline again).
struct JobWatch {
  int attempt = -1;
  int64_t first_progress_ms = 0;  // its first progress report: the launch's cost
  double baseline_s = 0;          // step time once 5 steps were timed
  double current_s = 0;
  int64_t slow_since_ms = 0;  // slow with congestion seen since
  int64_t decided_ms = 0;     // the last decision (network.replan_cooldown)
};

class NetworkMap {
 public:
  // A probe's success replaces the pair's figures (the one it replaces becomes
  // previous_gbps); a failure only counts.
  void Record(MeasuredPair p);
  void RecordFailure(const std::string& a, const std::string& b, int64_t now_ms);
  const MeasuredPair* Find(const std::string& a, const std::string& b) const;
  // Forgets every pair of a removed node; returns their meta keys (to write as "").
  std::vector<std::string> ForgetNode(const std::string& node);
  size_t size() const { return pairs_.size(); }

  // Persistence in the store's meta rows: one key per pair ("net/pair/A|B" -> JSON), so a
  // probe rewrites one row. Load skips (and lists) rows it cannot read.
  static bool IsMetaKey(const std::string& key);
  static std::string MetaKey(const std::string& a, const std::string& b);
  std::string MetaValue(const std::string& a, const std::string& b) const;
  std::vector<std::string> Load(const std::map<std::string, std::string>& meta);

  // The pairs that cover the fabric without all N^2 (docs/network.md): every pair inside a
  // nominal leaf of at most full_mesh_max_nodes nodes; in a larger leaf a ring and a chord
  // that moves on each round; between two leaves one pair whose members move on each round.
  static std::vector<std::pair<std::string, std::string>> CoverPairs(
      const std::vector<ProbeNode>& nodes, int full_mesh_max_nodes, int64_t round);
  // The next pair to probe now, both nodes idle: never measured first, then the longest
  // due (older than probe_interval, or a node changed since). A pair slow but not confirmed
  // (one figure) is due again kRecheckMs after it was measured. Pairs that failed wait
  // probe_interval x their failures (at most 8x) before another try.
  static constexpr int64_t kRecheckMs = 5000;
  std::optional<std::pair<std::string, std::string>> NextProbe(const std::vector<ProbeNode>& nodes,
                                                               const NominalOf& nominal,
                                                               const model::NetworkConfig& config,
                                                               int64_t now_ms) const;

  // Every known pair among `nodes`, judged against its nominal class.
  std::vector<PairView> View(const std::vector<std::string>& nodes, const NominalOf& nominal,
                             const model::NetworkConfig& config, int64_t now_ms) const;
  // The measured leaves: inside each nominal leaf, the groups joined by fresh pairs that are
  // not slow; groups join one another unless a confirmed slow pair lies between them (a pair
  // slow on one figure is no evidence either way). Largest group first. Node -> leaf
  // name: the nominal name where the leaf stays whole, "LEAF~K" for its K-th group otherwise.
  std::map<std::string, std::string> MeasuredLeaves(const std::vector<ProbeNode>& nodes,
                                                    const NominalOf& nominal,
                                                    const model::NetworkConfig& config,
                                                    int64_t now_ms) const;

 private:
  static std::pair<std::string, std::string> Key(const std::string& a, const std::string& b) {
    return a < b ? std::pair{a, b} : std::pair{b, a};
  }
  std::map<std::pair<std::string, std::string>, MeasuredPair> pairs_;
  uint64_t version_ = 0;  // bumped by every change to pairs_
  // NextProbe's pairs to measure again (slow on one figure), judged by View over every pair:
  // kept while nothing was recorded, the nodes are as many and the minute is the same (figures
  // age into staleness), as NextProbe runs every planning second.
  struct RecheckCache {
    uint64_t version = UINT64_MAX;
    size_t nodes = 0;
    int64_t minute = -1;
    std::set<std::pair<std::string, std::string>> pairs;
  };
  mutable RecheckCache recheck_;
};

}  // namespace tianshu::server
