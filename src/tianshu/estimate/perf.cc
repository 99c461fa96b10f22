#include "tianshu/estimate/perf.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tianshu/comm/comm_plan.h"
#include "tianshu/comm/cost_model.h"
#include "tianshu/estimate/iteration.h"

namespace tianshu::estimate {

double JobPerf::CommSeconds(double x) const {
  double net = 0;
  if (net_total_s > 0) {
    double hidden = net_total_s - net_exposed_s;
    net = std::max(0.0, net_total_s / std::max(x, 1e-6) - hidden);
  }
  return local_comm_s + net;
}

double JobPerf::StepSeconds(double x, double nvme_share) const {
  double base = compute_s + CommSeconds(x);
  double k = std::max(1.0, nvme_share);
  double stall = ckpt_async ? ckpt_snapshot_s + std::max(0.0, ckpt_write_s * k - ckpt_interval_s)
                            : ckpt_write_s * k;
  if (ckpt_interval_s > 0) base *= 1.0 + stall / ckpt_interval_s;
  return base;
}

namespace {

// Largest divisor of n that is <= cap (and, if `also` > 0, divides it too).
int DivisorAtMost(int n, int cap, int also = 0) {
  for (int d = std::max(1, std::min(n, cap)); d >= 1; --d) {
    if (n % d == 0 && (also <= 0 || also % d == 0)) return d;
  }
  return 1;
}

}  // namespace

// Trace jobs carry no parallelism: tensor parallelism grows with the model so that it fits an
// 80 GB device with Megatron's distributed optimizer (7B: 2, 13B: 4, 70B and up: 8, inside one
// node), pipeline parallelism from 70B up (70B: 4, 175B: 8, 500B+: 16), the rest data parallel.
estimate::ParallelConfig ResolveParallelism(const model::JobSpec& spec, int gpus) {
  if (!spec.parallelism.automatic) return estimate::FromSpec(spec.parallelism, gpus);
  estimate::ParallelConfig c;
  const model::ModelSpec& m = spec.model;
  double p = static_cast<double>(m.parameters);
  int want_tp = 1, want_pp = 1;
  if (m.IsTransformer() && p >= 5e9) {
    want_tp = p < 10e9 ? 2 : p < 30e9 ? 4 : 8;
    want_pp = p < 60e9 ? 1 : p < 150e9 ? 4 : p < 400e9 ? 8 : 16;
  }
  c.tp = DivisorAtMost(gpus, want_tp, m.heads > 0 ? m.heads : 0);
  c.pp = DivisorAtMost(gpus / c.tp, want_pp, m.layers > 0 ? m.layers : 0);
  c.dp = gpus / (c.tp * c.pp);
  c.zero_stage = m.IsTransformer() && p >= 1e9 ? 1 : 0;
  c.sequence_parallel = c.tp > 1;
  c.micro_batch = m.micro_batch > 0 ? m.micro_batch : 1;
  return c;
}

std::vector<double> ContentionSolver::Solve(std::span<const Flow> flows,
                                            std::span<const double> capacity, int passes) {
  std::vector<double> x(flows.size(), 1.0);
  if (flows.empty()) return x;
  // link -> its users: (flow index, demand, the demand the flow is scaled by there). A flow
  // naming a link twice is scaled by the last demand it names; its entries on the link are
  // adjacent, since flows are added in order.
  struct User {
    int flow;
    double demand;
    double scale_by;
  };
  std::unordered_map<int, std::vector<User>> on_link;
  for (size_t i = 0; i < flows.size(); ++i) {
    for (const auto& [link, d] : flows[i].demand) {
      if (d > 0) on_link[link].push_back({static_cast<int>(i), d, d});
    }
  }
  std::vector<int> links;
  links.reserve(on_link.size());
  for (auto& [l, users] : on_link) {
    links.push_back(l);
    for (size_t k = users.size() - 1; k-- > 0;) {
      if (users[k + 1].flow == users[k].flow) users[k].scale_by = users[k + 1].scale_by;
    }
  }
  std::sort(links.begin(), links.end());  // deterministic
  struct Want {
    double rate;
    int flow;
    double scale_by;
    bool operator<(const Want& o) const { return rate != o.rate ? rate < o.rate : flow < o.flow; }
  };
  std::vector<Want> want;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<double> next(flows.size(), 1.0);
    bool any = false;
    for (int link : links) {
      const auto& users = on_link[link];
      double cap = link < static_cast<int>(capacity.size()) ? capacity[link] : 0;
      if (cap <= 0) continue;
      want.clear();
      double total = 0;
      for (const User& u : users) {
        want.push_back({u.demand * x[u.flow], u.flow, u.scale_by});
        total += u.demand * x[u.flow];
      }
      if (total <= cap) continue;
      any = true;
      // Progressive filling: equal shares, the smallest demands satisfied first.
      std::sort(want.begin(), want.end());
      double left = cap;
      size_t n = want.size();
      for (size_t k = 0; k < n; ++k) {
        double share = left / static_cast<double>(n - k);
        double got = std::min(want[k].rate, share);
        left -= got;
        const int i = want[k].flow;
        next[i] = std::min(next[i], want[k].scale_by > 0 ? got / want[k].scale_by : 1.0);
      }
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::min(x[i], next[i]);
    if (!any) break;
  }
  for (double& v : x) v = std::clamp(v, 1e-6, 1.0);
  return x;
}

PerfModel::PerfModel(const model::Topology& topology, const model::EngineConfig& config)
    : topo_(topology), config_(config) {
  uplink_capacity_.resize(topo_.switches.size(), 0);
  for (const auto& sw : topo_.switches) uplink_capacity_[sw.id] = sw.uplink.BytesPerSec();
  // The most compact placement on the fastest accelerator: its nodes in id order (which is
  // leaf order for generated and imported fabrics), then everything else.
  int best_type = 0;
  for (size_t t = 0; t < topo_.types.size(); ++t) {
    if (topo_.types[t].accelerator.peak_tflops > topo_.types[best_type].accelerator.peak_tflops) {
      best_type = static_cast<int>(t);
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& n : topo_.nodes) {
      if ((n.type == best_type) != (pass == 0)) continue;
      for (int g = 0; g < topo_.types[n.type].gpus_per_node; ++g)
        ideal_gpus_.push_back(n.first_gpu + g);
    }
  }
}

std::string PerfModel::Key(const model::JobSpec& spec, int gpus) const {
  const model::ModelSpec& m = spec.model;
  estimate::ParallelConfig c = ResolveParallelism(spec, gpus);
  return m.profile + "|" + std::to_string(m.parameters) + "|" + std::to_string(m.layers) + "|" +
         std::to_string(m.hidden) + "|" + std::to_string(m.global_batch) + "|" +
         std::to_string(gpus) + "|" + c.ToString() + "|" +
         std::to_string(spec.checkpoint_interval_s);
}

double PerfModel::AloneFraction(const JobPerf& p) const {
  double x = 1;
  for (const auto& [sw, bytes] : p.uplink_bytes) {
    double d = p.DemandBytesPerSec(bytes);
    double cap = uplink_capacity_[sw];
    if (d > 0 && cap > 0) x = std::min(x, cap / d);
  }
  return std::max(x, 1e-6);
}

JobPerf PerfModel::Compute(const model::JobSpec& spec, std::span<const int> gpus) {
  JobPerf p;
  const model::ModelSpec& m = spec.model;
  bool shaped = m.IsTransformer() ? (m.layers > 0 && m.hidden > 0) : m.flops_per_sample > 0;
  if (gpus.empty() || spec.gpu_milli < model::kMilliPerGpu || !shaped ||
      spec.kind != model::JobKind::kTraining) {
    p.opaque = true;
    return p;
  }
  int n = static_cast<int>(gpus.size());
  estimate::ParallelConfig c = ResolveParallelism(spec, n);
  if (c.Gpus() != n) {
    c.tp = 1;
    c.pp = 1;
    c.dp = n;
  }
  comm::Layout layout{
      .tp = c.tp, .pp = c.pp, .dp = c.dp, .ep = c.ep > 0 && c.dp % c.ep == 0 ? c.ep : 1};
  model::Backend backend =
      spec.backend.value_or(topo_.TypeOf(comm::NodeOfGpu(topo_, gpus[0])).backend);
  comm::CommOptions co = comm::CommOptionsFrom(config_, backend, spec.priority);
  co.cost.contended = false;  // the simulator applies contention itself
  auto plan = comm::PlanCommunicators(topo_, gpus, layout, co);
  if (!plan) {
    p.opaque = true;
    return p;
  }
  estimate::EstimateOptions eo;
  eo.comm = co;
  eo.checkpoint_interval_s =
      spec.checkpoint_interval_s > 0 ? spec.checkpoint_interval_s : config_.checkpoint_interval_s;
  eo.checkpoint_mode = spec.checkpoint_mode.value_or(config_.checkpoint_mode);
  int64_t batch = m.global_batch > 0 ? m.global_batch : std::max<int64_t>(1, c.dp * c.micro_batch);
  estimate::IterationEstimate e = estimate::EstimateIteration(topo_, m, batch, c, *plan, eo);
  p.compute_s = e.time.compute + e.time.bubble;
  double net_exposed = 0;
  std::vector<int> count(topo_.switches.size(), 0);
  std::vector<int> touched;
  std::unordered_map<int, double> up;
  int tiers = static_cast<int>(topo_.tiers.size());
  for (const auto& ce : e.collectives) {
    if (ce.bottleneck < comm::LinkClass::kNicLeaf) continue;
    p.net_total_s += ce.total_seconds;
    net_exposed += ce.exposed_seconds;
    int groups = plan->NumGroups(ce.group);
    for (int g = 0; g < groups; ++g) {
      std::vector<int> members = plan->GroupGpus(ce.group, g);
      int size = static_cast<int>(members.size());
      if (size < 2) continue;
      std::vector<int> nodes;
      nodes.reserve(members.size());
      for (int gpu : members) nodes.push_back(comm::NodeOfGpu(topo_, gpu));
      touched.clear();
      for (int node : nodes) {
        for (int t = 0; t < tiers; ++t) {
          int sw = topo_.AncestorAt(node, t);
          if (sw < 0 || sw == topo_.Root()) continue;
          if (count[sw]++ == 0) touched.push_back(sw);
        }
      }
      double per_call = static_cast<double>(ce.bytes);
      double factor = 1;
      switch (ce.op) {
        case comm::Collective::kAllReduce:
          factor = 2.0 * (size - 1) / size;
          break;
        case comm::Collective::kAllGather:
        case comm::Collective::kReduceScatter:
          factor = static_cast<double>(size - 1) / size;
          break;
        default:
          factor = 1;
          break;
      }
      for (int sw : touched) {
        int inside = count[sw];
        if (inside > 0 && inside < size) {
          double bytes = per_call * static_cast<double>(ce.calls) * factor;
          if (ce.op == comm::Collective::kSendRecv) {
            // Stage boundaries that cross this switch: each carries the message once.
            int crossing = 0;
            for (int r = 0; r + 1 < size; ++r) {
              bool a = topo_.AncestorAt(nodes[r], topo_.switches[sw].tier) == sw;
              bool b = topo_.AncestorAt(nodes[r + 1], topo_.switches[sw].tier) == sw;
              crossing += a != b;
            }
            bytes = per_call * static_cast<double>(ce.calls) * crossing / std::max(1, size - 1);
          } else if (ce.op == comm::Collective::kAllToAll) {
            bytes = per_call * static_cast<double>(ce.calls) * (size - inside) / size * inside;
          }
          up[sw] += bytes;
        }
        count[sw] = 0;
      }
    }
  }
  p.net_exposed_s = std::min(net_exposed, p.net_total_s);
  p.local_comm_s = std::max(0.0, e.time.Comm() - net_exposed);
  for (const auto& [sw, b] : up) p.uplink_bytes.emplace_back(sw, b);
  std::sort(p.uplink_bytes.begin(), p.uplink_bytes.end());
  p.ckpt_interval_s = static_cast<double>(e.storage.interval_s > 0 ? e.storage.interval_s
                                                                   : eo.checkpoint_interval_s);
  p.ckpt_async = e.storage.async;
  p.ckpt_write_s = e.storage.write_seconds;
  if (e.storage.async) {
    double overflow = std::max(0.0, e.storage.write_seconds - p.ckpt_interval_s);
    p.ckpt_snapshot_s = std::max(0.0, e.storage.stall_seconds - overflow);
  }
  return p;
}

JobPerf PerfModel::Evaluate(const model::JobSpec& spec,
                            std::span<const placement::RankSlot> ranks) {
  std::vector<int> gpus;
  gpus.reserve(ranks.size());
  bool single_node = true;
  for (const auto& s : ranks) {
    if (s.gpu >= 0) gpus.push_back(s.gpu);
    if (s.node != ranks.front().node) single_node = false;
  }
  if (single_node && !ranks.empty()) {
    std::string key = Key(spec, static_cast<int>(gpus.size())) + "|type" +
                      std::to_string(topo_.nodes[ranks.front().node].type);
    auto it = single_node_cache_.find(key);
    if (it != single_node_cache_.end()) return it->second;
    JobPerf p = Compute(spec, gpus);
    single_node_cache_.emplace(std::move(key), p);
    return p;
  }
  return Compute(spec, gpus);
}

double PerfModel::IdealStepSeconds(const model::JobSpec& spec) {
  int n = spec.TotalGpus();
  n = std::min<int>(n, static_cast<int>(ideal_gpus_.size()));
  std::string key = Key(spec, n);
  auto it = ideal_cache_.find(key);
  if (it != ideal_cache_.end()) return it->second;
  std::vector<int> gpus(ideal_gpus_.begin(), ideal_gpus_.begin() + n);
  JobPerf p = Compute(spec, gpus);
  double s = p.opaque ? 0 : p.StepSeconds(AloneFraction(p), 1);
  ideal_cache_.emplace(std::move(key), s);
  return s;
}

std::optional<double> PredictedSlowdown(PerfModel& model, const model::JobSpec& spec,
                                        std::span<const placement::RankSlot> ranks) {
  const JobPerf p = model.Evaluate(spec, ranks);
  const double ideal = model.IdealStepSeconds(spec);
  if (p.opaque || ideal <= 0) return std::nullopt;
  return p.StepSeconds(model.AloneFraction(p), 1) / ideal;
}

double PredictedCheckpointWriteS(PerfModel& model, const model::JobSpec& spec,
                                 std::span<const placement::RankSlot> ranks) {
  const JobPerf p = model.Evaluate(spec, ranks);
  return p.opaque ? 0.0 : p.ckpt_write_s;
}

}  // namespace tianshu::estimate
