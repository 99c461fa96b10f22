// Device memory each rank of a job needs, by component.
//
// Training: mixed-precision Adam keeps 2 (bf16 weights) + 2 (bf16 gradients) + 12 (fp32
// master weights, momentum, variance) bytes per parameter (Rajbhandari et al. 2020, ZeRO,
// §3.1), sharded over the data-parallel group as the ZeRO stage says; activations follow
// Korthikanti et al. 2022 (Table 2) for tensor/sequence parallelism and recomputation, times
// the micro-batches the first pipeline stage holds in flight under 1F1B. Inference: weights
// plus the KV cache at the given batch and sequence length.
//   MemoryBreakdown m = TrainingMemory(*model::FindModelProfile("llama2-7b"), {.dp = 8,
//                                      .zero_stage = 3});
//   bool fits = m.Total() <= 80LL << 30;
#pragma once

#include <cstdint>

#include "tianshu/estimate/parallel.h"
#include "tianshu/model/job.h"

namespace tianshu::estimate {

struct MemoryBreakdown {
  int64_t weights = 0;      // bf16 parameters held by the rank
  int64_t gradients = 0;    // bf16 gradients
  int64_t optimizer = 0;    // fp32 master weights + Adam moments
  int64_t activations = 0;  // saved activations of the in-flight micro-batches
  int64_t kv_cache = 0;     // inference only
  int64_t overhead = 0;     // CUDA context, communicator buffers, allocator fragmentation
  int64_t Total() const {
    return weights + gradients + optimizer + activations + kv_cache + overhead;
  }
};

// Parameters of one transformer layer: attention 4h² + MLP (2·h·f, or 3·h·f for gated MLPs
// of llama/moe families; times experts for MoE) + biases and norms.
double LayerParameters(const model::ModelSpec& m);
// MLP width: ffn_hidden, else 4h (8h/3 rounded up to 256 for gated MLPs).
double FfnHidden(const model::ModelSpec& m);
// Declared parameters / shape-derived ones, for the transformer layers (1 when no count is
// declared; clamped to [0.5, 2]): absorbs grouped-query attention and odd MLP widths.
double LayerScale(const model::ModelSpec& m);
// Embedding (and, for untied families, the output layer) parameters.
double EmbeddingParameters(const model::ModelSpec& m);
// Total parameters: the shape, scaled to the declared count when there is one.
double ModelParameters(const model::ModelSpec& m);
// Parameters the most loaded rank holds before ZeRO sharding: the first stage's layers and
// embedding, divided by tensor (and, for experts, expert) parallelism.
double ParametersPerRank(const model::ModelSpec& m, const ParallelConfig& c);

// Activation bytes of one layer for one micro-batch (Korthikanti et al. 2022, Table 2):
//   no parallelism:        s·b·h·(34 + 5·a·s/h)
//   tensor parallel:       s·b·h·(10 + 24/t + 5·a·s/(h·t))
//   + sequence parallel:   s·b·h·(34 + 5·a·s/h) / t
//   + selective recompute: s·b·h·(10 + 24/t), or s·b·h·34/t with sequence parallelism
//   full recompute:        2·s·b·h (the layer input only), /t with sequence parallelism
double ActivationBytesPerLayer(const model::ModelSpec& m, const ParallelConfig& c);

// Memory of the most loaded rank (the first pipeline stage) of a training job.
MemoryBreakdown TrainingMemory(const model::ModelSpec& m, const ParallelConfig& c,
                               int64_t global_batch = 0);

// Memory of one inference rank: weights / (t·p) and the KV cache
//   2 (K and V) · 2 bytes · (l/p) · batch · seq · h / t.
MemoryBreakdown InferenceMemory(const model::ModelSpec& m, const model::InferenceSpec& inf, int tp,
                                int pp);

// Fixed framework overhead per rank (see memory.cc for the figure and its source).
int64_t FrameworkOverheadBytes();

}  // namespace tianshu::estimate
