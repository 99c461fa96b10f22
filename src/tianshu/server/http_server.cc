#include "tianshu/server/http_server.h"
#include "tianshu/server/http_internal.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ctime>

#include <chrono>
#include <filesystem>
#include <random>

#include "tianshu/base/secret_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/net/http_client.h"
#include "tianshu/server/console.h"
#include "tianshu/server/metrics.h"
#include "tianshu/server/requests.h"
#include "tianshu/server/worker_pool.h"

namespace tianshu::server {

using nlohmann::json;

namespace {

// The shortest gap between two scheduling cycles that changes asked for (they coalesce).
constexpr int64_t kMinCycleGapMs = 10;

}  // namespace

namespace http_detail {

void Respond(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(wire::Dump(body), "application/json");
}

void RespondError(httplib::Response& res, const ApiError& e) {
  Respond(res, e.status, wire::ToJson(wire::ErrorBody{e.status, e.message, e.details}));
}

std::map<std::string, std::string> Params(const httplib::Request& req) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : req.params) out[k] = v;
  return out;
}

std::string BearerOf(const httplib::Request& req) {
  std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  return auth.starts_with(prefix) ? auth.substr(prefix.size()) : std::string();
}

std::optional<Identity> Allowed(ControlPlane* cp, const httplib::Request& req,
                                httplib::Response& res, const std::vector<Role>& roles,
                                const std::string& what) {
  auto who = cp->Authenticate(BearerOf(req));
  if (!who) {
    RespondError(res, {401, "wrong token"});
    return std::nullopt;
  }
  for (Role r : roles) {
    if (who->role == r) return who;
  }
  RespondError(
      res, {403, std::string(RoleName(who->role)) + " token (" + who->name + ") may not " + what});
  return std::nullopt;
}

}  // namespace http_detail

using namespace http_detail;

Result<std::string> ReadTokenFile(const std::string& path) { return ReadSecretFile(path); }

Result<std::string> EnsureTokenFile(const std::string& path) {
  if (std::filesystem::exists(path)) return ReadSecretFile(path);
  auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    if (auto s = MakePrivateDirs(dir.string()); !s) return std::unexpected(s.error());
  }
  const std::string token = NewToken();
  if (auto s = WritePrivateFile(path, token + "\n"); !s) return std::unexpected(s.error());
  return token;
}

