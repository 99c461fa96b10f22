// The simulator's future: timed events (completions, resumes after a restart, node failures
// and repairs, wakeups the engine asked for) in the order they happen, ties broken by kind
// (completions first: capacity freed at an instant is visible to that instant's cycle), then
// by the order they were pushed, so a run is reproducible. Private to sim/.
//   EventQueue q;  q.Push(/*t=*/30, EvKind::kCompletion, /*job=*/4, /*version=*/2);
//   while (!q.Empty() && q.NextTime() <= now) {
//     if (q.PopSupersededUpTo(now)) continue;  // an instant only
//     Ev ev = q.Pop();  /* handle it */
//   }
// A job's completion is pushed again each time its speed changes, so most events in a long run
// are superseded ones (a million of 1.2 million on Philly): still instants of the run (the loop
// stops at each), but nothing to handle. Compact() moves those it is told are superseded to a
// heap of bare times, so that the heap of live events stays small.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
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
  // `first_compaction`: the live heap's size at which Compact first looks (then at twice the
  // size it left).
  explicit EventQueue(size_t first_compaction = 4096)
      : first_compaction_(first_compaction), compact_at_(first_compaction) {}
  // `version`: the job's run version it was computed for (a stale one is ignored by the caller).
  void Push(double t, EvKind k, int job, int64_t version = 0) {
    heap_.push_back(Ev{t, k, seq_++, job, version});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  bool Empty() const { return heap_.empty() && superseded_.empty(); }
  // The time of the earliest event, superseded ones included (not Empty()).
  double NextTime() const {
    const double live = heap_.empty() ? kNone : heap_.front().t;
    return superseded_.empty() ? live : std::min(live, superseded_.front());
  }
  // Whether the earliest event is a node failure, a repair or a wakeup (superseded events are
  // completions and resumes: at a tie, they come first).
  bool NextIsFailureOrLater() const {
    if (heap_.empty() || (!superseded_.empty() && superseded_.front() <= heap_.front().t)) {
      return false;
    }
    return heap_.front().kind >= EvKind::kNodeFail;
  }
  // Takes one superseded event at or before `t`, if any: the caller counts it, nothing more.
  bool PopSupersededUpTo(double t) {
    if (superseded_.empty() || superseded_.front() > t) return false;
    std::pop_heap(superseded_.begin(), superseded_.end(), std::greater<>());
    superseded_.pop_back();
    return true;
  }
  // The earliest live event (there is one).
  Ev Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    Ev ev = heap_.back();
    heap_.pop_back();
    return ev;
  }
  // Moves the events `superseded(ev)` names (it must stay true for them: a job's run version
  // only grows) to the heap of bare times, once the live heap has doubled since last time.
  template <typename Pred>
  void Compact(Pred superseded) {
    if (heap_.size() < compact_at_) return;
    auto keep =
        std::partition(heap_.begin(), heap_.end(), [&](const Ev& e) { return !superseded(e); });
    for (auto it = keep; it != heap_.end(); ++it) {
      superseded_.push_back(it->t);
      std::push_heap(superseded_.begin(), superseded_.end(), std::greater<>());
    }
    heap_.erase(keep, heap_.end());
    // The live events pop in the same order from any heap of them: (t, kind, seq) is unique.
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
    compact_at_ = std::max(first_compaction_, 2 * heap_.size());
  }

 private:
  static constexpr double kNone = 1e300;
  std::vector<Ev> heap_;            // min-heap by (t, kind, seq)
  std::vector<double> superseded_;  // min-heap of the times of superseded events
  size_t first_compaction_;
  size_t compact_at_;
  int64_t seq_ = 0;
};

}  // namespace tianshu::sim::internal
