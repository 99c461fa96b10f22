// The agent's conversation with `tianshu serve`: register (with the hardware found and the
// ranks still running), heartbeat at the server's interval, fetch work when the server says
// some is pending, send reports; back off exponentially with jitter while the server is
// unreachable, and register again when the server no longer knows the node (it restarted or
// declared the node lost). Time and randomness are passed in; the transport is an interface
// (HTTP for real, a fake in tests).
//   HttpControlPlane http("127.0.0.1:7070", token);
//   Session s({.node = "node-0", .agent_id = id, .address = "127.0.0.1"}, http, agent);
//   int64_t next = s.Step(now);   // sleep until `next`, then Step again
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "tianshu/agent/agent.h"
#include "tianshu/base/status.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

// Transport errors are Results; a server that answers "unknown node" (404) to a heartbeat gives
// HeartbeatResponse{.reregister = true}. Not thread-safe.
class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  [[nodiscard]] virtual Result<wire::RegisterResponse> Register(const wire::RegisterRequest& r) = 0;
  [[nodiscard]] virtual Result<wire::HeartbeatResponse> Heartbeat(const std::string& node,
                                                                  const wire::Heartbeat& hb) = 0;
  [[nodiscard]] virtual Result<wire::WorkBatch> FetchWork(const std::string& node) = 0;
  // Holds a request open up to wait_ms until the node has an order newer than `after` (a
  // batch's cursor; "" for any outstanding one). For a WorkWatcher's own transport.
  [[nodiscard]] virtual Result<wire::WorkBatch> WaitWork(const std::string& node,
                                                         const std::string& agent_id,
                                                         const std::string& after,
                                                         int64_t wait_ms) = 0;
  // Ends a request in flight on another thread (a WorkWatcher stopping); may do nothing.
  virtual void Abort() {}
  // What became of a report batch the server answered.
  struct ReportsSent {
    // The server does not know this node or agent (404, 409; 401: nor its credential): it took
    // nothing, and the agent registers again before it sends them again.
    bool refused = false;
    // Its answer to the batch's heartbeat; absent when the batch had none, or the heartbeat was
    // not taken (then the transport sent the reports alone).
    std::optional<wire::HeartbeatResponse> heartbeat;
    // The server does not know heartbeats in report batches (it is older than them): the
    // session sends its heartbeats alone until it registers again.
    bool heartbeat_unknown = false;
  };
  [[nodiscard]] virtual Result<ReportsSent> SendReports(const std::string& node,
                                                        const wire::ReportBatch& batch) = 0;
};

// HTTP/1.1 to "host:port". SetCredential may be called from another thread than the requests
// (one WorkWatcher's transport); requests themselves are one at a time. The bearer is the node's
// credential once it has one, else the join token; a registration whose credential the server no
// longer knows (401: the node was forgotten, or the server's store is new) is tried once more with
// the join token.
class HttpControlPlane final : public ControlPlane {
 public:
  // `server` is host:port (plain HTTP), http:// or https:// (TLS, the certificate verified
  // against `ca_file`, else the system's CAs).
  [[nodiscard]] static Result<std::unique_ptr<HttpControlPlane>> Open(const std::string& server,
                                                                      const std::string& join_token,
                                                                      const std::string& ca_file);
  void SetCredential(const std::string& credential);
  // Keeps the connection open between requests (HTTP keep-alive), where the default is one
  // connection per request. For the work watcher: its requests follow each other, and the
  // server's worker is held by its open request nearly all the time (between two requests, or
  // while the watcher backs off, a kept connection holds it until the server's 5 s keep-alive
  // timeout), so it saves a connection (a TLS handshake over https) per batch of orders. A
  // WaitWork that fails on a kept connection is tried once more on a new one.
  void KeepAlive();
  ~HttpControlPlane() override;
  Result<wire::RegisterResponse> Register(const wire::RegisterRequest& r) override;
  Result<wire::HeartbeatResponse> Heartbeat(const std::string& node,
                                            const wire::Heartbeat& hb) override;
  Result<wire::WorkBatch> FetchWork(const std::string& node) override;
  Result<wire::WorkBatch> WaitWork(const std::string& node, const std::string& agent_id,
                                   const std::string& after, int64_t wait_ms) override;
  void Abort() override;
  // A batch's heartbeat goes with it while the server takes it; a server that refuses the field
  // (one older than it) gets the reports alone, at once and from then on until the next
  // registration (it may have been upgraded meanwhile).
  Result<ReportsSent> SendReports(const std::string& node, const wire::ReportBatch& batch) override;

