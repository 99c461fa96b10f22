// Reports (agent -> server): what happened to an order, one at a time or in a batch.
#include "tianshu/wire/wire.h"

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

constexpr double kMaxGbps = 1e6;  // GB/s: a petabyte per second is no measurement

ProbeResult ReadProbe(const json& j, const std::string& p, std::vector<std::string>* e) {
  ProbeResult r;
  ObjectReader o(j, p, e,
                 {"method", "bytes", "iterations", "busbw_gbps", "algbw_gbps", "forward_gbps",
                  "backward_gbps"});
  o.Str("method", &r.method, true, 32);
  if (!r.method.empty() && r.method != "gloo" && r.method != "nccl-tests" &&
      r.method != "rccl-tests" && r.method != "hccl-test") {
    o.Err(o.Field("method"), "expected one of gloo, nccl-tests, rccl-tests, hccl-test");
  }
  o.Int("bytes", &r.bytes, 0, kMaxI64);
  o.Int("iterations", &r.iterations, 0, kMaxI64);
  o.Double("busbw_gbps", &r.busbw_gbps, 0, kMaxGbps);
  o.Double("algbw_gbps", &r.algbw_gbps, 0, kMaxGbps);
  o.Double("forward_gbps", &r.forward_gbps, 0, kMaxGbps);
  o.Double("backward_gbps", &r.backward_gbps, 0, kMaxGbps);
  return r;
}

Report ReadReport(const json& j, const std::string& p, std::vector<std::string>* e) {
  Report r;
  ObjectReader o(j, p, e,
                 {"order_id", "kind", "job_id", "rank", "pid", "exit_code", "signal", "step",
                  "path", "message", "probe"});
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
  if (const json* pr = o.Object("probe")) {
    r.probe = ReadProbe(*pr, o.Field("probe"), e);
    if (r.kind != ReportKind::kExited) o.Err(o.Field("probe"), "only an exited report carries one");
  }
  return r;
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
  if (r.probe) {
    const ProbeResult& p = *r.probe;
    j["probe"] = {{"method", p.method},
                  {"bytes", p.bytes},
                  {"iterations", p.iterations},
                  {"busbw_gbps", p.busbw_gbps},
                  {"algbw_gbps", p.algbw_gbps},
                  {"forward_gbps", p.forward_gbps},
                  {"backward_gbps", p.backward_gbps}};
  }
  return j;
}

}  // namespace

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

json ToJson(const Report& r) { return Versioned(ReportBody(r)); }

json ToJson(const ReportBatch& b) {
  json reports = json::array();
  for (const auto& r : b.reports) reports.push_back(ReportBody(r));
  json j = {{"agent_id", b.agent_id}, {"reports", reports}};
  if (b.heartbeat) j["heartbeat"] = ToJson(*b.heartbeat);  // only then: older servers refuse it
  return Versioned(std::move(j));
}

json ToJson(const ReportsAnswer& a) {
  json j = {{"accepted", a.accepted}};
  if (a.heartbeat) j["heartbeat"] = ToJson(*a.heartbeat);
  return Versioned(std::move(j));
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
  ObjectReader o(*j, "", &e, {"agent_id", "reports", "heartbeat"});
  o.Str("agent_id", &b.agent_id, true);
  o.Array(
      "reports",
      [&](const json& x, const std::string& q) { b.reports.push_back(ReadReport(x, q, &e)); },
      true);
  if (const json* h = o.Object("heartbeat")) {
    b.heartbeat = internal::ReadHeartbeat(*h, o.Field("heartbeat"), &e);
    if (b.heartbeat->agent_id != b.agent_id) {
      e.push_back("heartbeat.agent_id: differs from the batch's agent_id");
    }
  }
  return Finish(std::move(b), e);
}

Result<ReportsAnswer> ParseReportsAnswer(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  ReportsAnswer a;
  ObjectReader o(*j, "", &e, {"accepted", "heartbeat"});
  o.Int("accepted", &a.accepted, 0, kMaxI64);
  if (const json* h = o.Object("heartbeat")) {
    a.heartbeat = internal::ReadHeartbeatResponse(*h, o.Field("heartbeat"), &e);
  }
  return Finish(std::move(a), e);
}

}  // namespace tianshu::wire
