#include "tianshu/server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <ctime>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "tianshu/base/strings.h"

namespace tianshu::server {

using nlohmann::json;

namespace {

// An IMF-fixdate ("Thu, 03 Dec 2026 16:21:25 GMT") for epoch milliseconds.
std::string HttpDate(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

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

bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
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

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Fail("cannot read token file ", path);
  std::string line;
  std::getline(in, line);
  std::string token(Trim(line));
  if (token.empty()) return Fail("token file ", path, " is empty");
  return token;
}

Result<std::string> EnsureTokenFile(const std::string& path) {
  if (std::filesystem::exists(path)) return ReadTokenFile(path);
  std::error_code ec;
  auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  {
    std::ofstream out(path);
    if (!out) return Fail("cannot write token file ", path);
    out << token << "\n";
  }
  ::chmod(path.c_str(), 0600);
  return token;
}

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (options.token.empty()) return Fail("a token is required (--token-file)");
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
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) return Fail("cannot create data directory ", options.data_dir, ": ", ec.message());
  auto store = OpenSqliteStore((std::filesystem::path(options.data_dir) / "tianshu.db").string());
  if (!store) return std::unexpected(store.error());
  auto cp = ControlPlane::Open(std::move(*store), options.control, options.now_ms());
  if (!cp) return std::unexpected(cp.error());

