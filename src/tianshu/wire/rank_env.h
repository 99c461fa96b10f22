// The environment every rank of a launch order gets, derived from the order's own fields: the
// torch.distributed rendezvous (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
// NODE_RANK, LOCAL_WORLD_SIZE), the backend's visible-devices variable, and the job's identity
// (TIANSHU_JOB_ID, TIANSHU_JOB_NAME, TIANSHU_ATTEMPT); the rank's own `env` (the server's
// per-job variables, the job's run.env) is laid over it. Built in this one place: the agent
// launches with it, and the server sends only what the fields do not say.
//   auto env = wire::RankEnvironment(order, order.launch->ranks[0]);
#pragma once

#include <map>
#include <string>

#include "tianshu/wire/wire.h"

namespace tianshu::wire {

// CUDA_VISIBLE_DEVICES, or the backend's own (ASCEND_RT_, HIP_, MUSA_VISIBLE_DEVICES).
std::string VisibleDevicesVar(const std::string& backend);

// `order` must hold a launch; `rank` one of its ranks.
std::map<std::string, std::string> RankEnvironment(const WorkOrder& order, const RankLaunch& rank);

}  // namespace tianshu::wire
