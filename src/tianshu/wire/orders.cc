// Work orders (server -> agent): launch, checkpoint and stop, one at a time or in a batch.
#include "tianshu/wire/wire.h"

#include <algorithm>
#include <iterator>

#include "tianshu/wire/internal/object_reader.h"

namespace tianshu::wire {
namespace {

using internal::Finish;
using internal::kMaxI64;
using internal::kMaxInt;
using internal::ObjectReader;
using internal::ParseText;
using internal::Versioned;
using nlohmann::json;

RankLaunch ReadRankLaunch(const json& j, const std::string& p, std::vector<std::string>* e) {
  RankLaunch r;
  ObjectReader o(j, p, e,
                 {"rank", "local_rank", "node_rank", "devices", "gpu_milli", "command", "env"});
  o.Int("rank", &r.rank, 0, kMaxInt, true);
  o.Int("local_rank", &r.local_rank, 0, kMaxInt);
  o.Int("node_rank", &r.node_rank, 0, kMaxInt);
  o.IntList("devices", &r.devices, 0, 4096);
  o.Int("gpu_milli", &r.gpu_milli, 0, 1000);
  o.StrList("command", &r.command);
  o.StrMap("env", &r.env);
  return r;
}

CgroupPlan ReadCgroup(const json& j, const std::string& p, std::vector<std::string>* e) {
  CgroupPlan c;
  ObjectReader o(j, p, e,
                 {"numa_nodes", "cpu_milli", "memory_bytes", "io_weight", "io_write_bps", "devices",
                  "traffic_class"});
  o.IntList("numa_nodes", &c.numa_nodes, 0, 4096);
  o.Int("cpu_milli", &c.cpu_milli, 0, kMaxI64);
  o.Int("memory_bytes", &c.memory_bytes, 0, kMaxI64);
  o.Int("io_weight", &c.io_weight, 1, 10000);
  o.Int("io_write_bps", &c.io_write_bps, 0, kMaxI64);
  o.IntList("devices", &c.devices, 0, 4096);
  o.Int("traffic_class", &c.traffic_class, -1, 255);
  return c;
}

// The methods a probe may name (docs/network.md).
constexpr const char* kProbeMethods[] = {"auto", "gloo", "nccl-tests", "rccl-tests", "hccl-test"};

ProbeSpec ReadProbe(const json& j, const std::string& p, std::vector<std::string>* e) {
  ProbeSpec s;
  ObjectReader o(j, p, e, {"method", "bytes", "seconds"});
  o.Str("method", &s.method, false, 32);
  if (std::find(std::begin(kProbeMethods), std::end(kProbeMethods), s.method) ==
      std::end(kProbeMethods)) {
    o.Err(o.Field("method"), "expected one of auto, gloo, nccl-tests, rccl-tests, hccl-test");
  }
  o.Int("bytes", &s.bytes, int64_t{1} << 10, int64_t{1} << 30);  // 1 KiB .. 1 GiB
  o.Double("seconds", &s.seconds, 0.1, 60);
  return s;
}

LaunchOrder ReadLaunch(const json& j, const std::string& p, std::vector<std::string>* e) {
  LaunchOrder l;
  ObjectReader o(j, p, e,
                 {"job_name", "backend", "world_size", "master_addr", "master_port",
                  "checkpoint_dir", "workdir", "run_as", "ranks", "cgroup", "probe"});
  o.Str("job_name", &l.job_name);
  o.Str("backend", &l.backend);
  o.Int("world_size", &l.world_size, 1, kMaxInt);
  o.Str("master_addr", &l.master_addr);
  o.Int("master_port", &l.master_port, 0, 65535);
  o.Str("checkpoint_dir", &l.checkpoint_dir);
  o.Str("workdir", &l.workdir);
  o.Str("run_as", &l.run_as);
  o.Array("ranks",
          [&](const json& x, const std::string& q) { l.ranks.push_back(ReadRankLaunch(x, q, e)); });
  if (const json* c = o.Object("cgroup")) l.cgroup = ReadCgroup(*c, o.Field("cgroup"), e);
  if (const json* pr = o.Object("probe")) l.probe = ReadProbe(*pr, o.Field("probe"), e);
  return l;
}

WorkOrder ReadOrder(const json& j, const std::string& p, std::vector<std::string>* e) {
  WorkOrder w;
  ObjectReader o(j, p, e, {"id", "kind", "job_id", "attempt", "launch", "checkpoint", "stop"});
  o.Str("id", &w.id, true);
  std::string kind;
  o.Str("kind", &kind, true);
  if (!kind.empty()) {
    if (auto k = ParseOrderKind(kind)) {
      w.kind = *k;
    } else {
      o.Err(o.Field("kind"), "expected one of launch, checkpoint, stop");
    }
  }
  o.Str("job_id", &w.job_id, true);
  o.Int("attempt", &w.attempt, 0, kMaxInt);
  if (const json* l = o.Object("launch")) w.launch = ReadLaunch(*l, o.Field("launch"), e);
  if (const json* c = o.Object("checkpoint")) {
    CheckpointOrder co;
    ObjectReader cobj(*c, o.Field("checkpoint"), e, {"reason"});
    cobj.Str("reason", &co.reason);
    w.checkpoint = co;
  }
  if (const json* s = o.Object("stop")) {
    StopOrder so;
    ObjectReader sobj(*s, o.Field("stop"), e, {"reason", "checkpoint_first", "grace_ms"});
    sobj.Str("reason", &so.reason);
    sobj.Bool("checkpoint_first", &so.checkpoint_first);
    sobj.Int("grace_ms", &so.grace_ms, 0, kMaxI64);
    w.stop = so;
  }
  if (e->empty()) {
    if (auto st = ValidateOrder(w); !st) e->push_back(p + ": " + st.error().message);
  }
  return w;
}

json ToJsonLaunch(const LaunchOrder& l) {
  json ranks = json::array();
  for (const auto& r : l.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"local_rank", r.local_rank},
                     {"node_rank", r.node_rank},
                     {"devices", r.devices},
                     {"gpu_milli", r.gpu_milli},
                     {"command", r.command},
                     {"env", r.env}});
  }
  const CgroupPlan& c = l.cgroup;
  json j = {{"job_name", l.job_name},
            {"backend", l.backend},
            {"world_size", l.world_size},
            {"master_addr", l.master_addr},
            {"master_port", l.master_port},
            {"checkpoint_dir", l.checkpoint_dir},
            {"workdir", l.workdir},
            {"run_as", l.run_as},
            {"ranks", ranks},
            {"cgroup",
             {{"numa_nodes", c.numa_nodes},
              {"cpu_milli", c.cpu_milli},
              {"memory_bytes", c.memory_bytes},
              {"io_weight", c.io_weight},
              {"io_write_bps", c.io_write_bps},
              {"devices", c.devices},
              {"traffic_class", c.traffic_class}}}};
  // Only on probes: an agent from before probes refuses fields it does not know.
  if (l.probe) {
    j["probe"] = {
        {"method", l.probe->method}, {"bytes", l.probe->bytes}, {"seconds", l.probe->seconds}};
  }
  return j;
}

