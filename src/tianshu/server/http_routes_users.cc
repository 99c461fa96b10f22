// The users' routes of the HTTP API (health, who leads, metrics, submitting, holding and
// cancelling jobs) and the pre-routing checks every call passes (token, Date); the reads a
// follower answers too are in http_routes_reads.cc, the admin and agent routes in
// http_routes_agents.cc, the server's life in http_server.cc. Routes: docs/api.md.
#include <httplib.h>

#include <ctime>

#include "tianshu/base/strings.h"
#include "tianshu/server/console.h"
#include "tianshu/server/http_internal.h"
#include "tianshu/server/metrics.h"
#include "tianshu/server/requests.h"
#include "tianshu/server/worker_pool.h"

namespace tianshu::server {

using nlohmann::json;
using namespace http_detail;

namespace {

// An IMF-fixdate ("Thu, 03 Dec 2026 16:21:25 GMT") for epoch milliseconds.
std::string HttpDate(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

std::string DefaultMessage(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "no such path: see docs/api.md for the routes under /v1";
    case 405:
      return "method not allowed";
    case 413:
      return "request body over the limit of " + std::to_string(kMaxBodyBytes) + " bytes";
    case 414:
      return "request URI too long";
    default:
      return "HTTP " + std::to_string(status);
  }
}

}  // namespace

void Server::Routes() {
  httplib::Server& h = *http_;
  ControlPlane* cp = cp_.get();
  auto now = [this] { return options_.now_ms(); };
  // The caller (authenticated by the pre-routing handler) when its role may make this call;
  // otherwise the 403 is written and nullopt returned.
  const auto allowed = AllowedBy(cp);
  const std::vector<Role> people = {Role::kAdmin, Role::kUser};  // copied into each route
  console_ =
      std::make_shared<Console>(cp, Console::Options{.secure_cookie = !options_.tls_cert.empty()});

  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // RFC 9110 §6.6.1: an origin server with a clock sends Date; `tianshu doctor` reads it to
    // measure a node's clock offset from the server's.
    res.set_header("Date", HttpDate(options_.now_ms()));
    // cpp-httplib 0.11 buffers a chunked body whole before it checks the size limit: refuse
    // one before it is read (every client of this API knows its body's length).
    if (req.has_header("Transfer-Encoding")) {
      res.set_header("Connection", "close");
      RespondError(res, {411, "send the body with a Content-Length (chunked bodies are refused)"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/healthz" || req.path == "/v1/leader" || Console::IsConsolePath(req.path)) {
      return httplib::Server::HandlerResponse::Unhandled;  // the console's pages: console.h
    }
    console_->AuthorizeByCookie(req, options_.now_ms());  // a console session's GET
    if (!req.has_header("Authorization")) {
      if (req.path == "/v1/jobs" && req.method == "POST") cp_->CountRejected();
      RespondError(res, MissingTokenError());
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!cp_->Authenticate(BearerOf(req))) {
      if (req.path == "/v1/jobs" && req.method == "POST") cp_->CountRejected();
      RespondError(res, {401, "wrong token"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        RespondError(res, {res.status, DefaultMessage(res.status)});
        return httplib::Server::HandlerResponse::Handled;
      }));
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, const std::exception_ptr& ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        RespondError(res, {500, what});
      });

  AgentRoutes();  // first: the agents' calls are most of the requests

  // Who leads: this server, as a replica that won the election or as its store's only server.
  auto role = [this] {
    const bool replica = !options_.replica_id.empty();
    return json{
        {"role", replica ? "leader" : "single"},
        {"replica", options_.replica_id},
        {"leader", replica ? json{{"id", options_.replica_id}, {"url", options_.replica_url}}
                           : json(nullptr)}};
  };
  h.Get("/healthz", [this, role](const httplib::Request&, httplib::Response& res) {
    bool ok = !cp_->StoreFailed();
    json body = role();
    body["status"] = ok ? "ok" : "store failed";
    Respond(res, ok ? 200 : 503, body);
  });
  h.Get("/v1/leader",
        [role](const httplib::Request&, httplib::Response& res) { Respond(res, 200, role()); });
  h.Get("/metrics", [this, cp, allowed](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res, {Role::kAdmin, Role::kUser, Role::kNode}, "read metrics")) return;
    Exposition out;
    out.Raw(cp->Metrics());
    out.Family("tianshu_http_workers", "gauge",
               "HTTP worker threads alive (one per connection being served).")
        .Sample(static_cast<double>(pool_->Threads()));
    out.Family("tianshu_http_workers_peak", "gauge", "Most HTTP worker threads at once.")
        .Sample(static_cast<double>(pool_->Peak()));
    out.Family("tianshu_http_connections_refused_total", "counter",
               "Connections refused because their client held its share of busy workers.")
        .Sample(static_cast<double>(shares_->Refused()));
    out.Family("tianshu_http_queue_wait_seconds", "gauge",
               "How long the oldest connection has waited for a worker.")
        .Sample(static_cast<double>(pool_->OldestWaitMs()) / 1000.0);
    http_requests_.Append(out);
    AppendBuildInfo(out, "tianshu_build_info",
                    "1, with the version of the tianshu server and the compiler that built it.");
    AppendProcessMetrics(out);
    res.set_content(out.Take(), "text/plain; version=0.0.4; charset=utf-8");
  });

  // ---- jobs ----
  h.Post(
      "/v1/jobs", [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
        auto who = allowed(req, res, people, "submit jobs");
        if (!who) return cp->CountRejected();
        auto parsed = ParseSubmitBody(req.get_header_value("Content-Type"), req.body,
                                      req.get_header_value("X-Tianshu-File"));
        if (!parsed) {
          cp->CountRejected();
          return RespondError(res, parsed.error());
        }
        // Like sbatch: ranks of a job whose run section names no workdir start where it was
        // submitted from (the CLI sends its working directory).
        std::string submit_dir = req.get_header_value("X-Tianshu-Workdir");
        if (submit_dir.find("/../") != std::string::npos || submit_dir.ends_with("/..")) {
          submit_dir.clear();
        }
        if (parsed->run.workdir.empty() && !parsed->run.command.empty() &&
            submit_dir.starts_with("/")) {
          parsed->run.workdir = submit_dir;
        } else if (!parsed->run.workdir.empty() && !parsed->run.workdir.starts_with("/")) {
          // Relative: under the submit directory (the validator refused any "..").
          if (!submit_dir.starts_with("/")) {
            cp->CountRejected();
            return RespondError(res, {400, "run.workdir '" + parsed->run.workdir.substr(0, 256) +
                                               "' is relative and the request names no absolute "
                                               "X-Tianshu-Workdir: give an absolute path"});
          }
          parsed->run.workdir = submit_dir + "/" + parsed->run.workdir;
        }
        if (req.has_header("Idempotency-Key")) {
          parsed->idempotency_key = req.get_header_value("Idempotency-Key");
          if (!IsValidIdempotencyKey(parsed->idempotency_key)) {
            cp->CountRejected();
            return RespondError(res, {400, "Idempotency-Key must be 1-128 of A-Z a-z 0-9 . _ : -"});
          }
        }
        parsed->owner = who->name;
        parsed->run_as = who->unix_user;
        if (req.has_param("hold")) {
          const std::string hold = req.get_param_value("hold");
          if (hold != "true" && hold != "false") {
            cp->CountRejected();
            return RespondError(
                res, {400, "hold: expected true or false, got '" + hold.substr(0, 32) + "'"});
          }
          parsed->hold = hold == "true";
        }
        if (req.has_param("array")) {
          auto tasks = ParseArraySpec(req.get_param_value("array"));
          if (!tasks) {
            cp->CountRejected();
            return RespondError(res, tasks.error());
          }
          parsed->array = std::move(*tasks);
        }
        auto made = cp->Submit(std::move(*parsed), now());
        if (!made) return RespondError(res, made.error());
        res.set_header("Location", "/v1/jobs/" + made->job["id"].get<std::string>());
        // A retry of a submission that was made: the same job, not a second one.
        if (made->replayed) res.set_header("Idempotent-Replayed", "true");
        Respond(res, made->replayed ? 200 : 201, made->job);
      });
  auto cancel = [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
    auto who = allowed(req, res, people, "cancel jobs");
    if (!who) return;
    auto j = cp->Cancel(req.matches[1], *who, now(), req.get_param_value("array") == "true");
    if (!j) return RespondError(res, j.error());
    Respond(res, 200, *j);
  };
  // Hold or release pending jobs together: {"ids": ["j-000001", ...]}, all or none.
  for (const bool hold : {true, false}) {
    h.Post(hold ? "/v1/jobs/hold" : "/v1/jobs/release",
           [cp, now, allowed, people, hold](const httplib::Request& req, httplib::Response& res) {
             auto who = allowed(req, res, people, hold ? "hold jobs" : "release jobs");
             if (!who) return;
             auto ids = ParseJobIds(req.body);
             if (!ids) return RespondError(res, ids.error());
             auto out = cp->SetHeld(*ids, hold, *who, now());
             if (!out) return RespondError(res, out.error());
             Respond(res, 200, *out);
           });
  }
  h.Post(R"(/v1/jobs/([^/]+)/requeue)",
         [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
           auto who = allowed(req, res, people, "requeue jobs");
           if (!who) return;
           auto j = cp->Requeue(req.matches[1], *who, now());
           if (!j) return RespondError(res, j.error());
           Respond(res, 200, *j);
         });
  h.Post(R"(/v1/jobs/([^/]+)/cancel)", cancel);
  h.Delete(R"(/v1/jobs/([^/]+))", cancel);

  // ---- reads: jobs, logs, nodes, queues, events ----
  AddReadRoutes(h, {.view =
                        [this](httplib::Response&) {
                          // Not owning: the server outlives its routes.
                          return std::shared_ptr<ControlPlane>(std::shared_ptr<void>(), cp_.get());
                        },
                    .now = now,
                    .stopping = [this] { return stopping_.load(); },
                    .view_is_live = true});
  console_->AddRoutes(h, now);
}

}  // namespace tianshu::server
