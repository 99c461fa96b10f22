// Placement: given a snapshot of the cluster and one job (or a batch of pending jobs), choose
// the accelerator of every rank, in rank order. Strategies are plugins found by name (the
// names `scheduler.algorithm` accepts), built from typed options, and return an Outcome —
// placed, does not fit now, or can never fit, with a reason — never an exception.
//
//   auto s = MakeStrategy("topology", StrategyOptions{});
//   Outcome o = (*s)->Place(snapshot, PlacementRequest{.name = "j", .ranks = 16});
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/accelerator.h"
#include "tianshu/model/cluster_state.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/job.h"

namespace tianshu::placement {

using model::ClusterState;

// What one job asks of the cluster. Every rank gets one accelerator (or a `gpu_milli` share of
// one; 0 = a CPU-only rank); the gang is placed all or nothing.
struct PlacementRequest {
  std::string name;
  int ranks = 1;
  int gpu_milli = 1000;      // share of one device per rank, in thousandths
  int gpus_per_node = 0;     // 0: any split; else each node used holds exactly this many
  bool single_node = false;  // all ranks on one node (a Kubernetes pod)
  int64_t cpu_milli_per_rank = 0;
  int64_t memory_bytes_per_rank = 0;
  int64_t device_memory_bytes = 0;   // device memory each rank needs (0: not known)
  int64_t storage_bps_per_node = 0;  // checkpoint write bandwidth each node must sustain
  std::optional<model::Backend> backend;
  std::vector<std::string> accelerators;  // acceptable models (case-insensitive); empty = any
  std::map<std::string, std::string> node_selector;
  int64_t comm_bytes = 1 << 30;  // bytes all-reduced per iteration, for the network term
  // Nested gang groups, innermost first (see groups.h); every strategy honours them.
  std::vector<model::RankGroup> groups;
  // The most leaf switches the ranks may span (see leaves.h; every strategy honours it):
  // 0 any, model::kFewestLeaves the fewest that could hold the job.
  int max_leaves = 0;

  // Whether it asks for a shape a count of free GPUs cannot show: nested groups or a leaf
  // bound (a count that fits may still not place it).
  bool Shaped() const { return !groups.empty() || max_leaves != 0; }
};

// The request for a job as users describe it.
PlacementRequest RequestFromJob(const model::JobSpec& job);

enum class OutcomeKind {
  kPlaced,         // every rank has an accelerator
  kDoesNotFitNow,  // the cluster could hold it, but not with what is free now
  kCanNeverFit,    // no state of this cluster could hold it (filters or size)
};
std::string_view OutcomeKindName(OutcomeKind k);

struct RankSlot {
  int node = -1;
  int gpu = -1;  // global GPU index; -1 for a CPU-only rank
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads the defaulted <=>
  auto operator<=>(const RankSlot&) const = default;
};

struct Outcome {
  OutcomeKind kind = OutcomeKind::kDoesNotFitNow;
  std::vector<RankSlot> ranks;  // rank order, when placed
  std::string reason;           // why not placed, or a note on how it was placed