json OrderBody(const WorkOrder& w) {
  json j = {
      {"id", w.id}, {"kind", OrderKindName(w.kind)}, {"job_id", w.job_id}, {"attempt", w.attempt}};
  if (w.launch) j["launch"] = ToJsonLaunch(*w.launch);
  if (w.checkpoint) j["checkpoint"] = {{"reason", w.checkpoint->reason}};
  if (w.stop) {
    j["stop"] = {{"reason", w.stop->reason},
                 {"checkpoint_first", w.stop->checkpoint_first},
                 {"grace_ms", w.stop->grace_ms}};
  }
  return j;
}

}  // namespace

std::string_view OrderKindName(OrderKind k) {
  switch (k) {
    case OrderKind::kLaunch:
      return "launch";
    case OrderKind::kCheckpoint:
      return "checkpoint";
    case OrderKind::kStop:
      return "stop";
  }
  return "launch";
}
std::optional<OrderKind> ParseOrderKind(std::string_view s) {
  if (s == "launch") return OrderKind::kLaunch;
  if (s == "checkpoint") return OrderKind::kCheckpoint;
  if (s == "stop") return OrderKind::kStop;
  return std::nullopt;
}

Status ValidateOrder(const WorkOrder& o) {
  int payloads = (o.launch ? 1 : 0) + (o.checkpoint ? 1 : 0) + (o.stop ? 1 : 0);
  if (payloads > 1) return Fail("an order carries exactly one of launch, checkpoint, stop");
  switch (o.kind) {
    case OrderKind::kLaunch:
      if (!o.launch) return Fail("a launch order needs a 'launch' object");
      for (const auto& r : o.launch->ranks) {
        if (r.rank >= o.launch->world_size) {
          return Fail("rank ", std::to_string(r.rank), " is not below world_size ",
                      std::to_string(o.launch->world_size));
        }
        // A probe's ranks run what the agent chooses (their command is empty); one that also
        // names a command is ambiguous.
        if (o.launch->probe && !r.command.empty()) {
          return Fail("rank ", std::to_string(r.rank), " of a probe carries a command");
        }
      }
      break;
    case OrderKind::kCheckpoint:
      if (o.launch || o.stop) return Fail("a checkpoint order carries no launch or stop");
      break;
    case OrderKind::kStop:
      if (o.launch || o.checkpoint) return Fail("a stop order carries no launch or checkpoint");
      break;
  }
  return Ok();
}

