#include "tianshu/policy/options.h"

#include <map>
#include <set>

#include "tianshu/engine/plugin_options.h"
#include "tianshu/placement/strategy.h"

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

namespace {

// Reads the elastic plugin's options into *out; the first problem, if any.
std::optional<model::Diagnostic> ReadElastic(const model::EngineConfig& c, ElasticOptions* out) {
  engine::PluginOptionReader r("elastic", c);
  r.Double("min_throughput_gain", &out->min_throughput_gain, 0, 1e6);
  r.Seconds("restart_s", &out->restart_s, 0, 1e7);
  return r.Finish();
}

std::optional<model::Diagnostic> ReadMigration(const model::EngineConfig& c,
                                               MigrationOptions* out) {
  engine::PluginOptionReader r("defrag", c);
  r.Choice("strategy", &out->strategy, placement::StrategyNames(), "placement strategy");
  r.Seconds("restart_s", &out->restart_s, 0, 1e7);
  r.Seconds("unknown_wait_s", &out->unknown_wait_s, 0, 1e9);
  r.Int("max_moves", &out->max_moves, 1, 100000);
  r.Int("max_wait_steps", &out->max_wait_steps, 1, 100000);
  return r.Finish();
}

Status AsStatus(const model::Diagnostic& d) { return Fail(d.ToString()); }

}  // namespace

std::optional<model::Diagnostic> CheckElasticOptions(const model::EngineConfig& config) {
  ElasticOptions o;
  return ReadElastic(config, &o);
}

std::optional<model::Diagnostic> CheckMigrationOptions(const model::EngineConfig& config) {
  MigrationOptions o;
  return ReadMigration(config, &o);
}

Result<ElasticOptions> ElasticOptionsFrom(const model::EngineConfig& config) {
  ElasticOptions o;
  if (auto d = ReadElastic(config, &o)) return std::unexpected(AsStatus(*d).error());
  return o;
}

Result<MigrationOptions> MigrationOptionsFrom(const model::EngineConfig& config) {
  MigrationOptions o;
  if (auto d = ReadMigration(config, &o)) return std::unexpected(AsStatus(*d).error());
  return o;
}

}  // namespace tianshu::policy
