// Registration and heartbeat messages (agent <-> server): the node's hardware, the ranks it
// runs, and the server's answers.
#include "tianshu/wire/wire.h"

#include <algorithm>
#include <cctype>
#include <set>

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

// Bounds of the network and progress parts of a heartbeat (a node has a few dozen interfaces
// at most; a job's ranks on one node report as one entry).
constexpr size_t kMaxLinks = 256;
constexpr size_t kMaxProgress = 1024;
constexpr double kMaxRate = 1e15;  // per second: far above any link (800 Gb/s = 1e11 B/s)

// A Linux interface name as the kernel allows it (dev_valid_name: below IFNAMSIZ, no '/',
// ':' or white space), narrowed to the characters real names use.
bool PlausibleInterfaceName(const std::string& s) {
  if (s.empty() || s.size() > 15 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// A host name or an IPv4/IPv6 address: printable, no white space.
bool PlausibleHost(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == ':' || c == '[' || c == ']' || c == '%';
  });
}

LinkSample ReadLink(const json& j, const std::string& p, std::vector<std::string>* e) {
  LinkSample l;
  ObjectReader o(j, p, e,
                 {"name", "rdma", "speed_bps", "rx_bytes_per_s", "tx_bytes_per_s", "drops_per_s",
                  "xmit_wait_per_s"});
  o.Str("name", &l.name, true, 64);
  o.Bool("rdma", &l.rdma);
  o.Int("speed_bps", &l.speed_bps, 0, kMaxI64);
  o.Double("rx_bytes_per_s", &l.rx_bytes_per_s, 0, kMaxRate);
  o.Double("tx_bytes_per_s", &l.tx_bytes_per_s, 0, kMaxRate);
  o.Double("drops_per_s", &l.drops_per_s, 0, kMaxRate);
  o.Double("xmit_wait_per_s", &l.xmit_wait_per_s, 0, kMaxRate);
  return l;
}

NetworkSample ReadNetwork(const json& j, const std::string& p, std::vector<std::string>* e) {
  NetworkSample n;
  ObjectReader o(j, p, e, {"window_ms", "links", "tcp_retrans_per_s", "tcp_out_segs_per_s"});
  o.Int("window_ms", &n.window_ms, 0, kMaxI64);
  o.Array(
      "links", [&](const json& x, const std::string& q) { n.links.push_back(ReadLink(x, q, e)); },
      false, kMaxLinks);
  o.Double("tcp_retrans_per_s", &n.tcp_retrans_per_s, 0, kMaxRate);
  o.Double("tcp_out_segs_per_s", &n.tcp_out_segs_per_s, 0, kMaxRate);
  return n;
}

JobProgress ReadProgress(const json& j, const std::string& p, std::vector<std::string>* e) {
  JobProgress g;
  ObjectReader o(j, p, e,
                 {"job_id", "attempt", "rank", "step", "step_time_s", "samples", "updated_ms"});
  o.Str("job_id", &g.job_id, true, 256);
  o.Int("attempt", &g.attempt, 0, kMaxInt);
  o.Int("rank", &g.rank, 0, kMaxInt);
  o.Int("step", &g.step, -1, kMaxI64);
  o.Double("step_time_s", &g.step_time_s, 0, 1e9);
  o.Int("samples", &g.samples, 0, kMaxI64);
  o.Int("updated_ms", &g.updated_ms, 0, kMaxI64);
  return g;
}

json ToJson(const NetworkSample& n) {
  json links = json::array();
  for (const LinkSample& l : n.links) {
    links.push_back({{"name", l.name},
                     {"rdma", l.rdma},
                     {"speed_bps", l.speed_bps},
                     {"rx_bytes_per_s", l.rx_bytes_per_s},
                     {"tx_bytes_per_s", l.tx_bytes_per_s},
                     {"drops_per_s", l.drops_per_s},
                     {"xmit_wait_per_s", l.xmit_wait_per_s}});
  }
  return {{"window_ms", n.window_ms},
          {"links", links},
          {"tcp_retrans_per_s", n.tcp_retrans_per_s},
          {"tcp_out_segs_per_s", n.tcp_out_segs_per_s}};
}

