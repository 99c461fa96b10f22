// Work orders (server -> agent): launch, checkpoint and stop, one at a time or in a batch.
#include "tianshu/wire/wire.h"

#include <algorithm>
#include <iterator>

#include "tianshu/wire/internal/object_reader.h"
#include "tianshu/wire/json_writer.h"

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

// The one writer of an order: keys in sorted order, so the text is what Dump writes for the
// same document (a cycle writes hundreds of launch orders under the server's lock).
void WriteOrder(JsonWriter& w, const WorkOrder& o) {
  w.BeginObject();
  w.Key("attempt"), w.Int(o.attempt);
  if (o.checkpoint) {
    w.Key("checkpoint"), w.BeginObject();
    w.Key("reason"), w.String(o.checkpoint->reason);
    w.EndObject();
  }
  w.Key("id"), w.String(o.id);
  w.Key("job_id"), w.String(o.job_id);
  w.Key("kind"), w.String(OrderKindName(o.kind));
  if (o.launch) {
    const LaunchOrder& l = *o.launch;
    const CgroupPlan& c = l.cgroup;
    w.Key("launch"), w.BeginObject();
    w.Key("backend"), w.String(l.backend);
    w.Key("cgroup"), w.BeginObject();
    w.Key("cpu_milli"), w.Int(c.cpu_milli);
    w.Key("devices"), w.Array(c.devices);
    w.Key("io_weight"), w.Int(c.io_weight);
    w.Key("io_write_bps"), w.Int(c.io_write_bps);
    w.Key("memory_bytes"), w.Int(c.memory_bytes);
    w.Key("numa_nodes"), w.Array(c.numa_nodes);
    w.Key("traffic_class"), w.Int(c.traffic_class);
    w.EndObject();
    w.Key("checkpoint_dir"), w.String(l.checkpoint_dir);
    w.Key("job_name"), w.String(l.job_name);
    w.Key("master_addr"), w.String(l.master_addr);
    w.Key("master_port"), w.Int(l.master_port);
    // Only on probes: an agent from before probes refuses fields it does not know.
    if (l.probe) {
      w.Key("probe"), w.BeginObject();
      w.Key("bytes"), w.Int(l.probe->bytes);
      w.Key("method"), w.String(l.probe->method);
      w.Key("seconds"), w.Double(l.probe->seconds);
      w.EndObject();
    }
    w.Key("ranks"), w.BeginArray();
    for (const auto& r : l.ranks) {
      w.BeginObject();
      w.Key("command"), w.Array(r.command);
      w.Key("devices"), w.Array(r.devices);
      w.Key("env"), w.Object(r.env);
      w.Key("gpu_milli"), w.Int(r.gpu_milli);
      w.Key("local_rank"), w.Int(r.local_rank);
      w.Key("node_rank"), w.Int(r.node_rank);
      w.Key("rank"), w.Int(r.rank);
      w.EndObject();
    }
    w.EndArray();
    w.Key("run_as"), w.String(l.run_as);
    w.Key("workdir"), w.String(l.workdir);
    w.Key("world_size"), w.Int(l.world_size);
    w.EndObject();
  }
  if (o.stop) {
    w.Key("stop"), w.BeginObject();
    w.Key("checkpoint_first"), w.Bool(o.stop->checkpoint_first);
    w.Key("grace_ms"), w.Int(o.stop->grace_ms);
    w.Key("reason"), w.String(o.stop->reason);
    w.EndObject();
  }
  w.EndObject();
}

json OrderBody(const WorkOrder& w) { return json::parse(OrderText(w)); }

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

std::string OrderText(const WorkOrder& o) {
  std::string out;
  JsonWriter w(&out);
  WriteOrder(w, o);
  return out;
}

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
