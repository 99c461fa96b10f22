#include "tianshu/wire/wire.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "tianshu/base/strings.h"

namespace tianshu::wire {
namespace {

using nlohmann::json;

// A strict reader of one JSON object: every key must be known, every value of the right type
// and range. Problems are collected with the field path; the first one is reported.
class Obj {
 public:
  Obj(const json& j, std::string path, std::vector<std::string>* errors,
      std::initializer_list<const char*> keys)
      : j_(j), path_(std::move(path)), errors_(errors) {
    if (!j.is_object()) {
      Err(path_, "expected an object");
      ok_ = false;
      return;
    }
    std::set<std::string_view> known(keys.begin(), keys.end());
    known.insert("version");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!known.contains(it.key())) Err(Field(it.key()), "unknown field");
    }
    if (j.contains("version")) {
      const json& v = j["version"];
      if (!v.is_number_integer() || v.get<int64_t>() != kWireVersion) {
        Err(Field("version"), "unsupported wire version (this side speaks 1)");
      }
    }
  }

  bool ok() const { return ok_; }
  std::string Field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  void Err(const std::string& field, const std::string& msg) {
    errors_->push_back(field + ": " + msg);
  }

  const json* Get(const char* key, bool required) {
    if (!ok_) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (required) Err(Field(key), "is required");
      return nullptr;
    }
    return &*it;
  }

  void Str(const char* key, std::string* out, bool required = false, size_t max_len = 4096) {
    const json* v = Get(key, required);
    if (!v) return;
    if (!v->is_string()) return Err(Field(key), "expected a string");
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_len) return Err(Field(key), "longer than " + std::to_string(max_len));
    if (required && s.empty()) return Err(Field(key), "must not be empty");
    *out = s;
  }

  template <typename I>
  void Int(const char* key, I* out, int64_t lo, int64_t hi, bool required = false) {
    const json* v = Get(key, required);
    if (!v) return;
    int64_t x = 0;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Err(Field(key), "out of range");
      }
      x = v->get<int64_t>();
    } else {
      return Err(Field(key), "expected an integer");
    }
    if (x < lo || x > hi) {
      return Err(Field(key),
                 "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = static_cast<I>(x);
  }

  void Double(const char* key, double* out, double lo, double hi) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_number()) return Err(Field(key), "expected a number");
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      return Err(Field(key), "expected a number in [" + Num(lo) + ", " + Num(hi) + "]");
    }
    *out = x;
  }

  void Bool(const char* key, bool* out) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_boolean()) return Err(Field(key), "expected true or false");
    *out = v->get<bool>();
  }

  void StrMap(const char* key, std::map<std::string, std::string>* out) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_object()) return Err(Field(key), "expected an object of strings");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it->is_string()) return Err(Field(key) + "." + it.key(), "expected a string");
      (*out)[it.key()] = it->get<std::string>();
    }
  }

  void StrList(const char* key, std::vector<std::string>* out) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_array()) return Err(Field(key), "expected an array of strings");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return Err(Field(key) + "[" + std::to_string(i) + "]", "expected a string");
      }
      out->push_back((*v)[i].get<std::string>());
    }
  }

  void IntList(const char* key, std::vector<int>* out, int lo, int hi) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_array()) return Err(Field(key), "expected an array of integers");
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < lo || e.get<int64_t>() > hi) {
        return Err(
            Field(key) + "[" + std::to_string(i) + "]",
            "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      out->push_back(static_cast<int>(e.get<int64_t>()));
    }
  }

  // Calls each(element, path) for every element of an array field.
  void Array(const char* key, const std::function<void(const json&, const std::string&)>& each,
             bool required = false) {
    const json* v = Get(key, required);
    if (!v) return;
    if (!v->is_array()) return Err(Field(key), "expected an array");
    for (size_t i = 0; i < v->size(); ++i) {
      each((*v)[i], Field(key) + "[" + std::to_string(i) + "]");
    }
  }

  const json* Object(const char* key, bool required = false) {
    const json* v = Get(key, required);
    if (v && !v->is_object()) {
      Err(Field(key), "expected an object");
      return nullptr;
    }
    return v;
  }

 private:
  static std::string Num(double x) {
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const json& j_;
  std::string path_;
  std::vector<std::string>* errors_;
  bool ok_ = true;
};

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
constexpr int kMaxInt = std::numeric_limits<int>::max();

