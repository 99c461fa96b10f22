#include "tianshu/agent/work_watcher.h"

#include <algorithm>
#include <chrono>

namespace tianshu::agent {

WorkWatcher::WorkWatcher(WorkWatcherOptions options, ControlPlane& transport,
                         std::function<void()> wake)
    : options_(std::move(options)), transport_(transport), wake_(std::move(wake)) {
  thread_ = std::thread([this] { Run(); });
}

WorkWatcher::~WorkWatcher() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  transport_.Abort();  // an open request would otherwise hold the join for up to wait_ms
  thread_.join();
}

void WorkWatcher::SetActive(bool active) {
  {
    std::lock_guard l(mu_);
    if (active_ == active) return;
    active_ = active;
  }
  cv_.notify_all();
}

std::vector<wire::WorkOrder> WorkWatcher::Take() {
  std::lock_guard l(mu_);
  return std::exchange(ready_, {});
}

bool WorkWatcher::disabled() const {
  std::lock_guard l(mu_);
  return disabled_;
}

bool WorkWatcher::serving() const {
  std::lock_guard l(mu_);
  return active_ && !disabled_;
}

void WorkWatcher::Run() {
  int64_t retry_ms = options_.retry_ms;
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || active_; });
    if (stop_) return;
    const std::string after = cursor_;
    lock.unlock();
    auto batch = transport_.WaitWork(options_.node, options_.agent_id, after, options_.wait_ms);
    lock.lock();
    if (stop_) return;
    if (!batch) {
      // 400: a server that does not know `after`; the heartbeat path serves alone.
      if (batch.error().message.find("HTTP 400") != std::string::npos) {
        disabled_ = true;
        return;
      }
      // Unreachable, or the node is not (yet) registered: the session deals with that; try
      // again after a pause that grows while the failures last.
      cv_.wait_for(lock, std::chrono::milliseconds(retry_ms), [&] { return stop_; });
      retry_ms = std::min(retry_ms * 2, options_.retry_cap_ms);
      continue;
    }
    retry_ms = options_.retry_ms;
    if (batch->cursor.empty()) {  // an older server that ignored the cursor
      disabled_ = true;
      return;
    }
    cursor_ = batch->cursor;
    if (batch->orders.empty()) continue;
    for (auto& o : batch->orders) {
      const bool queued = std::any_of(ready_.begin(), ready_.end(),
                                      [&](const wire::WorkOrder& r) { return r.id == o.id; });
      if (!queued) ready_.push_back(std::move(o));
    }
    lock.unlock();
    wake_();
    lock.lock();
  }
}

}  // namespace tianshu::agent
