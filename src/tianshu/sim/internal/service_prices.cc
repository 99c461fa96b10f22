#include "tianshu/sim/internal/service_prices.h"

#include <utility>

#include "tianshu/comm/cost_model.h"

namespace tianshu::sim::internal {

std::optional<estimate::ServiceCost> ServicePrices::Price(const model::JobSpec& spec,
                                                          std::span<const int> gpus) {
  if (gpus.empty()) return std::nullopt;
  std::string key = spec.name + "|" + spec.model.profile + "|" + std::to_string(gpus.size()) + "|" +
                    std::to_string(topology_.nodes[comm::NodeOfGpu(topology_, gpus[0])].type) +
                    "|" + std::to_string(spec.gpu_milli);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::optional<estimate::ServiceCost> out = estimate::CostOfService(topology_, spec, gpus);
  cache_.emplace(std::move(key), out);
  return out;
}

}  // namespace tianshu::sim::internal
