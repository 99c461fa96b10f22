#include "tianshu/placement/strategy.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "tianshu/base/strings.h"
#include "tianshu/placement/fit.h"
#include "tianshu/placement/groups.h"
#include "tianshu/placement/internal/builtin.h"

namespace tianshu::placement {

std::string_view OutcomeKindName(OutcomeKind k) {
  switch (k) {
    case OutcomeKind::kPlaced:
      return "placed";
    case OutcomeKind::kDoesNotFitNow:
      return "does-not-fit-now";
    case OutcomeKind::kCanNeverFit:
      return "can-never-fit";
  }
  return "placed";
}

Span SpanOf(const model::Topology& topology, std::span<const RankSlot> ranks) {
  Span span;
  for (const RankSlot& slot : ranks) {
    if (slot.node < 0) continue;
    if (!span.nodes.empty() && span.nodes.back() == slot.node) continue;
    if (std::find(span.nodes.begin(), span.nodes.end(), slot.node) != span.nodes.end()) continue;
    span.nodes.push_back(slot.node);
    const int leaf = topology.nodes[slot.node].leaf;
    if (std::find(span.leaves.begin(), span.leaves.end(), leaf) == span.leaves.end()) {
      span.leaves.push_back(leaf);
    }
  }
  return span;
}

PlacementRequest RequestFromJob(const model::JobSpec& job) {
  PlacementRequest r;
  r.name = job.name;
  r.ranks = job.TotalGpus();
  r.gpu_milli = job.gpu_milli;
  r.gpus_per_node = job.nodes > 0 && job.gpus_per_node > 0 ? job.gpus_per_node : 0;
  r.backend = job.backend;
  r.accelerators = job.accelerators;
  r.node_selector = job.node_selector;
  r.groups = job.groups;
  r.max_leaves = job.max_leaves;
  // Gradients all-reduced per iteration: 2 bytes (BF16) per parameter.
  if (job.model.parameters > 0) r.comm_bytes = 2 * job.model.parameters;
  return r;
}

Status StrategyOptions::Validate() const {
  if (weights.compute < 0 || weights.network < 0 || weights.memory < 0) {
    return Fail("resource_weight: weights cannot be negative");
  }
  const GeneticOptions& g = genetic;
  if (g.population < 2) return Fail("genetic.population must be at least 2");
  if (g.generations < 0) return Fail("genetic.generations cannot be negative");
  if (g.patience < 1) return Fail("genetic.patience must be at least 1");
  if (g.mutation < 0 || g.mutation > 1) return Fail("genetic.mutation must be within 0..1");
  if (g.crossover < 0 || g.crossover > 1) return Fail("genetic.crossover must be within 0..1");
  if (g.elite < 1 || g.elite >= g.population) return Fail("genetic.elite must be 1..population-1");
  if (g.tournament < 1) return Fail("genetic.tournament must be at least 1");
  if (exact.max_nodes < 1) return Fail("exact.max_nodes must be positive");
  for (const TypicalTask& t : workload) {
    if (t.weight < 0 || t.gpus < 0 || t.gpu_milli < 0 || t.gpu_milli > 1000) {
      return Fail("workload: a typical task has a negative weight or a bad GPU share");
    }
  }
  return Ok();
}

std::vector<Outcome> Strategy::PlaceBatch(const ClusterState& snapshot,
                                          std::span<const PlacementRequest> requests) const {
  ClusterState work = snapshot;
  std::vector<Outcome> out;
  out.reserve(requests.size());
  for (const PlacementRequest& r : requests) {
    Outcome o = Place(work, r);
    if (o.placed() && !Apply(&work, r, o)) {
      o = NotNow(r, 0);
      o.reason += " (placement did not apply)";
    }
    out.push_back(std::move(o));
  }
  return out;
}

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, StrategyFactory> factories;
};

template <auto New>
StrategyFactory Wrap() {
  return [](const StrategyOptions& o) -> Result<std::unique_ptr<Strategy>> { return New(o); };
}

Registry& GetRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->factories["first-fit"] = Wrap<internal::NewFirstFit>();
    reg->factories["random"] = Wrap<internal::NewRandom>();
    reg->factories["spread"] = Wrap<internal::NewSpread>();
    reg->factories["best-fit"] = Wrap<internal::NewBestFit>();
    reg->factories["yarn"] = Wrap<internal::NewYarn>();
    reg->factories["topology"] = Wrap<internal::NewTopology>();
    reg->factories["fgd"] = Wrap<internal::NewFgd>();
    reg->factories["genetic"] = Wrap<internal::NewGenetic>();
    reg->factories["exact"] = Wrap<internal::NewExact>();
    return reg;
  }();
  return *r;
}

}  // namespace

std::vector<std::string> StrategyNames() {
  Registry& reg = GetRegistry();
  std::lock_guard lock(reg.mu);
  std::vector<std::string> names;
  for (const auto& [n, f] : reg.factories) names.push_back(n);
  return names;
}

