#include "tianshu/engine/pending_queue.h"

#include <algorithm>

namespace tianshu::engine {

void PendingQueue::Add(JobId id, double submit_s, double batch_key, int priority, bool whole_gpus) {
  auto before = [&](size_t i) {
    const Entry& other = entries_[i];
    if (other.submit_s != submit_s) return other.submit_s < submit_s;
    if (other.batch_key != batch_key) return other.batch_key < batch_key;
    return ids_[i] < id;
  };
  size_t at = ids_.size();
  if (!ids_.empty() && !before(ids_.size() - 1)) {
    // The first position whose job is not before this one (the queue is partitioned so).
    size_t lo = 0, hi = ids_.size();
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (before(mid)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    at = lo;
  }
  ids_.insert(ids_.begin() + static_cast<std::ptrdiff_t>(at), id);
  entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(at),
                  Entry{.submit_s = submit_s,
                        .batch_key = batch_key,
                        .priority = priority,
                        .whole_gpus = whole_gpus});
  ++priorities_[priority];
  if (!whole_gpus) ++not_whole_;
}

void PendingQueue::Remove(JobId id) {
  auto it = std::find(ids_.begin(), ids_.end(), id);
  if (it == ids_.end()) return;
  const auto i = it - ids_.begin();
  const int priority = entries_[static_cast<size_t>(i)].priority;
  if (!entries_[static_cast<size_t>(i)].whole_gpus) --not_whole_;
  ids_.erase(it);
  entries_.erase(entries_.begin() + i);
  auto p = priorities_.find(priority);
  if (p != priorities_.end() && --p->second == 0) priorities_.erase(p);
}

}  // namespace tianshu::engine
