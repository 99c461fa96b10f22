#include "tianshu/server/follower.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

#include "tianshu/server/http_internal.h"

namespace tianshu::server {

using http_detail::Respond;

Result<std::unique_ptr<FollowerServer>> FollowerServer::Start(FollowerOptions options) {
  auto f = std::unique_ptr<FollowerServer>(new FollowerServer());
  f->options_ = std::move(options);
  const FollowerOptions& o = f->options_;
  if (!o.tls_cert.empty()) {
    auto ssl = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!ssl->is_valid()) return Fail("cannot load the TLS certificate ", o.tls_cert);
    f->http_ = std::move(ssl);
  } else {
    f->http_ = std::make_unique<httplib::Server>();
  }
  // It reads no body: a small limit, and short timeouts for a client that trickles.
  f->http_->set_payload_max_length(64 * 1024);
  f->http_->set_read_timeout(5, 0);
  f->http_->set_write_timeout(5, 0);
  f->http_->set_keep_alive_max_count(1);
  FollowerServer* self = f.get();
  auto leader = [self] {
    std::lock_guard l(self->mu_);
    return self->leader_;
  };
  auto who = [self, leader] {
    const LeaderInfo l = leader();
    return nlohmann::json{{"role", "follower"},
                          {"replica", self->options_.id},
                          {"leader", l.id.empty() ? nlohmann::json(nullptr)
                                                  : nlohmann::json{{"id", l.id}, {"url", l.url}}}};
  };
  f->http_->Get("/healthz", [who](const httplib::Request&, httplib::Response& res) {
    nlohmann::json body = who();
    body["status"] = "ok";
    Respond(res, 200, body);
  });
  f->http_->Get("/v1/leader", [who](const httplib::Request&, httplib::Response& res) {
    Respond(res, 200, who());
  });
  auto refuse = [self, leader](const httplib::Request&, httplib::Response& res) {
    const LeaderInfo l = leader();
    res.set_header("X-Tianshu-Role", "follower");  // nothing was done: try another replica
    if (!l.url.empty()) res.set_header("X-Tianshu-Leader", l.url);
    res.set_header("Retry-After", "1");
    http_detail::RespondError(
        res,
        {503, l.id.empty()
                  ? "replica " + self->options_.id + " does not lead, and no replica leads now: " +
                        (l.problem.empty() ? std::string("an election is under way")
                                           : "the store cannot elect one (" + l.problem + ")")
                  : "replica " + self->options_.id + " does not lead: the leader is " + l.id +
                        (l.url.empty() ? "" : " at " + l.url) +
                        " (give clients every replica: TIANSHU_SERVER=a,b,c)"});
  };
  const std::string any = R"(/.*)";
  f->http_->Get(any, refuse);
  f->http_->Post(any, refuse);
  f->http_->Delete(any, refuse);
  f->http_->Put(any, refuse);
  // The port this replica served on as the leader, whose closed connections may linger in
  // TIME_WAIT, and which the leader's own listener takes over when it stops (SO_REUSEADDR).
  f->http_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  bool bound = false;
  for (int i = 0; i < 50 && !(bound = f->http_->bind_to_port(o.host, o.port)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // an older image closing it
  }
  if (!bound) return Fail("cannot listen on ", o.host, ":", std::to_string(o.port));
  f->thread_ = std::thread([self] {
    self->http_->listen_after_bind();
    self->done_ = true;
  });
  // stop() before the accept loop runs would be lost, and the loop would never end.
  for (int i = 0; i < 2000 && !f->http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return f;
}

FollowerServer::~FollowerServer() { Stop(); }

void FollowerServer::SetLeader(const LeaderInfo& leader) {
  std::lock_guard l(mu_);
  leader_ = leader;
}

void FollowerServer::Stop() {
  // A stop() before the accept loop runs is lost: ask until the loop has ended.
  while (thread_.joinable() && !done_) {
    http_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace tianshu::server
