// The admin and agent routes of the HTTP API (users, node credentials, registration,
// heartbeats, the work channel, reports); the users' routes are in http_routes_users.cc.
// Routes: docs/api.md.
#include <httplib.h>

#include "tianshu/base/strings.h"
#include "tianshu/server/http_internal.h"
#include "tianshu/server/requests.h"

namespace tianshu::server {

using nlohmann::json;
using namespace http_detail;

void Server::AgentRoutes() {
  httplib::Server& h = *http_;
  ControlPlane* cp = cp_.get();
  auto now = [this] { return options_.now_ms(); };
  const auto allowed = AllowedBy(cp);
  // ---- agents ----
  // Registered before every other route: cpp-httplib tries each route's regex in turn, and
  // these carry nearly all of the requests (heartbeats, the work channel, reports).
  h.Post("/v1/agents/register",
         [cp, now, allowed](const httplib::Request& req, httplib::Response& res) {
           auto who = allowed(req, res, {Role::kAdmin, Role::kJoin, Role::kNode}, "register nodes");
           if (!who) return;
           auto r = wire::ParseRegisterRequest(req.body);
           if (!r) return RespondError(res, {400, "bad registration: " + r.error().message});
           auto out = cp->Register(*r, *who, now());
           if (!out) return RespondError(res, out.error());
           Respond(res, 200, wire::ToJson(*out));
         });
  // A node's own credential, and only for that node.
  auto node_only = [allowed](const httplib::Request& req, httplib::Response& res) {
    auto who = allowed(req, res, {Role::kNode}, "act for a node (only its own credential can)");
    if (!who) return false;
    if (who->node != req.matches[1]) {
      RespondError(res, {403, "this credential belongs to node " + who->node + ", not " +
                                  std::string(req.matches[1])});
      return false;
    }
    return true;
  };
  h.Post(R"(/v1/agents/([^/]+)/heartbeat)",
         [cp, now, node_only](const httplib::Request& req, httplib::Response& res) {
           if (!node_only(req, res)) return;
           auto hb = wire::ParseHeartbeat(req.body);
           if (!hb) return RespondError(res, {400, "bad heartbeat: " + hb.error().message});
           auto out = cp->Heartbeat(req.matches[1], *hb, now());
           if (!out) return RespondError(res, out.error());
           Respond(res, 200, wire::ToJson(*out));
         });
  h.Get(R"(/v1/agents/([^/]+)/work)",
        [cp, node_only](const httplib::Request& req, httplib::Response& res) {
          if (!node_only(req, res)) return;
          auto params = Params(req);
          if (auto ok = CheckParams(params, {"wait_ms", "agent_id", "after"}); !ok) {
            return RespondError(res, ok.error());
          }
          auto wait = ParseIntParam(params, "wait_ms", 0, 0, 30000);
          if (!wait) return RespondError(res, wait.error());
          auto out = cp->Work(req.matches[1], params["agent_id"], *wait, params["after"]);
          if (!out) return RespondError(res, out.error());
          res.status = 200;
          res.set_content(std::move(*out), "application/json");
        });
  h.Post(R"(/v1/agents/([^/]+)/reports)",
         [cp, now, node_only](const httplib::Request& req, httplib::Response& res) {
           if (!node_only(req, res)) return;
           auto b = wire::ParseReportBatch(req.body);
           if (!b) return RespondError(res, {400, "bad reports: " + b.error().message});
           auto out = cp->Reports(req.matches[1], *b, now());
           if (!out) return RespondError(res, out.error());
           Respond(res, 200, wire::ToJson(*out));
         });
  // ---- identities (admin) ----
  h.Post("/v1/users", [cp, now, allowed](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res, {Role::kAdmin}, "manage users")) return;
    if (!JsonNestingWithin(req.body, kMaxJsonNesting)) {
      return RespondError(res, {400, "malformed JSON body"});
    }
    json b = json::parse(req.body, nullptr, false);
    if (!b.is_object() || !b.contains("name") || !b["name"].is_string()) {
      return RespondError(
          res,
          {400, R"(expected {"name": "...", "role": "user"|"admin"|"join", "unix_user": "..."})"});
    }
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (it.key() != "name" && it.key() != "role" && it.key() != "unix_user") {
        return RespondError(res, {400, "unknown field '" + it.key().substr(0, 64) + "'"});
      }
      if (!it->is_string()) return RespondError(res, {400, it.key() + ": expected a string"});
    }
    auto role = ParseRole(b.value("role", "user"));
    if (!role) return RespondError(res, {400, "role: expected user, admin or join"});
    auto out = cp->CreateUser(b["name"], *role, b.value("unix_user", ""), now());
    if (!out) return RespondError(res, out.error());
    Respond(res, 201, *out);
  });
  h.Get("/v1/users", [cp, allowed](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res, {Role::kAdmin}, "manage users")) return;
    Respond(res, 200, cp->ListUsers());
  });
  h.Delete(R"(/v1/users/([^/]+))",
           [cp, allowed](const httplib::Request& req, httplib::Response& res) {
             if (!allowed(req, res, {Role::kAdmin}, "manage users")) return;
             auto out = cp->RemoveUser(req.matches[1]);
             if (!out) return RespondError(res, out.error());
             Respond(res, 200, *out);
           });
  h.Post(R"(/v1/nodes/([^/]+)/forget)",
         [cp, allowed](const httplib::Request& req, httplib::Response& res) {
           if (!allowed(req, res, {Role::kAdmin}, "forget nodes")) return;
           auto out = cp->ForgetNode(req.matches[1]);
           if (!out) return RespondError(res, out.error());
           Respond(res, 200, *out);
         });

  // Cordon, drain, uncordon (POST) and remove (DELETE) a node: kubectl's verbs, an admin's.
  auto node_verb = [cp, now, allowed](const httplib::Request& req, httplib::Response& res) {
    auto who = allowed(req, res, {Role::kAdmin}, "cordon, drain or remove nodes");
    if (!who) return;
    const std::string verb = req.method == "DELETE" ? "remove" : std::string(req.matches[2]);
    auto out = cp->AdminNode(req.matches[1], verb, *who, now());
    if (!out) return RespondError(res, out.error());
    Respond(res, 200, *out);
  };
  h.Post(R"(/v1/nodes/([^/]+)/(cordon|drain|uncordon))", node_verb);
  h.Delete(R"(/v1/nodes/([^/]+))", node_verb);
}

}  // namespace tianshu::server
