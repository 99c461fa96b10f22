// The simulator's future: timed events (completions, resumes after a restart, node failures
// and repairs, wakeups the engine asked for) in the order they happen, ties broken by kind
// (completions first: capacity freed at an instant is visible to that instant's cycle), then
// by the order they were pushed, so a run is reproducible. Private to sim/.
//   EventQueue q;  q.Push(/*t=*/30, EvKind::kCompletion, /*job=*/4, /*version=*/2);
//   while (!q.Empty() && q.Top().t <= now) { Ev ev = q.Pop(); /* handle it */ }
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace tianshu::sim::internal {

enum class EvKind : int {
  kCompletion = 0,  // first: capacity freed at an instant is visible to that instant's cycle
  kResume = 1,
  kNodeFail = 2,
  kNodeRepair = 3,
  kWakeup = 4,
};

struct Ev {
  double t;
  EvKind kind;
  int64_t seq;
  int job;  // or node
  int64_t version;
  bool operator>(const Ev& o) const {
    if (t != o.t) return t > o.t;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

class EventQueue {
 public:
  // `version`: the job's run version it was computed for (a stale one is ignored by the caller).
  void Push(double t, EvKind k, int job, int64_t version = 0) {
    heap_.push(Ev{t, k, seq_++, job, version});
  }
  bool Empty() const { return heap_.empty(); }
  const Ev& Top() const { return heap_.top(); }  // not Empty()
  Ev Pop() {                                     // not Empty()
    Ev ev = heap_.top();
    heap_.pop();
    return ev;
  }

 private:
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> heap_;
  int64_t seq_ = 0;
};

}  // namespace tianshu::sim::internal
