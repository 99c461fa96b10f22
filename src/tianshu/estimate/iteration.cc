#include "tianshu/estimate/iteration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tianshu/comm/constants.h"
#include "tianshu/estimate/flops.h"

namespace tianshu::estimate {
namespace {

using comm::Collective;
using comm::GroupKind;

// --- Constants of the time model (one table; sources beside each) ---
// Matmul efficiency kMax · w / (w + kHalf), w = h/t: the fraction of dense peak a
// transformer layer's GEMMs reach on one GPU. Calibrated on Megatron-LM A100 runs: HFU 57%
// at w = 3200 (1T, Korthikanti et al. 2022 Table 5) after a 12% bubble, ~45% at w = 768
// (22B); cuBLAS reaches ~70-75% of peak on large bf16 GEMMs.
constexpr double kMaxMatmulEfficiency = 0.70;
constexpr double kHalfWidth = 256;
// Tensor-parallel all-reduces per layer and micro-batch: 2 forward + 2 backward
// (Shoeybi et al. 2019, §3), 2 more when full recomputation re-runs the forward.
constexpr int kTpCollectivesPerLayer = 4;
constexpr int kTpCollectivesFullRecompute = 2;
// Share of one micro-batch's compute that the data-parallel reduction and parameter gather
// can hide behind (Megatron --overlap-grad-reduce / --overlap-param-gather buckets).
constexpr double kDpOverlapFraction = 0.8;
// bf16 gradients and parameters on the wire.
constexpr double kCommBytesPerParam = 2;
// Checkpoint: bf16 weights + fp32 master weights and Adam moments (ZeRO §3.1).
constexpr double kCheckpointBytesPerParam = 14;
constexpr double kIoSizeBytes = 1 << 20;  // 1 MiB sequential writes

double Div(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

GroupPricer::GroupPricer(const model::Topology& topo, const comm::CommPlan& plan,
                         const comm::CommOptions& options, bool all_groups)
    : topo_(topo), plan_(plan), options_(options), all_groups_(all_groups) {
  peak_flops_ = std::numeric_limits<double>::infinity();
  device_memory_ = std::numeric_limits<int64_t>::max();
  nvme_write_ = std::numeric_limits<double>::infinity();
  pcie_ = std::numeric_limits<double>::infinity();
  nvlink_ = std::numeric_limits<double>::infinity();
  int last = -1;
  std::vector<char> seen(topo.nodes.size(), 0);
  for (int g : plan.rank_to_gpu) {
    int n = (last >= 0 && g >= topo.nodes[last].first_gpu &&
             g < topo.nodes[last].first_gpu + topo.GpusOn(last))
                ? last
                : comm::NodeOfGpu(topo, g);
    last = n;
    if (n < 0 || seen[n]) continue;
    seen[n] = 1;
    ++nodes_;
    const auto& t = topo.TypeOf(n);
    peak_flops_ = std::min(peak_flops_, t.accelerator.peak_tflops * 1e12);
    device_memory_ = std::min(device_memory_, t.accelerator.memory_bytes);
    double w = t.nvme_write_bandwidth.BytesPerSec();
    nvme_write_ = std::min(nvme_write_, w > 0 ? w : 1e9);
    double p = t.pcie_bandwidth.BytesPerSec();
    pcie_ = std::min(pcie_, p > 0 ? p : 16e9);
    nvlink_ = std::min(nvlink_, t.intra_bandwidth.BytesPerSec());
  }
  if (nodes_ == 0) {
    peak_flops_ = 1e12;
    device_memory_ = 0;
    nvme_write_ = 1e9;
    pcie_ = 16e9;
    nvlink_ = 0;
  }
}

comm::CollectiveCost GroupPricer::Cost(GroupKind kind, Collective op, int64_t bytes) {
  for (const Memo& m : memo_) {
    if (m.kind == kind && m.op == op && m.bytes == bytes) return m.cost;
  }
  comm::CollectiveCost worst;
  int groups = all_groups_ ? plan_.NumGroups(kind) : std::min(1, plan_.NumGroups(kind));
  for (int i = 0; i < groups; ++i) {
    scratch_ = plan_.GroupGpus(kind, i);
    auto c = comm::PlanCollective(topo_, scratch_, op, bytes, options_);
    if (i == 0 || c.seconds > worst.seconds) worst = c;
  }
  memo_.push_back({kind, op, bytes, worst});
  return worst;
}

double MatmulEfficiency(const model::ModelSpec& m, const ParallelConfig& c) {
  if (!m.IsTransformer() || m.hidden <= 0) return kMaxMatmulEfficiency * 0.8;
  double w = static_cast<double>(m.hidden) / std::max(1, c.tp);
  return kMaxMatmulEfficiency * w / (w + kHalfWidth);
}

IterationEstimate EstimateIteration(const model::ModelSpec& m, int64_t global_batch,
                                    const ParallelConfig& c, GroupPricer& pricer,
                                    const EstimateOptions& o) {
  IterationEstimate e;
  e.config = c;
  const int gpus = c.Gpus();
  const int64_t batch = global_batch > 0 ? global_batch : std::max<int64_t>(1, m.global_batch);
  e.memory = TrainingMemory(m, c, batch);
  e.device_memory_bytes = pricer.device_memory();
  e.fits = e.memory.Total() <= e.device_memory_bytes;
  e.peak_flops = pricer.peak_flops();
  e.matmul_efficiency = MatmulEfficiency(m, c);
  e.model_flops = ModelFlopsPerIteration(m, batch);
  e.hardware_flops = HardwareFlopsPerIteration(m, batch, c.recompute);
  const int64_t micro = c.MicroBatches(batch);
  e.micro_batches = micro;
  const double dm = static_cast<double>(micro);
  const bool transformer = m.IsTransformer() && m.layers > 0 && m.hidden > 0;
  const bool sp = c.sequence_parallel && c.tp > 1;

  // Compute of one micro-batch on one stage, per GPU.
  const double mb_hw_flops = HardwareFlopsPerIteration(m, c.micro_batch, c.recompute);
  const double mb_compute =
      mb_hw_flops / (static_cast<double>(c.tp) * c.pp) / (e.peak_flops * e.matmul_efficiency);
  e.time.compute = dm * mb_compute;

  auto add = [&](GroupKind kind, Collective op, int64_t bytes, int64_t calls, int size) {
    CollectiveEstimate ce;
    ce.group = kind;
    ce.op = op;
    ce.group_size = size;
    ce.bytes = bytes;
    ce.calls = calls;
    auto cost = pricer.Cost(kind, op, bytes);
    ce.algorithm = cost.algorithm;
    ce.protocol = cost.protocol;
    ce.bottleneck = cost.bottleneck;
    ce.seconds = cost.seconds;
    ce.bus_bytes_per_sec = cost.bus_bytes_per_sec;
    ce.total_seconds = cost.seconds * static_cast<double>(calls);
    ce.exposed_seconds = ce.total_seconds;
    e.collectives.push_back(ce);
    return e.collectives.size() - 1;  // an index: later adds may move the vector
  };
  auto at = [&](size_t i) -> CollectiveEstimate& { return e.collectives[i]; };

  const double layers_stage = transformer ? std::ceil(static_cast<double>(m.layers) / c.pp) : 0;
  const double sbh = transformer ? static_cast<double>(m.seq_len) * c.micro_batch * m.hidden : 0;
  double mb_tp = 0, mb_ep = 0;
  if (c.tp > 1 && transformer) {
    int per_layer = kTpCollectivesPerLayer +
                    (c.recompute == model::Recompute::kFull ? kTpCollectivesFullRecompute : 0);
    int64_t calls = static_cast<int64_t>(dm * layers_stage * per_layer);
    int64_t bytes = static_cast<int64_t>(2.0 * sbh);
    if (sp) {
      // Sequence parallelism turns each all-reduce into an all-gather and a reduce-scatter
      // (Korthikanti et al. 2022, §4.2.2): same bytes on the wire.
      size_t ag = add(GroupKind::kTensor, Collective::kAllGather, bytes, calls, c.tp);
      size_t rs = add(GroupKind::kTensor, Collective::kReduceScatter, bytes, calls, c.tp);
      e.time.tp_comm = at(ag).total_seconds + at(rs).total_seconds;
    } else {
      e.time.tp_comm =
          at(add(GroupKind::kTensor, Collective::kAllReduce, bytes, calls, c.tp)).total_seconds;
    }
    mb_tp = e.time.tp_comm / dm;
  }
  if (c.ep > 1 && m.experts > 1 && transformer) {
    int64_t bytes = static_cast<int64_t>(2.0 * sbh * std::max(1, m.top_k) / (sp ? c.tp : 1));
    int64_t calls = static_cast<int64_t>(4.0 * dm * layers_stage);
    e.time.ep_comm =
        at(add(GroupKind::kExpert, Collective::kAllToAll, bytes, calls, c.ep)).total_seconds;
    mb_ep = e.time.ep_comm / dm;
  }
  if (c.pp > 1 && transformer) {
    // Activations forward, their gradients backward, once per micro-batch and chunk; with
    // sequence parallelism Megatron sends the 1/t shard (scatter-gather).
    int64_t bytes = static_cast<int64_t>(2.0 * sbh / (sp ? c.tp : 1));
    int64_t calls = 2 * micro * std::max(1, c.virtual_stages);
    e.time.pp_comm =
        at(add(GroupKind::kPipeline, Collective::kSendRecv, bytes, calls, c.pp)).total_seconds;
  }
  e.bubble_fraction = PipelineBubble(c.pp, c.virtual_stages, micro);
  e.time.bubble = e.bubble_fraction * dm * (mb_compute + mb_tp + mb_ep);

  if (c.dp > 1) {
    const double psi = ParametersPerRank(m, c);
    const int64_t grad_bytes = static_cast<int64_t>(kCommBytesPerParam * psi);
    const int64_t bucket_cap = std::max<int64_t>(1 << 20, o.comm.allreduce_threshold_bytes);
    const int64_t buckets = std::max<int64_t>(1, (grad_bytes + bucket_cap - 1) / bucket_cap);
    const int64_t bucket = std::max<int64_t>(1, grad_bytes / buckets);
    double total = 0;
    std::vector<size_t> dp_parts;
    if (c.zero_stage == 0) {
      dp_parts.push_back(add(GroupKind::kData, Collective::kAllReduce, bucket, buckets, c.dp));
    } else {
      dp_parts.push_back(add(GroupKind::kData, Collective::kReduceScatter, bucket, buckets, c.dp));
      dp_parts.push_back(add(GroupKind::kData, Collective::kAllGather, bucket, buckets, c.dp));
    }
    for (size_t p : dp_parts) total += at(p).total_seconds;
    double window = kDpOverlapFraction * mb_compute;
    double exposed = std::max(0.0, total - window);
    if (c.zero_stage >= 3) {
      // ZeRO-3 gathers the parameters again for the forward and the backward of every
      // micro-batch; each gather hides behind that micro-batch's compute.
      size_t g = add(GroupKind::kData, Collective::kAllGather, bucket, 2 * buckets * micro, c.dp);
      double per_mb = at(g).total_seconds / dm;
      double ex = dm * std::max(0.0, per_mb - kDpOverlapFraction * mb_compute);
      at(g).exposed_seconds = ex;
      exposed += ex;
    }
    // Spread the exposed share over the parts for the per-collective report.
    for (size_t p : dp_parts) {
      at(p).exposed_seconds =
          total > 0 ? at(p).total_seconds / total * std::max(0.0, total - window) : 0;
    }
    e.time.dp_comm = exposed;
  }

  // Checkpoint: every node writes its share to local NVMe.
  const double t0 = e.time.Total();
  StorageDemand& st = e.storage;
  const double params = ModelParameters(m);
  st.checkpoint_bytes = static_cast<int64_t>(kCheckpointBytesPerParam * params);
  st.interval_s = o.checkpoint_interval_s;
  st.async = o.checkpoint_mode == model::CheckpointMode::kAsync;
  const int nodes = std::max(1, pricer.nodes());
  st.bytes_per_node = st.checkpoint_bytes / nodes;
  st.write_seconds = static_cast<double>(st.bytes_per_node) / pricer.nvme_write_bytes_per_sec();
  st.iops = pricer.nvme_write_bytes_per_sec() / kIoSizeBytes;
  if (st.interval_s > 0) {
    st.required_bytes_per_sec =
        static_cast<double>(st.bytes_per_node) / static_cast<double>(st.interval_s);
    if (st.async) {
      // A snapshot to host memory over PCIe stops training briefly; the write runs behind.
      double snapshot = static_cast<double>(st.checkpoint_bytes) / std::max(1, gpus) /
                        pricer.pcie_bytes_per_sec();
      st.hidden = st.write_seconds <= static_cast<double>(st.interval_s);
      st.stall_seconds =
          snapshot + (st.hidden ? 0.0 : st.write_seconds - static_cast<double>(st.interval_s));
    } else {
      st.hidden = false;
      st.stall_seconds = st.write_seconds;
    }
    e.time.checkpoint = st.stall_seconds * t0 / static_cast<double>(st.interval_s);
  }

  e.seconds = e.time.Total();
  const double peak_all = e.peak_flops * gpus;
  e.mfu = Div(e.model_flops, e.seconds * peak_all);
  e.hfu = Div(e.hardware_flops, e.seconds * peak_all);
  e.samples_per_sec = Div(static_cast<double>(batch), e.seconds);
  e.tokens_per_sec = e.samples_per_sec * (transformer ? m.seq_len : 1);
  e.comm_share = Div(e.time.Comm(), e.seconds);

  // Network demand per group kind, on the wire per GPU (nccl-tests bus factors).
  for (GroupKind k :
       {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData, GroupKind::kExpert}) {
    double wire = 0;
    for (const auto& ce : e.collectives) {
      if (ce.group != k) continue;
      double n = ce.group_size;
      double f = ce.op == Collective::kAllReduce  ? 2 * (n - 1) / n
                 : ce.op == Collective::kSendRecv ? 1.0
                                                  : (n - 1) / n;
      wire += f * static_cast<double>(ce.bytes) * static_cast<double>(ce.calls);
    }
    if (wire <= 0) continue;
    e.network.push_back({k, wire, Div(wire, o.target_comm_share * e.time.compute)});
  }

  // Why: the figures a reader would ask about.
  auto gb = [](double bps) { return std::to_string(static_cast<int>(std::lround(bps / 1e9))); };
  if (!e.fits) {
    e.notes.push_back("does not fit: " + std::to_string(e.memory.Total() >> 20) +
                      " MiB per rank needed, device has " +
                      std::to_string(e.device_memory_bytes >> 20) + " MiB");
  }
  for (const auto& ce : e.collectives) {
    if (ce.group == GroupKind::kTensor && ce.bottleneck >= comm::LinkClass::kNicLeaf) {
      // Name the widest span of the first group: several nodes, or several leaves.
      const auto& topo = pricer.topo();
      auto g = pricer.plan().GroupGpus(GroupKind::kTensor, 0);
      int node0 = comm::NodeOfGpu(topo, g[0]);
      int top = -1;
      for (int x : g) top = std::max(top, topo.CommonTier(node0, comm::NodeOfGpu(topo, x)));
      std::string where = top >= 1 ? "spans leaf switches" : "spans nodes";
      e.notes.push_back(
          "TP group " + where + ": its " + std::string(comm::CollectiveName(ce.op)) +
          " runs at NIC bandwidth (" + gb(ce.bus_bytes_per_sec) +
          " GB/s bus) instead of NVLink (~" +
          gb(pricer.nvlink_bytes_per_sec() * comm::kConstants.nvlink_efficiency) +
          " GB/s); tensor-parallel traffic is " +
          std::to_string(static_cast<int>(std::lround(100 * Div(e.time.tp_comm, e.seconds)))) +
          "% of the iteration");
      break;
    }
  }
  if (e.time.dp_comm > 0.05 * e.seconds) {
    e.notes.push_back("data-parallel gradient reduction is " +
                      std::to_string(static_cast<int>(std::lround(1000 * e.time.dp_comm))) +
                      " ms longer than the backward it overlaps");
  }
  if (e.bubble_fraction > 0.1) {
    e.notes.push_back("pipeline bubble (p-1)/(v·m) = " +
                      std::to_string(static_cast<int>(std::lround(100 * e.bubble_fraction))) +
                      "%: more micro-batches or interleaved stages would shrink it");
  }
  if (st.interval_s > 0 && !st.hidden) {
    e.notes.push_back(std::string(st.async ? "async" : "sync") + " checkpoint of " +
                      std::to_string(st.bytes_per_node >> 30) + " GiB per node takes " +
                      std::to_string(static_cast<int>(std::lround(st.write_seconds))) +
                      " s on NVMe" +
                      (st.async ? ", longer than the interval" : ", stalling training"));
  }
  return e;
}

IterationEstimate EstimateIteration(const model::Topology& topo, const model::ModelSpec& m,
                                    int64_t global_batch, const ParallelConfig& c,
                                    const comm::CommPlan& plan, const EstimateOptions& options) {
  GroupPricer pricer(topo, plan, options.comm, options.all_groups);
  return EstimateIteration(m, global_batch, c, pricer, options);
}

}  // namespace tianshu::estimate
