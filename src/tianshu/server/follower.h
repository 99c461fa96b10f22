// What a `tianshu serve` replica that does not lead answers on the API's port (issue 17): its
// health and who leads (GET /healthz, GET /v1/leader); the reads of http_routes_reads.cc (jobs,
// nodes, queues, events, logs) from its view of the store; and to everything else, a 503 with
// the leader's address in X-Tianshu-Leader and the error message, so that a client given
// several servers moves to the leader, and one given only this one is told where it is.
//
// A read is as fresh as a read from the leader: before it answers, the follower asks the store
// for its revision (a quorum read) and reloads its view when the store changed since, so a job
// acknowledged by the leader is never missing here (one reload at a time; the reads that found
// the store moved share it). A token the view does not know is sent to the leader before the
// store is read. It writes nothing: its view refuses every change.
//
//   auto f = FollowerServer::Start({.host = "0.0.0.0", .port = 7070, .id = "cp1:7070",
//                                   .store = *ParseStoreUrl(url), .control = control});
//   f->SetLeader({.id = "cp0:7070", .url = "https://cp0:7070"});
//   f->Stop();   // before the replica serves as the leader on the same port
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tianshu/base/status.h"
#include "tianshu/server/control_plane.h"
#include "tianshu/server/leader.h"
#include "tianshu/server/store.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace tianshu::server {

struct FollowerOptions {
  std::string host = "127.0.0.1";
  int port = 7070;
  std::string tls_cert, tls_key;  // both or neither, as the leader serves
  std::string id;                 // this replica
  // Where reads come from (opened at the first read, again after a failure), and the control
  // plane's options (the admin token among them) its views are opened with. Without an etcd
  // store every read is refused like a write.
  StoreUrl store;
  ControlPlaneOptions control;
};

class FollowerServer {
 public:
  [[nodiscard]] static Result<std::unique_ptr<FollowerServer>> Start(FollowerOptions options);
  ~FollowerServer();
  // Who leads now. The first time a leader is named, the follower loads its view of the store
  // in the background, so that its parsed specs are at hand when it is elected.
  void SetLeader(const LeaderInfo& leader);
  void Stop();  // idempotent; the port is free once it returns
  // The newest view it loaded (nullptr when none): what an elected replica hands its control
  // plane as ControlPlaneOptions::earlier.
  std::shared_ptr<const ControlPlane> LastView();

 private:
  FollowerServer() = default;
  // The view for one read, fresh as of the store's revision now; nullptr with the 503 written
  // when the store cannot be read. Sets the follower's headers on `res` either way.
  std::shared_ptr<ControlPlane> View(httplib::Response& res);
  // The 503 a client moves to the leader on (`why`, when given, leads the message).
  void Refuse(httplib::Response& res, const std::string& why);
  LeaderInfo Leader();
  // Sets X-Tianshu-Role: follower and X-Tianshu-Leader on an answer; returns who leads.
  LeaderInfo MarkFollower(httplib::Response& res);

  FollowerOptions options_;
  std::mutex mu_;  // leader_, view_, view_revision_
  LeaderInfo leader_;
  std::shared_ptr<ControlPlane> view_;
  int64_t view_revision_ = -1;
  std::mutex reload_mu_;          // one reload at a time; store_
  std::shared_ptr<Store> store_;  // opened at the first read
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::thread warm_;                   // the first view's load (SetLeader)
  std::atomic<bool> done_{false};      // the accept loop has ended
  std::atomic<bool> stopping_{false};  // Stop was called: waiting reads end
};

}  // namespace tianshu::server