template <typename T>
Result<T> Finish(T value, const std::vector<std::string>& errors) {
  if (errors.empty()) return value;
  std::string msg = errors.front();
  if (errors.size() > 1) msg += " (and " + std::to_string(errors.size() - 1) + " more)";
  return std::unexpected(Error{msg});
}

Result<json> ParseText(std::string_view text) {
  // Messages nest 4 levels; a deeper one is refused before it is built (and destroyed)
  // recursively.
  constexpr int kMaxNesting = 64;
  if (!JsonNestingWithin(text, kMaxNesting)) {
    return Fail("JSON nested deeper than ", std::to_string(kMaxNesting), " levels");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail("malformed JSON");
  return j;
}

// ---- readers ----

Device ReadDevice(const json& j, const std::string& p, std::vector<std::string>* e) {
  Device d;
  Obj o(j, p, e,
        {"index", "model", "vendor", "memory_bytes", "uuid", "numa", "pci_bus_id", "mig_enabled",
         "declared"});
  o.Int("index", &d.index, 0, 4096, true);
  o.Str("model", &d.model);
  o.Str("vendor", &d.vendor);
  o.Int("memory_bytes", &d.memory_bytes, 0, kMaxI64);
  o.Str("uuid", &d.uuid);
  o.Int("numa", &d.numa, -1, 4096);
  o.Str("pci_bus_id", &d.pci_bus_id);
  o.Bool("mig_enabled", &d.mig_enabled);
  o.Bool("declared", &d.declared);
  return d;
}

Hardware ReadHardware(const json& j, const std::string& p, std::vector<std::string>* e) {
  Hardware h;
  Obj o(
      j, p, e,
      {"devices", "cpu_milli", "memory_bytes", "numa_nodes", "nics", "disks", "backend", "labels"});
  o.Array("devices",
          [&](const json& x, const std::string& q) { h.devices.push_back(ReadDevice(x, q, e)); });
  o.Int("cpu_milli", &h.cpu_milli, 0, kMaxI64);
  o.Int("memory_bytes", &h.memory_bytes, 0, kMaxI64);
  o.Int("numa_nodes", &h.numa_nodes, 1, 4096);
  o.Array("nics", [&](const json& x, const std::string& q) {
    NicInfo n;
    Obj no(x, q, e, {"name", "bandwidth_bps", "rdma", "numa"});
    no.Str("name", &n.name);
    no.Int("bandwidth_bps", &n.bandwidth_bps, 0, kMaxI64);
    no.Bool("rdma", &n.rdma);
    no.Int("numa", &n.numa, -1, 4096);
    h.nics.push_back(n);
  });
  o.Array("disks", [&](const json& x, const std::string& q) {
    DiskInfo d;
    Obj dobj(x, q, e, {"name", "capacity_bytes", "nvme"});
    dobj.Str("name", &d.name);
    dobj.Int("capacity_bytes", &d.capacity_bytes, 0, kMaxI64);
    dobj.Bool("nvme", &d.nvme);
    h.disks.push_back(d);
  });
  o.Str("backend", &h.backend);
  if (!h.backend.empty() && h.backend != "cuda" && h.backend != "ascend" && h.backend != "rocm" &&
      h.backend != "musa") {
    o.Err(o.Field("backend"), "expected one of cuda, ascend, rocm, musa");
  }
  o.StrMap("labels", &h.labels);
  std::set<int> seen;
  for (const auto& d : h.devices) {
    if (!seen.insert(d.index).second) {
      o.Err(o.Field("devices"), "device index " + std::to_string(d.index) + " appears twice");
    }
  }
  return h;
}

RunningRank ReadRunning(const json& j, const std::string& p, std::vector<std::string>* e) {
  RunningRank r;
  Obj o(j, p, e, {"order_id", "job_id", "attempt", "rank", "pid"});
  o.Str("order_id", &r.order_id, true);
  o.Str("job_id", &r.job_id, true);
  o.Int("attempt", &r.attempt, 0, kMaxInt);
  o.Int("rank", &r.rank, 0, kMaxInt);
  o.Int("pid", &r.pid, 0, kMaxI64);
  return r;
}

RankLaunch ReadRankLaunch(const json& j, const std::string& p, std::vector<std::string>* e) {
  RankLaunch r;
  Obj o(j, p, e, {"rank", "local_rank", "node_rank", "devices", "gpu_milli", "command", "env"});
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
  Obj o(j, p, e,
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

LaunchOrder ReadLaunch(const json& j, const std::string& p, std::vector<std::string>* e) {
  LaunchOrder l;
  Obj o(j, p, e,
        {"job_name", "backend", "world_size", "master_addr", "master_port", "checkpoint_dir",
         "workdir", "run_as", "ranks", "cgroup"});
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
  return l;
}

WorkOrder ReadOrder(const json& j, const std::string& p, std::vector<std::string>* e) {
  WorkOrder w;
  Obj o(j, p, e, {"id", "kind", "job_id", "attempt", "launch", "checkpoint", "stop"});
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
    Obj cobj(*c, o.Field("checkpoint"), e, {"reason"});
    cobj.Str("reason", &co.reason);
    w.checkpoint = co;
  }
  if (const json* s = o.Object("stop")) {
    StopOrder so;
    Obj sobj(*s, o.Field("stop"), e, {"reason", "checkpoint_first", "grace_ms"});
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

Report ReadReport(const json& j, const std::string& p, std::vector<std::string>* e) {
  Report r;
  Obj o(j, p, e,
        {"order_id", "kind", "job_id", "rank", "pid", "exit_code", "signal", "step", "path",
         "message"});
  o.Str("order_id", &r.order_id, true);
  std::string kind;
  o.Str("kind", &kind, true);
  if (!kind.empty()) {
    if (auto k = ParseReportKind(kind)) {
      r.kind = *k;
    } else {
      o.Err(o.Field("kind"),
            "expected one of accepted, started, exited, checkpointed, stopped, rejected");
    }
  }
  o.Str("job_id", &r.job_id);
  o.Int("rank", &r.rank, -1, kMaxInt);
  o.Int("pid", &r.pid, 0, kMaxI64);
  o.Int("exit_code", &r.exit_code, -1024, 1024);
  o.Int("signal", &r.signal, 0, 1024);
  o.Int("step", &r.step, -1, kMaxI64);
  o.Str("path", &r.path);
  o.Str("message", &r.message, false, 65536);
  return r;
}

// ---- writers ----

json Versioned(json j) {
  j["version"] = kWireVersion;
  return j;
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
  return {{"job_name", l.job_name},
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

json ReportBody(const Report& r) {
  json j = {{"order_id", r.order_id},
            {"kind", ReportKindName(r.kind)},
            {"job_id", r.job_id},
            {"rank", r.rank}};
  if (r.pid) j["pid"] = r.pid;
  if (r.kind == ReportKind::kExited) {
    j["exit_code"] = r.exit_code;
    j["signal"] = r.signal;
  }
  if (r.step >= 0) j["step"] = r.step;
  if (!r.path.empty()) j["path"] = r.path;
  if (!r.message.empty()) j["message"] = r.message;
  return j;
}

}  // namespace

std::string_view HealthName(Health h) {
  switch (h) {
    case Health::kOk:
      return "ok";
    case Health::kDegraded:
      return "degraded";
    case Health::kFailed:
      return "failed";
  }
  return "ok";
}
std::optional<Health> ParseHealth(std::string_view s) {
  if (s == "ok") return Health::kOk;
  if (s == "degraded") return Health::kDegraded;
  if (s == "failed") return Health::kFailed;
  return std::nullopt;
}
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
std::string_view ReportKindName(ReportKind k) {
  switch (k) {
    case ReportKind::kAccepted:
      return "accepted";
    case ReportKind::kStarted:
      return "started";
    case ReportKind::kExited:
      return "exited";
    case ReportKind::kCheckpointed:
      return "checkpointed";
    case ReportKind::kStopped:
      return "stopped";
    case ReportKind::kRejected:
      return "rejected";
  }
  return "accepted";
}
std::optional<ReportKind> ParseReportKind(std::string_view s) {
  if (s == "accepted") return ReportKind::kAccepted;
  if (s == "started") return ReportKind::kStarted;
  if (s == "exited") return ReportKind::kExited;
  if (s == "checkpointed") return ReportKind::kCheckpointed;
  if (s == "stopped") return ReportKind::kStopped;
  if (s == "rejected") return ReportKind::kRejected;
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

json ToJson(const Device& d) {
  return {{"index", d.index},
          {"model", d.model},
          {"vendor", d.vendor},
          {"memory_bytes", d.memory_bytes},
          {"uuid", d.uuid},
          {"numa", d.numa},
          {"pci_bus_id", d.pci_bus_id},
          {"mig_enabled", d.mig_enabled},
          {"declared", d.declared}};
}

json ToJson(const Hardware& h) {
  json devices = json::array(), nics = json::array(), disks = json::array();
  for (const auto& d : h.devices) devices.push_back(ToJson(d));
  for (const auto& n : h.nics) {
    nics.push_back(
        {{"name", n.name}, {"bandwidth_bps", n.bandwidth_bps}, {"rdma", n.rdma}, {"numa", n.numa}});
  }
  for (const auto& d : h.disks) {
    disks.push_back({{"name", d.name}, {"capacity_bytes", d.capacity_bytes}, {"nvme", d.nvme}});
  }
  return {{"devices", devices},
          {"cpu_milli", h.cpu_milli},
          {"memory_bytes", h.memory_bytes},
          {"numa_nodes", h.numa_nodes},
          {"nics", nics},
          {"disks", disks},
          {"backend", h.backend},
          {"labels", h.labels}};
}

json ToJson(const RunningRank& r) {
  return {{"order_id", r.order_id},
          {"job_id", r.job_id},
          {"attempt", r.attempt},
          {"rank", r.rank},
          {"pid", r.pid}};
}

json ToJson(const RegisterRequest& v) {
  json running = json::array();
  for (const auto& r : v.running) running.push_back(ToJson(r));
  return Versioned({{"node", v.node},
                    {"agent_id", v.agent_id},
                    {"address", v.address},
                    {"credential_sha256", v.credential_sha256},
                    {"hardware", ToJson(v.hardware)},
                    {"running", running}});
}

json ToJson(const RegisterResponse& v) {
  return Versioned({{"node", v.node},
                    {"credential", v.credential},
                    {"log_key", v.log_key},
                    {"heartbeat_interval_ms", v.heartbeat_interval_ms},
                    {"lost_after_ms", v.lost_after_ms},
                    {"server_id", v.server_id},
                    {"lease_ms", v.lease_ms}});
}

json ToJson(const Heartbeat& v) {
  json devices = json::array(), running = json::array();
  for (const auto& d : v.devices) {
    devices.push_back({{"index", d.index},
                       {"utilization", d.utilization},
                       {"memory_used_bytes", d.memory_used_bytes},
                       {"healthy", d.healthy}});
  }
  for (const auto& r : v.running) running.push_back(ToJson(r));
  return Versioned({{"agent_id", v.agent_id},
                    {"health", HealthName(v.health)},
                    {"message", v.message},
                    {"cpu_utilization", v.cpu_utilization},
                    {"memory_used_bytes", v.memory_used_bytes},
                    {"devices", devices},
                    {"running", running}});
}

json ToJson(const HeartbeatResponse& v) {
  return Versioned({{"reregister", v.reregister}, {"pending_orders", v.pending_orders}});
}

json ToJson(const WorkOrder& w) { return Versioned(OrderBody(w)); }

json ToJson(const WorkBatch& b) {
  json orders = json::array();
  for (const auto& o : b.orders) orders.push_back(OrderBody(o));
  json out = {{"orders", orders}};
  if (!b.cursor.empty()) out["cursor"] = b.cursor;
  return Versioned(std::move(out));
}

json ToJson(const Report& r) { return Versioned(ReportBody(r)); }

json ToJson(const ReportBatch& b) {
  json reports = json::array();
  for (const auto& r : b.reports) reports.push_back(ReportBody(r));
  return Versioned({{"agent_id", b.agent_id}, {"reports", reports}});
}

json ToJson(const ErrorBody& e) {
  json j = {{"code", e.code}, {"message", e.message}};
  if (!e.details.empty()) j["details"] = e.details;
  return {{"error", j}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Result<RegisterRequest> ParseRegisterRequest(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  RegisterRequest r;
  Obj o(*j, "", &e, {"node", "agent_id", "address", "credential_sha256", "hardware", "running"});
  o.Str("node", &r.node, true, 253);
  o.Str("agent_id", &r.agent_id, true);
  o.Str("address", &r.address);
  o.Str("credential_sha256", &r.credential_sha256);
  if (const json* h = o.Object("hardware", true)) r.hardware = ReadHardware(*h, "hardware", &e);
  o.Array("running",
          [&](const json& x, const std::string& q) { r.running.push_back(ReadRunning(x, q, &e)); });
  for (char c : r.node) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      e.push_back("node: only letters, digits, '-', '_' and '.' are allowed");
      break;
    }
  }
  return Finish(std::move(r), e);
}

Result<RegisterResponse> ParseRegisterResponse(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  RegisterResponse r;
  Obj o(*j, "", &e,
        {"node", "credential", "log_key", "heartbeat_interval_ms", "lost_after_ms", "server_id",
         "lease_ms"});
  o.Str("node", &r.node, true);
  o.Str("credential", &r.credential);
  o.Str("log_key", &r.log_key);
  o.Int("heartbeat_interval_ms", &r.heartbeat_interval_ms, 1, kMaxI64);
  o.Int("lost_after_ms", &r.lost_after_ms, 1, kMaxI64);
  o.Str("server_id", &r.server_id);
  o.Int("lease_ms", &r.lease_ms, 0, int64_t{7} * 24 * 3600 * 1000);  // at most a week
  return Finish(std::move(r), e);
}

Result<Heartbeat> ParseHeartbeat(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  Heartbeat h;
  Obj o(*j, "", &e,
        {"agent_id", "health", "message", "cpu_utilization", "memory_used_bytes", "devices",
         "running"});
  o.Str("agent_id", &h.agent_id, true);
  std::string health;
  o.Str("health", &health);
  if (!health.empty()) {
    if (auto x = ParseHealth(health)) {
      h.health = *x;
    } else {
      e.push_back("health: expected one of ok, degraded, failed");
    }
  }
  o.Str("message", &h.message, false, 65536);
  o.Double("cpu_utilization", &h.cpu_utilization, 0, 1);
  o.Int("memory_used_bytes", &h.memory_used_bytes, 0, kMaxI64);
  o.Array("devices", [&](const json& x, const std::string& q) {
    DeviceUsage d;
    Obj dobj(x, q, &e, {"index", "utilization", "memory_used_bytes", "healthy"});
    dobj.Int("index", &d.index, 0, 4096, true);
    dobj.Double("utilization", &d.utilization, 0, 1);
    dobj.Int("memory_used_bytes", &d.memory_used_bytes, 0, kMaxI64);
    dobj.Bool("healthy", &d.healthy);
    h.devices.push_back(d);
  });
  o.Array("running",
          [&](const json& x, const std::string& q) { h.running.push_back(ReadRunning(x, q, &e)); });
  return Finish(std::move(h), e);
}

Result<HeartbeatResponse> ParseHeartbeatResponse(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  HeartbeatResponse r;
  Obj o(*j, "", &e, {"reregister", "pending_orders"});
  o.Bool("reregister", &r.reregister);
  o.Int("pending_orders", &r.pending_orders, 0, kMaxI64);
  return Finish(r, e);  // trivially copyable
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
  Obj o(*j, "", &e, {"orders", "cursor"});
  o.Str("cursor", &b.cursor);
  o.Array(
      "orders",
      [&](const json& x, const std::string& q) { b.orders.push_back(ReadOrder(x, q, &e)); }, true);
  return Finish(std::move(b), e);
}

Result<Report> ReportFromJson(const json& j, const std::string& where) {
  std::vector<std::string> e;
  Report r = ReadReport(j, where, &e);
  return Finish(std::move(r), e);
}

Result<Report> ParseReport(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  return ReportFromJson(*j, "report");
}

Result<ReportBatch> ParseReportBatch(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  ReportBatch b;
  Obj o(*j, "", &e, {"agent_id", "reports"});
  o.Str("agent_id", &b.agent_id, true);
  o.Array(
      "reports",
      [&](const json& x, const std::string& q) { b.reports.push_back(ReadReport(x, q, &e)); },
      true);
  return Finish(std::move(b), e);
}

Result<ErrorBody> ParseErrorBody(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  ErrorBody b;
  Obj top(*j, "", &e, {"error"});
  if (const json* inner = top.Object("error", true)) {
    Obj o(*inner, "error", &e, {"code", "message", "details"});
    o.Int("code", &b.code, 100, 599);
    o.Str("message", &b.message, false, 1 << 20);
    o.StrList("details", &b.details);
  }
  return Finish(std::move(b), e);
}

}  // namespace tianshu::wire