json ToJson(const JobProgress& g) {
  return {{"job_id", g.job_id},
          {"attempt", g.attempt},
          {"rank", g.rank},
          {"step", g.step},
          {"step_time_s", g.step_time_s},
          {"samples", g.samples},
          {"updated_ms", g.updated_ms}};
}

Device ReadDevice(const json& j, const std::string& p, std::vector<std::string>* e) {
  Device d;
  ObjectReader o(j, p, e,
                 {"index", "model", "vendor", "memory_bytes", "uuid", "numa", "pci_bus_id",
                  "mig_enabled", "declared"});
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
  ObjectReader o(
      j, p, e,
      {"devices", "cpu_milli", "memory_bytes", "numa_nodes", "nics", "disks", "backend", "labels"});
  o.Array("devices",
          [&](const json& x, const std::string& q) { h.devices.push_back(ReadDevice(x, q, e)); });
  o.Int("cpu_milli", &h.cpu_milli, 0, kMaxI64);
  o.Int("memory_bytes", &h.memory_bytes, 0, kMaxI64);
  o.Int("numa_nodes", &h.numa_nodes, 1, 4096);
  o.Array("nics", [&](const json& x, const std::string& q) {
    NicInfo n;
    ObjectReader no(x, q, e, {"name", "bandwidth_bps", "rdma", "numa"});
    no.Str("name", &n.name);
    no.Int("bandwidth_bps", &n.bandwidth_bps, 0, kMaxI64);
    no.Bool("rdma", &n.rdma);
    no.Int("numa", &n.numa, -1, 4096);
    h.nics.push_back(n);
  });
  o.Array("disks", [&](const json& x, const std::string& q) {
    DiskInfo d;
    ObjectReader dobj(x, q, e, {"name", "capacity_bytes", "nvme"});
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
  ObjectReader o(j, p, e, {"order_id", "job_id", "attempt", "rank", "pid"});
  o.Str("order_id", &r.order_id, true);
  o.Str("job_id", &r.job_id, true);
  o.Int("attempt", &r.attempt, 0, kMaxInt);
  o.Int("rank", &r.rank, 0, kMaxInt);
  o.Int("pid", &r.pid, 0, kMaxI64);
  return r;
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
  json j = {{"node", v.node},
            {"agent_id", v.agent_id},
            {"address", v.address},
            {"credential_sha256", v.credential_sha256},
            {"hardware", ToJson(v.hardware)},
            {"running", running}};
  // Only when set: a server from before data networks refuses fields it does not know.
  if (!v.data_address.empty()) j["data_address"] = v.data_address;
  if (!v.data_interface.empty()) j["data_interface"] = v.data_interface;
  return Versioned(std::move(j));
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
  json j = {{"agent_id", v.agent_id},
            {"health", HealthName(v.health)},
            {"message", v.message},
            {"cpu_utilization", v.cpu_utilization},
            {"memory_used_bytes", v.memory_used_bytes},
            {"devices", devices},
            {"running", running}};
  if (v.network) j["network"] = ToJson(*v.network);
  if (!v.progress.empty()) {
    json progress = json::array();
    for (const JobProgress& g : v.progress) progress.push_back(ToJson(g));
    j["progress"] = std::move(progress);
  }
  return Versioned(std::move(j));
}

json ToJson(const HeartbeatResponse& v) {
  return Versioned({{"reregister", v.reregister}, {"pending_orders", v.pending_orders}});
}

Result<RegisterRequest> ParseRegisterRequest(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  RegisterRequest r;
  ObjectReader o(*j, "", &e,
                 {"node", "agent_id", "address", "credential_sha256", "data_address",
                  "data_interface", "hardware", "running"});
  o.Str("node", &r.node, true, 253);
  o.Str("agent_id", &r.agent_id, true);
  o.Str("address", &r.address);
  o.Str("credential_sha256", &r.credential_sha256);
  o.Str("data_address", &r.data_address, false, 253);
  if (!PlausibleHost(r.data_address)) {
    o.Err(o.Field("data_address"), "expected a host name or an IP address");
  }
  o.Str("data_interface", &r.data_interface, false, 15);
  if (!r.data_interface.empty() && !PlausibleInterfaceName(r.data_interface)) {
    o.Err(o.Field("data_interface"), "expected a network interface name (letters, digits, -_.)");
  }
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
  ObjectReader o(*j, "", &e,
                 {"node", "credential", "log_key", "heartbeat_interval_ms", "lost_after_ms",
                  "server_id", "lease_ms"});
  o.Str("node", &r.node, true);
  o.Str("credential", &r.credential);
  o.Str("log_key", &r.log_key);
  o.Int("heartbeat_interval_ms", &r.heartbeat_interval_ms, 1, kMaxI64);
  o.Int("lost_after_ms", &r.lost_after_ms, 1, kMaxI64);
  o.Str("server_id", &r.server_id);
  o.Int("lease_ms", &r.lease_ms, 0, int64_t{7} * 24 * 3600 * 1000);  // at most a week
  return Finish(std::move(r), e);
}

namespace internal {

Heartbeat ReadHeartbeat(const json& j, const std::string& p, std::vector<std::string>* errors) {
  std::vector<std::string>& e = *errors;
  Heartbeat h;
  ObjectReader o(j, p, &e,
                 {"agent_id", "health", "message", "cpu_utilization", "memory_used_bytes",
                  "devices", "running", "network", "progress"});
  o.Str("agent_id", &h.agent_id, true);
  std::string health;
  o.Str("health", &health);
  if (!health.empty()) {
    if (auto x = ParseHealth(health)) {
      h.health = *x;
    } else {
      e.push_back(o.Field("health") + ": expected one of ok, degraded, failed");
    }
  }
  o.Str("message", &h.message, false, 65536);
  o.Double("cpu_utilization", &h.cpu_utilization, 0, 1);
  o.Int("memory_used_bytes", &h.memory_used_bytes, 0, kMaxI64);
  o.Array("devices", [&](const json& x, const std::string& q) {
    DeviceUsage d;
    ObjectReader dobj(x, q, &e, {"index", "utilization", "memory_used_bytes", "healthy"});
    dobj.Int("index", &d.index, 0, 4096, true);
    dobj.Double("utilization", &d.utilization, 0, 1);
    dobj.Int("memory_used_bytes", &d.memory_used_bytes, 0, kMaxI64);
    dobj.Bool("healthy", &d.healthy);
    h.devices.push_back(d);
  });
  o.Array("running",
          [&](const json& x, const std::string& q) { h.running.push_back(ReadRunning(x, q, &e)); });
  if (const json* n = o.Object("network")) h.network = ReadNetwork(*n, o.Field("network"), &e);
  o.Array(
      "progress",
      [&](const json& x, const std::string& q) { h.progress.push_back(ReadProgress(x, q, &e)); },
      false, kMaxProgress);
  return h;
}

HeartbeatResponse ReadHeartbeatResponse(const json& j, const std::string& p,
                                        std::vector<std::string>* e) {
  HeartbeatResponse r;
  ObjectReader o(j, p, e, {"reregister", "pending_orders"});
  o.Bool("reregister", &r.reregister);
  o.Int("pending_orders", &r.pending_orders, 0, kMaxI64);
  return r;
}

}  // namespace internal

Result<Heartbeat> ParseHeartbeat(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  Heartbeat h = internal::ReadHeartbeat(*j, "", &e);
  return Finish(std::move(h), e);
}

Result<HeartbeatResponse> ParseHeartbeatResponse(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  HeartbeatResponse r = internal::ReadHeartbeatResponse(*j, "", &e);
  return Finish(r, e);  // trivially copyable
}

}  // namespace tianshu::wire
