// The HTTP server's workers: one thread per connection being served, started on demand up to a
// cap and ended after a while idle. cpp-httplib serves a connection on one worker from its
// first byte to its close, so a fixed pool of N is taken by N slow or idle clients and every
// other request (agents' heartbeats among them) waits. Here a slow client holds one thread of
// many; and when the cap is reached the pool says how long the oldest connection has waited
// for a worker, which the server uses to tell its own starvation from lost nodes.
//
//   WorkerPool pool({.min_threads = 8, .max_threads = 1024});
//   pool.enqueue([] { ... });          // runs now, on an idle or a new thread
//   int64_t late = pool.OldestWaitMs(now_ms);
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace tianshu::server {

struct WorkerPoolOptions {
  size_t min_threads = 8;        // kept when idle
  size_t max_threads = 1024;     // at most this many connections served at once; more wait
  int64_t idle_exit_ms = 30000;  // a thread above min_threads ends after this long idle
};

class WorkerPool : public httplib::TaskQueue {
 public:
  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  // How long the oldest task not yet running has waited, in ms (0 when none waits).
  int64_t OldestWaitMs() const;
  size_t Threads() const;  // alive now
  size_t Busy() const;     // running a task now
  size_t Peak() const;     // most alive at once

 private:
  void Work();
  static int64_t NowMs();

  const WorkerPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_, exited_cv_;
  std::deque<std::pair<int64_t, std::function<void()>>> tasks_;  // enqueue time, task
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread> ended_;  // threads that returned, to join
  size_t idle_ = 0, peak_ = 0;
  bool shutdown_ = false;
};

}  // namespace tianshu::server
