// What a `tianshu serve` replica that does not lead answers on the API's port (issue 17): its
// health and who leads (GET /healthz, GET /v1/leader); every other request gets 503 with the
// leader's address in X-Tianshu-Leader and the error message, so that a client given several
// servers moves to the leader, and one given only this one is told where it is. It holds no
// state and writes nothing.
//
//   auto f = FollowerServer::Start({.host = "0.0.0.0", .port = 7070, .id = "cp1:7070"});
//   f->SetLeader({.id = "cp0:7070", .url = "https://cp0:7070"});
//   f->Stop();   // before the replica serves as the leader on the same port
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tianshu/base/status.h"
#include "tianshu/server/leader.h"

namespace httplib {
class Server;
}

namespace tianshu::server {

struct FollowerOptions {
  std::string host = "127.0.0.1";
  int port = 7070;
  std::string tls_cert, tls_key;  // both or neither, as the leader serves
  std::string id;                 // this replica
};

class FollowerServer {
 public:
  [[nodiscard]] static Result<std::unique_ptr<FollowerServer>> Start(FollowerOptions options);
  ~FollowerServer();
  void SetLeader(const LeaderInfo& leader);
  void Stop();  // idempotent; the port is free once it returns

 private:
  FollowerServer() = default;
  FollowerOptions options_;
  std::mutex mu_;
  LeaderInfo leader_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<bool> done_{false};  // the accept loop has ended
};

}  // namespace tianshu::server
