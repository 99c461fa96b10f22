// `tianshu serve`: the control plane behind an HTTP/1.1 server (cpp-httplib) on loopback by
// default, with bearer-token authentication on everything but /healthz, a ticker thread that
// runs failure detection and the scheduling cycle, and the routes of docs/api.md.
//
//   auto s = Server::Start({.host = "127.0.0.1", .port = 0, .data_dir = dir, .token = "t"});
//   int port = (*s)->port();   // a free port when 0 was asked
//   (*s)->Stop();
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tianshu/base/status.h"
#include "tianshu/server/control_plane.h"
#include "tianshu/server/listener.h"

namespace httplib {
class Server;
}

namespace tianshu::server {

class WorkerPool;
class Console;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 7070;                        // 0: any free port
  std::string data_dir = "tianshu-data";  // holds tianshu.db and checkpoints/
  // Where the state lives (store.h's ParseStoreUrl): "" is data_dir/tianshu.db (SQLite);
  // etcd://HOST:PORT,... keeps it in etcd.
  std::string store;
  // A replica on etcd that won the election (leader.h): every write of its store needs the
  // leadership, and GET /v1/leader names it. Unset: the only server of its store.
  std::optional<EtcdGuard> guard;
  std::string replica_id, replica_url;
  // How long a write waits for etcd to become available again before it fails (0: the
  // store's default); a replica waits less than its lease.
  int64_t store_wait_ms = 0;
  std::string token;  // required on every call but /healthz; must not be empty
  // TLS: a PEM certificate (chain) and its private key; both or neither. Without them the
  // server speaks plain HTTP, which it refuses on a non-loopback host unless allow_plain_http.
  std::string tls_cert, tls_key;
  bool allow_plain_http = false;
  ControlPlaneOptions control;  // checkpoint_root defaults to data_dir/checkpoints
  // Most connections served at once (a thread each, started on demand); long polls (agents'
  // work channel, events) and slow clients hold one each.
  int http_threads = 1024;
  int64_t tick_ms = 100;            // failure detection period; a change asks for a cycle at once
  std::function<int64_t()> now_ms;  // wall clock in ms since the epoch; the real one when empty
  std::function<void(const std::string&)> log;  // one line per notable event; none when empty
};

// What Server::Start refuses to listen with (plain HTTP off loopback without
// allow_plain_http, half a TLS pair, a TLS key others can read); a replica checks it before it
// answers as a follower.
[[nodiscard]] Status CheckListenOptions(const ServerOptions& options);

class Server {
 public:
  // Opens (or creates and migrates) the store, rebuilds the state, binds, starts serving.
  [[nodiscard]] static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();
  int port() const { return port_; }
  ControlPlane& control_plane() { return *cp_; }
  // Stops serving and the ticker, wakes long polls; idempotent, callable from any thread
  // (not from a signal handler).
  void Stop();
  // Blocks until Stop.
  void Wait();

 private:
  Server() = default;
  void Routes();
  void AgentRoutes();                                       // http_routes_agents.cc
  void Serve(int sock, const std::string& peer, bool tls);  // one accepted connection

  ServerOptions options_;
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<WorkerPool> pool_;  // before http_: outlives its accept loop
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<ClientShares> shares_;
  std::unique_ptr<Listener> listen_;  // our accept loop (the real port)
  HttpRequests http_requests_;        // by route and status, for /metrics
  std::shared_ptr<Console> console_;  // the web console (console.h); made by Routes()
  // Refresh by the ticker: the nodes' hosts; when a connection from one was last refused.
  std::shared_ptr<const std::set<std::string>> node_hosts_;
  std::mutex node_hosts_mu_;
  std::atomic<int64_t> node_refused_ms_{0};
  int64_t node_hosts_refreshed_ms_ = 0;  // ticker thread only
  std::thread listener_, ticker_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
};

// Reads a token file (first line, trimmed): fails when missing, readable by every user or
// shorter than 16 bytes (ReadSecretFile).
[[nodiscard]] Result<std::string> ReadTokenFile(const std::string& path);
// Creates `path` with a new random token (0600 from its creation, its directory 0700) unless
// it exists; returns the token.
[[nodiscard]] Result<std::string> EnsureTokenFile(const std::string& path);

}  // namespace tianshu::server
