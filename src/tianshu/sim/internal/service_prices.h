// The price of an inference service (estimate::CostOfService: its queue, per replica) on a set
// of GPUs, remembered per (service, profile, GPU count, node type, share) since a run asks
// again at every start and every overlay check. Private to sim/.
//   ServicePrices prices(topology);
//   std::optional<estimate::ServiceCost> c = prices.Price(spec, gpu_ids);
#pragma once

#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "tianshu/estimate/serving.h"
#include "tianshu/model/job.h"
#include "tianshu/model/topology.h"

namespace tianshu::sim::internal {

class ServicePrices {
 public:
  // `topology` must outlive it.
  explicit ServicePrices(const model::Topology& topology) : topology_(topology) {}
  // nullopt: no GPUs, or nothing to price (not a priced service).
  std::optional<estimate::ServiceCost> Price(const model::JobSpec& spec, std::span<const int> gpus);

 private:
  const model::Topology& topology_;
  std::unordered_map<std::string, std::optional<estimate::ServiceCost>> cache_;
};

}  // namespace tianshu::sim::internal
