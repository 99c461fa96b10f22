#include "tianshu/wire/rank_env.h"

#include <vector>

#include "tianshu/base/strings.h"

namespace tianshu::wire {

std::string VisibleDevicesVar(const std::string& backend) {
  if (backend == "ascend") return "ASCEND_RT_VISIBLE_DEVICES";
  if (backend == "rocm") return "HIP_VISIBLE_DEVICES";
  if (backend == "musa") return "MUSA_VISIBLE_DEVICES";
  return "CUDA_VISIBLE_DEVICES";
}

std::map<std::string, std::string> RankEnvironment(const WorkOrder& order, const RankLaunch& rank) {
  const LaunchOrder& l = *order.launch;
  std::map<std::string, std::string> env;
  std::vector<std::string> devs;
  for (int d : rank.devices) devs.push_back(std::to_string(d));
  env[VisibleDevicesVar(l.backend)] = Join(devs, ",");
  env["MASTER_ADDR"] = l.master_addr.empty() ? "127.0.0.1" : l.master_addr;
  env["MASTER_PORT"] = std::to_string(l.master_port);
  env["WORLD_SIZE"] = std::to_string(l.world_size);
  env["RANK"] = std::to_string(rank.rank);
  env["LOCAL_RANK"] = std::to_string(rank.local_rank);
  env["NODE_RANK"] = std::to_string(rank.node_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(l.ranks.size());
  env["TIANSHU_JOB_ID"] = order.job_id;
  env["TIANSHU_JOB_NAME"] = l.job_name;
  env["TIANSHU_ATTEMPT"] = std::to_string(order.attempt);
  for (const auto& [k, v] : rank.env) env[k] = v;  // the server's per-job variables win
  return env;
}

}  // namespace tianshu::wire
