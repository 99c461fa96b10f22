// The server's own accept loop, in front of cpp-httplib: cpp-httplib 0.11 accepts and serves a
// connection with no hook in between, so one client could take every worker. Here each accepted
// connection is first weighed by its client address (ClientShares), and only then served.
//
//   auto l = Listener::Open("0.0.0.0", 7070);            // bound and listening (backlog 4096)
//   (*l)->Run([&](int sock, const std::string& peer) { ... serve, then close sock ... });
//   (*l)->Stop();                                        // no new connection after it returns
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tianshu/base/status.h"

namespace tianshu::server {

// Fair shares of the HTTP workers per client address (IP; the port is ignored). While fewer than
// half of the workers are taken, any connection is admitted; past that, an address that already
// holds its share (an eighth of the workers, at least 4) gets no more. One client then cannot
// take more than half of the workers plus its share, and agents (one or two connections each)
// always find room. nginx's limit_conn and Kubernetes' priority and fairness work the same way.
class ClientShares {
 public:
  explicit ClientShares(size_t max_workers) : max_workers_(max_workers) {}
  // Whether a new connection from `address` may be served; counts it when it may.
  bool Admit(const std::string& address);
  void Release(const std::string& address);  // a connection Admit counted has ended
  size_t Held(const std::string& address) const;
  size_t Total() const;
  size_t Share() const { return std::max<size_t>(4, max_workers_ / 8); }
  uint64_t Refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }

 private:
  const size_t max_workers_;
  mutable std::mutex mu_;
  std::map<std::string, size_t> held_;
  size_t total_ = 0;
  uint64_t refused_ = 0;
};

class Listener {
 public:
  // Binds host:port (port 0: any free port) and listens; SO_REUSEADDR, close-on-exec.
  [[nodiscard]] static Result<std::unique_ptr<Listener>> Open(const std::string& host, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  // Accepts on a thread of its own and hands each connection, with its peer's address, to
  // `serve`, which owns the socket from then on.
  void Run(std::function<void(int sock, const std::string& peer)> serve);
  void Stop();  // idempotent; closes the listening socket

 private:
  Listener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace tianshu::server
