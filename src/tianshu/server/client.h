// A small client of the control plane's HTTP API, for the CLI, tests and agents: one call per
// request, the bearer token attached, JSON answers parsed, and failures turned into messages a
// user can act on (server unreachable, wrong token, the server's own error message).
//
//   Client c({.server = "http://127.0.0.1:7070", .token = token});
//   Result<ApiResponse> r = c.Get("/v1/jobs");
//   if (!r) std::cerr << r.error().message;            // "cannot reach the tianshu server ..."
#pragma once

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tianshu/base/status.h"

namespace tianshu::net {
class ServerSet;
}

namespace tianshu::server {

struct ClientOptions {
  // host:port, http://host:port or https://...; the replicas of a control plane on etcd as a
  // comma-separated list (the leader is found, and followed after a failover).
  std::string server = "http://127.0.0.1:7070";
  std::string token;
  std::string ca_file;  // https: the CA that signed the server's certificate ("" = system's)
  int timeout_ms = 30000;
};

struct ApiResponse {
  int status = 0;
  nlohmann::json body;                         // parsed JSON, or null when the answer was not JSON
  std::string text;                            // the raw body
  std::map<std::string, std::string> headers;  // the answer's headers (last of each name)
  bool ok() const { return status >= 200 && status < 300; }
  // The server's error message and details, "" for a success.
  std::string ErrorText() const;
};

// Thread-compatible: one Client per thread. One connection per request (see client.cc).
class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Transport failures are errors; an HTTP error status is a response (check ok()), except 401,
  // which is an error saying the token is missing or wrong.
  [[nodiscard]] Result<ApiResponse> Get(const std::string& path);
  [[nodiscard]] Result<ApiResponse> Post(const std::string& path, const std::string& body,
                                         const std::string& content_type,
                                         const std::map<std::string, std::string>& headers = {});
  [[nodiscard]] Result<ApiResponse> Delete(const std::string& path);
  // A POST carrying an Idempotency-Key, which makes resending it safe: it is resent after any
  // transport failure (an answer lost to a server crash included) and after a 503, up to
  // `attempts` times with a growing pause (0.2 s, 0.4 s, ... at most 5 s).
  [[nodiscard]] Result<ApiResponse> PostIdempotent(const std::string& path, const std::string& body,
                                                   const std::string& content_type,
                                                   const std::string& idempotency_key,
                                                   std::map<std::string, std::string> headers,
                                                   int attempts = 8);
  const ClientOptions& options() const { return options_; }

 private:
  ClientOptions options_;
  std::string base_error_;
  std::unique_ptr<net::ServerSet> http_;
};

}  // namespace tianshu::server
