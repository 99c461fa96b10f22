#include "tianshu/agent/session.h"

#include <httplib.h>
#include <mutex>
#include <tuple>

#include <algorithm>
#include <atomic>

#include "tianshu/base/strings.h"
#include "tianshu/net/http_client.h"

namespace tianshu::agent {

// ---- HTTP ----

struct HttpControlPlane::Impl {
  std::unique_ptr<net::ServerSet> servers;  // the control plane's replicas
  std::mutex mu;            // guards the three below (SetCredential from another thread)
  httplib::Headers bearer;  // the current bearer
  std::string join_token, credential;
  std::atomic<bool> keep_alive{false}, aborted{false};
  void Bearer(const std::string& t) { bearer = {{"Authorization", "Bearer " + t}}; }
  httplib::Headers Headers() {
    std::lock_guard l(mu);
    return bearer;
  }
};

Result<std::unique_ptr<HttpControlPlane>> HttpControlPlane::Open(const std::string& server,
                                                                 const std::string& join_token,
                                                                 const std::string& ca_file) {
  auto servers = net::ServerSet::Open(server, ca_file);
  if (!servers) return std::unexpected(servers.error());
  auto out = std::unique_ptr<HttpControlPlane>(new HttpControlPlane());
  out->impl_ = std::make_unique<Impl>();
  Impl& i = *out->impl_;
  i.servers = std::move(*servers);
  i.servers->Configure([](httplib::Client& c) {
    // One connection per request: with hundreds of agents a held keep-alive connection would
    // pin one of the server's HTTP worker threads each.
    c.set_keep_alive(false);
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(10, 0);
    c.set_write_timeout(10, 0);
  });
  i.join_token = join_token;
  i.Bearer(join_token);
  return out;
}

HttpControlPlane::HttpControlPlane() = default;

void HttpControlPlane::SetCredential(const std::string& credential) {
  std::lock_guard l(impl_->mu);
  impl_->credential = credential;
  impl_->Bearer(credential.empty() ? impl_->join_token : credential);
}

void HttpControlPlane::KeepAlive() {
  impl_->keep_alive = true;
  impl_->servers->Configure([](httplib::Client& c) { c.set_keep_alive(true); });
}

HttpControlPlane::~HttpControlPlane() = default;

namespace {

template <typename T, typename Parse>
Result<T> Answer(const httplib::Result& res, const std::string& what, Parse parse) {
  if (!res) return Fail(what, ": server unreachable (", httplib::to_string(res.error()), ")");
  if (res->status != 200) {
    std::string msg = res->body;
    if (auto e = wire::ParseErrorBody(res->body)) msg = e->message;
    return Fail(what, ": HTTP ", std::to_string(res->status), ": ", msg);
  }
  return parse(res->body);
}

}  // namespace

Result<wire::RegisterResponse> HttpControlPlane::Register(const wire::RegisterRequest& r) {
  auto res = impl_->servers->Send([&](httplib::Client& c) {
    return c.Post("/v1/agents/register", impl_->Headers(), wire::ToJson(r).dump(),
                  "application/json");
  });
  bool had_credential = false;
  {
    std::lock_guard l(impl_->mu);
    had_credential = !impl_->credential.empty();
  }
  if (res && res->status == 401 && had_credential) {
    SetCredential("");  // a credential the server does not know: join again
    res = impl_->servers->Send([&](httplib::Client& c) {
      return c.Post("/v1/agents/register", impl_->Headers(), wire::ToJson(r).dump(),
                    "application/json");
    });
  }
  return Answer<wire::RegisterResponse>(
      res, "register", [](const std::string& b) { return wire::ParseRegisterResponse(b); });
}

Result<wire::HeartbeatResponse> HttpControlPlane::Heartbeat(const std::string& node,
                                                            const wire::Heartbeat& hb) {
  auto res = impl_->servers->Send([&](httplib::Client& c) {
    return c.Post("/v1/agents/" + node + "/heartbeat", impl_->Headers(), wire::ToJson(hb).dump(),
                  "application/json");
  });
  // 404/409: the server does not know this node or agent; 401: nor its credential.
  if (res && (res->status == 404 || res->status == 409 || res->status == 401)) {
    return wire::HeartbeatResponse{.reregister = true};
  }
  return Answer<wire::HeartbeatResponse>(
      res, "heartbeat", [](const std::string& b) { return wire::ParseHeartbeatResponse(b); });
}

Result<wire::WorkBatch> HttpControlPlane::FetchWork(const std::string& node) {
  auto res = impl_->servers->Send([&](httplib::Client& c) {
    return c.Get("/v1/agents/" + node + "/work?wait_ms=0", impl_->Headers());
  });
  return Answer<wire::WorkBatch>(res, "work",
                                 [](const std::string& b) { return wire::ParseWorkBatch(b); });
}

Result<wire::WorkBatch> HttpControlPlane::WaitWork(const std::string& node,
                                                   const std::string& agent_id,
                                                   const std::string& after, int64_t wait_ms) {
  httplib::Params params{{"wait_ms", std::to_string(wait_ms)}, {"agent_id", agent_id}};
  if (!after.empty()) params.emplace("after", after);
  // The server answers by wait_ms at the latest: wait that long and a little more for it.
  const int64_t read_s = wait_ms / 1000 + 10;
  impl_->servers->Configure(
      [read_s](httplib::Client& c) { c.set_read_timeout(static_cast<time_t>(read_s), 0); });
  auto get = [&] {
    return impl_->servers->Send([&](httplib::Client& c) {
      return c.Get("/v1/agents/" + node + "/work", params, impl_->Headers());
    });
  };
  auto res = get();
  // A kept connection the server closed meanwhile (its idle timeout; over TLS its close
  // message looks like data, so the client reuses the socket) fails the request: once more,
  // on a new connection (the request changes nothing on the server). Never after Abort.
  if (!res && impl_->keep_alive && !impl_->aborted) res = get();
  return Answer<wire::WorkBatch>(res, "work",
                                 [](const std::string& b) { return wire::ParseWorkBatch(b); });
}

void HttpControlPlane::Abort() {
  impl_->aborted = true;  // before the stop: the request it ends is not tried again
  impl_->servers->Stop();
}

Status HttpControlPlane::SendReports(const std::string& node, const wire::ReportBatch& batch) {
  auto res = impl_->servers->Send([&](httplib::Client& c) {
    return c.Post("/v1/agents/" + node + "/reports", impl_->Headers(), wire::ToJson(batch).dump(),
                  "application/json");
  });
  auto r = Answer<bool>(res, "reports", [](const std::string&) -> Result<bool> { return true; });
  if (!r) return std::unexpected(r.error());
  return Ok();
}

// ---- backoff ----

int64_t Backoff::Next() {
  int shift = std::min(failures_, 30);
  ++failures_;
  int64_t ceiling = base_;
  for (int i = 0; i < shift && ceiling < cap_; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap_);
  int64_t floor = std::min(base_ / 2, ceiling);
  std::uniform_int_distribution<int64_t> d(floor, ceiling);
  return d(rng_);
}

// ---- session ----

Session::Session(SessionOptions options, ControlPlane& server, Agent& agent)
    : options_(std::move(options)),
      server_(server),
      agent_(agent),
      backoff_(options_.backoff_base_ns, options_.backoff_cap_ns, options_.seed) {}

void Session::Failed(const std::string& what, int64_t now_ns) {
  last_error_ = what;
  int64_t delay = backoff_.Next();
  // Near the end of the node lease, try more often: one answered heartbeat keeps the ranks.
  if (const int64_t deadline = agent_.LeaseDeadline(); deadline > 0) {
    const int64_t left = deadline - BootTimeNs();
    if (left > 0) delay = std::min(delay, std::max(options_.backoff_base_ns, left / 3));
  }
  next_ns_ = now_ns + delay;
}

bool Session::Flush() {
  while (!agent_.PendingReports().empty()) {
    const auto& pending = agent_.PendingReports();
    size_t n = std::min(pending.size(), options_.max_reports_per_call);
    wire::ReportBatch batch{
        .agent_id = options_.agent_id,
        .reports = {pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n)}};
    if (Status s = server_.SendReports(options_.node, batch); !s) {
      last_error_ = s.error().message;
      ++stats_.report_failures;
      return false;
    }
    ++stats_.report_batches;
    agent_.AckReports(n);
  }
  return true;
}