  auto s = std::unique_ptr<Server>(new Server());
  s->options_ = std::move(options);
  s->cp_ = std::move(*cp);
  s->http_ = std::make_unique<httplib::Server>();
  const int threads = std::max(4, s->options_.http_threads);
  s->http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  s->http_->set_payload_max_length(kMaxBodyBytes);
  s->http_->set_keep_alive_max_count(1000);
  s->http_->set_tcp_nodelay(true);  // answers go out at once, not after a delayed ACK
  s->http_->set_read_timeout(30, 0);
  s->http_->set_write_timeout(30, 0);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients overflows it and Linux
  // drops connections the clients already think are open (they fail reading the answer).
  // Keep the listening socket and raise its backlog once bound.
  auto listen_fd = std::make_shared<int>(-1);
  s->http_->set_socket_options([listen_fd](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *listen_fd = sock;
  });
  s->Routes();
  const auto& o = s->options_;
  if (o.port == 0) {
    s->port_ = s->http_->bind_to_any_port(o.host);
    if (s->port_ <= 0) return Fail("cannot listen on ", o.host, ": no free port");
  } else {
    if (!s->http_->bind_to_port(o.host, o.port)) {
      return Fail("cannot listen on ", o.host, ":", std::to_string(o.port),
                  " (in use by another process? choose another with --listen)");
    }
    s->port_ = o.port;
  }
  if (*listen_fd >= 0) ::listen(*listen_fd, 4096);
  Server* self = s.get();
  s->listener_ = std::thread([self] { self->http_->listen_after_bind(); });
  // httplib's stop() before its accept loop has started is lost (the loop then never ends):
  // return only once it runs, so that a Stop() right after Start() cannot hang.
  for (int i = 0; i < 5000 && !s->http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s->ticker_ = std::thread([self] {
    while (!self->stopping_) {
      self->cp_->Tick(self->options_.now_ms());
      for (int64_t slept = 0; slept < self->options_.tick_ms && !self->stopping_; slept += 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  });
  if (s->options_.log) {
    s->options_.log("tianshu serve: listening on http://" + o.host + ":" +
                    std::to_string(s->port_) + ", store " + s->cp_->StoreDescription());
  }
  return s;
}

Server::~Server() { Stop(); }

void Server::Stop() {
  if (stopping_.exchange(true)) {
    if (listener_.joinable()) listener_.join();
    if (ticker_.joinable()) ticker_.join();
    return;
  }
  cp_->Shutdown();
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
    if (req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
    std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.empty()) {
      if (req.path == "/v1/jobs" && req.method == "POST") cp_->CountRejected();
      RespondError(res, {401,
                         "missing bearer token: send 'Authorization: Bearer <token>' "
                         "(tianshu: --token-file or TIANSHU_TOKEN)"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!auth.starts_with(prefix) || !SameToken(auth.substr(prefix.size()), options_.token)) {
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

  h.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    bool ok = !cp_->StoreFailed();
    Respond(res, ok ? 200 : 503, {{"status", ok ? "ok" : "store failed"}});
  });
  h.Get("/metrics", [cp](const httplib::Request&, httplib::Response& res) {
    res.set_content(cp->Metrics(), "text/plain; version=0.0.4");
  });

  // ---- jobs ----
  h.Post("/v1/jobs", [cp, now](const httplib::Request& req, httplib::Response& res) {
    auto parsed = ParseSubmitBody(req.get_header_value("Content-Type"), req.body,
                                  req.get_header_value("X-Tianshu-File"));
    if (!parsed) {
      cp->CountRejected();
      return RespondError(res, parsed.error());
    }
    // Like sbatch: ranks of a job whose run section names no workdir start where it was
    // submitted from (the CLI sends its working directory).
    std::string submit_dir = req.get_header_value("X-Tianshu-Workdir");
    if (parsed->run.workdir.empty() && !parsed->run.command.empty() &&
        submit_dir.starts_with("/")) {
      parsed->run.workdir = submit_dir;
    }
    auto job = cp->Submit(std::move(*parsed), now());
    if (!job) return RespondError(res, job.error());
    res.set_header("Location", "/v1/jobs/" + (*job)["id"].get<std::string>());
    Respond(res, 201, *job);
  });
  h.Get("/v1/jobs", [cp](const httplib::Request& req, httplib::Response& res) {
    auto f = ParseJobFilter(Params(req));
    if (!f) return RespondError(res, f.error());
    Respond(res, 200, cp->ListJobs(*f));
  });
  h.Get(R"(/v1/jobs/([^/]+))", [cp](const httplib::Request& req, httplib::Response& res) {
    auto j = cp->GetJob(req.matches[1]);
    if (!j) return RespondError(res, j.error());
    Respond(res, 200, *j);
  });
  auto cancel = [cp, now](const httplib::Request& req, httplib::Response& res) {
    auto j = cp->Cancel(req.matches[1], now());
    if (!j) return RespondError(res, j.error());
    Respond(res, 200, *j);
  };
  // A rank's log, read from the agent of its node (the agent serves it on its address).
  h.Get(R"(/v1/jobs/([^/]+)/logs)", [this, cp](const httplib::Request& req,
                                               httplib::Response& res) {
    int64_t rank = 0, offset = 0;
    if ((req.has_param("rank") && !ParseInt64(req.get_param_value("rank"), &rank)) ||
        (req.has_param("offset") && !ParseInt64(req.get_param_value("offset"), &offset)) ||
        rank < 0 || offset < 0) {
      return RespondError(res, {400, "rank and offset are non-negative integers"});
    }
    auto where = cp->RankAddress(req.matches[1], static_cast<int>(rank));
    if (!where) return RespondError(res, where.error());
    httplib::Client agent("http://" + *where);
    agent.set_connection_timeout(2, 0);
    agent.set_read_timeout(10, 0);
    auto r = agent.Get("/v1/logs/" + std::string(req.matches[1]) + "/" + std::to_string(rank) +
                           "?offset=" + std::to_string(offset),
                       {{"Authorization", "Bearer " + options_.token}});
    if (!r) {
      return RespondError(res, {502, "the agent at " + *where + " did not answer for the log (" +
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
  h.Post(R"(/v1/jobs/([^/]+)/cancel)", cancel);
  h.Delete(R"(/v1/jobs/([^/]+))", cancel);

  // ---- nodes, queues, events ----
  h.Get("/v1/nodes", [cp, now](const httplib::Request&, httplib::Response& res) {
    Respond(res, 200, cp->ListNodes(now()));
  });
  h.Get(R"(/v1/nodes/([^/]+))", [cp, now](const httplib::Request& req, httplib::Response& res) {
    auto n = cp->GetNode(req.matches[1], now());
    if (!n) return RespondError(res, n.error());
    Respond(res, 200, *n);
  });
  h.Get("/v1/queues", [cp](const httplib::Request&, httplib::Response& res) {
    Respond(res, 200, cp->ListQueues());
  });
  h.Get("/v1/events", [this, cp](const httplib::Request& req, httplib::Response& res) {
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

  // ---- agents ----
  h.Post("/v1/agents/register", [cp, now](const httplib::Request& req, httplib::Response& res) {
    auto r = wire::ParseRegisterRequest(req.body);
    if (!r) return RespondError(res, {400, "bad registration: " + r.error().message});
    auto out = cp->Register(*r, now());
    if (!out) return RespondError(res, out.error());
    Respond(res, 200, wire::ToJson(*out));
  });
  h.Post(R"(/v1/agents/([^/]+)/heartbeat)",
         [cp, now](const httplib::Request& req, httplib::Response& res) {
           auto hb = wire::ParseHeartbeat(req.body);
           if (!hb) return RespondError(res, {400, "bad heartbeat: " + hb.error().message});
           auto out = cp->Heartbeat(req.matches[1], *hb, now());
           if (!out) return RespondError(res, out.error());
           Respond(res, 200, wire::ToJson(*out));
         });
  h.Get(R"(/v1/agents/([^/]+)/work)", [cp](const httplib::Request& req, httplib::Response& res) {
    auto params = Params(req);
    if (auto ok = CheckParams(params, {"wait_ms", "agent_id"}); !ok) {
      return RespondError(res, ok.error());
    }
    auto wait = ParseIntParam(params, "wait_ms", 0, 0, 30000);
    if (!wait) return RespondError(res, wait.error());
    auto out = cp->Work(req.matches[1], params["agent_id"], *wait);
    if (!out) return RespondError(res, out.error());
    Respond(res, 200, wire::ToJson(*out));
  });
  h.Post(R"(/v1/agents/([^/]+)/reports)",
         [cp, now](const httplib::Request& req, httplib::Response& res) {
           auto b = wire::ParseReportBatch(req.body);
           if (!b) return RespondError(res, {400, "bad reports: " + b.error().message});
           auto out = cp->Reports(req.matches[1], *b, now());
           if (!out) return RespondError(res, out.error());
           Respond(res, 200, {{"version", wire::kWireVersion}, {"accepted", *out}});
         });
}

}  // namespace tianshu::server
