#include "tianshu/server/etcd_client.h"

#include <httplib.h>

#include <array>
#include <filesystem>

namespace tianshu::server {

namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// gRPC codes etcd answers with when it cannot serve now (Unavailable, DeadlineExceeded,
// Aborted, ResourceExhausted: a leader change, no quorum, an overloaded member).
// The most an answer may hold (a range is paged in 1,000 keys).
constexpr size_t kMaxAnswerBytes = size_t{1} << 30;

bool UnavailableCode(int code) { return code == 14 || code == 4 || code == 10 || code == 8; }

std::string Trimmed(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

nlohmann::json EtcdGuard::Compare() const {
  return {{"key", EtcdClient::Encode(key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", std::to_string(create_revision)}};
}

std::string EtcdClient::Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

Result<std::string> EtcdClient::Decode(std::string_view in) {
  std::array<int, 256> value{};
  value.fill(-1);
  for (size_t k = 0; k < kAlphabet.size(); ++k) value[static_cast<uint8_t>(kAlphabet[k])] = int(k);
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : in) {
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = value[static_cast<uint8_t>(c)];
    if (v < 0 || pad > 0) return Fail("etcd: bad base64 in an answer");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (pad > 2) return Fail("etcd: bad base64 in an answer");
  return out;
}

std::string EtcdClient::PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<uint8_t>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(static_cast<uint8_t>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::string EtcdClient::Str(const nlohmann::json& o, const char* field) {
  if (!o.is_object()) return "";
  auto it = o.find(field);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

bool EtcdClient::Bool(const nlohmann::json& o, const char* field) {
  if (!o.is_object()) return false;
  auto it = o.find(field);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

nlohmann::json EtcdClient::Array(const nlohmann::json& o, const char* field) {
  if (!o.is_object()) return nlohmann::json::array();
  auto it = o.find(field);
  return it != o.end() && it->is_array() ? *it : nlohmann::json::array();
}

nlohmann::json EtcdClient::Object(const nlohmann::json& o, const char* field) {
  if (!o.is_object()) return nlohmann::json::object();
  auto it = o.find(field);
  return it != o.end() && it->is_object() ? *it : nlohmann::json::object();
}

int64_t EtcdClient::Int(const nlohmann::json& o, const char* field) {
  if (!o.is_object()) return 0;
  auto it = o.find(field);
  if (it == o.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Open(EtcdOptions options) {
  if (options.endpoints.empty()) return Fail("etcd: no endpoint given");
  for (auto& e : options.endpoints) {
    e = Trimmed(e);
    if (!e.starts_with("http://") && !e.starts_with("https://")) {
      return Fail("etcd: endpoint ", e, " is not http://host:port or https://host:port");
    }
    if (e.starts_with("http://") &&
        !(options.ca_file.empty() && options.cert_file.empty() && options.key_file.empty())) {
      return Fail("etcd: TLS files were given for ", e,
                  ", which is plain HTTP (use etcd+tls://, nothing goes in the clear silently)");
    }
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Fail("etcd: a client certificate needs its key, and a key its certificate");
  }
  for (const std::string* f : {&options.ca_file, &options.cert_file, &options.key_file}) {
    std::error_code ec;
    if (!f->empty() && !std::filesystem::is_regular_file(*f, ec)) {
      return Fail("etcd: cannot read ", *f);
    }
  }
  auto c = std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
  for (const auto& e : c->options_.endpoints) {
    if (!c->Connect(e)->is_valid()) return Fail("etcd: not an endpoint: ", e);
  }
  return c;
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::Endpoints() const {
  std::string out;
  for (const auto& e : options_.endpoints) {
    out += (out.empty() ? "" : ",") + e.substr(e.find("://") + 3);
  }
  return out;
}

std::unique_ptr<httplib::Client> EtcdClient::Connect(const std::string& endpoint) const {
  auto c = std::make_unique<httplib::Client>(endpoint, options_.cert_file, options_.key_file);
  if (endpoint.starts_with("https://")) {
    if (!options_.ca_file.empty()) c->set_ca_cert_path(options_.ca_file.c_str());
    c->enable_server_certificate_verification(true);
  }
  const auto timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  c->set_connection_timeout(std::min(timeout, std::chrono::milliseconds(2000)));
  c->set_read_timeout(timeout);
  c->set_write_timeout(timeout);
  c->set_tcp_nodelay(true);
  return c;
}

std::expected<nlohmann::json, EtcdError> EtcdClient::Call(const std::string& path,
                                                          const nlohmann::json& body) {
  size_t first;
  {
    std::lock_guard l(mu_);
    first = current_;
  }
  const std::string text = body.dump();
  std::string why;
  const size_t n = options_.endpoints.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    const std::string& endpoint = options_.endpoints[i];
    // A connection per call: the gateway closes idle ones, and a POST that failed on a stale
    // socket could not tell whether it had been applied.
    auto http = Connect(endpoint);
    // The gateway ends an error's chunked body with gRPC trailers, which cpp-httplib 0.11 fails
    // to read: the body is taken as it arrives, and a whole JSON object is an answer.
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = text;
    req.set_header("Content-Type", "application/json");
    std::string got;
    req.content_receiver = [&got](const char* data, size_t len, uint64_t, uint64_t) {
      got.append(data, len);
      return got.size() <= kMaxAnswerBytes;
    };
    auto r = http->send(req);
    auto answer = nlohmann::json::parse(got, nullptr, false);
    if (!answer.is_object()) {
      why += (why.empty() ? "" : "; ") + endpoint + ": " +
             (r ? "HTTP " + std::to_string(r->status) + " without a JSON answer"
                : httplib::to_string(r.error()));
      continue;
    }
    const int status = r ? r->status : (answer.contains("error") ? 500 : 200);
    if (status == 200 && !answer.contains("error")) {
      std::lock_guard l(mu_);
      current_ = i;
      return answer;
    }
    const int code = static_cast<int>(Int(answer, "code"));
    std::string message = Str(answer, "message");
    if (message.empty()) message = "HTTP " + std::to_string(status);
    if (status == 503 || UnavailableCode(code) || message.find("leader") != std::string::npos ||
        message.find("timed out") != std::string::npos) {
      why += (why.empty() ? "" : "; ") + endpoint + ": " + message;
      continue;
    }
    return std::unexpected(EtcdError{.unavailable = false, .message = endpoint + ": " + message});
  }
  return std::unexpected(EtcdError{
      .unavailable = true,
      .message = "no etcd member could serve it (no quorum, or none reachable; the request may "
                 "or may not have been applied): " +
                 why +
                 (options_.endpoints[0].starts_with("https://")
                      ? " (over TLS: etcd must accept the client certificate and key, and the CA "
                        "must have signed etcd's)"
                      : "")});
}

}  // namespace tianshu::server
