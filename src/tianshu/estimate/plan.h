// The whole plan for one job on a cluster, as `tianshu plan` prints it: where it goes, the
// parallelism, memory per rank, FLOPs, predicted iteration time and its breakdown, network
// and storage demand, and the communicator plan with its environment.
//
// Without explicit nodes the job goes to the smallest subtree of the switch tree that holds
// it (a topology-greedy pick; placement/ owns the real strategies). Inference jobs get the
// smallest tensor/pipeline split whose weights and KV cache fit, and as many replicas as the
// allocation holds.
//   auto plan = PlanJob(topo, job, {.config = engine_config});
//   std::cout << plan->estimate.seconds << " s/iteration\n";
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/comm/bandwidth_matrix.h"
#include "tianshu/comm/comm_plan.h"
#include "tianshu/estimate/iteration.h"
#include "tianshu/estimate/search.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/job.h"
#include "tianshu/model/topology.h"

namespace tianshu::estimate {

struct PlanOptions {
  model::EngineConfig config;
  std::vector<std::string> nodes;  // node names to use, in this order; empty: pick
  const comm::BandwidthMatrix* measured = nullptr;
  bool spread_tp = false;  // what-if: tensor peers on different nodes/leaves
  bool tp_within_nvlink = true;
  bool contended = true;  // see comm::CostOptions
};

// Inference figures assume each request fills the context: a prompt of max_seq_len/2 tokens
// and as many generated, the whole batch decoding together (no continuous batching).
struct InferenceEstimate {
  int tp = 1;
  int pp = 1;
  int replicas = 1;
  MemoryBreakdown memory;
  int64_t device_memory_bytes = 0;
  bool fits = false;
  double decode_step_seconds = 0;  // one token for the whole batch of one replica
  double prefill_seconds = 0;      // the prompt of one batch
  double request_latency_ms = 0;   // prefill + generated tokens
  double tokens_per_sec = 0;       // all replicas
  double requests_per_sec = 0;     // capacity of all replicas
  bool meets_slo = true;
  std::vector<CollectiveEstimate> collectives;
  std::vector<std::string> notes;
};

struct JobPlan {
  model::JobSpec job;
  bool training = true;
  std::vector<int> nodes;  // node ids used, in rank order of first use
  std::vector<int> gpus;   // global GPU ids allocated
  std::string placement;   // how the nodes were chosen
  bool automatic = false;  // parallelism searched
  int evaluated = 0;       // configurations the search estimated
  bool found = true;       // false: nothing fits (see reason)
  std::string reason;
  comm::CommPlan comm;
  IterationEstimate estimate;   // training
  InferenceEstimate inference;  // inference
};

// GPUs the job asks for: gpus, or nodes · gpus_per_node (of the cluster's first type).
int RequestedGpus(const model::JobSpec& job, const model::Topology& topo);

// Nodes whose type the job accepts (backend and accelerator models).
bool NodeAccepts(const model::JobSpec& job, const model::ServerType& type);

// The smallest subtree (leaf, then spine, then core) holding `gpus` GPUs of acceptable nodes;
// its nodes in topology order, trimmed to what is needed. Fails when the cluster is too small.
[[nodiscard]] Result<std::vector<int>> PickNodes(const model::Topology& topo,
                                                 const model::JobSpec& job, int gpus,
                                                 std::string* why = nullptr);

[[nodiscard]] Result<InferenceEstimate> EstimateInference(const model::Topology& topo,
                                                          const model::JobSpec& job,
                                                          std::span<const int> gpus,
                                                          const EstimateOptions& options,
                                                          comm::CommPlan* plan_out);

[[nodiscard]] Result<JobPlan> PlanJob(const model::Topology& topo, const model::JobSpec& job,
                                      const PlanOptions& options);

}  // namespace tianshu::estimate
