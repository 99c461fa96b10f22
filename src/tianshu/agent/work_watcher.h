// Brings work orders to the agent as soon as the server has made them durable: one thread
// holds a request open at GET /v1/agents/{node}/work (with the cursor of the last batch) and
// hands what comes back to the agent's main loop, which it wakes. The heartbeat's
// `pending_orders` stays the fallback: with a server that does not know cursors (400), or
// while this one cannot reach it, orders still arrive on the next heartbeat.
//   WorkWatcher w(transport, node, agent_id, [main] { pthread_kill(main, SIGUSR1); });
//   w.SetActive(session.registered());           // from the main loop
//   session.Deliver(w.Take(), now);               // after each wake-up
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tianshu/agent/session.h"

namespace tianshu::agent {

struct WorkWatcherOptions {
  std::string node, agent_id;
  int64_t wait_ms = 20000;  // how long one request is held open
  int64_t retry_ms = 1000;  // after a failed request, doubling up to retry_cap_ms
  int64_t retry_cap_ms = 10000;
};

class WorkWatcher {
 public:
  // `transport` is the watcher's own (requests are one at a time per transport); `wake` is
  // called from the watcher's thread when Take has something.
  WorkWatcher(WorkWatcherOptions options, ControlPlane& transport, std::function<void()> wake);
  ~WorkWatcher();  // aborts the open request and joins
  WorkWatcher(const WorkWatcher&) = delete;
  WorkWatcher& operator=(const WorkWatcher&) = delete;

  // Requests are held open only while the session is registered (the server knows the agent).
  void SetActive(bool active);
  // The orders that came since the last Take, oldest first (an order may come again: the
  // server resends until the agent accepts it, and Agent::Apply answers a repeat only).
  std::vector<wire::WorkOrder> Take();
  // True once the server refused the cursor (an older server): heartbeats fetch work alone.
  bool disabled() const;
  // Whether it serves the node's orders: active (SetActive) and not disabled (it may be
  // waiting to try again after a failed request).
  bool serving() const;

 private:
  void Run();

  WorkWatcherOptions options_;
  ControlPlane& transport_;
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool active_ = false, stop_ = false, disabled_ = false;
  std::vector<wire::WorkOrder> ready_;
  std::string cursor_;
  std::thread thread_;
};

}  // namespace tianshu::agent
