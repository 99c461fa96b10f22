// The `auto` parallelism search: (t, p, d, micro-batch, recomputation, ZeRO stage,
// interleaving) that fits device memory and minimises the predicted iteration time of a
// training job on a concrete allocation.
//
// Tensor parallelism stays inside the NVLink domain unless told otherwise; pipeline degrees
// divide the layers; d·b divides the global batch. The search is exhaustive over that grid
// (a few thousand points), with collectives priced once per layout and message size, and is
// deterministic. Nothing fitting is an outcome (found = false, with the reason), not an error.
//   auto r = SearchParallelism(topo, job.model, job.model.global_batch, gpus, {}, {});
//   if (r && r->found) use(r->best.config);
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/estimate/iteration.h"

namespace tianshu::estimate {

struct SearchOptions {
  bool tp_within_nvlink = true;  // t ≤ the NVLink domain of the allocation
  std::vector<int> micro_batches = {1, 2, 4, 8};
  std::optional<model::Recompute> recompute;  // fixed, or searched over none/selective/full
  int zero_stage = -1;                        // fixed, or -1 to search (0-3; 0-1 with p > 1)
  bool interleave = true;                     // also try v = 2 where Megatron allows it
  bool sequence_parallel = true;
  bool try_both_rank_orders = true;  // tp-dp-pp and tp-pp-dp for the winner
  int max_evaluations = 200'000;     // step budget
};

struct SearchResult {
  bool found = false;
  std::string reason;  // when nothing fits
  IterationEstimate best;
  comm::CommPlan plan;  // of the winner
  int layouts = 0;      // (t, p) pairs tried
  int evaluated = 0;    // configurations estimated
  int fitting = 0;      // of which fit in memory
};

// Fails only on bad input (no GPUs, a model without shape).
[[nodiscard]] Result<SearchResult> SearchParallelism(
    const model::Topology& topo, const model::ModelSpec& m, int64_t global_batch,
    std::span<const int> gpus, const EstimateOptions& estimate, const SearchOptions& options = {});

// The NVLink domain the allocation offers tensor parallelism: the smallest over its nodes
// of min(GPUs allocated on the node, NVLink island size).
int NvlinkDomain(const model::Topology& topo, std::span<const int> gpus);

}  // namespace tianshu::estimate
