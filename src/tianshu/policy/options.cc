#include "tianshu/policy/options.h"

#include <map>
#include <mutex>
#include <set>

namespace tianshu::policy {

Status QueueOptions::Validate() const {
  std::map<std::string, const QueueSpec*> by_name;
  for (const QueueSpec& q : queues) {
    if (q.name.empty()) return Fail("queues: a queue has no name");
    if (!by_name.emplace(q.name, &q).second) return Fail("queues: duplicate queue '", q.name, "'");
  }
  std::map<std::string, int64_t> child_quota;
  for (const QueueSpec& q : queues) {
    if (!(q.weight > 0)) return Fail("queues.", q.name, ".weight must be positive");
    if (q.quota_gpus < 0) return Fail("queues.", q.name, ".quota cannot be negative");
    if (!q.parent.empty() && !by_name.count(q.parent)) {
      return Fail("queues.", q.name, ".parent: unknown queue '", q.parent, "'");
    }
    if (!q.parent.empty()) child_quota[q.parent] += q.quota_gpus;
    std::set<std::string> seen{q.name};
    for (const QueueSpec* p = &q; !p->parent.empty();) {
      p = by_name.at(p->parent);
      if (!seen.insert(p->name).second) return Fail("queues.", q.name, ": parent cycle");
    }
  }
  for (const QueueSpec& q : queues) {
    auto it = child_quota.find(q.name);
    int64_t children = it == child_quota.end() ? 0 : it->second;
    if (q.quota_gpus > 0 && children > q.quota_gpus) {
      return Fail("queues.", q.name, ": children's quotas (", std::to_string(children),
                  " GPUs) exceed its quota (", std::to_string(q.quota_gpus), ")");
    }
    if (!q.borrow && q.quota_gpus == 0 && children == 0) {
      return Fail("queues.", q.name, ": a queue that may not borrow needs a quota");
    }
  }
  return Ok();
}

Status ElasticOptions::Validate() const {
  if (min_throughput_gain < 0) return Fail("elastic.min_throughput_gain cannot be negative");
  if (restart_s < 0) return Fail("elastic.restart_s cannot be negative");
  return Ok();
}

Status MigrationOptions::Validate() const {
  if (strategy.empty()) return Fail("migration.strategy is empty");
  if (restart_s < 0) return Fail("migration.restart_s cannot be negative");
  if (unknown_wait_s < 0) return Fail("migration.unknown_wait_s cannot be negative");
  if (max_moves < 1) return Fail("migration.max_moves must be at least 1");
  if (max_wait_steps < 1) return Fail("migration.max_wait_steps must be at least 1");
  return Ok();
}

Status PolicyOptions::Validate() const {
  if (auto st = queues.Validate(); !st) return st;
  if (auto st = elastic.Validate(); !st) return st;
  return migration.Validate();
}

namespace {

struct Current {
  std::mutex mu;
  PolicyOptions options;
};

Current& Global() {
  static Current* c = new Current;
  return *c;
}

}  // namespace

Status SetPolicyOptions(const PolicyOptions& options) {
  if (auto st = options.Validate(); !st) return st;
  Current& c = Global();
  std::lock_guard<std::mutex> lock(c.mu);
  c.options = options;
  return Ok();
}

PolicyOptions CurrentPolicyOptions() {
  Current& c = Global();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.options;
}

}  // namespace tianshu::policy
