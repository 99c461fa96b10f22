#include "tianshu/estimate/search.h"

#include <algorithm>
#include <limits>
#include <map>

namespace tianshu::estimate {

int NvlinkDomain(const model::Topology& topo, std::span<const int> gpus) {
  std::map<int, int> per_node;
  for (int g : gpus) ++per_node[comm::NodeOfGpu(topo, g)];
  int domain = std::numeric_limits<int>::max();
  for (auto [n, count] : per_node) {
    if (n < 0) continue;
    const auto& t = topo.TypeOf(n);
    int island = t.intra_kind == model::IntraNodeKind::kNvSwitch ? t.gpus_per_node
                 : t.intra_kind == model::IntraNodeKind::kNvLink ? std::max(1, t.nvlink_domain_size)
                                                                 : 1;
    domain = std::min(domain, std::min(count, island));
  }
  return domain == std::numeric_limits<int>::max() ? 1 : domain;
}

Result<SearchResult> SearchParallelism(const model::Topology& topo, const model::ModelSpec& m,
                                       int64_t global_batch, std::span<const int> gpus,
                                       const EstimateOptions& est, const SearchOptions& so) {
  const int n = static_cast<int>(gpus.size());
  if (n <= 0) return Fail("the allocation has no GPUs");
  const bool transformer = m.IsTransformer() && m.layers > 0 && m.hidden > 0;
  if (!transformer && m.flops_per_sample <= 0 && m.parameters <= 0) {
    return Fail("model '", m.profile, "' has neither a transformer shape nor FLOPs per sample");
  }
  const int64_t batch = global_batch > 0 ? global_batch : std::max<int64_t>(1, m.global_batch);
  const int domain = so.tp_within_nvlink ? NvlinkDomain(topo, gpus) : n;

  SearchResult out;
  std::vector<int> tps, pps;
  for (int t = 1; t <= std::min(n, transformer ? domain : 1); t *= 2) {
    if (n % t) continue;
    if (transformer && (m.hidden % t || (m.heads > 0 && m.heads % t))) continue;
    tps.push_back(t);
  }
  std::vector<model::Recompute> recomputes =
      so.recompute
          ? std::vector<model::Recompute>{*so.recompute}
          : std::vector<model::Recompute>{model::Recompute::kNone, model::Recompute::kSelective,
                                          model::Recompute::kFull};
  double best_seconds = std::numeric_limits<double>::infinity();
  ParallelConfig best_config;
  bool have_best = false;
  // Keeps the best estimate's memory for the "nothing fits" reason.
  int64_t least_memory = std::numeric_limits<int64_t>::max();
  ParallelConfig least_config;

  for (int t : tps) {
    for (int p = 1; p <= (transformer ? m.layers : 1) && t * p <= n; ++p) {
      if ((n / t) % p || (n % (t * p))) continue;
      if (transformer && m.layers % p) continue;
      const int d = n / (t * p);
      if (batch % d) continue;
      // MoE: experts spread over the largest power of two that divides both.
      int ep = 1;
      while (m.experts > 1 && ep * 2 <= m.experts && m.experts % (ep * 2) == 0 &&
             d % (ep * 2) == 0) {
        ep *= 2;
      }
      auto plan = comm::PlanCommunicators(topo, gpus, {.tp = t, .pp = p, .dp = d, .ep = ep}, [&] {
        comm::CommOptions o = est.comm;
        o.order = comm::RankOrder::kDataInner;
        return o;
      }());
      if (!plan) continue;
      ++out.layouts;
      GroupPricer pricer(topo, *plan, est.comm, false);
      std::vector<int> zeros;
      if (so.zero_stage >= 0) {
        zeros = {so.zero_stage};
      } else if (d == 1) {
        zeros = {0};
      } else if (p > 1) {
        zeros = {0, 1};
      } else {
        zeros = {0, 1, 2, 3};
      }
      for (int b : so.micro_batches) {
        if ((batch / d) % b) continue;
        const int64_t micro = batch / (int64_t{d} * b);
        for (model::Recompute rc : recomputes) {
          for (int z : zeros) {
            for (int v : {1, 2}) {
              if (v == 2 && (!so.interleave || p <= 2 || (m.layers / p) % 2 || micro % p)) continue;
              if (out.evaluated >= so.max_evaluations) break;
              ParallelConfig c{.tp = t,
                               .pp = p,
                               .dp = d,
                               .ep = ep,
                               .zero_stage = z,
                               .sequence_parallel = so.sequence_parallel && t > 1,
                               .recompute = rc,
                               .micro_batch = b,
                               .virtual_stages = v};
              ++out.evaluated;
              MemoryBreakdown mem = TrainingMemory(m, c, batch);
              if (mem.Total() < least_memory) {
                least_memory = mem.Total();
                least_config = c;
              }
              if (mem.Total() > pricer.device_memory()) continue;
              ++out.fitting;
              IterationEstimate e = EstimateIteration(m, batch, c, pricer, est);
              if (e.seconds < best_seconds) {
                best_seconds = e.seconds;
                best_config = c;
                have_best = true;
              }
            }
          }
        }
      }
    }
  }
  if (!have_best) {
    out.found = false;
    out.reason = "no configuration fits: the smallest needs " + std::to_string(least_memory >> 20) +
                 " MiB per rank (" + least_config.ToString() + ")";
    return out;
  }
  // The winner, priced on every group, in both rank orders.
  std::vector<comm::RankOrder> orders = {comm::RankOrder::kDataInner};
  if (so.try_both_rank_orders && best_config.pp > 1 && best_config.dp > 1) {
    orders.push_back(comm::RankOrder::kPipelineInner);
  }
  EstimateOptions full = est;
  full.all_groups = true;
  bool first = true;
  for (comm::RankOrder order : orders) {
    comm::CommOptions co = est.comm;
    co.order = order;
    auto plan = comm::PlanCommunicators(
        topo, gpus,
        {.tp = best_config.tp, .pp = best_config.pp, .dp = best_config.dp, .ep = best_config.ep},
        co);
    if (!plan) return std::unexpected(plan.error());
    IterationEstimate e = EstimateIteration(topo, m, batch, best_config, *plan, full);
    if (first || e.seconds < out.best.seconds) {
      out.best = std::move(e);
      out.plan = std::move(*plan);
      first = false;
    }
  }
  out.found = true;
  return out;
}

}  // namespace tianshu::estimate
