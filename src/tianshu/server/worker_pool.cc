#include "tianshu/server/worker_pool.h"

#include <algorithm>
#include <system_error>

namespace tianshu::server {

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(options) {
  std::lock_guard l(mu_);
  for (size_t i = 0; i < std::max<size_t>(1, options_.min_threads); ++i) {
    std::thread t([this] { Work(); });
    threads_.emplace(t.get_id(), std::move(t));
  }
  peak_ = threads_.size();
}

WorkerPool::~WorkerPool() { shutdown(); }

int64_t WorkerPool::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void WorkerPool::enqueue(std::function<void()> fn) {
  std::vector<std::thread> ended;
  {
    std::lock_guard l(mu_);
    tasks_.emplace_back(NowMs(), std::move(fn));
    if (idle_ < tasks_.size() && threads_.size() < options_.max_threads && !shutdown_) {
      try {
        std::thread t([this] { Work(); });
        threads_.emplace(t.get_id(), std::move(t));
        peak_ = std::max(peak_, threads_.size());
      } catch (const std::system_error&) {
        // No thread to be had (a process limit): the task waits for a running one.
      }
    }
    ended.swap(ended_);
  }
  cv_.notify_one();
  for (auto& t : ended) t.join();
}

void WorkerPool::Work() {
  std::unique_lock l(mu_);
  for (;;) {
    ++idle_;
    const bool woke = cv_.wait_for(l, std::chrono::milliseconds(options_.idle_exit_ms),
                                   [this] { return !tasks_.empty() || shutdown_; });
    --idle_;
    if (tasks_.empty()) {
      if (shutdown_ || (!woke && threads_.size() > options_.min_threads)) break;
      continue;
    }
    auto fn = std::move(tasks_.front().second);
    tasks_.pop_front();
    l.unlock();
    fn();
    l.lock();
  }
  auto self = threads_.find(std::this_thread::get_id());
  ended_.push_back(std::move(self->second));
  threads_.erase(self);
  exited_cv_.notify_all();
}

void WorkerPool::shutdown() {
  std::vector<std::thread> ended;
  {
    std::unique_lock l(mu_);
    shutdown_ = true;
    cv_.notify_all();
    // Tasks already queued still run (httplib closes their sockets in them).
    exited_cv_.wait(l, [this] { return threads_.empty(); });
    ended.swap(ended_);
  }
  for (auto& t : ended) t.join();
}

int64_t WorkerPool::OldestWaitMs() const {
  std::lock_guard l(mu_);
  return tasks_.empty() ? 0 : NowMs() - tasks_.front().first;
}

size_t WorkerPool::Threads() const {
  std::lock_guard l(mu_);
  return threads_.size();
}

size_t WorkerPool::Busy() const {
  std::lock_guard l(mu_);
  return threads_.size() - idle_;
}

size_t WorkerPool::Peak() const {
  std::lock_guard l(mu_);
  return peak_;
}

}  // namespace tianshu::server