json ToJson(const WorkOrder& w) { return Versioned(OrderBody(w)); }

json ToJson(const WorkBatch& b) {
  json orders = json::array();
  for (const auto& o : b.orders) orders.push_back(OrderBody(o));
  json out = {{"orders", orders}};
  if (!b.cursor.empty()) out["cursor"] = b.cursor;
  return Versioned(std::move(out));
}

std::string OrderText(const WorkOrder& w) { return Dump(OrderBody(w)); }

std::string OrderMessageText(const std::string& order_text) {
  // Every key of an order sorts before "version", the last one nlohmann's object writes.
  if (order_text.size() < 2 || order_text.back() != '}') return order_text;
  return order_text.substr(0, order_text.size() - 1) +
         (order_text.size() > 2 ? ",\"version\":" : "\"version\":") + std::to_string(kWireVersion) +
         "}";
}

std::string WorkBatchText(const std::vector<const std::string*>& order_texts,
                          const std::string& cursor) {
  size_t bytes = 64 + cursor.size();
  for (const std::string* t : order_texts) bytes += t->size() + 1;
  std::string out;
  out.reserve(bytes);
  // Keys in the order nlohmann's object (a std::map) writes them.
  out += '{';
  if (!cursor.empty()) out += "\"cursor\":" + Dump(json(cursor)) + ",";
  out += "\"orders\":[";
  for (size_t i = 0; i < order_texts.size(); ++i) {
    if (i > 0) out += ',';
    out += *order_texts[i];
  }
  out += "],\"version\":" + std::to_string(kWireVersion) + "}";
  return out;
}

Result<WorkOrder> WorkOrderFromJson(const json& j, const std::string& where) {
  std::vector<std::string> e;
  WorkOrder w = ReadOrder(j, where, &e);
  return Finish(std::move(w), e);
}

Result<WorkOrder> ParseWorkOrder(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  return WorkOrderFromJson(*j, "order");
}

Result<WorkBatch> ParseWorkBatch(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  WorkBatch b;
  ObjectReader o(*j, "", &e, {"orders", "cursor"});
  o.Str("cursor", &b.cursor);
  o.Array(
      "orders",
      [&](const json& x, const std::string& q) { b.orders.push_back(ReadOrder(x, q, &e)); }, true);
  return Finish(std::move(b), e);
}

}  // namespace tianshu::wire
