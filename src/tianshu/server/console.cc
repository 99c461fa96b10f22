#include "tianshu/server/console.h"

#include <fstream>
#include <sstream>

#include "tianshu/server/http_internal.h"
#include "tianshu/server/identity.h"

namespace tianshu::server {

using nlohmann::json;
using namespace http_detail;

namespace {

constexpr char kCookie[] = "tianshu_console";

// Scripts and styles from this origin only: no inline script, no eval, nothing from a CDN.
// Inline style attributes are allowed because dygraphs writes its legend's colours that way.
constexpr char kPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' "
    "data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'";

// The headers every console answer carries.
void Harden(httplib::Response& res) {
  res.set_header("Content-Security-Policy", kPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");
}

// The packaged files the console may serve, each under javascript_root.
const std::map<std::string, std::pair<std::string, std::string>>& Library() {
  static const auto* files = new std::map<std::string, std::pair<std::string, std::string>>{
      {"dygraph.min.js", {"dygraphs/dygraph.min.js", "text/javascript; charset=utf-8"}},
      {"dygraph.min.css", {"dygraphs/dygraph.min.css", "text/css; charset=utf-8"}},
  };
  return *files;
}

}  // namespace

// ---- sessions ----

std::string ConsoleSessions::Open(const std::string& token, int64_t now_ms) {
  std::string id = NewToken();
  std::lock_guard l(mu_);
  std::erase_if(by_hash_, [&](const auto& kv) { return kv.second.expires_ms <= now_ms; });
  if (by_hash_.size() >= max_sessions_) {
    auto oldest = by_hash_.begin();
    for (auto it = by_hash_.begin(); it != by_hash_.end(); ++it) {
      if (it->second.expires_ms < oldest->second.expires_ms) oldest = it;
    }
    by_hash_.erase(oldest);
  }
  by_hash_[TokenHash(id)] = {token, now_ms + ttl_ms_};
  return id;
}

std::optional<std::string> ConsoleSessions::TokenOf(const std::string& id, int64_t now_ms) const {
  if (id.empty()) return std::nullopt;
  const std::string hash = TokenHash(id);
  std::lock_guard l(mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || it->second.expires_ms <= now_ms) return std::nullopt;
  return it->second.token;
}

void ConsoleSessions::Close(const std::string& id) {
  if (id.empty()) return;
  const std::string hash = TokenHash(id);
  std::lock_guard l(mu_);
  by_hash_.erase(hash);
}

// ---- utilisation ----

void UtilizationRing::Add(const Sample& s) {
  std::lock_guard l(mu_);
  samples_.push_back(s);
  while (samples_.size() > kept_) samples_.pop_front();
}

json UtilizationRing::Json() const {
  json out = json::array();
  std::lock_guard l(mu_);
  for (const auto& s : samples_) {
    out.push_back({{"time_ms", s.time_ms},
                   {"gpus_total", s.gpus_total},
                   {"gpus_allocated", s.gpus_allocated},
                   {"allocated_fraction", s.gpus_total > 0 ? s.gpus_allocated / s.gpus_total : 0.0},
                   {"active_jobs", s.active_jobs},
                   {"pending_jobs", s.pending_jobs}});
  }
  return json{{"samples", std::move(out)}};
}

// ---- the console ----

Console::Console(ControlPlane* cp, Options options)
    : cp_(cp),
      options_(std::move(options)),
      sessions_(options_.session_ttl_ms),
      ring_(options_.samples_kept) {}

bool Console::IsConsolePath(const std::string& path) {
  return path == "/" || path == "/console" || path.starts_with("/console/");
}

std::optional<std::string> Console::SessionId(const httplib::Request& req) const {
  const std::string cookies = req.get_header_value("Cookie");
  const std::string name = std::string(kCookie) + "=";
  size_t at = 0;
  while (at < cookies.size()) {
    size_t end = cookies.find(';', at);
    if (end == std::string::npos) end = cookies.size();
    std::string pair = cookies.substr(at, end - at);
    while (!pair.empty() && pair.front() == ' ') pair.erase(0, 1);
    if (pair.starts_with(name)) return pair.substr(name.size());
    at = end + 1;
  }
  return std::nullopt;
}

void Console::AuthorizeByCookie(const httplib::Request& req, int64_t now_ms) const {
  if (req.method != "GET" || req.has_header("Authorization")) return;
  auto id = SessionId(req);
  if (!id) return;
  auto token = sessions_.TokenOf(*id, now_ms);
  if (!token) return;
  // The request is httplib's own, not const (it hands the pre-routing handler a const view):
  // the routes then authenticate the session's token like any bearer token.
  const_cast<httplib::Request&>(req).set_header("Authorization", "Bearer " + *token);
}

void Console::Sample(int64_t now_ms) {
  if (last_sample_ms_ != 0 && now_ms - last_sample_ms_ < options_.sample_every_ms) return;
  last_sample_ms_ = now_ms;
  const json q = cp_->ListQueues(/*count_finished=*/false);  // every 2 s, under the lock
  UtilizationRing::Sample s{.time_ms = now_ms};
  s.gpus_total = q.value("cluster_gpus", 0.0);
  for (const auto& queue : q.value("queues", json::array())) {
    s.gpus_allocated += queue.value("gpus_in_use", 0.0);
    s.active_jobs += queue.value("active", int64_t{0});
    s.pending_jobs += queue.value("pending", int64_t{0});
  }
  ring_.Add(s);
}

void Console::Login(const httplib::Request& req, httplib::Response& res, int64_t now_ms) {
  Harden(res);
  if (req.get_header_value("Content-Type").find("application/json") != 0) {
    return RespondError(res, {415, "send {\"token\": \"...\"} as application/json"});
  }
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("token") || !body["token"].is_string()) {
    return RespondError(res, {400, "expected {\"token\": \"...\"}"});
  }
  const std::string token = body["token"].get<std::string>();
  auto who = cp_->Authenticate(token);
  if (!who) return RespondError(res, {401, "wrong token"});
  if (who->role != Role::kAdmin && who->role != Role::kUser) {
    return RespondError(res, {403, std::string(RoleName(who->role)) +
                                       " tokens may not open the console: use a user's token"});
  }
  const std::string id = sessions_.Open(token, now_ms);
  std::string cookie = std::string(kCookie) + "=" + id + "; Path=/; HttpOnly; SameSite=Strict; " +
                       "Max-Age=" + std::to_string(sessions_.ttl_ms() / 1000);
  if (options_.secure_cookie) cookie += "; Secure";
  res.set_header("Set-Cookie", cookie);
  Respond(res, 200,
          {{"name", who->name},
           {"role", std::string(RoleName(who->role))},
           {"expires_ms", now_ms + sessions_.ttl_ms()}});
}

void Console::ServeLibrary(const std::string& file, httplib::Response& res) {
  Harden(res);
  auto known = Library().find(file);
  if (known == Library().end()) return RespondError(res, {404, "no such console file"});
  std::lock_guard l(library_mu_);
  auto it = library_.find(file);
  if (it == library_.end()) {
    const std::string path = options_.javascript_root + "/" + known->second.first;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      // Not cached: the package may be installed while the server runs.
      return RespondError(res, {404, "the chart library " + path +
                                         " is not installed (Debian package libjs-dygraphs)"});
    }
    std::ostringstream text;
    text << in.rdbuf();
    it = library_.emplace(file, text.str()).first;
  }
  res.set_content(it->second, known->second.second);
}

