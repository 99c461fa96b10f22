#include "tianshu/policy/builtin.h"

#include <mutex>
#include <optional>

#include "tianshu/engine/plugin_options.h"
#include "tianshu/engine/policy.h"
#include "tianshu/policy/defrag.h"
#include "tianshu/policy/elastic.h"
#include "tianshu/policy/queues.h"
#include "tianshu/policy/speed.h"
#include "tianshu/policy/srtf.h"

namespace tianshu::policy {

namespace {

using engine::EngineOptions;

// The queue tree an engine uses: its configuration's `queues:`.
Result<QueueTree> TreeFor(const EngineOptions& o) {
  return QueueTree::Make(QueueOptions{.queues = o.config.queues});
}

Status RegisterAll() {
  auto fair = [](const EngineOptions& o) -> Result<std::unique_ptr<engine::OrderPolicy>> {
    auto tree = TreeFor(o);
    if (!tree) return std::unexpected(tree.error());
    return MakeFairShareOrder(std::move(*tree));
  };
  if (auto st = engine::RegisterOrderPolicy("fair-share", fair); !st) return st;
  auto srtf = [](const EngineOptions&) -> Result<std::unique_ptr<engine::OrderPolicy>> {
    return MakeSrtfOrder();
  };
  if (auto st = engine::RegisterOrderPolicy("srtf", srtf); !st) return st;
  auto srtf_preempt =
      [](const EngineOptions&) -> Result<std::unique_ptr<engine::PreemptionPolicy>> {
    return MakeSrtfPreemption();
  };
  if (auto st = engine::RegisterPreemptionPolicy("srtf", srtf_preempt); !st) return st;
  auto reclaim = [](const EngineOptions& o) -> Result<std::unique_ptr<engine::PreemptionPolicy>> {
    auto tree = TreeFor(o);
    if (!tree) return std::unexpected(tree.error());
    return MakeQueueReclaim(std::move(*tree));
  };
  if (auto st = engine::RegisterPreemptionPolicy("queue-reclaim", reclaim); !st) return st;
  if (auto st = engine::BindPreemptionToOrder("srtf", "srtf"); !st) return st;
  if (auto st = engine::BindPreemptionToOrder("fair-share", "queue-reclaim"); !st) return st;
  auto elastic = [](const EngineOptions& o) -> Result<std::unique_ptr<engine::ReshapePolicy>> {
    auto options = ElasticOptionsFrom(o.config);
    if (!options) return std::unexpected(options.error());
    return MakeElasticPolicy(o, *options);
  };
  if (auto st = engine::RegisterElasticPolicy("elastic", elastic); !st) return st;
  if (auto st = engine::BindElasticScaling("elastic"); !st) return st;
  auto defrag = [](const EngineOptions& o) -> Result<std::unique_ptr<engine::ReshapePolicy>> {
    auto options = MigrationOptionsFrom(o.config);
    if (!options) return std::unexpected(options.error());
    return MakeDefragPolicy(o, *options);
  };
  if (auto st = engine::RegisterMigrationPolicy("defrag", defrag); !st) return st;
  if (auto st = engine::BindMigration("defrag"); !st) return st;
  if (auto st = engine::RegisterPluginOptions("elastic", CheckElasticOptions); !st) return st;
  if (auto st = engine::RegisterPluginOptions("defrag", CheckMigrationOptions); !st) return st;
  auto by_speed = [](const placement::StrategyOptions& so) {
    return MakeBySpeedStrategy("topology", so);
  };
  return placement::RegisterStrategy("by-speed", by_speed);
}

}  // namespace

Status RegisterBuiltinPolicies() {
  static std::mutex mu;
  static std::optional<Status> result;
  std::lock_guard<std::mutex> lock(mu);
  if (!result) result = RegisterAll();
  return *result;
}

}  // namespace tianshu::policy
