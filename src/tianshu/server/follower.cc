#include "tianshu/server/follower.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

#include "tianshu/server/http_internal.h"

namespace tianshu::server {

using http_detail::Respond;

namespace {

// The threads that serve a follower's connections (each waiting event read holds one for up to
// a minute; event streams go to the leader).
constexpr int kFollowerThreads = 64;

// A follower's view of the shared store: reads go through, every change is refused.
class ViewStore final : public Store {
 public:
  explicit ViewStore(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  std::optional<StoreLimits> Limits() const override { return store_->Limits(); }
  Result<StoredState> Load(size_t max_events) override { return store_->Load(max_events); }
  Result<int64_t> Revision() override { return store_->Revision(); }
  Status Write(const std::vector<const Change*>&) override {
    return Fail("a follower's view of the store writes nothing");
  }
  Result<std::optional<JobRow>> ReadJob(const std::string& id) override {
    return store_->ReadJob(id);
  }
  std::string Describe() const override { return store_->Describe(); }

 private:
  std::shared_ptr<Store> store_;
};

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::unique_ptr<FollowerServer>> FollowerServer::Start(FollowerOptions options) {
  auto f = std::unique_ptr<FollowerServer>(new FollowerServer());
  f->options_ = std::move(options);
  f->options_.control.read_only = true;
  if (f->options_.store.etcd) {
    f->options_.store.etcd->guard.reset();
    f->options_.store.etcd->unavailable_wait_ms = 1000;  // a read waits little: try another
  }
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
  f->http_->new_task_queue = [] { return new httplib::ThreadPool(kFollowerThreads); };
  FollowerServer* self = f.get();
  auto who = [self] {
    const LeaderInfo l = self->Leader();
    return nlohmann::json{{"role", "follower"},
                          {"replica", self->options_.id},
                          {"leader", l.id.empty() ? nlohmann::json(nullptr)
                                                  : nlohmann::json{{"id", l.id}, {"url", l.url}}}};
  };
  f->http_->set_pre_routing_handler([self](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/healthz" || req.path == "/v1/leader") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    // A stream lives as long as its client: the leader serves those.
    if (req.get_header_value("Accept").find("text/event-stream") != std::string::npos) {
      self->Refuse(res, "event streams are served by the leader");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method != "GET" && req.method != "HEAD") {
      return httplib::Server::HandlerResponse::Unhandled;  // refused below
    }
    if (!req.has_header("Authorization")) {
      http_detail::RespondError(res, http_detail::MissingTokenError());
      return httplib::Server::HandlerResponse::Handled;
    }
    // Checked against the view it holds before anything reads the store, so that a caller
    // without a token this replica knows cannot make it read the store. One it does not know
    // (wrong, or made since its last read) goes to the leader.
    if (auto view = self->LastView(); view && !view->Authenticate(http_detail::BearerOf(req))) {
      self->Refuse(res, "replica " + self->options_.id +
                            " does not know this token (a wrong one, or one made since it last "
                            "read the store)");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  f->http_->Get("/healthz", [who](const httplib::Request&, httplib::Response& res) {
    nlohmann::json body = who();
    body["status"] = "ok";
    Respond(res, 200, body);
  });
  f->http_->Get("/v1/leader", [who](const httplib::Request&, httplib::Response& res) {
    Respond(res, 200, who());
  });
  http_detail::AddReadRoutes(*f->http_,
                             {.view = [self](httplib::Response& res) { return self->View(res); },
                              .now = WallMs,
                              .stopping = [self] { return self->stopping_.load(); },
                              .view_is_live = false});
  auto refuse = [self](const httplib::Request&, httplib::Response& res) { self->Refuse(res, ""); };
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

LeaderInfo FollowerServer::Leader() {
  std::lock_guard l(mu_);
  return leader_;
}

LeaderInfo FollowerServer::MarkFollower(httplib::Response& res) {
  const LeaderInfo l = Leader();
  res.set_header("X-Tianshu-Role", "follower");
  if (!l.url.empty()) res.set_header("X-Tianshu-Leader", l.url);
  return l;
}

void FollowerServer::Refuse(httplib::Response& res, const std::string& why) {
  const LeaderInfo l = MarkFollower(res);  // with a 503: nothing was done, try another replica
  res.set_header("Retry-After", "1");
  const std::string me = "replica " + options_.id + " does not lead";
  const std::string where =
      l.id.empty() ? ", and no replica leads now: " +
                         (l.problem.empty() ? std::string("an election is under way")
                                            : "the store cannot elect one (" + l.problem + ")")
                   : ": the leader is " + l.id + (l.url.empty() ? "" : " at " + l.url) +
                         " (give clients every replica: TIANSHU_SERVER=a,b,c)";
  http_detail::RespondError(res, {503, why.empty() ? me + where : why + "; " + me + where});
}

std::shared_ptr<ControlPlane> FollowerServer::View(httplib::Response& res) {
  MarkFollower(res);
  if (!options_.store.etcd) {
    Refuse(res, "this replica has no store to read from");
    return nullptr;
  }
  if (stopping_) {  // about to lead: no new loads to wait for
    Refuse(res, "replica " + options_.id + " is stopping");
    return nullptr;
  }
  std::shared_ptr<Store> store;
  {
    std::lock_guard reload(reload_mu_);
    if (!store_) {
      auto opened = OpenStore(options_.store);
      if (!opened) {
        Refuse(res, "cannot read the store: " + opened.error().message);
        return nullptr;
      }
      store_ = std::move(*opened);
    }
    store = store_;
  }
  // Asked outside the reload lock: reads check at once, and those that find the store moved
  // share the next reload (one that read a later revision covers theirs).
  auto revision = store->Revision();
  if (!revision) {
    Refuse(res, "cannot read the store: " + revision.error().message);
    return nullptr;
  }
  auto fresh = [&]() -> std::shared_ptr<ControlPlane> {
    std::lock_guard state(mu_);
    if (!view_ || view_revision_ < *revision) return nullptr;
    res.set_header("X-Tianshu-Store-Revision", std::to_string(view_revision_));
    return view_;
  };
  if (auto v = fresh()) return v;
  std::lock_guard reload(reload_mu_);
  if (auto v = fresh()) return v;
  // Everything the store held at `revision` is in this view (it was read after). The specs of
  // jobs whose text did not change come from the view before.
  ControlPlaneOptions control = options_.control;
  {
    std::lock_guard state(mu_);
    control.earlier = view_;
  }
  auto cp = ControlPlane::Open(std::make_unique<ViewStore>(store_), std::move(control), WallMs());
  if (!cp) {
    Refuse(res, "cannot read the store: " + cp.error().message);
    return nullptr;
  }
  std::lock_guard state(mu_);
  view_ = std::move(*cp);
  view_revision_ = *revision;
  res.set_header("X-Tianshu-Store-Revision", std::to_string(view_revision_));
  return view_;
}

FollowerServer::~FollowerServer() { Stop(); }

void FollowerServer::SetLeader(const LeaderInfo& leader) {
  std::lock_guard l(mu_);
  leader_ = leader;
  if (!leader.id.empty() && !warm_.joinable() && options_.store.etcd && !stopping_) {
    warm_ = std::thread([this] {
      httplib::Response unused;
      (void)View(unused);
    });
  }
}

std::shared_ptr<const ControlPlane> FollowerServer::LastView() {
  std::lock_guard l(mu_);
  return view_;
}

void FollowerServer::Stop() {
  stopping_ = true;  // an event read that waits ends within 500 ms: the port is wanted soon
  // A stop() before the accept loop runs is lost: ask until the loop has ended.
  while (thread_.joinable() && !done_) {
    http_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (thread_.joinable()) thread_.join();
  std::thread warm;
  {
    std::lock_guard l(mu_);
    warm.swap(warm_);
  }
  if (warm.joinable()) warm.join();
}

}  // namespace tianshu::server
