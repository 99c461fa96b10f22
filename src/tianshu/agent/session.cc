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
  // The server refused a heartbeat in a report batch (one older than the field): until the next
  // registration, reports go alone.
  std::atomic<bool> heartbeats_alone{false};
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
  impl_->heartbeats_alone = false;  // the server may have been upgraded
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

Result<ControlPlane::ReportsSent> HttpControlPlane::SendReports(const std::string& node,
                                                                const wire::ReportBatch& batch) {
  auto post = [&](const wire::ReportBatch& b) {
    return impl_->servers->Send([&](httplib::Client& c) {
      return c.Post("/v1/agents/" + node + "/reports", impl_->Headers(), wire::ToJson(b).dump(),
                    "application/json");
    });
  };
  auto alone = [&] {
    return wire::ReportBatch{.agent_id = batch.agent_id, .reports = batch.reports};
  };
  bool with_beat = batch.heartbeat && !impl_->heartbeats_alone;
  auto res = batch.heartbeat && !with_beat ? post(alone()) : post(batch);
  // A batch refused (400) with a heartbeat in it took nothing: the reports go again alone, never
  // held back by the heartbeat. A server older than heartbeats in report batches refuses the
  // field itself: to it, reports go alone until the next registration.
  if (with_beat && res && res->status == 400) {
    if (res->body.find("heartbeat: unknown field") != std::string::npos) {
      impl_->heartbeats_alone = true;
    }
    with_beat = false;
    res = post(alone());
  }
  // 404/409: the server does not know this node or agent; 401: nor its credential.
  if (res && (res->status == 404 || res->status == 409 || res->status == 401)) {
    return ReportsSent{.refused = true};
  }
  if (!res || res->status != 200) {  // an error, with the server's message
    return std::unexpected(Answer<bool>(res, "reports", [](const std::string&) -> Result<bool> {
                             return true;
                           }).error());
  }
  // 200: the reports were taken, whatever else the answer says; a heartbeat answer that is
  // missing or unreadable counts as a heartbeat not taken (the session sends one alone).
  ReportsSent sent{.heartbeat_unknown = batch.heartbeat && impl_->heartbeats_alone};
  if (with_beat) {
    if (auto a = wire::ParseReportsAnswer(res->body); a && a->heartbeat)
      sent.heartbeat = a->heartbeat;
  }
  return sent;
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
      backoff_(options_.backoff_base_ns, options_.backoff_cap_ns, options_.seed),
      report_backoff_(options_.report_backoff_base_ns, options_.report_backoff_cap_ns,
                      options_.seed + 1) {}

void Session::Failed(const std::string& what, int64_t now_ns) {
  last_error_ = what;
  beat_answered_ = false;  // next_ns_ is a retry time: never put off
  int64_t delay = backoff_.Next();
  // Near the end of the node lease, try more often: one answered heartbeat keeps the ranks.
  if (const int64_t deadline = agent_.LeaseDeadline(); deadline > 0) {
    const int64_t left = deadline - BootTimeNs();
    if (left > 0) delay = std::min(delay, std::max(options_.backoff_base_ns, left / 3));
  }
  next_ns_ = now_ns + delay;
}

void Session::Reregister(int64_t now_ns) {
  registered_ = false;
  beat_answered_ = false;
  last_error_ = "server asked to register again";
  next_ns_ = now_ns + backoff_.Next() / 4;  // soon, but never a tight loop
}

bool Session::Flush(int64_t now_ns, bool beat) {
  while (!agent_.PendingReports().empty()) {
    const auto& pending = agent_.PendingReports();
    size_t n = std::min(pending.size(), options_.max_reports_per_call);
    wire::ReportBatch batch{
        .agent_id = options_.agent_id,
        .reports = {pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n)}};
    // Not on a retry after a failure: each heartbeat made samples the counters' windows.
    if (beat && !heartbeats_alone_ && backoff_.failures() == 0) {
      batch.heartbeat = MakeHeartbeat(now_ns);
    }
    const int64_t sent_boot_ns = BootTimeNs();  // the lease counts from the send, never later
    auto sent = server_.SendReports(options_.node, batch);
    if (!sent) {
      last_error_ = sent.error().message;
      ++stats_.report_failures;
      reports_retry_ns_ = now_ns + report_backoff_.Next();
      return false;
    }
    if (sent->refused) {  // nothing taken: they go again after the registration
      Reregister(now_ns);
      return false;
    }
    ++stats_.report_batches;
    report_backoff_.Reset();
    reports_retry_ns_ = 0;
    agent_.AckReports(n);
    last_reports_ns_ = now_ns;
    if (sent->heartbeat) {
      ++stats_.heartbeats_with_reports;
      beat = false;
      if (!Answered(*sent->heartbeat, sent_boot_ns, now_ns)) return false;
    } else if (sent->heartbeat_unknown) {
      heartbeats_alone_ = true;  // this server takes none: until the next registration
    }
  }
  return true;
}