Result<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name,
                                               const StrategyOptions& options) {
  if (auto st = options.Validate(); !st) return std::unexpected(st.error());
  StrategyFactory factory;
  {
    Registry& reg = GetRegistry();
    std::lock_guard lock(reg.mu);
    auto it = reg.factories.find(std::string(name));
    if (it == reg.factories.end()) {
      std::vector<std::string> names;
      for (const auto& [n, f] : reg.factories) names.push_back(n);
      std::string near = NearestWord(name, names);
      return Fail("unknown placement strategy '", std::string(name), "'",
                  near.empty() ? std::string() : " (did you mean '" + near + "'?)",
                  "; known: ", Join(names, ", "));
    }
    factory = it->second;
  }
  auto built = factory(options);
  if (!built) return built;
  return HonourConstraints(std::move(*built));  // groups and leaf bounds, for every strategy
}

Status RegisterStrategy(const std::string& name, StrategyFactory factory) {
  Registry& reg = GetRegistry();
  std::lock_guard lock(reg.mu);
  if (reg.factories.count(name))
    return Fail("placement strategy '", name, "' is already registered");
  reg.factories[name] = std::move(factory);
  return Ok();
}

namespace {

// Sorts (key, amount) pairs by key and merges equal keys, summing their amounts.
void SumByKey(std::vector<std::pair<int, int>>* v) {
  std::sort(v->begin(), v->end());
  size_t out = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    if (out > 0 && (*v)[out - 1].first == (*v)[i].first) {
      (*v)[out - 1].second += (*v)[i].second;
    } else {
      (*v)[out++] = (*v)[i];
    }
  }
  v->resize(out);
}

// Applies (sign +1) or releases (sign -1) after checking every resource first, so that a
// failure changes nothing.
Status Change(ClusterState* state, const PlacementRequest& r, const Outcome& o, int sign) {
  if (!o.placed()) return Fail("'", r.name, "' is not placed");
  if (static_cast<int>(o.ranks.size()) != r.ranks) {
    return Fail("'", r.name, "' has ", std::to_string(o.ranks.size()), " slots for ",
                std::to_string(r.ranks), " ranks");
  }
  // Per GPU and per node, in ascending order (sorted vectors: this runs for every trial of a
  // scheduling cycle, and a map allocates per entry).
  std::vector<std::pair<int, int>> gpu_milli;
  std::vector<std::pair<int, int>> node_ranks;
  gpu_milli.reserve(o.ranks.size());
  node_ranks.reserve(o.ranks.size());
  for (const RankSlot& s : o.ranks) {
    if (s.node < 0 || s.node >= state->topology().NumNodes()) {
      return Fail("'", r.name, "': no node ", std::to_string(s.node));
    }
    const int first = state->topology().nodes[s.node].first_gpu;
    if (s.gpu >= 0 && (s.gpu < first || s.gpu >= first + state->topology().GpusOn(s.node))) {
      return Fail("'", r.name, "': GPU ", std::to_string(s.gpu), " is not on node ",
                  state->topology().nodes[s.node].name);
    }
    if (s.gpu >= 0) gpu_milli.emplace_back(s.gpu, r.gpu_milli);
    node_ranks.emplace_back(s.node, 1);
  }
  SumByKey(&gpu_milli);
  SumByKey(&node_ranks);
  for (auto [g, m] : gpu_milli) {
    if (g >= state->topology().NumGpus()) return Fail("'", r.name, "': no GPU ", std::to_string(g));
    int after = state->GpuFreeMilli(g) - sign * m;
    if (after < 0 || after > model::kMilliPerGpu) {
      return Fail("'", r.name, "': GPU ", std::to_string(g), " has ",
                  std::to_string(state->GpuFreeMilli(g)), " milli free, needs ", std::to_string(m));
    }
  }
  for (auto [n, k] : node_ranks) {
    int64_t cpu = state->CpuFreeMilli(n) - sign * k * r.cpu_milli_per_rank;
    int64_t mem = state->MemoryFreeBytes(n) - sign * k * r.memory_bytes_per_rank;
    int64_t sto = state->StorageFreeBps(n) - sign * r.storage_bps_per_node;
    if (cpu < 0 || mem < 0 || sto < 0 || cpu > state->CpuCapacity(n) ||
        mem > state->MemoryCapacity(n) || sto > state->StorageCapacity(n)) {
      return Fail("'", r.name, "': node ", state->topology().nodes[n].name,
                  " lacks the CPU, memory or storage asked for");
    }
  }
  for (auto [g, m] : gpu_milli) {
    Status st = sign > 0 ? state->TakeGpu(g, m) : state->ReturnGpu(g, m);
    if (!st) return st;
  }
  for (auto [n, k] : node_ranks) {
    Status st = sign > 0 ? state->TakeHost(n, k * r.cpu_milli_per_rank, k * r.memory_bytes_per_rank,
                                           r.storage_bps_per_node)
                         : state->ReturnHost(n, k * r.cpu_milli_per_rank,
                                             k * r.memory_bytes_per_rank, r.storage_bps_per_node);
    if (!st) return st;
  }
  return Ok();
}

}  // namespace

Status Apply(ClusterState* state, const PlacementRequest& r, const Outcome& o) {
  return Change(state, r, o, +1);
}

Status Release(ClusterState* state, const PlacementRequest& r, const Outcome& o) {
  if (!o.placed()) return Ok();
  return Change(state, r, o, -1);
}

}  // namespace tianshu::placement
