// FLOPs of a training iteration and the pipeline bubble, after Megatron-LM's accounting.
//
// Model FLOPs (what MFU counts) use Narayanan et al. 2021, eq. (3):
//   F = 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))
// generalised to gated or MoE MLPs by counting 2 FLOPs per active weight per token; hardware
// FLOPs add what recomputation repeats (the 96 form with full recomputation).
//   double f = ModelFlopsPerIteration(*model::FindModelProfile("gpt3-175b"), 1536);
//   double bubble = PipelineBubble(8, 1, 64);   // (p-1)/(v·m) = 0.109
#pragma once

#include <cstdint>

#include "tianshu/model/job.h"

namespace tianshu::estimate {

// The closed form of Narayanan et al. 2021 eq. (3): 72 form, or the 96 form with full
// activation recomputation (a second forward pass).
double NarayananFlops(double batch, double seq, double layers, double hidden, double vocab,
                      bool full_recompute);

// Model FLOPs per iteration of `batch` sequences (no recomputation counted).
double ModelFlopsPerIteration(const model::ModelSpec& m, int64_t batch);
// FLOPs the hardware executes, with what the recomputation strategy repeats:
// selective adds the attention-score forward (4·B·s²·h per layer, Korthikanti et al. 2022
// §5), full adds a whole forward pass.
double HardwareFlopsPerIteration(const model::ModelSpec& m, int64_t batch,
                                 model::Recompute recompute);
// Forward FLOPs per token of autoregressive decoding at context length `context`.
double DecodeFlopsPerToken(const model::ModelSpec& m, int context);

// Pipeline bubble as a fraction of ideal compute time (Narayanan et al. 2021, §2.2):
// (p − 1) / (v · m).
double PipelineBubble(int pp, int virtual_stages, int64_t micro_batches);

}  // namespace tianshu::estimate
