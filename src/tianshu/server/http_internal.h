// Inside the HTTP server: the answer helpers its route files (http_server.cc,
// http_routes_agents.cc) share. Not for other users.
#pragma once

#include <httplib.h>

#include <map>
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

}  // namespace tianshu::server::http_detail
