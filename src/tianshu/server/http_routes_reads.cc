// The read routes of the HTTP API that a leader and a follower replica both answer (issue 17):
// jobs, a job, a rank's log, nodes, a node, queues, events. The leader reads its live control
// plane; a follower reads its view of the store (follower.h). Routes: docs/api.md.
#include <httplib.h>

#include <chrono>
#include <thread>

#include "tianshu/base/strings.h"
#include "tianshu/server/http_internal.h"
#include "tianshu/server/requests.h"

namespace tianshu::server::http_detail {

using nlohmann::json;

namespace {

// How often a follower re-reads its view while an event read waits for new events.
constexpr int64_t kFollowerPollMs = 500;

// The events after q.since; on a view that is not live, waited for by re-reading it. nullopt
// when no view could be had (the error is then in `res`).
std::optional<json> ReadEvents(const ReadRoutesOptions& o, EventQuery q, httplib::Response& res) {
  if (o.view_is_live) {
    auto cp = o.view(res);
    if (!cp) return std::nullopt;
    return cp->WaitEvents(q);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(q.wait_ms);
  EventQuery now = q;
  now.wait_ms = 0;
  for (;;) {
    auto cp = o.view(res);
    if (!cp) return std::nullopt;
    json r = cp->WaitEvents(now);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (!r["events"].empty() || left <= 0 || o.stopping()) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left, kFollowerPollMs)));
  }
}

}  // namespace

ApiError MissingTokenError() {
  return {401,
          "missing bearer token: send 'Authorization: Bearer <token>' "
          "(tianshu: --token-file or TIANSHU_TOKEN)"};
}

