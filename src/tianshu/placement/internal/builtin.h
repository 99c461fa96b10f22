// Factories of the built-in strategies, one per file, collected by the registry.
//   std::unique_ptr<Strategy> s = NewTopology(options);
//   RegisterBuiltins(&registry);
#pragma once

#include <memory>

#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

std::unique_ptr<Strategy> NewFirstFit(const StrategyOptions& options);
std::unique_ptr<Strategy> NewRandom(const StrategyOptions& options);
std::unique_ptr<Strategy> NewSpread(const StrategyOptions& options);
std::unique_ptr<Strategy> NewBestFit(const StrategyOptions& options);
std::unique_ptr<Strategy> NewYarn(const StrategyOptions& options);
std::unique_ptr<Strategy> NewTopology(const StrategyOptions& options);
std::unique_ptr<Strategy> NewFgd(const StrategyOptions& options);
std::unique_ptr<Strategy> NewGenetic(const StrategyOptions& options);
std::unique_ptr<Strategy> NewExact(const StrategyOptions& options);

}  // namespace tianshu::placement::internal
