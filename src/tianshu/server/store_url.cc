// Store URLs (store.h): which store a server or `tianshu store copy` opens.
#include <unistd.h>

#include <filesystem>

#include "tianshu/base/secret_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/net/http_client.h"
#include "tianshu/server/store.h"

namespace tianshu::server {

namespace {

Result<int64_t> Number(const std::string& url, const std::string& key, const std::string& v,
                       int64_t min) {
  try {
    size_t used = 0;
    const int64_t n = std::stoll(v, &used);
    if (used == v.size() && n >= min) return n;
  } catch (...) {
  }
  return Fail("store URL ", url, ": ", key, "=", v, " is not a whole number of at least ",
              std::to_string(min));
}

}  // namespace

Result<StoreUrl> ParseStoreUrl(const std::string& url) {
  StoreUrl out;
  std::string rest;
  bool tls = false;
  if (url.starts_with("etcd://")) {
    rest = url.substr(7);
  } else if (url.starts_with("etcd+tls://")) {
    rest = url.substr(11);
    tls = true;
  } else if (url.find("://") != std::string::npos) {
    return Fail("store URL ", url, ": unknown scheme (sqlite:PATH, etcd://HOST:PORT,... or ",
                "etcd+tls://HOST:PORT,...)");
  } else {
    out.sqlite_path = url.starts_with("sqlite:") ? url.substr(7) : url;
    if (out.sqlite_path.empty()) return Fail("store URL '", url, "' names no file");
    return out;
  }
  EtcdStoreOptions o;
  bool insecure = false;
  std::string query;
  if (auto q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest.resize(q);
  }
  std::string hosts = rest;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    hosts = rest.substr(0, slash);
    o.prefix = rest.substr(slash);
    if (o.prefix == "/") o.prefix = "/tianshu/";
    if (o.prefix.back() != '/') o.prefix += '/';
  }
  for (const std::string& h : SplitString(hosts, ',')) {
    if (h.empty() || h.find(':') == std::string::npos) {
      return Fail("store URL ", url, ": '", h, "' is not HOST:PORT");
    }
    o.etcd.endpoints.push_back((tls ? "https://" : "http://") + h);
  }
  if (o.etcd.endpoints.empty()) return Fail("store URL ", url, ": no etcd endpoint");
  for (const std::string& kv : SplitString(query, '&')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (k == "ca" || k == "cert" || k == "key") {
      if (!tls) {
        return Fail("store URL ", url, ": ", k, "= is for etcd+tls:// (TLS) endpoints only");
      }
      (k == "ca" ? o.etcd.ca_file : k == "cert" ? o.etcd.cert_file : o.etcd.key_file) = v;
    } else if (k == "max-txn-ops") {
      auto n = Number(url, k, v, 16);
      if (!n) return std::unexpected(n.error());
      if (*n > kMaxTxnOps) {
        return Fail("store URL ", url, ": max-txn-ops=", v, " is over ",
                    std::to_string(kMaxTxnOps));
      }
      o.max_txn_ops = static_cast<int>(*n);
    } else if (k == "max-request-bytes") {
      auto n = Number(url, k, v, 65536);
      if (!n) return std::unexpected(n.error());
      o.max_request_bytes = static_cast<size_t>(*n);
    } else if (k == "events-kept") {
      auto n = Number(url, k, v, 100);
      if (!n) return std::unexpected(n.error());
      o.events_kept = *n;
    } else if (k == "timeout-ms") {
      auto n = Number(url, k, v, 100);
      if (!n) return std::unexpected(n.error());
      o.etcd.request_timeout_ms = *n;
    } else if (k == "insecure-plain-http") {
      if (v != "true" && v != "false") {
        return Fail("store URL ", url, ": insecure-plain-http=", v, " is not true or false");
      }
      insecure = v == "true";
    } else {
      return Fail("store URL ", url, ": unknown option '", k,
                  "' (ca, cert, key, max-txn-ops, max-request-bytes, events-kept, timeout-ms, "
                  "insecure-plain-http)");
    }
  }
  if (!tls && !insecure) {
    for (const std::string& e : o.etcd.endpoints) {
      const std::string host = e.substr(7, e.rfind(':') - 7);
      if (!net::IsLoopbackHost(host)) {
        return Fail("store URL ", url, ": plain etcd:// to ", host,
                    " would send the jobs' records (their environments, API keys among them) in "
                    "the clear: use etcd+tls://...?ca=FILE&cert=FILE&key=FILE, or add "
                    "insecure-plain-http=true on a network you trust");
      }
    }
  }
  out.etcd = std::move(o);
  return out;
}

Result<std::unique_ptr<Store>> OpenStore(const StoreUrl& url) {
  if (url.etcd) return OpenEtcdStore(*url.etcd);
  // The store holds run.env values (API keys): 0600 from its creation. SQLite gives its WAL and
  // shared-memory files the database file's mode; older ones made wider are narrowed.
  const std::string& db = url.sqlite_path;
  const auto dir = std::filesystem::path(db).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) {
      if (auto s = MakePrivateDirs(dir.string()); !s) return std::unexpected(s.error());
    }
  }
  for (const std::string& f : {db + "-wal", db + "-shm", db + "-journal"}) {
    if (auto s = NarrowToPrivate(f); !s) return std::unexpected(s.error());
  }
  auto fd = OpenPrivateAppend(db);
  if (!fd) return std::unexpected(fd.error());
  ::close(*fd);
  return OpenSqliteStore(db);
}

}  // namespace tianshu::server
