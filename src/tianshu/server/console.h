// The web console of `tianshu serve` (issue 19): one page (HTML, script and style built into the
// binary, the charting library read from Debian's libjs-dygraphs) on the API's port, a login that
// trades a token for a console session cookie, and a ring of utilisation samples the page charts
// (GET /v1/utilization).
//
//   Console console(cp, {.secure_cookie = tls});
//   console.AddRoutes(http, now);    // GET /, /console/*, POST /console/login|logout, ...
//   console.Sample(now_ms);           // from the ticker; keeps one sample per sample_every_ms
//
// Sessions: POST /console/login with {"token": T} (JSON only: a cross-site form cannot send it)
// checks T with ControlPlane::Authenticate (admin and user roles only) and sets the cookie
// `tianshu_console` to a random session id (HttpOnly, SameSite=Strict, Path=/, Secure under TLS).
// The server keeps the id's SHA-256 with the token and an expiry; the token never reaches the
// browser again. A GET without an Authorization header but with a live session cookie is then
// served as that token's identity (re-authenticated on every request, so a removed user's
// session dies with its token); any other method needs the bearer token (no CSRF through the
// cookie). POST /console/logout forgets the session.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tianshu/server/control_plane.h"

namespace tianshu::server {

// The console's sessions: random ids mapped to the token they were opened with. Thread-safe.
class ConsoleSessions {
 public:
  explicit ConsoleSessions(int64_t ttl_ms, size_t max_sessions = 10000)
      : ttl_ms_(ttl_ms), max_sessions_(max_sessions) {}
  // A new session for `token` (already authenticated by the caller); returns its id. Drops
  // expired sessions, and the oldest one when max_sessions are open.
  std::string Open(const std::string& token, int64_t now_ms);
  // The token of a live session; nullopt when unknown or expired.
  std::optional<std::string> TokenOf(const std::string& id, int64_t now_ms) const;
  // Forgets the session (idempotent).
  void Close(const std::string& id);
  int64_t ttl_ms() const { return ttl_ms_; }

 private:
  struct Session {
    std::string token;
    int64_t expires_ms = 0;
  };
  const int64_t ttl_ms_;
  const size_t max_sessions_;
  mutable std::mutex mu_;
  std::map<std::string, Session> by_hash_;  // SHA-256 of the id -> session
};

// Samples of the cluster's use over time, oldest first, at most `kept`. Thread-safe.
class UtilizationRing {
 public:
  struct Sample {
    int64_t time_ms = 0;
    double gpus_total = 0, gpus_allocated = 0;
    int64_t active_jobs = 0, pending_jobs = 0;
  };
  explicit UtilizationRing(size_t kept) : kept_(kept) {}
  void Add(const Sample& s);
  // {"samples": [{"time_ms", "gpus_total", "gpus_allocated", "allocated_fraction",
  //  "active_jobs", "pending_jobs"}]}
  nlohmann::json Json() const;

 private:
  const size_t kept_;
  mutable std::mutex mu_;
  std::deque<Sample> samples_;
};

class Console {
 public:
  struct Options {
    // Where Debian installs packaged JavaScript (libjs-dygraphs puts dygraphs/ there).
    std::string javascript_root = "/usr/share/javascript";
    bool secure_cookie = false;                   // the server speaks TLS
    int64_t session_ttl_ms = 12 * 3600 * 1000LL;  // a working day
    int64_t sample_every_ms = 2000;
    size_t samples_kept = 3600;  // two hours at 2 s
  };
  Console(ControlPlane* cp, Options options);

  // The console's routes and GET /v1/utilization on `h`; `now` is the server's clock.
  void AddRoutes(httplib::Server& h, const std::function<int64_t()>& now);
  // For the pre-routing handler: the console's own paths (/, /console/...), which need no token.
  static bool IsConsolePath(const std::string& path);
  // A GET that has no Authorization header but a live session cookie gets the session's bearer
  // token as its Authorization header, so that every route authenticates it as usual. Only the
  // pre-routing handler calls this, on the request being routed.
  void AuthorizeByCookie(const httplib::Request& req, int64_t now_ms) const;
  // Takes a sample when sample_every_ms have passed since the last; the ticker calls it.
  void Sample(int64_t now_ms);

 private:
  std::optional<std::string> SessionId(const httplib::Request& req) const;
  void Login(const httplib::Request& req, httplib::Response& res, int64_t now_ms);
  void ServeLibrary(const std::string& file, httplib::Response& res);

  ControlPlane* cp_;
  Options options_;
  ConsoleSessions sessions_;
  UtilizationRing ring_;
  int64_t last_sample_ms_ = 0;  // ticker thread only
  std::mutex library_mu_;
  std::map<std::string, std::string> library_;  // files of javascript_root read so far
};

// The built-in assets (console_assets/, embedded at build time): the file's text, or nullopt.
std::optional<std::string_view> ConsoleAsset(std::string_view name);

}  // namespace tianshu::server