void AddReadRoutes(httplib::Server& h, ReadRoutesOptions options) {
  const auto o = std::make_shared<const ReadRoutesOptions>(std::move(options));
  const std::vector<Role> people = {Role::kAdmin, Role::kUser};
  // The view and the caller when its role may make this call; otherwise the error is written.
  auto reader = [o, people](const httplib::Request& req, httplib::Response& res,
                            const std::string& what)
      -> std::optional<std::pair<std::shared_ptr<ControlPlane>, Identity>> {
    auto cp = o->view(res);
    if (!cp) return std::nullopt;
    auto who = Allowed(cp.get(), req, res, people, what);
    if (!who) return std::nullopt;
    return std::make_pair(std::move(cp), std::move(*who));
  };

  h.Get("/v1/jobs", [reader](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "list jobs");
    if (!r) return;
    auto f = ParseJobFilter(Params(req));
    if (!f) return RespondError(res, f.error());
    Respond(res, 200, r->first->ListJobs(*f));
  });
  h.Get(R"(/v1/jobs/([^/]+))", [reader](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "read jobs");
    if (!r) return;
    auto j = r->first->GetJob(req.matches[1], r->second);
    if (!j) return RespondError(res, j.error());
    Respond(res, 200, *j);
  });
  // A rank's log, read from the agent of its node (the agent serves it on its address).
  h.Get(R"(/v1/jobs/([^/]+)/logs)", [reader](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "read logs");
    if (!r) return;
    int64_t rank = -1, offset = 0;  // no rank: the one that failed the job, else 0
    if ((req.has_param("rank") && (!ParseInt64(req.get_param_value("rank"), &rank) || rank < 0)) ||
        (req.has_param("offset") && !ParseInt64(req.get_param_value("offset"), &offset)) ||
        rank > 1'000'000 || offset < 0) {
      return RespondError(res, {400, "rank and offset are non-negative integers"});
    }
    // Only ever the node's registered address, with the key that node's agent was given: no
    // user's token goes to a node.
    auto where = r->first->RankLog(req.matches[1], static_cast<int>(rank), r->second);
    if (!where) return RespondError(res, where.error());
    httplib::Client agent("http://" + where->address);
    agent.set_connection_timeout(2, 0);
    agent.set_read_timeout(10, 0);
    auto got = agent.Get("/v1/logs/" + where->job_id + "/" + std::to_string(where->rank) +
                             "?offset=" + std::to_string(offset),
                         {{"Authorization", "Bearer " + where->key}});
    if (!got) {
      return RespondError(res,
                          {502, "the agent at " + where->address + " did not answer for the log (" +
                                    httplib::to_string(got.error()) + ")"});
    }
    if (got->status != 200) {
      return RespondError(res, {got->status == 404 ? 404 : 502, std::string(Trim(got->body))});
    }
    for (const char* name : {"X-Tianshu-Log-Next", "X-Tianshu-Log-Size", "X-Tianshu-Log-Ended"}) {
      res.set_header(name, got->get_header_value(name));
    }
    res.set_header("X-Tianshu-Log-Rank", std::to_string(where->rank));
    res.set_content(got->body, "application/octet-stream");
  });

  h.Get("/v1/nodes", [reader, o](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "list nodes");
    if (!r) return;
    Respond(res, 200, r->first->ListNodes(o->now()));
  });
  h.Get(R"(/v1/nodes/([^/]+))", [reader, o](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "read nodes");
    if (!r) return;
    auto n = r->first->GetNode(req.matches[1], o->now());
    if (!n) return RespondError(res, n.error());
    Respond(res, 200, *n);
  });
  h.Get("/v1/queues", [reader](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "list queues");
    if (!r) return;
    Respond(res, 200, r->first->ListQueues());
  });
  // The measured network: pairs against their nominal figures, measured leaves, probes.
  h.Get("/v1/topology/measured", [reader, o](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "read the measured network");
    if (!r) return;
    Respond(res, 200, r->first->MeasuredNetwork(o->now()));
  });
  // GPU-hours by user and by queue over [since_ms, until_ms) (default: all time up to now).
  h.Get("/v1/accounting", [reader, o](const httplib::Request& req, httplib::Response& res) {
    auto r = reader(req, res, "read accounting");
    if (!r) return;
    const int64_t now = o->now();
    int64_t since = 0, until = now;
    for (const auto& [name, out] : {std::pair{"since_ms", &since}, std::pair{"until_ms", &until}}) {
      if (req.has_param(name) && (!ParseInt64(req.get_param_value(name), out) || *out < 0)) {
        return RespondError(res,
                            {400, std::string(name) + ": expected milliseconds since the epoch"});
      }
    }
    if (until <= since) return RespondError(res, {400, "until_ms must be after since_ms"});
    Respond(res, 200, r->first->Accounting(since, until, now));
  });
  h.Get("/v1/events", [reader, o](const httplib::Request& req, httplib::Response& res) {
    if (!reader(req, res, "read events")) return;
    auto q = ParseEventQuery(Params(req));
    if (!q) return RespondError(res, q.error());
    if (req.get_header_value("Accept").find("text/event-stream") == std::string::npos) {
      auto r = ReadEvents(*o, *q, res);
      if (r) Respond(res, 200, *r);
      return;
    }
    // Server-sent events: one `event: job|node` per state change, `id:` its sequence number.
    auto since = std::make_shared<int64_t>(q->since);
    if (req.has_header("Last-Event-ID")) {
      int64_t v = 0;
      if (ParseInt64(req.get_header_value("Last-Event-ID"), &v) && v >= 0) *since = v;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [o, since](size_t, httplib::DataSink& sink) {
          httplib::Response unused;
          std::optional<json> r;
          if (!o->stopping())
            r = ReadEvents(*o, {.since = *since, .wait_ms = 1000, .limit = 1000}, unused);
          if (!r) {  // stopping, or a follower that lost the store: the client reconnects
            sink.done();
            return true;
          }
          std::string out;
          for (const auto& e : (*r)["events"]) {
            out += "id: " + std::to_string(e["seq"].get<int64_t>()) +
                   "\nevent: " + e["type"].get<std::string>() + "\ndata: " + wire::Dump(e) + "\n\n";
          }
          if (out.empty()) out = ": keep-alive\n\n";
          *since = (*r)["next"].get<int64_t>();
          return sink.write(out.data(), out.size());
        });
  });
}

}  // namespace tianshu::server::http_detail
