#include "tianshu/estimate/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <unordered_map>

#include "tianshu/base/strings.h"
#include "tianshu/estimate/flops.h"

namespace tianshu::estimate {
namespace {

// Decoding reads every weight and the KV cache once per step: HBM streaming reaches ~80% of
// its datasheet bandwidth (vLLM / TensorRT-LLM roofline measurements on A100/H100).
constexpr double kHbmEfficiency = 0.8;
// Prefill GEMMs of inference kernels: ~50% of dense peak (same sources).
constexpr double kPrefillEfficiency = 0.5;

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

int RequestedGpus(const model::JobSpec& job, const model::Topology& topo) {
  if (job.gpus > 0) return job.gpus;
  if (job.nodes > 0) {
    int per = job.gpus_per_node > 0 ? job.gpus_per_node
                                    : (topo.types.empty() ? 8 : topo.types[0].gpus_per_node);
    return job.nodes * per;
  }
  return 0;
}

bool NodeAccepts(const model::JobSpec& job, const model::ServerType& type) {
  if (job.backend && type.backend != *job.backend) return false;
  if (!job.accelerators.empty()) {
    bool ok = false;
    for (const auto& a : job.accelerators) {
      const model::AcceleratorSpec* spec = model::FindAccelerator(a);
      std::string want = ToLower(spec ? spec->model : a);
      if (ToLower(type.accelerator.model) == want) ok = true;
    }
    if (!ok) return false;
  }
  for (const auto& [k, v] : job.node_selector) {
    auto it = type.labels.find(k);
    if (it == type.labels.end() || it->second != v) return false;
  }
  return true;
}

Result<std::vector<int>> PickNodes(const model::Topology& topo, const model::JobSpec& job, int gpus,
                                   std::string* why) {
  if (gpus <= 0) return Fail("the job asks for no GPUs (set gpus or nodes)");
  const int S = static_cast<int>(topo.switches.size());
  std::vector<int64_t> have(S, 0);
  for (const auto& n : topo.nodes) {
    if (NodeAccepts(job, topo.TypeOf(n.id))) have[n.leaf] += topo.GpusOn(n.id);
  }
  // Bottom-up sums: process switches by tier.
  std::vector<int> order(S);
  for (int i = 0; i < S; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return topo.switches[a].tier < topo.switches[b].tier; });
  for (int s : order) {
    for (int c : topo.switches[s].children) have[s] += have[c];
  }
  int best = -1;
  for (int s : order) {
    if (have[s] < gpus) continue;
    if (best < 0 || topo.switches[s].tier < topo.switches[best].tier ||
        (topo.switches[s].tier == topo.switches[best].tier && have[s] < have[best])) {
      best = s;
    }
  }
  if (best < 0) {
    int64_t total = topo.Root() >= 0 ? have[topo.Root()] : 0;
    return Fail("the cluster has ", Str(total), " GPUs the job accepts; it asks for ", Str(gpus));
  }
  // Depth-first in child order: nodes of one leaf stay together.
  std::vector<int> out;
  int remaining = gpus;
  std::function<void(int)> visit = [&](int s) {
    const auto& sw = topo.switches[s];
    for (int n : sw.nodes) {
      if (remaining <= 0) return;
      if (!NodeAccepts(job, topo.TypeOf(n))) continue;
      out.push_back(n);
      remaining -= topo.GpusOn(n);
    }
    for (int c : sw.children) {
      if (remaining <= 0) return;
      if (have[c] > 0) visit(c);
    }
  };
  visit(best);
  if (why) {
    *why = "smallest subtree holding the job: " + topo.tiers[topo.switches[best].tier].name + " '" +
           topo.switches[best].name + "' (" + Str(have[best]) + " GPUs)";
  }
  return out;
}

Result<InferenceEstimate> EstimateInference(const model::Topology& topo, const model::JobSpec& job,
                                            std::span<const int> gpus,
                                            const EstimateOptions& options,
                                            comm::CommPlan* plan_out) {
  const model::ModelSpec& m = job.model;
  const int n = static_cast<int>(gpus.size());
  if (n <= 0) return Fail("the allocation has no GPUs");
  InferenceEstimate r;
  const int domain = NvlinkDomain(topo, gpus);
  int64_t device = std::numeric_limits<int64_t>::max();
  double peak = std::numeric_limits<double>::infinity(), hbm = peak;
  for (int g : gpus) {
    const auto& t = topo.TypeOf(comm::NodeOfGpu(topo, g));
    device = std::min(device, t.accelerator.memory_bytes);
    peak = std::min(peak, t.accelerator.peak_tflops * 1e12);
    hbm = std::min(hbm, t.accelerator.hbm_bandwidth.BytesPerSec());
  }
  r.device_memory_bytes = device;
  // Smallest t·p that fits, t first (inside NVLink), then pipeline stages; or what the job
  // asks for.
  bool found = false;
  if (!job.parallelism.automatic) {
    r.tp = std::max(1, job.parallelism.tp);
    r.pp = std::max(1, job.parallelism.pp);
    if (n % (r.tp * r.pp)) {
      return Fail("tp·pp = ", Str(r.tp * r.pp), " does not divide the job's ", Str(n), " GPUs");
    }
    r.memory = InferenceMemory(m, job.inference, r.tp, r.pp);
    found = r.memory.Total() <= device;
    if (!found) {
      r.fits = false;
      r.meets_slo = false;  // a service that cannot load meets no objective
      r.notes.push_back("weights and KV cache need " + Str(r.memory.Total() >> 20) +
                        " MiB per rank at tp=" + Str(r.tp) + " pp=" + Str(r.pp) +
                        "; the device has " + Str(device >> 20) + " MiB");
      return r;
    }
  }
  for (int p = 1; p <= std::max(1, m.layers) && !found; ++p) {
    if (m.layers > 0 && m.layers % p) continue;
    for (int t = 1; t <= domain && !found; t *= 2) {
      if (n % (t * p)) continue;
      if (m.heads > 0 && m.heads % t) continue;
      MemoryBreakdown mem = InferenceMemory(m, job.inference, t, p);
      if (mem.Total() <= device) {
        r.tp = t;
        r.pp = p;
        r.memory = mem;
        found = true;
      }
    }
  }
  if (!found) {
    r.tp = domain;
    r.pp = 1;
    r.memory = InferenceMemory(m, job.inference, r.tp, 1);
    r.fits = false;
    r.meets_slo = false;
    r.notes.push_back("weights and KV cache do not fit even at tp=" + Str(domain) +
                      " on these GPUs; add GPUs or reduce batch / max_seq_len");
    return r;
  }
  r.fits = true;
  r.replicas = n / (r.tp * r.pp);
  comm::CommOptions co = options.comm;
  auto plan = comm::PlanCommunicators(topo, gpus, {.tp = r.tp, .pp = r.pp, .dp = r.replicas}, co);
  if (!plan) return std::unexpected(plan.error());
  GroupPricer pricer(topo, *plan, co, false);
  const int batch = std::max(1, job.inference.batch);
  const int seq = job.inference.max_seq_len > 0 ? job.inference.max_seq_len : m.seq_len;
  const int prompt = std::max(1, seq / 2), generated = std::max(1, seq - prompt);
  const double layers = std::max(1, m.layers);
  // Decode: stream weights + KV cache from HBM, or compute, whichever is slower; then the
  // tensor-parallel all-reduces (2 per layer, Megatron) and the stage hand-offs.
  double bytes = static_cast<double>(r.memory.weights + r.memory.kv_cache);
  double flops = DecodeFlopsPerToken(m, seq) * batch / (r.tp * r.pp);
  double step = std::max(bytes / (hbm * kHbmEfficiency), flops / (peak * kPrefillEfficiency));
  step *= r.pp;  // the stages of one token run one after another
  double prefill = HardwareFlopsPerIteration(
                       [&] {
                         model::ModelSpec p = m;
                         p.seq_len = prompt;
                         return p;
                       }(),
                       batch, model::Recompute::kNone) /
                   3.0 / (r.tp * r.pp) / (peak * kPrefillEfficiency) * r.pp;
  if (r.tp > 1) {
    int64_t ar = int64_t{2} * batch * m.hidden;
    auto c = pricer.Cost(comm::GroupKind::kTensor, comm::Collective::kAllReduce, ar);
    CollectiveEstimate ce{.group = comm::GroupKind::kTensor,
                          .op = comm::Collective::kAllReduce,
                          .group_size = r.tp,
                          .bytes = ar,
                          .calls = static_cast<int64_t>(2 * layers),
                          .algorithm = c.algorithm,
                          .protocol = c.protocol,
                          .bottleneck = c.bottleneck,
                          .seconds = c.seconds,
                          .bus_bytes_per_sec = c.bus_bytes_per_sec};
    ce.total_seconds = ce.exposed_seconds = c.seconds * static_cast<double>(ce.calls);
    step += ce.total_seconds;
    r.collectives.push_back(ce);
    int64_t ar_prefill = ar * prompt;
    prefill +=
        2 * layers *
        pricer.Cost(comm::GroupKind::kTensor, comm::Collective::kAllReduce, ar_prefill).seconds;
  }
  if (r.pp > 1) {
    int64_t hand = int64_t{2} * batch * m.hidden;
    auto c = pricer.Cost(comm::GroupKind::kPipeline, comm::Collective::kSendRecv, hand);
    CollectiveEstimate ce{.group = comm::GroupKind::kPipeline,
                          .op = comm::Collective::kSendRecv,
                          .group_size = r.pp,
                          .bytes = hand,
                          .calls = r.pp - 1,
                          .algorithm = c.algorithm,
                          .protocol = c.protocol,
                          .bottleneck = c.bottleneck,
                          .seconds = c.seconds,
                          .bus_bytes_per_sec = c.bus_bytes_per_sec};
    ce.total_seconds = ce.exposed_seconds = c.seconds * (r.pp - 1);
    step += ce.total_seconds;
    r.collectives.push_back(ce);
  }
  r.decode_step_seconds = step;
  r.prefill_seconds = prefill;
  r.request_latency_ms = 1000.0 * (prefill + generated * step);
  r.tokens_per_sec = r.replicas * batch / step;
  r.requests_per_sec = r.replicas * batch / (r.request_latency_ms / 1000.0);
  if (job.inference.latency_slo_ms > 0 && r.request_latency_ms > job.inference.latency_slo_ms) {
    r.meets_slo = false;
    r.notes.push_back("predicted request latency " + Str(std::llround(r.request_latency_ms)) +
                      " ms exceeds the " + Str(std::llround(job.inference.latency_slo_ms)) +
                      " ms objective");
  }
  if (job.inference.request_rate > 0 && r.requests_per_sec < job.inference.request_rate) {
    r.meets_slo = false;
    char buf[160];
    std::snprintf(buf, sizeof buf, "capacity %.2f req/s is below the requested %.2f req/s",
                  r.requests_per_sec, job.inference.request_rate);
    r.notes.emplace_back(buf);
  }
  if (plan_out) *plan_out = std::move(*plan);
  return r;
}

Result<JobPlan> PlanJob(const model::Topology& topo, const model::JobSpec& job,
                        const PlanOptions& o) {
  JobPlan plan;
  plan.job = job;
  plan.training = job.kind == model::JobKind::kTraining;
  const int want = RequestedGpus(job, topo);
  if (want <= 0) return Fail("job '", job.name, "' asks for no GPUs (set gpus or nodes)");

  // Where.
  if (o.nodes.empty()) {
    auto nodes = PickNodes(topo, job, want, &plan.placement);
    if (!nodes) return std::unexpected(nodes.error());
    plan.nodes = std::move(*nodes);
  } else {
    std::unordered_map<std::string, int> by_name;
    for (const auto& n : topo.nodes) by_name.emplace(n.name, n.id);
    for (const auto& name : o.nodes) {
      auto it = by_name.find(name);
      if (it == by_name.end()) return Fail("--nodes: no node named '", name, "'");
      if (std::find(plan.nodes.begin(), plan.nodes.end(), it->second) != plan.nodes.end()) {
        return Fail("--nodes: '", name, "' is listed twice");
      }
      if (!NodeAccepts(job, topo.TypeOf(it->second))) {
        return Fail("--nodes: '", name, "' (", topo.TypeOf(it->second).accelerator.model,
                    ") does not match the job's backend, accelerators or selectors");
      }
      plan.nodes.push_back(it->second);
    }
    plan.placement = "nodes given on the command line";
  }
  for (int n : plan.nodes) {
    const int per =
        job.gpus_per_node > 0 ? std::min(job.gpus_per_node, topo.GpusOn(n)) : topo.GpusOn(n);
    for (int l = 0; l < per && static_cast<int>(plan.gpus.size()) < want; ++l) {
      plan.gpus.push_back(topo.nodes[n].first_gpu + l);
    }
  }
  if (static_cast<int>(plan.gpus.size()) < want) {
    return Fail("the chosen nodes hold ", Str(static_cast<int64_t>(plan.gpus.size())),
                " GPUs; the job asks for ", Str(want));
  }

  // How.
  const model::Backend backend =
      job.backend ? *job.backend : topo.TypeOf(plan.nodes.front()).backend;
  EstimateOptions eo;
  eo.comm = comm::CommOptionsFrom(o.config, backend, job.priority);
  eo.comm.cost.measured = o.measured;
  eo.comm.cost.contended = o.contended;
  eo.checkpoint_interval_s =
      job.checkpoint_interval_s > 0 ? job.checkpoint_interval_s : o.config.checkpoint_interval_s;
  eo.checkpoint_mode = job.checkpoint_mode.value_or(o.config.checkpoint_mode);
  eo.all_groups = true;

  if (!plan.training) {
    auto r = EstimateInference(topo, job, plan.gpus, eo, &plan.comm);
    if (!r) return std::unexpected(r.error());
    plan.inference = std::move(*r);
    plan.found = plan.inference.fits;
    plan.automatic = true;
    return plan;
  }

  const int64_t batch = job.model.global_batch;
  ParallelConfig chosen;
  if (job.parallelism.automatic) {
    SearchOptions so;
    so.tp_within_nvlink = o.tp_within_nvlink;
    auto r = SearchParallelism(topo, job.model, batch, plan.gpus, eo, so);
    if (!r) return std::unexpected(r.error());
    plan.automatic = true;
    plan.evaluated = r->evaluated;
    if (!r->found) {
      plan.found = false;
      plan.reason = r->reason;
      // Still report the most frugal layout's memory so the user sees what is missing.
      ParallelConfig c = FromSpec(job.parallelism, want);
      c.tp = 1;
      while (c.tp * 2 <= NvlinkDomain(topo, plan.gpus) && want % (c.tp * 2) == 0) c.tp *= 2;
      c.pp = 1;
      c.dp = want / c.tp;
      c.zero_stage = 3;
      c.recompute = model::Recompute::kFull;
      auto cp =
          comm::PlanCommunicators(topo, plan.gpus, {.tp = c.tp, .pp = 1, .dp = c.dp}, eo.comm);
      if (!cp) return std::unexpected(cp.error());
      plan.comm = std::move(*cp);
      plan.estimate = EstimateIteration(topo, job.model, batch, c, plan.comm, eo);
      return plan;
    }
    chosen = r->best.config;
    if (!o.spread_tp) {
      plan.comm = std::move(r->plan);
      plan.estimate = std::move(r->best);
      return plan;
    }
  } else {
    chosen = FromSpec(job.parallelism, want);
    chosen.micro_batch = std::max(1, job.model.micro_batch);
    if (chosen.Gpus() != want) {
      return Fail("parallelism tp·pp·dp = ", Str(chosen.tp), "·", Str(chosen.pp), "·",
                  Str(chosen.dp), " = ", Str(chosen.Gpus()), " but the job has ", Str(want),
                  " GPUs");
    }
  }
  comm::Layout layout{.tp = chosen.tp, .pp = chosen.pp, .dp = chosen.dp, .ep = chosen.ep};
  std::vector<comm::RankOrder> orders;
  if (o.spread_tp) {
    orders = {comm::RankOrder::kSpreadTensor};
  } else {
    orders = {comm::RankOrder::kDataInner};
    if (chosen.pp > 1 && chosen.dp > 1) orders.push_back(comm::RankOrder::kPipelineInner);
  }
  bool first = true;
  for (comm::RankOrder order : orders) {
    comm::CommOptions co = eo.comm;
    co.order = order;
    auto cp = comm::PlanCommunicators(topo, plan.gpus, layout, co);
    if (!cp) return std::unexpected(cp.error());
    IterationEstimate e = EstimateIteration(topo, job.model, batch, chosen, *cp, eo);
    if (first || e.seconds < plan.estimate.seconds) {
      plan.estimate = std::move(e);
      plan.comm = std::move(*cp);
      first = false;
    }
  }
  plan.found = plan.estimate.fits;
  if (!plan.found) plan.reason = plan.estimate.notes.empty() ? "" : plan.estimate.notes.front();
  return plan;
}

}  // namespace tianshu::estimate