  bool placed() const { return kind == OutcomeKind::kPlaced; }
};

// The placed outcome holding `ranks`: what a job already runs on (to apply or release it).
inline Outcome PlacedOutcome(std::vector<RankSlot> ranks) {
  return Outcome{.kind = OutcomeKind::kPlaced, .ranks = std::move(ranks)};
}

// The distinct nodes and leaf switches a placement uses, each in order of first use.
struct Span {
  std::vector<int> nodes;
  std::vector<int> leaves;
};
Span SpanOf(const model::Topology& topology, std::span<const RankSlot> ranks);

// Options of the genetic strategy (steps, not wall-clock time, so a run is reproducible).
struct GeneticOptions {
  int population = 24;
  int generations = 40;    // step budget: at most population x generations evaluations
  int patience = 12;       // early stop after this many generations without improvement
  double mutation = 0.15;  // per-job mutation probability, raised while the search stalls
  double crossover = 0.9;
  int elite = 2;
  int tournament = 3;
};

// Options of the exact (MIP) strategy.
struct ExactOptions {
  int max_nodes = 2000;       // branch-and-bound node budget
  int max_variables = 20000;  // refuse instances larger than this (falls back to topology)
};

// One kind of task of the expected workload, for fragmentation-aware placement (FGD).
struct TypicalTask {
  int64_t cpu_milli = 0;
  int gpus = 1;                     // GPUs per task (1 for a shared GPU)
  int gpu_milli = 1000;             // per GPU
  std::vector<std::string> models;  // acceptable GPU models; empty = any
  double weight = 1;                // relative frequency
  int64_t memory_bytes = 0;         // host memory (0: not considered)
};

enum class FgdScore { kInteger, kExact };
enum class FgdTies { kShuffled, kRandom, kFirst };

struct StrategyOptions {
  uint64_t seed = 42;
  model::ResourceWeight weights;  // cluster.resource_weight
  GeneticOptions genetic;
  ExactOptions exact;
  std::vector<TypicalTask> workload;  // FGD's target workload; empty = the request itself
  // How FGD compares the nodes where a task fits. kInteger: the score of the published FGD
  // scheduler plugin (hkust-adsl/kubernetes-scheduler-simulator, fgd_score.go),
  // int(100 * sigmoid((F_before - F_after) / 1000)), so nodes whose fragmentation grows by
  // amounts within about 40 milli-GPU of each other tie and fgd_ties picks among them.
  // kExact: the smallest growth, ties to the node with less free GPU share, then the lower id.
  // With no `workload` (a job scored against itself, as the engine and the server do), FGD
  // always scores kExact.
  FgdScore fgd_score = FgdScore::kInteger;
  // Which of the nodes tied on the integer score: kShuffled the first in a node order shuffled
  // once per seed (a fixed preference, so load gathers on the same nodes and the others stay
  // whole), kRandom one at random (kube-scheduler's selectHost), kFirst the lowest id.
  FgdTies fgd_ties = FgdTies::kShuffled;

  [[nodiscard]] Status Validate() const;
};

// A placement strategy. Implementations are stateless between calls and thread-compatible:
// Place and PlaceBatch are const and depend only on their arguments and the options (the
// seed), so the same input gives the same Outcome.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view Name() const = 0;

  // Places one job on the snapshot (which it does not change).
  virtual Outcome Place(const ClusterState& snapshot, const PlacementRequest& request) const = 0;

  // Places a batch of jobs together, in the given (priority) order: outcome i belongs to
  // request i and every placed outcome fits alongside the earlier ones. The default places
  // them one by one on a working copy; `genetic` and `exact` search over the batch.
  virtual std::vector<Outcome> PlaceBatch(const ClusterState& snapshot,
                                          std::span<const PlacementRequest> requests) const;

  // A request this strategy's own rule refuses on every state of the cluster (`idle`: the
  // cluster with nothing allocated), beyond what NeverFits says of any strategy: kCanNeverFit
  // with the reason, judged at submission. nullopt by default (no rule of its own).
  virtual std::optional<Outcome> NeverPlaces(const ClusterState& idle,
                                             const PlacementRequest& request) const {
    (void)idle;
    (void)request;
    return std::nullopt;
  }
};

using StrategyFactory =
    std::function<Result<std::unique_ptr<Strategy>>(const StrategyOptions& options)>;

// Names of the registered strategies, in name order.
std::vector<std::string> StrategyNames();
// Builds a strategy by name; fails on an unknown name (suggesting the nearest) or bad options.
[[nodiscard]] Result<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name,
                                                             const StrategyOptions& options = {});
// Adds a strategy (for plugins and tests); fails if the name is taken.
[[nodiscard]] Status RegisterStrategy(const std::string& name, StrategyFactory factory);

// Applies a placed outcome to a state (GPU shares, CPU, memory, storage); fails, changing
// nothing, if it does not fit. Release undoes it.
[[nodiscard]] Status Apply(ClusterState* state, const PlacementRequest& request,
                           const Outcome& outcome);
[[nodiscard]] Status Release(ClusterState* state, const PlacementRequest& request,
                             const Outcome& outcome);

}  // namespace tianshu::placement