void Session::Deliver(const std::vector<wire::WorkOrder>& orders, int64_t now_ns) {
  for (const wire::WorkOrder& o : orders) agent_.Apply(o, now_ns);
  // As in Step: a failure leaves the heartbeat's time as it is.
  if (registered_ && !orders.empty() && !Flush(now_ns, BeatSoon(now_ns))) beat_answered_ = false;
}

wire::Heartbeat Session::MakeHeartbeat(int64_t now_ns) {
  wire::Heartbeat hb{
      .agent_id = options_.agent_id, .health = wire::Health::kOk, .running = agent_.Running()};
  // Node CPU and memory use since the previous heartbeat (/proc/stat, /proc/meminfo).
  std::tie(hb.cpu_utilization, hb.memory_used_bytes) = agent_.HostUsage();
  if (options_.device_usage) hb.devices = options_.device_usage();
  // Link rates since the previous heartbeat, and how far each running job has got.
  hb.network = agent_.NetworkUsage(now_ns);
  hb.progress = agent_.Progress();
  return hb;
}

bool Session::Beat(int64_t now_ns) {
  const wire::Heartbeat hb = MakeHeartbeat(now_ns);
  const int64_t sent_boot_ns = BootTimeNs();  // the lease counts from the send, never later
  auto resp = server_.Heartbeat(options_.node, hb);
  if (!resp) {
    ++stats_.heartbeat_failures;
    last_error_ = resp.error().message;
    return false;
  }
  return Answered(*resp, sent_boot_ns, now_ns);
}

bool Session::Answered(const wire::HeartbeatResponse& resp, int64_t sent_boot_ns, int64_t now_ns) {
  ++stats_.heartbeats;
  if (resp.reregister) {
    Reregister(now_ns);
    return false;
  }
  agent_.RenewLease(sent_boot_ns);
  backoff_.Reset();
  next_ns_ = now_ns + heartbeat_ns_;
  beat_answered_ = true;  // next_ns_ is a period after an answered heartbeat
  const bool pending = resp.pending_orders > 0;
  const bool fetch = pending && (pending_before_ || !options_.watched || !options_.watched());
  pending_before_ = pending;
  if (!fetch) return true;
  auto work = server_.FetchWork(options_.node);
  if (!work) {
    ++stats_.work_failures;
    last_error_ = work.error().message;
    return false;
  }
  for (const wire::WorkOrder& o : work->orders) agent_.Apply(o, now_ns);
  return Flush(now_ns);
}

int64_t Session::Step(int64_t now_ns) {
  if (now_ns < next_ns_) {
    // Not due; still push reports out promptly while connected (with the heartbeat when it is
    // nearly due: one request instead of two).
    // A failure here leaves the heartbeat's time as it is: reports the server will not take
    // never keep the heartbeat (and so the lease) from it.
    if (registered_ && !agent_.PendingReports().empty() && now_ns >= reports_retry_ns_ &&
        !Flush(now_ns, BeatSoon(now_ns))) {
      beat_answered_ = false;
    }
    return next_ns_;
  }
  const bool registering = !registered_;
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
    heartbeats_alone_ = false;
    if (options_.on_register) options_.on_register(*resp);
    agent_.SetLease(resp->lease_ms * 1'000'000);
    agent_.RenewLease(register_sent_ns);  // orders may come (the watcher) before a heartbeat
    backoff_.Reset();
    report_backoff_.Reset();  // a server that answered: what is pending goes at once
    reports_retry_ns_ = 0;
    heartbeat_ns_ = std::max<int64_t>(resp->heartbeat_interval_ms, 50) * 1'000'000;
    lost_after_ns_ = std::max<int64_t>(resp->lost_after_ms, 0) * 1'000'000;
  }
  // While ranks run and reports flow (some were sent within the last period: short jobs
  // starting and ending), another report is likely soon: a heartbeat that came due after an
  // answered one waits up to half a period for one to ride with, never so long that the gap
  // between heartbeats passes a quarter of lost_after (the server counts a node silent for half
  // of it as quiet).
  const int64_t grace = std::min(heartbeat_ns_ / 2, lost_after_ns_ / 4 - heartbeat_ns_);
  const int64_t latest = next_ns_ + grace;
  if (!registering && beat_answered_ && !heartbeats_alone_ && grace > 0 && now_ns < latest &&
      now_ns - last_reports_ns_ < heartbeat_ns_ && agent_.PendingReports().empty() &&
      !agent_.Running().empty()) {
    return latest;
  }
  // Due: the heartbeat goes with the pending reports, else alone: when none are pending, when
  // the server did not take it with them, and when they failed (the server may refuse them and
  // take the heartbeat). One that rode with them moved next_ns_ on.
  bool ok = agent_.PendingReports().empty() || now_ns < reports_retry_ns_ || Flush(now_ns, true);
  if (registered_ && now_ns >= next_ns_) ok = Beat(now_ns);
  if (!ok && registered_) Failed(last_error_, now_ns);
  return next_ns_;
}

}  // namespace tianshu::agent
