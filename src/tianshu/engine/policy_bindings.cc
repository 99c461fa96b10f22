// The switches that bind a policy to a configuration key (policy.h: BindPreemptionToOrder,
// BindElasticScaling, BindMigration), kept process-wide.
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "tianshu/engine/policy.h"

namespace tianshu::engine {

namespace {

// The switches' bindings (see BindPreemptionToOrder). The engine binds its own 2D-LAS pair.
struct Bindings {
  std::mutex mu;
  std::map<std::string, std::string> preemption_for_order;
  std::optional<std::string> elastic_scaling, migration;
};

Bindings& Binds() {
  static Bindings* bindings = [] {
    auto* b = new Bindings;
    b->preemption_for_order["las"] = "las";
    return b;
  }();
  return *bindings;
}

Status BindOnce(std::optional<std::string>& slot, std::string_view what, const std::string& name) {
  if (slot && *slot != name) {
    return Fail(std::string(what), " is already bound to '", *slot, "', not '", name, "'");
  }
  slot = name;
  return Ok();
}

}  // namespace

Status BindPreemptionToOrder(const std::string& order, const std::string& preemption) {
  Bindings& b = Binds();
  std::lock_guard<std::mutex> lock(b.mu);
  std::optional<std::string> slot;
  if (auto it = b.preemption_for_order.find(order); it != b.preemption_for_order.end()) {
    slot = it->second;
  }
  if (auto st = BindOnce(slot, "the preemption of ordering '" + order + "'", preemption); !st) {
    return st;
  }
  b.preemption_for_order[order] = preemption;
  return Ok();
}
Status BindElasticScaling(const std::string& elastic_policy) {
  Bindings& b = Binds();
  std::lock_guard<std::mutex> lock(b.mu);
  return BindOnce(b.elastic_scaling, "task_scheduler.elastic_scaling", elastic_policy);
}
Status BindMigration(const std::string& migration_policy) {
  Bindings& b = Binds();
  std::lock_guard<std::mutex> lock(b.mu);
  return BindOnce(b.migration, "scheduler.migration", migration_policy);
}
std::string BoundPreemption(std::string_view order) {
  Bindings& b = Binds();
  std::lock_guard<std::mutex> lock(b.mu);
  auto it = b.preemption_for_order.find(std::string(order));
  return it != b.preemption_for_order.end() ? it->second : "priority";
}
std::optional<std::string> BoundElasticScaling() {
  Bindings& b = Binds();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.elastic_scaling;
}
std::optional<std::string> BoundMigration() {
  Bindings& b = Binds();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.migration;
}

}  // namespace tianshu::engine