Status CheckListenOptions(const ServerOptions& options) {
  if (options.token.empty()) return Fail("a token is required (--token-file)");
  const bool tls = !options.tls_cert.empty() || !options.tls_key.empty();
  if (tls && (options.tls_cert.empty() || options.tls_key.empty())) {
    return Fail("TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
  }
  if (!tls && !net::IsLoopbackHost(options.host) && !options.allow_plain_http) {
    return Fail("refusing to serve plain HTTP on ", options.host,
                ": tokens would cross the network in the clear. Give --tls-cert and --tls-key, "
                "or --insecure-plain-http on a network you trust");
  }
  if (tls) {
    struct stat st {};
    if (::stat(options.tls_key.c_str(), &st) != 0) {
      return Fail("cannot read TLS key ", options.tls_key);
    }
    if ((st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
      return Fail("TLS key ", options.tls_key,
                  " is readable or writable by every user: run chmod 600 (or 640) on it");
    }
  }
  return Ok();
}

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (auto ok = CheckListenOptions(options); !ok) return std::unexpected(ok.error());
  const bool tls = !options.tls_cert.empty() || !options.tls_key.empty();
  if (!options.now_ms) {
    options.now_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  if (options.control.checkpoint_root.empty()) {
    options.control.checkpoint_root =
        std::filesystem::absolute(std::filesystem::path(options.data_dir) / "checkpoints").string();
  }
  if (auto s = MakePrivateDirs(options.data_dir); !s) return std::unexpected(s.error());
  auto url = ParseStoreUrl(options.store.empty()
                               ? (std::filesystem::path(options.data_dir) / "tianshu.db").string()
                               : options.store);
  if (!url) return std::unexpected(url.error());
  if (options.guard) {
    if (!url->etcd) return Fail("a replica's leadership guards an etcd store only");
    url->etcd->guard = options.guard;
  }
  if (url->etcd && options.store_wait_ms > 0)
    url->etcd->unavailable_wait_ms = options.store_wait_ms;
  auto store = OpenStore(*url);
  if (!store) return std::unexpected(store.error());
  options.control.admin_token = options.token;
  auto cp = ControlPlane::Open(std::move(*store), options.control, options.now_ms());
  options.control.earlier.reset();  // loaded: the follower's view may go
  if (!cp) return std::unexpected(cp.error());

  auto s = std::unique_ptr<Server>(new Server());
  s->options_ = std::move(options);
  s->cp_ = std::move(*cp);
  if (tls) {
    auto ssl = std::make_unique<httplib::SSLServer>(s->options_.tls_cert.c_str(),
                                                    s->options_.tls_key.c_str());
    if (!ssl->is_valid()) {
      return Fail("cannot load the TLS certificate ", s->options_.tls_cert, " and key ",
                  s->options_.tls_key, " (PEM, the key matching the certificate)");
    }
    s->http_ = std::move(ssl);
  } else {
    s->http_ = std::make_unique<httplib::Server>();
  }
  // httplib deletes the queue it is given when its accept loop ends; the pool itself lives as
  // long as the server (the ticker reads it).
  struct Forward : httplib::TaskQueue {
    explicit Forward(WorkerPool* p) : pool(p) {}
    void enqueue(std::function<void()> fn) override { pool->enqueue(std::move(fn)); }
    void shutdown() override { pool->shutdown(); }
    WorkerPool* pool;
  };
  s->pool_ = std::make_unique<WorkerPool>(WorkerPoolOptions{
      .min_threads = 8, .max_threads = static_cast<size_t>(std::max(8, s->options_.http_threads))});
  s->http_->new_task_queue = [pool = s->pool_.get()] { return new Forward(pool); };
  s->http_->set_payload_max_length(kMaxBodyBytes);
  s->http_->set_keep_alive_max_count(1000);
  s->http_->set_tcp_nodelay(true);  // answers go out at once, not after a delayed ACK
  s->http_->set_read_timeout(30, 0);
  s->http_->set_write_timeout(30, 0);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients overflows it and Linux
  // drops connections the clients already think are open (they fail reading the answer).
  // Keep the listening socket and raise its backlog once bound.
  s->Routes();
  // Every answer, counted by its route's pattern (not the raw path: bounded label values).
  s->http_->set_logger([self = s.get()](const httplib::Request& req, const httplib::Response& res) {
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t i = 1; i < req.matches.size(); ++i) {
      if (req.matches[i].matched) {
        spans.emplace_back(static_cast<size_t>(req.matches.position(i)),
                           static_cast<size_t>(req.matches.length(i)));
      }
    }
    self->http_requests_.Count(req.method, RoutePattern(req.path, !req.matches.empty(), spans),
                               res.status);
  });
  const auto& o = s->options_;
  // Connections come through our own accept loop (Listener): each is weighed by its client
  // address before a worker serves it. cpp-httplib's own loop listens on a loopback port of
  // its own that nobody is told about; it is kept because its stop() is what ends the
  // keep-alive loops of the connections being served.
  auto listener = Listener::Open(o.host, o.port);
  if (!listener) {
    return Fail(listener.error().message,
                o.port == 0 ? "" : " (in use by another process? choose another with --listen)");
  }
  s->listen_ = std::move(*listener);
  s->port_ = s->listen_->port();
  if (s->http_->bind_to_any_port("127.0.0.1") <= 0) return Fail("cannot bind a loopback port");
  s->shares_ =
      std::make_unique<ClientShares>(static_cast<size_t>(std::max(8, s->options_.http_threads)));
  Server* self = s.get();
  s->listener_ = std::thread([self] { self->http_->listen_after_bind(); });
  s->listen_->Run([self, tls](int sock, const std::string& peer) { self->Serve(sock, peer, tls); });
  // httplib's stop() before its accept loop has started is lost (the loop then never ends):
  // return only once it runs, so that a Stop() right after Start() cannot hang.
  for (int i = 0; i < 5000 && !s->http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s->ticker_ = std::thread([self] {
    while (!self->stopping_) {
      // Connections waiting for a worker: heartbeats may be among them, so silence now says
      // nothing about the nodes. No node is declared lost until the server has caught up.
      const int64_t lost_after = self->options_.control.lost_after_ms;
      const int64_t now = self->options_.now_ms();
      if (self->pool_->OldestWaitMs() > std::min<int64_t>(1000, lost_after / 4) ||
          now - self->node_refused_ms_ < 1000) {
        self->cp_->DeferLosses(now);
      }
      if (now - self->node_hosts_refreshed_ms_ >= 1000) {
        auto hosts = std::make_shared<const std::set<std::string>>(self->cp_->NodeHosts());
        std::lock_guard l(self->node_hosts_mu_);
        self->node_hosts_ = std::move(hosts);
        self->node_hosts_refreshed_ms_ = now;
      }
      self->cp_->Tick(self->options_.now_ms());
      self->console_->Sample(now);  // the console's utilisation chart
      // Until the next period, or sooner when a change asks for a cycle (a submission, a rank
      // that ended, a lost node): changes that come together share one cycle, no more than
      // one per kMinCycleGapMs.
      self->cp_->WaitForChange(self->options_.tick_ms, kMinCycleGapMs);
    }
  });
  if (s->options_.log) {
    for (const auto& w : s->cp_->StartupWarnings()) s->options_.log("tianshu serve: store: " + w);
    s->options_.log(std::string("tianshu serve: listening on ") + (tls ? "https://" : "http://") +
                    o.host + ":" + std::to_string(s->port_) + ", store " +
                    s->cp_->StoreDescription());
  }
  return s;
}

Server::~Server() { Stop(); }

namespace {

// cpp-httplib 0.11 serves an accepted socket only from its own accept loop, through the private
// virtual Server::process_and_close_socket. An explicit instantiation may name a private member
// ([temp.spec.general]): this one hands out a pointer to it, called virtually (SSLServer's TLS
// override for HTTPS).
struct ProcessSocket {
  using type = bool (httplib::Server::*)(socket_t);
  friend type ProcessSocketOf(ProcessSocket);
};
template <typename Tag, typename Tag::type Member>
struct ExposeMember {
  friend typename Tag::type ProcessSocketOf(Tag) { return Member; }
};
template struct ExposeMember<ProcessSocket, &httplib::Server::process_and_close_socket>;

}  // namespace

void Server::Serve(int sock, const std::string& peer, bool tls) {
  if (!shares_->Admit(peer)) {
    // A node's own address past its share (ranks on it hold the connections, or a proxy): its
    // heartbeats may be among the refused, so the ticker declares no node lost meanwhile.
    std::shared_ptr<const std::set<std::string>> hosts;
    {
      std::lock_guard l(node_hosts_mu_);
      hosts = node_hosts_;
    }
    if (hosts && hosts->contains(peer)) node_refused_ms_ = options_.now_ms();
    // Past its share while the workers are scarce: refused at once, with a plain HTTP answer
    // when the server speaks plain HTTP.
    static constexpr char kBusy[] =
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
        "Content-Length: 0\r\n\r\n";
    if (!tls) (void)!::send(sock, kBusy, sizeof kBusy - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(sock);
    return;
  }
  // What cpp-httplib's own loop sets on an accepted socket.
  timeval read_timeout{30, 0}, write_timeout{30, 0};
  ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &read_timeout, sizeof read_timeout);
  ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &write_timeout, sizeof write_timeout);
  int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  pool_->enqueue([this, sock, peer] {
    (http_.get()->*ProcessSocketOf(ProcessSocket{}))(sock);  // serves, then closes
    shares_->Release(peer);
  });
}

void Server::Stop() {
  if (stopping_.exchange(true)) {
    if (listener_.joinable()) listener_.join();
    if (ticker_.joinable()) ticker_.join();
    return;
  }
  cp_->Shutdown();
  if (listen_) listen_->Stop();
  http_->stop();
  if (listener_.joinable()) listener_.join();
  if (ticker_.joinable()) ticker_.join();
}

void Server::Wait() {
  while (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace tianshu::server
