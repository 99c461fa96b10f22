// Group commit: callers enqueue state changes in the order they made them and wait until
// theirs is durable; one writer thread writes whatever has queued up as one transaction, so
// concurrent submissions share one fsync while each change stays atomic and ordered.
//
//   Committer c(store.get(), /*max_batch=*/256);
//   uint64_t t = c.Enqueue(std::move(change));   // under the caller's state lock
//   if (auto s = c.Wait(t); !s) return Unavailable(s.error());
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "tianshu/server/store.h"

namespace tianshu::server {

struct CommitStats {
  int64_t commits = 0;        // transactions written
  int64_t changes = 0;        // state changes written
  double commit_seconds = 0;  // time spent in Store::Write
  int64_t bytes = 0;          // keys and documents written (what the store was handed)
};

class Committer {
 public:
  // `store` must outlive the committer. `max_batch` = 1 writes one transaction per change.
  Committer(Store* store, size_t max_batch);
  ~Committer();  // writes what is queued, then stops
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  // Queues a change; returns its ticket (increasing). Thread-safe; callers that need their
  // changes written in their state's order call it under their own lock.
  uint64_t Enqueue(Change change);
  // Blocks until the change with this ticket is durable. Fails (for this and every later
  // ticket) once a write failed: the store's state is then unknown and the server must stop
  // accepting changes.
  [[nodiscard]] Status Wait(uint64_t ticket);
  // Highest ticket known durable (every lower one is durable too).
  uint64_t Durable() const;
  bool Failed() const;
  CommitStats Stats() const;

 private:
  void Run();

  Store* store_;
  size_t max_batch_;
  mutable std::mutex mu_;
  std::condition_variable queued_cv_, done_cv_;
  std::deque<std::pair<uint64_t, Change>> queue_;
  uint64_t next_ticket_ = 1;
  uint64_t durable_ = 0;
  bool stopping_ = false;
  std::optional<Error> failure_;
  CommitStats stats_;
  std::thread thread_;
};

}  // namespace tianshu::server
