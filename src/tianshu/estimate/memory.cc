#include "tianshu/estimate/memory.h"

#include <algorithm>
#include <cmath>

namespace tianshu::estimate {
namespace {

bool Gated(const model::ModelSpec& m) { return m.family == "llama" || m.family == "moe"; }
double Ffn(const model::ModelSpec& m) { return FfnHidden(m); }
int64_t Bytes(double x) { return static_cast<int64_t>(std::llround(std::max(0.0, x))); }

// Mixed-precision Adam bytes per parameter (ZeRO, Rajbhandari et al. 2020, §3.1): K = 12 for
// the optimizer states, 2 + 2 for the fp16/bf16 weights and gradients.
constexpr double kWeightBytes = 2;
constexpr double kGradBytes = 2;
constexpr double kOptimizerBytes = 12;
// CUDA context + cuBLAS/cuDNN workspaces + NCCL channel buffers: ~1.5-2.5 GiB per rank in
// PyTorch/Megatron runs (nvidia-smi of an idle initialised rank); we take 2 GiB.
constexpr int64_t kFrameworkBytes = int64_t{2} << 30;
// Caching-allocator fragmentation on top of the live tensors (PyTorch memory stats of
// Megatron runs show 5-10%).
constexpr double kFragmentation = 0.05;

}  // namespace

int64_t FrameworkOverheadBytes() { return kFrameworkBytes; }

double FfnHidden(const model::ModelSpec& m) {
  if (m.ffn_hidden > 0) return m.ffn_hidden;
  // Gated (SwiGLU) MLPs keep the parameter count of a 4h MLP with 8h/3, rounded up to a
  // multiple of 256 (Touvron et al. 2023: 11008 for h = 4096).
  if (Gated(m)) return std::ceil(8.0 * m.hidden / 3.0 / 256.0) * 256.0;
  return 4.0 * m.hidden;
}

double LayerScale(const model::ModelSpec& m) {
  if (m.parameters <= 0 || m.layers <= 0 || m.hidden <= 0 || !m.IsTransformer()) return 1.0;
  double derived = m.layers * LayerParameters(m);
  double declared = static_cast<double>(m.parameters) - EmbeddingParameters(m);
  if (derived <= 0 || declared <= 0) return 1.0;
  return std::clamp(declared / derived, 0.5, 2.0);
}

double LayerParameters(const model::ModelSpec& m) {
  const double h = m.hidden;
  const double mlp = (Gated(m) ? 3.0 : 2.0) * h * Ffn(m) * std::max(1, m.experts);
  return 4.0 * h * h + mlp + 13.0 * h;
}

double EmbeddingParameters(const model::ModelSpec& m) {
  const double e = static_cast<double>(m.vocab) * m.hidden;
  // GPT ties input and output embeddings (and learns positions); llama-style models do not.
  return Gated(m) ? 2.0 * e : e + static_cast<double>(m.seq_len) * m.hidden;
}

double ModelParameters(const model::ModelSpec& m) {
  if (!m.IsTransformer() || m.layers <= 0 || m.hidden <= 0) {
    return static_cast<double>(m.parameters);
  }
  return m.layers * LayerParameters(m) * LayerScale(m) + EmbeddingParameters(m);
}

double ParametersPerRank(const model::ModelSpec& m, const ParallelConfig& c) {
  if (!m.IsTransformer() || m.layers <= 0 || m.hidden <= 0) {
    return static_cast<double>(m.parameters) / (c.tp * c.pp);
  }
  const double h = m.hidden;
  const double layers = std::ceil(static_cast<double>(m.layers) / c.pp);
  double dense = 4.0 * h * h + 13.0 * h;
  double mlp = (Gated(m) ? 3.0 : 2.0) * h * Ffn(m);
  double per_layer = dense / c.tp;
  if (m.experts > 1) {
    per_layer += mlp * m.experts / (static_cast<double>(c.tp) * std::max(1, c.ep));
  } else {
    per_layer += mlp / c.tp;
  }
  per_layer *= LayerScale(m);
  // The first stage holds the input embedding; with one stage it holds the output layer too
  // (tied for GPT: counted once).
  double embed = static_cast<double>(m.vocab) * h;
  if (Gated(m) && c.pp == 1) embed *= 2;
  return layers * per_layer + embed / c.tp;
}

double ActivationBytesPerLayer(const model::ModelSpec& m, const ParallelConfig& c) {
  const double s = m.seq_len, b = c.micro_batch, h = m.hidden, a = m.heads, t = c.tp;
  const bool sp = c.sequence_parallel && c.tp > 1;
  const double sbh = s * b * h;
  const double attn = a > 0 ? 5.0 * a * s / h : 0.0;  // the a·s² score and softmax terms
  switch (c.recompute) {
    case model::Recompute::kFull:
      return 2.0 * sbh / (sp ? t : 1.0);
    case model::Recompute::kSelective:
      return sp ? 34.0 * sbh / t : sbh * (10.0 + 24.0 / t);
    case model::Recompute::kNone:
      return sp ? sbh * (34.0 + attn) / t : sbh * (10.0 + 24.0 / t + attn / t);
  }
  return 0;
}

MemoryBreakdown TrainingMemory(const model::ModelSpec& m, const ParallelConfig& c,
                               int64_t global_batch) {
  MemoryBreakdown out;
  const double psi = ParametersPerRank(m, c);
  const double d = std::max(1, c.dp);
  out.weights = Bytes(kWeightBytes * psi / (c.zero_stage >= 3 ? d : 1.0));
  out.gradients = Bytes(kGradBytes * psi / (c.zero_stage >= 2 ? d : 1.0));
  out.optimizer = Bytes(kOptimizerBytes * psi / (c.zero_stage >= 1 ? d : 1.0));
  if (m.IsTransformer() && m.layers > 0) {
    // 1F1B: the first stage holds min(p, m) micro-batches of its l/p layers; interleaving
    // adds (1 + (p−1)/(p·v)) (Korthikanti et al. 2022, §4.2.3).
    const int64_t micro = global_batch > 0 ? c.MicroBatches(global_batch) : c.pp;
    const double in_flight = static_cast<double>(std::min<int64_t>(c.pp, micro));
    const double layers = std::ceil(static_cast<double>(m.layers) / c.pp);
    double interleave = c.virtual_stages > 1 && c.pp > 1
                            ? 1.0 + (c.pp - 1.0) / (static_cast<double>(c.pp) * c.virtual_stages)
                            : 1.0;
    double act = ActivationBytesPerLayer(m, c) * layers * in_flight * interleave;
    // With one stage the same rank also holds the fp32 logits: 4·s·b·V/t.
    if (c.pp == 1) act += 4.0 * m.seq_len * c.micro_batch * static_cast<double>(m.vocab) / c.tp;
    out.activations = Bytes(act);
  } else {
    // Non-transformers: activations scale with the forward FLOPs; ResNet-50 keeps ~100 MB
    // per sample of 4.1 GFLOP in fp16 (He et al. 2016 shapes), i.e. 25 bytes per kFLOP.
    out.activations = Bytes(m.flops_per_sample * 25e-3 * c.micro_batch);
  }
  int64_t live = out.weights + out.gradients + out.optimizer + out.activations;
  out.overhead = kFrameworkBytes + Bytes(kFragmentation * static_cast<double>(live));
  return out;
}

MemoryBreakdown InferenceMemory(const model::ModelSpec& m, const model::InferenceSpec& inf, int tp,
                                int pp) {
  MemoryBreakdown out;
  ParallelConfig c;
  c.tp = std::max(1, tp);
  c.pp = std::max(1, pp);
  c.ep = 1;
  out.weights = Bytes(kWeightBytes * ParametersPerRank(m, c));
  if (m.IsTransformer() && m.layers > 0) {
    const double seq = inf.max_seq_len > 0 ? inf.max_seq_len : m.seq_len;
    const double layers = std::ceil(static_cast<double>(m.layers) / c.pp);
    // K and V, 2 bytes each, per layer and token: kv_heads x head_dim values (GQA shares a
    // key/value head among heads/kv_heads query heads), split over the tensor-parallel ranks
    // (a rank keeps at least one KV head).
    const double kv_width = static_cast<double>(m.hidden) * m.KvHeads() / std::max(1, m.heads);
    const double kv_shards = std::min<double>(c.tp, std::max(1, m.KvHeads()));
    out.kv_cache = Bytes(2.0 * 2.0 * layers * std::max(1, inf.batch) * seq * kv_width / kv_shards);
    // Working activations of one decode step plus a prefill chunk: s·b·h·(10 + 24/t) once.
    ParallelConfig one = c;
    one.micro_batch = std::max(1, inf.batch);
    one.recompute = model::Recompute::kSelective;
    one.sequence_parallel = false;
    out.activations = Bytes(ActivationBytesPerLayer(m, one));
  }
  int64_t live = out.weights + out.kv_cache + out.activations;
  out.overhead = kFrameworkBytes + Bytes(kFragmentation * static_cast<double>(live));
  return out;
}

}  // namespace tianshu::estimate
