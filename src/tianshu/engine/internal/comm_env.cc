#include "tianshu/engine/internal/comm_env.h"

#include "tianshu/comm/comm_plan.h"

namespace tianshu::engine::internal {

std::map<std::string, std::string> CommEnv(const model::Topology& topology,
                                           const EngineOptions& options, const JobRecord& job,
                                           const std::vector<placement::RankSlot>& ranks) {
  if (!options.plan_communicators) return {};
  std::vector<int> gpus;
  gpus.reserve(ranks.size());
  for (const auto& s : ranks) {
    if (s.gpu >= 0) gpus.push_back(s.gpu);
  }
  if (gpus.empty()) return {};
  comm::Layout layout;
  const model::Parallelism& p = job.spec.parallelism;
  int n = static_cast<int>(gpus.size());
  if (!p.automatic && p.tp * p.pp > 0 && n % (p.tp * p.pp) == 0) {
    layout.tp = p.tp;
    layout.pp = p.pp;
    layout.dp = n / (p.tp * p.pp);
    layout.ep = p.ep > 0 && layout.dp % p.ep == 0 ? p.ep : 1;
  } else {
    layout.dp = n;
  }
  model::Backend backend = job.spec.backend.value_or(topology.TypeOf(ranks.front().node).backend);
  comm::CommOptions co = comm::CommOptionsFrom(options.config, backend, job.spec.priority);
  co.order = comm::RankOrder::kAsGiven;
  auto plan = comm::PlanCommunicators(topology, gpus, layout, co);
  if (!plan) return {};
  return plan->env;
}

}  // namespace tianshu::engine::internal
