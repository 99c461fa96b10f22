// Inside the HTTP server: the answer helpers and read routes its route files (http_server.cc,
// http_routes_*.cc) and the follower (follower.cc) share. Not for other users.
#pragma once

#include <httplib.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/server/control_plane.h"
#include "tianshu/server/http_server.h"

namespace tianshu::server::http_detail {

// A JSON answer.
void Respond(httplib::Response& res, int status, const nlohmann::json& body);
// The API's error body ({"error": {"status", "message", "details"}}).
void RespondError(httplib::Response& res, const ApiError& e);
// The query parameters (the last of each name).
std::map<std::string, std::string> Params(const httplib::Request& req);
// The bearer token of the Authorization header ("" when none).
std::string BearerOf(const httplib::Request& req);
// The caller when its role may make this call (`what`, for the message); otherwise the 401 or
// 403 is written and nullopt returned.
std::optional<Identity> Allowed(ControlPlane* cp, const httplib::Request& req,
                                httplib::Response& res, const std::vector<Role>& roles,
                                const std::string& what);
// Allowed bound to `cp`, for the routes to capture: allowed(req, res, roles, what).
inline auto AllowedBy(ControlPlane* cp) {
  return [cp](const httplib::Request& req, httplib::Response& res, const std::vector<Role>& roles,
              const std::string& what) { return Allowed(cp, req, res, roles, what); };
}

// The 401 for a call without an Authorization header.
ApiError MissingTokenError();

// The read routes a leader and a follower both answer (http_routes_reads.cc): GET /v1/jobs,
// /v1/jobs/ID, /v1/jobs/ID/logs, /v1/nodes, /v1/nodes/NAME, /v1/queues, /v1/events. Each
// authenticates its caller against the view it reads.
struct ReadRoutesOptions {
  // The control plane to read for one request; nullptr when there is none to be had, the
  // error then written to `res`. Called once per request (once per chunk of an event stream).
  std::function<std::shared_ptr<ControlPlane>(httplib::Response& res)> view;
  std::function<int64_t()> now;
  std::function<bool()> stopping;  // ends event streams
  // True: an event read that waits, waits on the view for new events (the leader's live one).
  // False: it reads a fresh view every 500 ms until its wait is over (a follower's snapshots).
  bool view_is_live = true;
};
void AddReadRoutes(httplib::Server& h, ReadRoutesOptions options);

}  // namespace tianshu::server::http_detail