 private:
  HttpControlPlane();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Exponential backoff with full jitter (AWS architecture blog, "Exponential Backoff And
// Jitter", 2015): delay = uniform(base/2, min(cap, base * 2^failures)).
class Backoff {
 public:
  Backoff(int64_t base_ns, int64_t cap_ns, uint64_t seed)
      : base_(base_ns), cap_(cap_ns), rng_(seed) {}
  int64_t Next();  // after a failure
  void Reset() { failures_ = 0; }
  int failures() const { return failures_; }

 private:
  int64_t base_, cap_;
  int failures_ = 0;
  std::mt19937_64 rng_;
};

struct SessionOptions {
  std::string node;
  std::string agent_id;
  std::string address;
  // A separate data network (RegisterRequest's): the host other ranks reach this node on, and
  // the interface the ranks' traffic leaves by; "" when it is the address's network.
  std::string data_address;
  std::string data_interface;
  std::map<std::string, std::string> labels;
  // Called with every successful registration's answer (a newly minted credential to keep,
  // the log key); may be empty.
  std::function<void(const wire::RegisterResponse&)> on_register;
  std::string credential_sha256;  // of the credential the agent made and keeps
  // The devices' usage for each heartbeat (measured ones only: NVML); may be empty.
  std::function<std::vector<wire::DeviceUsage>()> device_usage;
  // Whether a WorkWatcher brings this agent its orders (a held-open request; may be empty:
  // none). While it does, a heartbeat that says orders are pending fetches them only when
  // some were pending at the previous heartbeat too: the watcher has just brought them, and
  // the agent's `accepted` is on its way (fetching them again cost a second answer of every
  // launch order that met a heartbeat). A watcher that stopped delivering costs one period.
  std::function<bool()> watched;
  uint64_t seed = 1;
  int64_t backoff_base_ns = 500'000'000;
  int64_t backoff_cap_ns = 30'000'000'000;
  // Pending reports whose send failed (the server unreachable, or refusing them) are tried
  // again after a backoff of their own, not at every turn of the agent's loop; the first
  // batch taken resets it. Orders a WorkWatcher delivers try at once (the server answered).
  int64_t report_backoff_base_ns = 100'000'000;
  int64_t report_backoff_cap_ns = 5'000'000'000;
  size_t max_reports_per_call = 512;
};

// What a session did since it started (for the agent's /metrics): calls answered and failed.
struct SessionStats {
  int64_t register_failures = 0;
  int64_t heartbeats = 0;  // answered
  int64_t heartbeat_failures = 0;
  int64_t report_batches = 0;           // acknowledged by the server
  int64_t heartbeats_with_reports = 0;  // of `heartbeats`: answered with a report batch
  int64_t report_failures = 0;
  int64_t work_failures = 0;  // fetching outstanding orders
};

class Session {
 public:
  Session(SessionOptions options, ControlPlane& server, Agent& agent);
  // Does what is due at `now_ns` (register, heartbeat, fetch and apply work, send reports) and
  // returns the time it next has something to do.
  int64_t Step(int64_t now_ns);
  // Applies orders a WorkWatcher brought (at once, not on the next heartbeat) and sends the
  // agent's answers.
  void Deliver(const std::vector<wire::WorkOrder>& orders, int64_t now_ns);
  bool registered() const { return registered_; }
  int registrations() const { return registrations_; }
  const std::string& last_error() const { return last_error_; }
  int64_t heartbeat_interval_ns() const { return heartbeat_ns_; }
  const SessionStats& stats() const { return stats_; }
  // Pending reports are not sent before this time (a failed send's backoff; 0: none).
  int64_t reports_retry_ns() const { return reports_retry_ns_; }

 private:
  // Sends the pending reports; with `beat`, a heartbeat goes with the first batch (and its
  // answer is handled) when the server takes it. False when a call failed (last_error_ says
  // why) or the server asked to register again.
  bool Flush(int64_t now_ns, bool beat = false);
  // A heartbeat is nearly due: reports sent now take it with them.
  bool BeatSoon(int64_t now_ns) const { return now_ns >= next_ns_ - heartbeat_ns_ / 2; }
  wire::Heartbeat MakeHeartbeat(int64_t now_ns);
  // Sends a heartbeat alone; false when it failed or the server asked to register again.
  bool Beat(int64_t now_ns);
  // The server's answer to a heartbeat sent at `sent_boot_ns`: the lease renewed, orders fetched
  // when pending; false when it asked to register again.
  bool Answered(const wire::HeartbeatResponse& resp, int64_t sent_boot_ns, int64_t now_ns);
  void Failed(const std::string& what, int64_t now_ns);
  void Reregister(int64_t now_ns);

  SessionOptions options_;
  ControlPlane& server_;
  Agent& agent_;
  Backoff backoff_;
  Backoff report_backoff_;
  int64_t reports_retry_ns_ = 0;
  bool registered_ = false;
  int registrations_ = 0;
  int64_t next_ns_ = 0;
  int64_t heartbeat_ns_ = 1'000'000'000;
  bool pending_before_ = false;    // the previous answered heartbeat said orders were pending
  bool heartbeats_alone_ = false;  // the server took no heartbeat with reports: none is sent so
  bool beat_answered_ = false;     // next_ns_ is a period after an answered heartbeat
  int64_t last_reports_ns_ = -1'000'000'000'000;  // the last report batch the server took
  int64_t lost_after_ns_ = 10'000'000'000;        // the server's, from the registration
  std::string last_error_;
  SessionStats stats_;
};

}  // namespace tianshu::agent
