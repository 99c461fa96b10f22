#include "tianshu/server/client.h"

#include <httplib.h>

#include "tianshu/net/http_client.h"

#include <chrono>
#include <thread>

namespace tianshu::server {

std::string ApiResponse::ErrorText() const {
  if (ok()) return "";
  std::string out;
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const auto& e = body["error"];
    out = e.value("message", "HTTP " + std::to_string(status));
    if (e.contains("details") && e["details"].is_array()) {
      for (const auto& d : e["details"]) {
        if (d.is_string()) out += "\n" + d.get<std::string>();
      }
    }
  } else {
    out = "HTTP " + std::to_string(status) + (text.empty() ? "" : ": " + text.substr(0, 200));
  }
  return out;
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  auto opened = net::ServerSet::Open(options_.server, options_.ca_file);
  if (!opened) {
    base_error_ = opened.error().message;
    return;
  }
  http_ = std::move(*opened);
  const int timeout_ms = options_.timeout_ms;
  const std::string token = options_.token;
  http_->Configure([timeout_ms, &token](httplib::Client& c) {
    c.set_connection_timeout(std::chrono::milliseconds(std::min(timeout_ms, 10000)));
    c.set_read_timeout(std::chrono::milliseconds(timeout_ms));
    c.set_write_timeout(std::chrono::milliseconds(timeout_ms));
    // A fresh connection per request: a kept-alive socket the server has just closed fails as
    // a read error after the request went out, and a POST cannot be resent safely.
    c.set_keep_alive(false);
    c.set_tcp_nodelay(true);  // headers and body are separate writes: no Nagle stall
    if (!token.empty()) c.set_bearer_token_auth(token);
  });
}

Client::~Client() = default;

namespace {

Result<ApiResponse> Convert(const httplib::Result& r, const std::string& server) {
  if (!r) {
    std::string why = httplib::to_string(r.error());
    return Fail("cannot reach the tianshu server at ", server, " (", why,
                "): is `tianshu serve` (or `tianshu up`) running? Set --server or "
                "TIANSHU_SERVER");
  }
  ApiResponse out;
  out.status = r->status;
  out.text = r->body;
  for (const auto& [k, v] : r->headers) out.headers[k] = v;
  out.body = nlohmann::json::parse(r->body, nullptr, false);
  if (out.body.is_discarded()) out.body = nullptr;
  if (out.status == 401) {
    return Fail("the server refused the token (", out.ErrorText(),
                "): pass the server's token with --token-file or TIANSHU_TOKEN");
  }
  return out;
}

// Retries what never reached the server (connect refused or timed out: a full listen backlog
// under load), so every request is sent at most once.
template <typename F>
httplib::Result WithRetry(F&& send) {
  httplib::Result r = send();
  for (int i = 0;
       i < 3 && !r &&
       (r.error() == httplib::Error::Connection || r.error() == httplib::Error::ConnectionTimeout);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << i));
    r = send();
  }
  return r;
}

}  // namespace

Result<ApiResponse> Client::Get(const std::string& path) {
  if (!base_error_.empty()) return Fail(base_error_);
  return Convert(WithRetry([&] { return http_->Send([&](auto& c) { return c.Get(path); }); }),
                 options_.server);
}

Result<ApiResponse> Client::Post(const std::string& path, const std::string& body,
                                 const std::string& content_type,
                                 const std::map<std::string, std::string>& headers) {
  if (!base_error_.empty()) return Fail(base_error_);
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  return Convert(WithRetry([&] {
                   return http_->Send([&](auto& c) { return c.Post(path, h, body, content_type); });
                 }),
                 options_.server);
}

Result<ApiResponse> Client::PostIdempotent(const std::string& path, const std::string& body,
                                           const std::string& content_type,
                                           const std::string& idempotency_key,
                                           std::map<std::string, std::string> headers,
                                           int attempts) {
  headers["Idempotency-Key"] = idempotency_key;
  Result<ApiResponse> r = Fail("not sent");
  for (int i = 0; i < std::max(1, attempts); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5000, 200 << i)));
    r = Post(path, body, content_type, headers);
    if (r && r->status != 503) return r;
    if (!r && r.error().message.starts_with("the server refused the token")) return r;
  }
  return r;
}

Result<ApiResponse> Client::Delete(const std::string& path) {
  if (!base_error_.empty()) return Fail(base_error_);
  return Convert(WithRetry([&] { return http_->Send([&](auto& c) { return c.Delete(path); }); }),
                 options_.server);
}

}  // namespace tianshu::server
