// A job as users describe it: what model, how parallel, how many accelerators, and how it
// should be treated (priority, queue, selectors, checkpoints, retries, inference objectives).
//
// Model figures may come from a named profile of the catalogue (FindModelProfile); any field
// the file sets overrides the profile.
//   JobSpec j; j.model = *FindModelProfile("llama2-70b"); j.gpus = 512;
//   j.parallelism = {.automatic = false, .tp = 8, .pp = 4};
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/model/accelerator.h"

namespace tianshu::model {

enum class JobKind {
  kTraining,   // runs to completion, checkpoints, can be preempted and resized
  kInference,  // a service with a request rate and a latency objective
};

enum class Recompute {
  kNone,       // keep all activations
  kSelective,  // recompute attention scores only (Korthikanti et al. 2022)
  kFull,       // keep layer inputs only, recompute the rest
};

enum class CheckpointMode {
  kAsync,  // snapshot to host memory, write in the background
  kSync,   // training stops while the checkpoint is written
};

// JobSpec::max_leaves for `topology: {leaves: minimum}`.
inline constexpr int kFewestLeaves = -1;
// How a job wrote its leaf bound: "minimum", "3"; "" for none.
std::string LeafBoundName(int max_leaves);

// Nested gang groups: every consecutive block of `size` ranks (in rank order) sits inside one
// domain of `within`: a tensor-parallel group inside one NVLink domain, a pipeline stage
// inside one leaf switch.
//   groups: [{size: 8, within: nvlink}, {size: 64, within: leaf}]
enum class GroupScope {
  kNvlink,  // one NVLink island (a whole node with NVSwitch; one GPU with PCIe only)
  kNode,
  kLeaf,  // one leaf switch
};
struct RankGroup {
  int size = 1;
  GroupScope within = GroupScope::kNode;
};
std::string_view GroupScopeName(GroupScope s);

std::string_view JobKindName(JobKind k);
// A job name a user may give: 1-128 of [A-Za-z0-9._-], first and last a letter or digit.
bool IsValidJobName(std::string_view name);
std::string_view RecomputeName(Recompute r);
std::string_view CheckpointModeName(CheckpointMode m);

// Transformer shape (or, for non-transformers, FLOPs per sample and parameter count).
struct ModelSpec {
  std::string profile;         // catalogue name, "" for a custom model
  std::string family = "gpt";  // gpt | llama | bert | moe | resnet
  int64_t parameters = 0;      // total parameters (all experts for MoE)
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;    // key/value heads (grouped-query attention); 0 means heads
  int ffn_hidden = 0;  // 0 means 4 * hidden
  int seq_len = 2048;
  int vocab = 51200;
  int experts = 1;           // MoE experts per layer; 1 = dense
  int top_k = 1;             // experts each token visits
  int64_t global_batch = 0;  // sequences (or samples) per iteration
  int micro_batch = 1;
  double flops_per_sample = 0;  // forward FLOPs per sample for non-transformers (resnet)

  bool IsTransformer() const { return family != "resnet"; }
  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
};

struct Parallelism {
  bool automatic = true;  // search t, p, d, micro-batch and recomputation
  int tp = 1;
  int pp = 1;
  int dp = 0;          // 0: derived as gpus / (tp * pp)
  int ep = 1;          // expert parallel degree
  int zero_stage = 0;  // 0..3 (1 with distributed_optimizer = Megatron's distributed optimizer)
  bool distributed_optimizer = false;
  bool sequence_parallel = true;
  Recompute recompute = Recompute::kSelective;
  int virtual_stages = 1;  // interleaved 1F1B chunks per pipeline stage
};

struct ElasticRange {
  bool enabled = false;
  int min_nodes = 1;
  int max_nodes = 0;  // 0: unbounded
};

struct InferenceSpec {
  double request_rate = 0;    // requests per second
  double latency_slo_ms = 0;  // per-request latency objective (p99)
  int batch = 1;              // concurrent sequences (for the KV cache)
  int max_seq_len = 0;        // prompt + output tokens; 0 = model seq_len
};

// What each rank runs, for the local scheduler (optional: the simulator ignores it).
//   run:
//     command: [/usr/bin/python3, examples/workloads/train_gpt.py, --steps, "200"]
//     env: {OMP_NUM_THREADS: "1"}
//     workdir: /home/me/project
// A string command runs under /bin/sh -c. Variables the scheduler sets (RANK, WORLD_SIZE,
// LOCAL_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT, TIANSHU_*) cannot be given in env.
struct RunSpec {
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string workdir;
};

struct JobSpec {
  std::string name;
  JobKind kind = JobKind::kTraining;
  ModelSpec model;
  Parallelism parallelism;
  int gpus = 0;           // total accelerators (or nodes * gpus_per_node)
  int nodes = 0;          // optional: whole nodes requested
  int gpus_per_node = 0;  // optional: ranks per node
  int gpu_milli = 1000;   // fraction of one device per rank, in thousandths (< 1000: shared)
  ElasticRange elastic;
  int priority = 0;
  std::string queue = "default";
  std::optional<Backend> backend;
  std::map<std::string, std::string> node_selector;
  std::vector<std::string> accelerators;  // acceptable models; empty = any of the backend
  int64_t checkpoint_interval_s = 0;      // 0: the engine's scheduler.checkpoint_interval
  std::optional<CheckpointMode> checkpoint_mode;
  int max_retries = -1;  // -1: the engine's scheduler.max_retries
  // time_limit: the longest the job may run, its attempts' run times added up (a wait in the
  // queue does not count). At the limit it is checkpointed, stopped and failed, with no retry
  // (Slurm's --time). 0: none.
  int64_t time_limit_s = 0;
  int64_t iterations = 0;  // training length, optional
  double duration_s = 0;   // expected run time under ideal placement, optional
  InferenceSpec inference;
  std::vector<RankGroup> groups;  // nested gang groups, innermost first (checked to nest)
  // topology.leaves: the most leaf switches the job may span, a requirement, not a preference
  // (Slurm's --switches=N, Kueue's podset-required-topology): 0 any (the scheduler's compact
  // placement and wait apply), kFewestLeaves the fewest that could hold it, else N >= 1.
  int max_leaves = 0;
  RunSpec run;

  // Accelerators asked for: gpus, else nodes * gpus_per_node (0 when neither is given).
  int TotalGpus() const { return gpus > 0 ? gpus : nodes * gpus_per_node; }
};

// A named model of the catalogue (case-insensitive; "gpt3-175b", "llama2-7b", ...), or nullptr.
const ModelSpec* FindModelProfile(std::string_view name);
std::vector<std::string> ModelProfiles();

}  // namespace tianshu::model