void Session::Deliver(const std::vector<wire::WorkOrder>& orders, int64_t now_ns) {
  for (const wire::WorkOrder& o : orders) agent_.Apply(o, now_ns);
  if (registered_ && !orders.empty() && !Flush()) Failed(last_error_, now_ns);
}

int64_t Session::Step(int64_t now_ns) {
  if (now_ns < next_ns_) {
    // Not due; still push reports out promptly while connected.
    if (registered_ && !agent_.PendingReports().empty() && !Flush()) Failed(last_error_, now_ns);
    return next_ns_;
  }
  if (!registered_) {
    wire::RegisterRequest req{.node = options_.node,
                              .agent_id = options_.agent_id,
                              .address = options_.address,
                              .credential_sha256 = options_.credential_sha256,
                              .data_address = options_.data_address,
                              .data_interface = options_.data_interface,
                              .hardware = agent_.Hardware(),
                              .running = agent_.Running()};
    for (const auto& [k, v] : options_.labels) req.hardware.labels[k] = v;
    const int64_t register_sent_ns = BootTimeNs();  // the server counts it as a heartbeat
    auto resp = server_.Register(req);
    if (!resp) {
      ++stats_.register_failures;
      Failed(resp.error().message, now_ns);
      return next_ns_;
    }
    registered_ = true;
    ++registrations_;
    if (options_.on_register) options_.on_register(*resp);
    agent_.SetLease(resp->lease_ms * 1'000'000);
    agent_.RenewLease(register_sent_ns);  // orders may come (the watcher) before a heartbeat
    backoff_.Reset();
    heartbeat_ns_ = std::max<int64_t>(resp->heartbeat_interval_ms, 50) * 1'000'000;
  }
  if (!Flush()) {
    Failed(last_error_, now_ns);
    return next_ns_;
  }
  wire::Heartbeat hb{
      .agent_id = options_.agent_id, .health = wire::Health::kOk, .running = agent_.Running()};
  // Node CPU and memory use since the previous heartbeat (/proc/stat, /proc/meminfo).
  std::tie(hb.cpu_utilization, hb.memory_used_bytes) = agent_.HostUsage();
  if (options_.device_usage) hb.devices = options_.device_usage();
  // Link rates since the previous heartbeat, and how far each running job has got.
  hb.network = agent_.NetworkUsage(now_ns);
  hb.progress = agent_.Progress();
  const int64_t sent_boot_ns = BootTimeNs();  // the lease counts from the send, never later
  auto resp = server_.Heartbeat(options_.node, hb);
  if (!resp) {
    ++stats_.heartbeat_failures;
    Failed(resp.error().message, now_ns);
    return next_ns_;
  }
  ++stats_.heartbeats;
  if (resp->reregister) {
    registered_ = false;
    last_error_ = "server asked to register again";
    next_ns_ = now_ns + backoff_.Next() / 4;  // soon, but never a tight loop
    return next_ns_;
  }
  agent_.RenewLease(sent_boot_ns);
  backoff_.Reset();
  const bool pending = resp->pending_orders > 0;
  const bool fetch = pending && (pending_before_ || !options_.watched || !options_.watched());
  pending_before_ = pending;
  if (fetch) {
    auto work = server_.FetchWork(options_.node);
    if (!work) {
      ++stats_.work_failures;
      Failed(work.error().message, now_ns);
      return next_ns_;
    }
    for (const wire::WorkOrder& o : work->orders) agent_.Apply(o, now_ns);
    if (!Flush()) {
      Failed(last_error_, now_ns);
      return next_ns_;
    }
  }
  next_ns_ = now_ns + heartbeat_ns_;
  return next_ns_;
}

}  // namespace tianshu::agent
