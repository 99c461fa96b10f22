#include "tianshu/estimate/parallel.h"

namespace tianshu::estimate {

std::string ParallelConfig::ToString() const {
  std::string s =
      "tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp);
  if (ep > 1) s += " ep=" + std::to_string(ep);
  s += " zero=" + std::to_string(zero_stage);
  if (tp > 1 && sequence_parallel) s += " sp";
  s += " recompute=" + std::string(model::RecomputeName(recompute));
  s += " mb=" + std::to_string(micro_batch);
  if (virtual_stages > 1) s += " v=" + std::to_string(virtual_stages);
  return s;
}

ParallelConfig FromSpec(const model::Parallelism& p, int gpus) {
  ParallelConfig c;
  c.tp = std::max(1, p.tp);
  c.pp = std::max(1, p.pp);
  c.dp = p.dp > 0 ? p.dp : std::max(1, gpus / (c.tp * c.pp));
  c.ep = std::max(1, p.ep);
  c.zero_stage = std::max(p.zero_stage, p.distributed_optimizer ? 1 : 0);
  c.sequence_parallel = p.sequence_parallel;
  c.recompute = p.recompute;
  c.virtual_stages = std::max(1, p.virtual_stages);
  return c;
}

}  // namespace tianshu::estimate
