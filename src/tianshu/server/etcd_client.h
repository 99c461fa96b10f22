// A small client of etcd v3 over its JSON gateway (POST /v3/kv/range, /v3/kv/txn, ...), the
// path every etcd >= 3.3 serves next to gRPC on the same client port: no generated code, and the
// HTTP/TLS stack the rest of Tianshu already uses (docs/operations.md says why). Keys and values
// travel base64-encoded, 64-bit numbers as JSON strings, as the gateway wants them.
//
//   auto c = EtcdClient::Open({.endpoints = {"http://10.0.0.1:2379", "http://10.0.0.2:2379"}});
//   auto r = (*c)->Call("/v3/kv/range", {{"key", EtcdClient::Encode("/tianshu/schema")}});
//
// Thread-safe. A request that cannot reach an endpoint, or that an endpoint answers with
// "unavailable" (no leader, a member cut off from the others), is tried on the next endpoint;
// the caller decides whether to try again later (EtcdError::unavailable).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/base/status.h"

namespace httplib {
class Client;
}

namespace tianshu::server {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "http://host:port" or "https://host:port"
  // TLS to etcd: the CA that signed the members' certificates, and this client's certificate
  // and key when the members require client certificates (--client-cert-auth).
  std::string ca_file, cert_file, key_file;
  int64_t request_timeout_ms = 5000;
};

// A condition on a write: it is applied only while `key` is the one created at
// `create_revision` (the leader's key, leader.h): a deposed leader's writes are refused.
struct EtcdGuard {
  std::string key;
  int64_t create_revision = 0;
  nlohmann::json Compare() const;  // the transaction's compare clause
};

struct EtcdError {
  // No endpoint could serve it now (unreachable, no leader, timed out): the request may or may
  // not have been applied. False: etcd refused it (too large, too many operations, bad key).
  bool unavailable = false;
  std::string message;
};

class EtcdClient {
 public:
  [[nodiscard]] static Result<std::unique_ptr<EtcdClient>> Open(EtcdOptions options);
  ~EtcdClient();

  // POSTs `body` to `path` on the endpoint that answered last, moving on to the others when it
  // cannot be served there; the answer's JSON, or why not.
  std::expected<nlohmann::json, EtcdError> Call(const std::string& path,
                                                const nlohmann::json& body);

  std::string Endpoints() const;  // "host:port,host:port"

  static std::string Encode(std::string_view bytes);  // base64
  static Result<std::string> Decode(std::string_view base64);
  // The key after every key that starts with `prefix` (etcd's range_end for a prefix).
  static std::string PrefixEnd(std::string prefix);
  // Fields of an answer, read without trusting its shape (a wrong type reads as absent): a
  // JSON int64 of the gateway (a string; 0 when absent), a string, a bool, an array, an object.
  static int64_t Int(const nlohmann::json& object, const char* field);
  static std::string Str(const nlohmann::json& object, const char* field);
  static bool Bool(const nlohmann::json& object, const char* field);
  static nlohmann::json Array(const nlohmann::json& object, const char* field);
  static nlohmann::json Object(const nlohmann::json& object, const char* field);

 private:
  explicit EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
  std::unique_ptr<httplib::Client> Connect(const std::string& endpoint) const;

  EtcdOptions options_;
  std::mutex mu_;
  size_t current_ = 0;  // the endpoint that answered last
};

}  // namespace tianshu::server
