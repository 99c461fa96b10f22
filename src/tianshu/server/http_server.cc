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
#include "tianshu/server/metrics.h"
#include "tianshu/server/requests.h"
#include "tianshu/server/worker_pool.h"

namespace tianshu::server {

using nlohmann::json;

namespace {

// The shortest gap between two scheduling cycles that changes asked for (they coalesce).
constexpr int64_t kMinCycleGapMs = 10;

// An IMF-fixdate ("Thu, 03 Dec 2026 16:21:25 GMT") for epoch milliseconds.
std::string HttpDate(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

std::string DefaultMessage(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "no such path: see docs/api.md for the routes under /v1";
    case 405:
      return "method not allowed";
    case 413:
      return "request body over the limit of " + std::to_string(kMaxBodyBytes) + " bytes";
    case 414:
      return "request URI too long";
    default:
      return "HTTP " + std::to_string(status);
  }
}

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

namespace {

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

}  // namespace

Status CheckListenOptions(const ServerOptions& options) {
  if (options.token.empty()) return Fail("a token is required (--token-file)");
  const bool tls = !options.tls_cert.empty() || !options.tls_key.empty();
  if (tls && (options.tls_cert.empty() || options.tls_key.empty())) {
    return Fail("TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
  }
  if (!tls && !IsLoopback(options.host) && !options.allow_plain_http) {
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

void Server::Routes() {
  httplib::Server& h = *http_;
  ControlPlane* cp = cp_.get();
  auto now = [this] { return options_.now_ms(); };
  // The caller (authenticated by the pre-routing handler) when its role may make this call;
  // otherwise the 403 is written and nullopt returned.
  const auto allowed = AllowedBy(cp);
  const std::vector<Role> people = {Role::kAdmin, Role::kUser};  // copied into each route

  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // RFC 9110 §6.6.1: an origin server with a clock sends Date; `tianshu doctor` reads it to
    // measure a node's clock offset from the server's.
    res.set_header("Date", HttpDate(options_.now_ms()));
    // cpp-httplib 0.11 buffers a chunked body whole before it checks the size limit: refuse
    // one before it is read (every client of this API knows its body's length).
    if (req.has_header("Transfer-Encoding")) {
      res.set_header("Connection", "close");
      RespondError(res, {411, "send the body with a Content-Length (chunked bodies are refused)"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/healthz" || req.path == "/v1/leader") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (!req.has_header("Authorization")) {
      if (req.path == "/v1/jobs" && req.method == "POST") cp_->CountRejected();
      RespondError(res, {401,
                         "missing bearer token: send 'Authorization: Bearer <token>' "
                         "(tianshu: --token-file or TIANSHU_TOKEN)"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!cp_->Authenticate(BearerOf(req))) {
      if (req.path == "/v1/jobs" && req.method == "POST") cp_->CountRejected();
      RespondError(res, {401, "wrong token"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        RespondError(res, {res.status, DefaultMessage(res.status)});
        return httplib::Server::HandlerResponse::Handled;
      }));
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, const std::exception_ptr& ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        RespondError(res, {500, what});
      });

  // Who leads: this server, as a replica that won the election or as its store's only server.
  auto role = [this] {
    const bool replica = !options_.replica_id.empty();
    return json{
        {"role", replica ? "leader" : "single"},
        {"replica", options_.replica_id},
        {"leader", replica ? json{{"id", options_.replica_id}, {"url", options_.replica_url}}
                           : json(nullptr)}};
  };
  h.Get("/healthz", [this, role](const httplib::Request&, httplib::Response& res) {
    bool ok = !cp_->StoreFailed();
    json body = role();
    body["status"] = ok ? "ok" : "store failed";
    Respond(res, ok ? 200 : 503, body);
  });
  h.Get("/v1/leader",
        [role](const httplib::Request&, httplib::Response& res) { Respond(res, 200, role()); });
  h.Get("/metrics", [this, cp, allowed](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res, {Role::kAdmin, Role::kUser, Role::kNode}, "read metrics")) return;
    std::string out = cp->Metrics();
    out += MetricHeader("tianshu_http_workers", "gauge",
                        "HTTP worker threads alive (one per connection being served).");
    out += "tianshu_http_workers " + std::to_string(pool_->Threads()) + "\n";
    out += MetricHeader("tianshu_http_workers_peak", "gauge", "Most HTTP worker threads at once.");
    out += "tianshu_http_workers_peak " + std::to_string(pool_->Peak()) + "\n";
    out += MetricHeader("tianshu_http_connections_refused_total", "counter",
                        "Connections refused because their client held its share of busy "
                        "workers.");
    out += "tianshu_http_connections_refused_total " + std::to_string(shares_->Refused()) + "\n";
    out += MetricHeader("tianshu_http_queue_wait_seconds", "gauge",
                        "How long the oldest connection has waited for a worker.");
    out += "tianshu_http_queue_wait_seconds " +
           std::to_string(static_cast<double>(pool_->OldestWaitMs()) / 1000.0) + "\n";
    res.set_content(out, "text/plain; version=0.0.4");
  });

  // ---- jobs ----
  h.Post(
      "/v1/jobs", [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
        auto who = allowed(req, res, people, "submit jobs");
        if (!who) return cp->CountRejected();
        auto parsed = ParseSubmitBody(req.get_header_value("Content-Type"), req.body,
                                      req.get_header_value("X-Tianshu-File"));
        if (!parsed) {
          cp->CountRejected();
          return RespondError(res, parsed.error());
        }
        // Like sbatch: ranks of a job whose run section names no workdir start where it was
        // submitted from (the CLI sends its working directory).
        std::string submit_dir = req.get_header_value("X-Tianshu-Workdir");
        if (submit_dir.find("/../") != std::string::npos || submit_dir.ends_with("/..")) {
          submit_dir.clear();
        }
        if (parsed->run.workdir.empty() && !parsed->run.command.empty() &&
            submit_dir.starts_with("/")) {
          parsed->run.workdir = submit_dir;
        } else if (!parsed->run.workdir.empty() && !parsed->run.workdir.starts_with("/")) {
          // Relative: under the submit directory (the validator refused any "..").
          if (!submit_dir.starts_with("/")) {
            cp->CountRejected();
            return RespondError(res, {400, "run.workdir '" + parsed->run.workdir.substr(0, 256) +
                                               "' is relative and the request names no absolute "
                                               "X-Tianshu-Workdir: give an absolute path"});
          }
          parsed->run.workdir = submit_dir + "/" + parsed->run.workdir;
        }
        if (req.has_header("Idempotency-Key")) {
          parsed->idempotency_key = req.get_header_value("Idempotency-Key");
          if (!IsValidIdempotencyKey(parsed->idempotency_key)) {
            cp->CountRejected();
            return RespondError(res, {400, "Idempotency-Key must be 1-128 of A-Z a-z 0-9 . _ : -"});
          }
        }
        parsed->owner = who->name;
        parsed->run_as = who->unix_user;
        if (req.has_param("hold")) {
          const std::string hold = req.get_param_value("hold");
          if (hold != "true" && hold != "false") {
            cp->CountRejected();
            return RespondError(
                res, {400, "hold: expected true or false, got '" + hold.substr(0, 32) + "'"});
          }
          parsed->hold = hold == "true";
        }
        if (req.has_param("array")) {
          auto tasks = ParseArraySpec(req.get_param_value("array"));
          if (!tasks) {
            cp->CountRejected();
            return RespondError(res, tasks.error());
          }
          parsed->array = std::move(*tasks);
        }
        auto made = cp->Submit(std::move(*parsed), now());
        if (!made) return RespondError(res, made.error());
        res.set_header("Location", "/v1/jobs/" + made->job["id"].get<std::string>());
        // A retry of a submission that was made: the same job, not a second one.
        if (made->replayed) res.set_header("Idempotent-Replayed", "true");
        Respond(res, made->replayed ? 200 : 201, made->job);
      });
  h.Get("/v1/jobs", [cp, allowed, people](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res, people, "list jobs")) return;
    auto f = ParseJobFilter(Params(req));
    if (!f) return RespondError(res, f.error());
    Respond(res, 200, cp->ListJobs(*f));
  });
  h.Get(R"(/v1/jobs/([^/]+))",
        [cp, allowed, people](const httplib::Request& req, httplib::Response& res) {
          auto who = allowed(req, res, people, "read jobs");
          if (!who) return;
          auto j = cp->GetJob(req.matches[1], *who);
          if (!j) return RespondError(res, j.error());
          Respond(res, 200, *j);
        });
  auto cancel = [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
    auto who = allowed(req, res, people, "cancel jobs");
    if (!who) return;
    auto j = cp->Cancel(req.matches[1], *who, now(), req.get_param_value("array") == "true");
    if (!j) return RespondError(res, j.error());
    Respond(res, 200, *j);
  };
  // A rank's log, read from the agent of its node (the agent serves it on its address).
  h.Get(R"(/v1/jobs/([^/]+)/logs)", [cp, allowed, people](const httplib::Request& req,
                                                          httplib::Response& res) {
    auto who = allowed(req, res, people, "read logs");
    if (!who) return;
    int64_t rank = 0, offset = 0;
    if ((req.has_param("rank") && !ParseInt64(req.get_param_value("rank"), &rank)) ||
        (req.has_param("offset") && !ParseInt64(req.get_param_value("offset"), &offset)) ||
        rank < 0 || offset < 0) {
      return RespondError(res, {400, "rank and offset are non-negative integers"});
    }
    // Only ever the node's registered address, with the key that node's agent was given: no
    // user's token goes to a node.
    auto where = cp->RankLog(req.matches[1], static_cast<int>(rank), *who);
    if (!where) return RespondError(res, where.error());
    httplib::Client agent("http://" + where->address);
    agent.set_connection_timeout(2, 0);
    agent.set_read_timeout(10, 0);
    auto r = agent.Get("/v1/logs/" + std::string(req.matches[1]) + "/" + std::to_string(rank) +
                           "?offset=" + std::to_string(offset),
                       {{"Authorization", "Bearer " + where->key}});
    if (!r) {
      return RespondError(res,
                          {502, "the agent at " + where->address + " did not answer for the log (" +
                                    httplib::to_string(r.error()) + ")"});
    }
    if (r->status != 200) {
      return RespondError(res, {r->status == 404 ? 404 : 502, std::string(Trim(r->body))});
    }
    for (const char* name : {"X-Tianshu-Log-Next", "X-Tianshu-Log-Size", "X-Tianshu-Log-Ended"}) {
      res.set_header(name, r->get_header_value(name));
    }
    res.set_content(r->body, "application/octet-stream");
  });
  // Hold or release pending jobs together: {"ids": ["j-000001", ...]}, all or none.
  for (const bool hold : {true, false}) {
    h.Post(hold ? "/v1/jobs/hold" : "/v1/jobs/release",
           [cp, now, allowed, people, hold](const httplib::Request& req, httplib::Response& res) {
             auto who = allowed(req, res, people, hold ? "hold jobs" : "release jobs");
             if (!who) return;
             auto ids = ParseJobIds(req.body);
             if (!ids) return RespondError(res, ids.error());
             auto out = cp->SetHeld(*ids, hold, *who, now());
             if (!out) return RespondError(res, out.error());
             Respond(res, 200, *out);
           });
  }
  h.Post(R"(/v1/jobs/([^/]+)/cancel)", cancel);
  h.Delete(R"(/v1/jobs/([^/]+))", cancel);

  // ---- nodes, queues, events ----
  h.Get("/v1/nodes",
        [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
          if (!allowed(req, res, people, "list nodes")) return;
          Respond(res, 200, cp->ListNodes(now()));
        });
  h.Get(R"(/v1/nodes/([^/]+))",
        [cp, now, allowed, people](const httplib::Request& req, httplib::Response& res) {
          if (!allowed(req, res, people, "read nodes")) return;
          auto n = cp->GetNode(req.matches[1], now());
          if (!n) return RespondError(res, n.error());
          Respond(res, 200, *n);
        });
  h.Get("/v1/queues", [cp, allowed, people](const httplib::Request& req, httplib::Response& res) {
    if (!allowed(req, res, people, "list queues")) return;
    Respond(res, 200, cp->ListQueues());
  });
  h.Get("/v1/events", [this, cp, allowed, people](const httplib::Request& req,
                                                  httplib::Response& res) {
    if (!allowed(req, res, people, "read events")) return;
    auto q = ParseEventQuery(Params(req));
    if (!q) return RespondError(res, q.error());
    if (req.get_header_value("Accept").find("text/event-stream") == std::string::npos) {
      return Respond(res, 200, cp->WaitEvents(*q));
    }
    // Server-sent events: one `event: job|node` per state change, `id:` its sequence number.
    auto since = std::make_shared<int64_t>(q->since);
    if (req.has_header("Last-Event-ID")) {
      int64_t v = 0;
      if (ParseInt64(req.get_header_value("Last-Event-ID"), &v) && v >= 0) *since = v;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, cp, since](size_t, httplib::DataSink& sink) {
          if (stopping_) {
            sink.done();
            return true;
          }
          json r = cp->WaitEvents({.since = *since, .wait_ms = 1000, .limit = 1000});
          std::string out;
          for (const auto& e : r["events"]) {
            out += "id: " + std::to_string(e["seq"].get<int64_t>()) +
                   "\nevent: " + e["type"].get<std::string>() + "\ndata: " + wire::Dump(e) + "\n\n";
          }
          if (out.empty()) out = ": keep-alive\n\n";
          *since = r["next"].get<int64_t>();
          return sink.write(out.data(), out.size());
        });
  });

  AgentRoutes();
}

}  // namespace tianshu::server