void Console::AddRoutes(httplib::Server& h, const std::function<int64_t()>& now) {
  auto asset = [](const std::string& name, const char* type) {
    return [name, type](const httplib::Request&, httplib::Response& res) {
      Harden(res);
      auto text = ConsoleAsset(name);
      if (!text) return RespondError(res, {404, "no such console file"});
      res.set_content(std::string(*text), type);
    };
  };
  const auto page = asset("index.html", "text/html; charset=utf-8");
  h.Get("/", page);
  h.Get("/console", page);
  h.Get("/console/", page);
  h.Get("/console/app.js", asset("app.js", "text/javascript; charset=utf-8"));
  h.Get("/console/app.css", asset("app.css", "text/css; charset=utf-8"));
  h.Get(R"(/console/lib/([A-Za-z0-9._-]+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          ServeLibrary(req.matches[1], res);
        });
  h.Post("/console/login", [this, now](const httplib::Request& req, httplib::Response& res) {
    Login(req, res, now());
  });
  h.Post("/console/logout", [this](const httplib::Request& req, httplib::Response& res) {
    Harden(res);
    if (auto id = SessionId(req)) sessions_.Close(*id);
    std::string cookie = std::string(kCookie) + "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0";
    if (options_.secure_cookie) cookie += "; Secure";
    res.set_header("Set-Cookie", cookie);
    Respond(res, 200, {{"logged_out", true}});
  });
  // Who the session is: the page asks before it shows anything but the login form.
  h.Get("/console/session", [this, now](const httplib::Request& req, httplib::Response& res) {
    Harden(res);
    auto id = SessionId(req);
    auto token = id ? sessions_.TokenOf(*id, now()) : std::nullopt;
    auto who = token ? cp_->Authenticate(*token) : std::nullopt;
    if (!who) return RespondError(res, {401, "not logged in"});
    Respond(res, 200, {{"name", who->name}, {"role", std::string(RoleName(who->role))}});
  });
  h.Get("/v1/utilization", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Allowed(cp_, req, res, {Role::kAdmin, Role::kUser}, "read utilization")) return;
    json out = ring_.Json();
    out["sample_every_ms"] = options_.sample_every_ms;
    Respond(res, 200, out);
  });
}

}  // namespace tianshu::server
