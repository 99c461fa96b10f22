// The communicator environment (NCCL_*, HCCL_*, ...) a start carries: the job's parallelism
// laid over its ranks and planned by comm/ on this topology. Empty unless
// EngineOptions::plan_communicators is on (the server wants it; the simulator does not).
// Private to engine/.
//   StartJob s{.id = job.id, .ranks = ranks};
//   s.env = internal::CommEnv(topology, options, job, s.ranks);
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tianshu/engine/engine.h"

namespace tianshu::engine::internal {

// Empty when planning is off, the ranks hold no GPU, or no plan exists.
std::map<std::string, std::string> CommEnv(const model::Topology& topology,
                                           const EngineOptions& options, const JobRecord& job,
                                           const std::vector<placement::RankSlot>& ranks);

}  // namespace tianshu::engine::internal
