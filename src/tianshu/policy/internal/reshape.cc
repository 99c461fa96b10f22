#include "tianshu/policy/internal/reshape.h"

#include <algorithm>

#include "tianshu/estimate/memory.h"
#include "tianshu/estimate/search.h"

namespace tianshu::policy::internal {

bool Quiescent(const engine::CycleView& view, const model::ClusterState& work) {
  const model::ClusterState& snap = *view.state;
  for (int g = 0; g < snap.topology().NumGpus(); ++g) {
    if (snap.GpuFreeMilli(g) != work.GpuFreeMilli(g)) return false;
  }
  return true;
}

std::vector<int> NodesOf(const std::vector<placement::RankSlot>& ranks) {
  std::vector<int> out;
  for (const auto& s : ranks) {
    if (std::find(out.begin(), out.end(), s.node) == out.end()) out.push_back(s.node);
  }
  return out;
}

std::vector<int> GpusOf(const std::vector<placement::RankSlot>& ranks) {
  std::vector<int> out;
  out.reserve(ranks.size());
  for (const auto& s : ranks) {
    if (s.gpu >= 0) out.push_back(s.gpu);
  }
  return out;
}

namespace {
// bf16 weights + fp32 master weights and Adam moments (ZeRO §3.1), as estimate/iteration.cc.
constexpr double kCheckpointBytesPerParam = 14;
}  // namespace

double RestartCostS(const model::Topology& topo, const model::JobSpec& job,
                    std::span<const int> nodes, double restart_s) {
  if (nodes.empty()) return restart_s;
  const double params = job.model.layers > 0 ? estimate::ModelParameters(job.model)
                                             : static_cast<double>(job.model.parameters);
  const double per_node = kCheckpointBytesPerParam * params / static_cast<double>(nodes.size());
  double worst = 0;
  for (int n : nodes) {
    const model::ServerType& t = topo.TypeOf(n);
    double s = 0;
    if (t.nvme_write_bandwidth.BytesPerSec() > 0)
      s += per_node / t.nvme_write_bandwidth.BytesPerSec();
    if (t.Injection().BytesPerSec() > 0) s += per_node / t.Injection().BytesPerSec();
    if (t.nvme_read_bandwidth.BytesPerSec() > 0)
      s += per_node / t.nvme_read_bandwidth.BytesPerSec();
    worst = std::max(worst, s);
  }
  return worst + restart_s;
}

Result<estimate::SearchResult> SearchFor(const model::Topology& topo, const model::JobSpec& job,
                                         std::span<const int> gpus,
                                         const model::EngineConfig& config) {
  const model::ModelSpec& m = job.model;
  estimate::EstimateOptions eo;
  eo.checkpoint_interval_s =
      job.checkpoint_interval_s > 0 ? job.checkpoint_interval_s : config.checkpoint_interval_s;
  eo.checkpoint_mode = job.checkpoint_mode.value_or(config.checkpoint_mode);
  eo.comm.allreduce_threshold_bytes = config.allreduce_threshold_bytes;
  eo.comm.buffer_bytes = config.network_buffer_size_bytes;
  return estimate::SearchParallelism(topo, m, m.global_batch, gpus, eo);
}

double PredictThroughput(const model::Topology& topo, const model::JobSpec& job,
                         std::span<const int> gpus, const model::EngineConfig& config) {
  const model::ModelSpec& m = job.model;
  if (m.layers <= 0 || m.hidden <= 0 || m.global_batch <= 0) {
    return static_cast<double>(gpus.size());
  }
  auto r = SearchFor(topo, job, gpus, config);
  if (!r || !r->found) return 0;
  return r->best.samples_per_sec;
}

int RanksPerNode(const engine::JobRecord& job, const model::Topology& topo) {
  if (job.request.gpus_per_node > 0) return job.request.gpus_per_node;
  if (job.placement.empty()) return 0;
  return topo.GpusOn(job.placement.front().node);
}

}  // namespace tianshu::policy::internal
