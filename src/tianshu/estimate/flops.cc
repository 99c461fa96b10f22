#include "tianshu/estimate/flops.h"

#include <algorithm>

#include "tianshu/estimate/memory.h"

namespace tianshu::estimate {

double NarayananFlops(double B, double s, double l, double h, double V, bool full_recompute) {
  const double k = full_recompute ? 96.0 : 72.0;
  return k * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

namespace {

// Weights a token passes through in one layer: attention 4h², and the MLP (top_k experts).
double ActiveLayerWeights(const model::ModelSpec& m) {
  const double h = m.hidden;
  const double f = FfnHidden(m);
  const bool gated = m.family == "llama" || m.family == "moe";
  return (4.0 * h * h + (gated ? 3.0 : 2.0) * h * f * std::max(1, m.experts > 1 ? m.top_k : 1)) *
         LayerScale(m);
}

// Forward FLOPs per iteration: 2 per active weight per token, 4·s·h per token per layer for
// the attention scores and their weighted sum, 2·h·V per token for the logits. With
// ActiveLayerWeights = 12h² this is exactly a third of Narayanan's 72 form.
double ForwardFlops(const model::ModelSpec& m, double batch) {
  if (!m.IsTransformer() || m.layers <= 0) return m.flops_per_sample * batch;
  const double s = m.seq_len, h = m.hidden, l = m.layers;
  return batch * s * (l * (2.0 * ActiveLayerWeights(m) + 4.0 * s * h) + 2.0 * h * m.vocab);
}

}  // namespace

double ModelFlopsPerIteration(const model::ModelSpec& m, int64_t batch) {
  // Backward costs twice the forward (Narayanan et al. 2021, §5.1).
  return 3.0 * ForwardFlops(m, static_cast<double>(batch));
}

double HardwareFlopsPerIteration(const model::ModelSpec& m, int64_t batch,
                                 model::Recompute recompute) {
  const double b = static_cast<double>(batch);
  double f = 3.0 * ForwardFlops(m, b);
  switch (recompute) {
    case model::Recompute::kNone:
      break;
    case model::Recompute::kSelective:
      if (m.IsTransformer()) f += 4.0 * b * m.seq_len * m.seq_len * m.hidden * m.layers;
      break;
    case model::Recompute::kFull:
      f += ForwardFlops(m, b);
      break;
  }
  return f;
}

double DecodeFlopsPerToken(const model::ModelSpec& m, int context) {
  if (!m.IsTransformer() || m.layers <= 0) return m.flops_per_sample;
  const double h = m.hidden;
  return m.layers * (2.0 * ActiveLayerWeights(m) + 4.0 * context * h) + 2.0 * h * m.vocab;
}

double PipelineBubble(int pp, int virtual_stages, int64_t micro_batches) {
  if (pp <= 1 || micro_batches <= 0) return 0;
  return (pp - 1.0) / (std::max(1, virtual_stages) * static_cast<double>(micro_batches));
}

}  // namespace tianshu::estimate
