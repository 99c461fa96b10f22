#include "tianshu/engine/policy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <ranges>
#include <set>

#include "tianshu/base/strings.h"
#include "tianshu/engine/internal/sort_keys.h"

namespace tianshu::engine {

// A threshold counts as passed within a millionth of a GPU-second: the engine wakes at the
// instant one is passed, and the service accrued up to then may fall short of it by rounding.
constexpr double kLasSlackGpuS = 1e-6;

int LasQueue(double attained_gpu_s, const LasOptions& options) {
  int q = 0;
  for (double t : options.thresholds_gpu_s) {
    if (attained_gpu_s >= t - kLasSlackGpuS) ++q;
  }
  return q;
}

double LasQueueEntry(const JobRecord& r) {
  return r.standing_since_s >= 0 ? std::max(r.submit_s, r.standing_since_s) : r.submit_s;
}

namespace {

LasOptions LasOptionsOf(const EngineOptions& o) {
  const auto& t = o.config.las_thresholds_gpu_s;
  return {.thresholds_gpu_s = {t.begin(), t.end()},
          .demoted_yields = o.config.restart_overhead_s == 0,
          .preempted_first = o.config.las_queue_order == "preempted-first"};
}

class FifoOrder final : public OrderPolicy {
 public:
  std::string_view Name() const override { return "fifo"; }
  void Order(const CycleView& v, std::vector<JobId>* q) const override {
    // The engine keeps the queue in submission order already.
    (void)v;
    (void)q;
  }
};

class PriorityOrder final : public OrderPolicy {
 public:
  std::string_view Name() const override { return "priority"; }
  void Order(const CycleView& v, std::vector<JobId>* q) const override {
    auto less = [&](JobId a, JobId b) { return QueuedBefore(v.Job(a), v.Job(b)); };
    // The queue comes in submission order: with one priority class that is the order.
    if (v.uniform_priority) return;
    if (!std::is_sorted(q->begin(), q->end(), less)) std::stable_sort(q->begin(), q->end(), less);
  }
};

// 2D-LAS: the job's attained GPU-service picks its queue; lower queues first, FIFO inside by
// the time each job entered its queue, so a demoted job goes to the back of its new queue
// (Gu et al., Tiresias, NSDI'19 §3.1 "discretized 2D-LAS", and its simulator). Higher priority
// classes first. With LasOptions::preempted_first (its simulator's list order: the running jobs
// of a queue stay ahead of the waiting ones, and those stopped are moved behind them, so a job
// stopped last is first of the waiting), a job stopped in its queue waits ahead of those that
// have not run there, the most recently stopped first.
class LasOrder final : public OrderPolicy {
 public:
  explicit LasOrder(LasOptions o) : o_(std::move(o)) {}
  std::string_view Name() const override { return "las"; }
  // Sort keys once (class, queue, place in it, id) rather than looking jobs up in every
  // comparison.
  struct Key {
    int neg_priority;
    int queue;
    int waited;    // preempted-first: 0 for a job stopped in its queue (it resumes first), else 1
    double entry;  // when it entered its queue; for a stopped one, minus when it stopped
    double batch_key;  // JobRecord::batch_key: submission order's tie
    JobId id;
    auto operator<=>(const Key&) const =
        default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads it
  };
  void Order(const CycleView& v, std::vector<JobId>* q) const override {
    // The queue comes in submission order (SubmittedBefore). A job that never changed
    // standing entered its 2D-LAS queue when it was submitted: those are in order inside their
    // (class, queue) group already and are only dealt to it. The others (demoted, requeued)
    // are sorted apart and merged in: one sort's order, in linear time plus that of the few.
    std::vector<Key> fresh;
    std::vector<Key> moved;
    fresh.reserve(q->size());
    for (JobId id : *q) {
      const JobRecord& r = v.Job(id);
      // (One priority class: the spec is not read.)
      const int neg_priority = v.uniform_priority ? 0 : -r.spec.priority;
      const double entry = LasQueueEntry(r);
      // (It became pending after it entered its queue: it ran there and was stopped.)
      const bool resumes = o_.preempted_first && r.pending_since_s > entry;
      const Key k{neg_priority,    LasQueue(r.attained_gpu_s, o_),
                  resumes ? 0 : 1, resumes ? -r.pending_since_s : entry,
                  r.batch_key,     r.id};
      (!resumes && k.entry == r.submit_s ? fresh : moved).push_back(k);
    }
    (void)internal::DealByGroup(&fresh, [](const Key& k) {
      return std::pair{k.neg_priority, k.queue};
    });
    if (!std::is_sorted(fresh.begin(), fresh.end())) std::sort(fresh.begin(), fresh.end());
    // The demoted and the stopped keep their keys while they wait: mostly last cycle's order.
    moved_order_.Sort(&moved);
    std::vector<Key> all(q->size());
    std::merge(fresh.begin(), fresh.end(), moved.begin(), moved.end(), all.begin());
    for (size_t i = 0; i < all.size(); ++i) (*q)[i] = all[i].id;
  }
  std::optional<double> NextChange(const JobRecord& r, double now_s) const override {
    const double rate = r.HeldGpus();
    if (rate <= 0) return std::nullopt;
    const double attained = ServiceAt(r, now_s);  // (asked of running jobs only)
    // Dated from the last accrual, not from `now_s`: the same time whenever it is asked until
    // the service is accrued again (Engine::NextWakeup keeps it that long).
    const double base = std::min(now_s, r.accrued_to_s);
    for (double t : o_.thresholds_gpu_s) {
      if (attained < t - kLasSlackGpuS) return base + (t - r.attained_gpu_s) / rate;
    }
    return std::nullopt;
  }

 private:
  LasOptions o_;
  // The keys sorted apart, as the last cycle left them (one engine calls it; not thread-safe).
  mutable internal::SortedAcrossCalls<Key> moved_order_;
};

class NoBackfill final : public BackfillPolicy {
 public:
  std::string_view Name() const override { return "none"; }
  bool StopAtBlockedHead() const override { return true; }
  Reservation Reserve(const CycleView&, const JobRecord&,
                      const model::ClusterState&) const override {
    return {};
  }
  bool MayStart(const CycleView&, const JobRecord&, Reservation*) const override { return false; }
};

// Anything that fits may start, in queue order (no reservation for the head).
class GreedyBackfill final : public BackfillPolicy {
 public:
  std::string_view Name() const override { return "greedy"; }
  bool StopAtBlockedHead() const override { return false; }
  Reservation Reserve(const CycleView&, const JobRecord&,
                      const model::ClusterState&) const override {
    return {};
  }
  bool MayStart(const CycleView&, const JobRecord&, Reservation*) const override { return true; }
};

// EASY backfill (Lifka 1995; Slurm's sched/backfill): the head gets a reservation at the
// earliest time enough GPUs are expected free (running jobs end at start + their estimate of
// remaining time); a later job may start now if it is expected to end before that time, or if
// it only uses GPUs the head will not need then. Jobs without an estimate can use the spare
// GPUs only.
class TimeBackfill final : public BackfillPolicy {
 public:
  std::string_view Name() const override { return "time"; }
  bool StopAtBlockedHead() const override { return false; }
  Reservation Reserve(const CycleView& v, const JobRecord& head,
                      const model::ClusterState& working) const override {
    Reservation r;
    r.head = head.id;
    r.active = true;
    // Running jobs end earliest first (on a tie, the smaller first), freeing their GPUs until
    // the head's need is free. The walk usually stops after a few ends of hundreds (3.3 of 895
    // on Philly at load 0.9): the first 16 are kept in one pass, and all of them are sorted
    // only where those do not reach the need.
    using End = std::pair<double, int64_t>;  // expected end, GPUs
    auto end_of = [&](JobId id) {
      const JobRecord& j = v.Job(id);
      return End{ExpectedEndS(j), j.Gpus()};
    };
    int64_t free = 0;
    auto walk = [&](std::span<const End> ends) {
      free = working.SwitchFreeWholeGpus(working.topology().Root());
      r.shadow_s = kNever;
      for (const End& e : ends) {
        if (free >= head.Gpus()) break;
        free += e.second;
        r.shadow_s = e.first;
      }
    };
    internal::SmallestK<End, 16> first;
    for (JobId id : v.running) first.Offer(end_of(id));
    walk(first.Values());
    if (free < head.Gpus() && !first.HoldsAll()) {
      std::vector<End> ends;
      ends.reserve(v.running.size());
      for (JobId id : v.running) ends.push_back(end_of(id));
      std::sort(ends.begin(), ends.end());
      walk(ends);
    }
    if (free >= head.Gpus()) {
      if (v.running.empty() || r.shadow_s == kNever) r.shadow_s = std::min(r.shadow_s, v.now_s);
      r.spare_gpus = free - head.Gpus();
    } else {
      r.spare_gpus = 0;
    }
    return r;
  }
  bool MayStart(const CycleView& v, const JobRecord& c, Reservation* r) const override {
    if (!r->active) return true;
    const double left = RemainingEstimateS(c);
    if (left >= 0 && v.now_s + left <= r->shadow_s) return true;
    if (c.Gpus() <= r->spare_gpus) {
      r->spare_gpus -= c.Gpus();
      return true;
    }
    return false;
  }
};

}  // namespace

void KeepVictimsThatPay(const CycleView& v, const JobRecord& c, double restart_s,
                        std::span<const JobId> gone, std::vector<JobId>* victims) {
  const double run_s = RemainingEstimateS(c);
  if (run_s < 0) return;
  const double restart = std::max(0.0, restart_s);
  // A job past its expected end is taken to end now.
  auto end_of = [&](const JobRecord& j) { return std::max(ExpectedEndS(j), v.now_s); };
  // While other jobs wait too, the job expected to end last is spared: the cluster drains when
  // it ends, and evicted it would wait behind them all, moving the drain by more than the
  // candidate's run. None while some running job has no estimate (the drain is unknown then).
  std::pair<double, JobId> last{-1, -1};
  for (JobId id : v.pending.size() > 1 ? v.running : std::span<const JobId>{}) {
    if (std::find(gone.begin(), gone.end(), id) != gone.end()) continue;
    last = std::max(last, std::pair{end_of(v.Job(id)), id});
  }
  // Nor when the last is past its estimate (taken to end now): nothing tells the drain then.
  if (last.first >= kNever || last.first <= v.now_s) last.second = -1;
  std::erase_if(*victims, [&](JobId id) {
    const JobRecord& r = v.Job(id);
    if (r.spec.priority < c.spec.priority) return false;
    if (id == last.second) return true;
    // A job past its estimate has nothing the model can weigh: the policy's rule.
    const double end = end_of(r);
    return end < kNever && end > v.now_s && end - v.now_s <= run_s + restart;
  });
}

namespace {

class NoPreemption final : public PreemptionPolicy {
 public:
  std::string_view Name() const override { return "none"; }
  std::vector<JobId> Victims(const CycleView&, const JobRecord&) const override { return {}; }
};

// Strictly lower priority classes, lowest first, then the most recently started (least work
// lost since its last checkpoint).
class PriorityPreemption final : public PreemptionPolicy {
 public:
  std::string_view Name() const override { return "priority"; }
  std::vector<JobId> Victims(const CycleView& v, const JobRecord& c) const override {
    std::vector<JobId> out;
    for (JobId id : v.running) {
      if (v.Job(id).spec.priority < c.spec.priority) out.push_back(id);
    }
    std::sort(out.begin(), out.end(), [&](JobId a, JobId b) {
      const JobRecord& x = v.Job(a);
      const JobRecord& y = v.Job(b);
      if (x.spec.priority != y.spec.priority) return x.spec.priority < y.spec.priority;
      if (x.start_s != y.start_s) return x.start_s > y.start_s;
      return x.id > y.id;
    });
    return out;
  }
};

// Tiresias: a job of a lower 2D-LAS queue evicts running jobs of higher queues, the highest
// queue (most service received) first, and inside a queue the most recently started (the least
// work lost since it started; with LasOptions::preempted_first, the one that joined the queue's
// running jobs last, by its start or its demotion, as Tiresias' simulator walks them). Where
// restarts are free (LasOptions::demoted_yields), a job demoted since the previous cycle has gone
// to the back of its new queue: the jobs waiting there that entered it earlier may take its GPUs
// now, as Tiresias' simulator lets them (once it runs on in its new queue, only lower queues evict
// it). Priority classes come first: jobs of a lower class are victims before any other, jobs of a
// higher class never. A victim always ranks strictly below its evictor, so eviction cannot cycle.
class LasPreemption final : public PreemptionPolicy {
 public:
  static constexpr int kLowerClass = 1 << 20;  // sorts before every 2D-LAS queue
  explicit LasPreemption(LasOptions o) : o_(std::move(o)) {}
  std::string_view Name() const override { return "las"; }
  std::vector<JobId> Victims(const CycleView& v, const JobRecord& c) const override {
    int qc = LasQueue(c.attained_gpu_s, o_);
    // Sorted on keys taken once (not looked up in every comparison): the latest queue first,
    // then the most recently started (preempted-first: joined the queue's running jobs), then the
    // highest id.
    struct Cand {
      int queue;
      double joined_s;
      JobId id;
      auto operator<=>(const Cand&) const = default;
    };
    std::vector<Cand> cand;
    // Where every running job is of the candidate's class, no running job's spec is read.
    const bool one_class = v.running_priority == c.spec.priority;
    // Latest started first: the running jobs come in start order, so the walk goes backwards
    // and each queue's candidates are nearly sorted already.
    for (JobId id : std::views::reverse(v.running)) {
      const JobRecord& r = v.Job(id);
      const int priority = one_class ? c.spec.priority : r.spec.priority;
      if (priority > c.spec.priority) continue;
      // A lower priority class is always a victim; inside the class, a later 2D-LAS queue, or
      // the same queue entered this instant after the candidate.
      int q = priority < c.spec.priority ? kLowerClass : LasQueueNow(r, v.now_s, o_);
      // Demoted since the previous cycle (the simulator's cycle is at the instant; the
      // server's a tick later).
      const bool demoted_now = DemotedNow(v, r) && LasQueueEntry(r) > LasQueueEntry(c);
      // preempted-first: when it joined its queue's running jobs (started, or was demoted).
      const double joined = o_.preempted_first ? std::max(r.start_s, LasQueueEntry(r)) : r.start_s;
      if (q > qc || (q == qc && demoted_now)) cand.push_back({q, joined, id});
    }
    const std::vector<size_t> at =
        internal::DealByGroup(&cand, [](const Cand& k) { return -k.queue; });
    for (size_t b = 0; b + 1 < at.size(); ++b) {
      internal::SortMostlySorted(cand, at[b], at[b + 1], std::greater<>());
    }
    std::vector<JobId> out;
    out.reserve(cand.size());
    for (const Cand& k : cand) out.push_back(k.id);
    return out;
  }
  // The GPUs (ranks: an upper bound) held in each queue and by the jobs demoted into it this
  // instant, summed once a cycle less what the cycle evicts. Not kept where the running jobs
  // are of several classes, or of another than the candidate's.
  int64_t VictimGpusBound(const CycleView& v, const JobRecord& c) const override {
    if (v.running.empty()) return 0;
    if (v.running_priority != c.spec.priority) return kAnyGpus;
    Sum(v);
    const auto qc = static_cast<size_t>(LasQueue(c.attained_gpu_s, o_));
    int64_t below = demoted_[qc];
    for (size_t q = qc + 1; q < held_.size(); ++q) below += held_[q];
    return below;
  }
  void Evicted(const CycleView& v, const JobRecord& r) const override {
    Sum(v);
    const auto q = static_cast<size_t>(LasQueueNow(r, v.now_s, o_));
    const auto ranks = static_cast<int64_t>(r.placement.size());
    held_[q] -= ranks;
    if (DemotedNow(v, r)) demoted_[q] -= ranks;
  }

 private:
  bool DemotedNow(const CycleView& v, const JobRecord& r) const {
    return o_.demoted_yields && r.standing_since_s > v.previous_cycle_s;
  }
  void Sum(const CycleView& v) const {
    if (bound_cycle_ == v.cycle) return;
    bound_cycle_ = v.cycle;
    held_.assign(o_.thresholds_gpu_s.size() + 1, 0);
    demoted_.assign(o_.thresholds_gpu_s.size() + 1, 0);
    for (JobId id : v.running) {
      const JobRecord& r = v.Job(id);
      const auto q = static_cast<size_t>(LasQueueNow(r, v.now_s, o_));
      const auto ranks = static_cast<int64_t>(r.placement.size());  // (its request's, not read)
      held_[q] += ranks;
      if (DemotedNow(v, r)) demoted_[q] += ranks;
    }
  }
  LasOptions o_;
  // VictimGpusBound's sums, per queue, for cycle bound_cycle_ (one engine calls it).
  mutable int64_t bound_cycle_ = -1;
  mutable std::vector<int64_t> held_, demoted_;
};

class NoReshape final : public ReshapePolicy {
 public:
  std::string_view Name() const override { return "none"; }
  std::vector<Decision> Propose(const CycleView&, const model::ClusterState&) const override {
    return {};
  }
};

template <typename T>
struct Registry {
  std::mutex mu;
  std::map<std::string, PolicyFactory<T>> factories;
};

template <typename T>
Result<std::unique_ptr<T>> MakeFrom(Registry<T>& reg, std::string_view kind, std::string_view name,
                                    const EngineOptions& o) {
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.factories.find(std::string(name));
  if (it != reg.factories.end()) return it->second(o);
  std::vector<std::string> names;
  for (const auto& [n, f] : reg.factories) names.push_back(n);
  return Fail("unknown ", std::string(kind), " policy '", std::string(name),
              "'; known: ", Join(names, ", "));
}

template <typename T>
Status RegisterIn(Registry<T>& reg, std::string_view kind, const std::string& name,
                  PolicyFactory<T> f) {
  std::lock_guard<std::mutex> lock(reg.mu);
  if (reg.factories.count(name)) {
    return Fail(std::string(kind), " policy '", name, "' is already registered");
  }
  reg.factories[name] = std::move(f);
  return Ok();
}

template <typename T, typename Impl>
PolicyFactory<T> Simple() {
  return [](const EngineOptions&) -> Result<std::unique_ptr<T>> {
    return std::unique_ptr<T>(new Impl());
  };
}

Registry<OrderPolicy>& Orders() {
  static Registry<OrderPolicy>* r = [] {
    auto* reg = new Registry<OrderPolicy>;
    reg->factories["fifo"] = Simple<OrderPolicy, FifoOrder>();
    reg->factories["priority"] = Simple<OrderPolicy, PriorityOrder>();
    reg->factories["las"] = [](const EngineOptions& o) -> Result<std::unique_ptr<OrderPolicy>> {
      return std::unique_ptr<OrderPolicy>(new LasOrder(LasOptionsOf(o)));
    };
    return reg;
  }();
  return *r;
}

Registry<BackfillPolicy>& Backfills() {
  static Registry<BackfillPolicy>* r = [] {
    auto* reg = new Registry<BackfillPolicy>;
    reg->factories["none"] = Simple<BackfillPolicy, NoBackfill>();
    reg->factories["greedy"] = Simple<BackfillPolicy, GreedyBackfill>();
    reg->factories["time"] = Simple<BackfillPolicy, TimeBackfill>();
    return reg;
  }();
  return *r;
}

Registry<PreemptionPolicy>& Preemptions() {
  static Registry<PreemptionPolicy>* r = [] {
    auto* reg = new Registry<PreemptionPolicy>;
    reg->factories["none"] = Simple<PreemptionPolicy, NoPreemption>();
    reg->factories["priority"] = Simple<PreemptionPolicy, PriorityPreemption>();
    reg->factories["las"] =
        [](const EngineOptions& o) -> Result<std::unique_ptr<PreemptionPolicy>> {
      return std::unique_ptr<PreemptionPolicy>(new LasPreemption(LasOptionsOf(o)));
    };
    return reg;
  }();
  return *r;
}

Registry<ReshapePolicy>& Elastics() {
  static Registry<ReshapePolicy>* r = [] {
    auto* reg = new Registry<ReshapePolicy>;
    reg->factories["none"] = Simple<ReshapePolicy, NoReshape>();
    return reg;
  }();
  return *r;
}

Registry<ReshapePolicy>& Migrations() {
  static Registry<ReshapePolicy>* r = [] {
    auto* reg = new Registry<ReshapePolicy>;
    reg->factories["none"] = Simple<ReshapePolicy, NoReshape>();
    return reg;
  }();
  return *r;
}

}  // namespace

template <typename T>
std::vector<std::string> NamesIn(Registry<T>& reg) {
  std::lock_guard<std::mutex> lock(reg.mu);
  std::set<std::string> names;
  for (const auto& [n, f] : reg.factories) names.insert(n);
  return {names.begin(), names.end()};
}

std::vector<std::string> OrderPolicyNames() { return NamesIn(Orders()); }
std::vector<std::string> BackfillPolicyNames() { return NamesIn(Backfills()); }
std::vector<std::string> PreemptionPolicyNames() { return NamesIn(Preemptions()); }
std::vector<std::string> ElasticPolicyNames() { return NamesIn(Elastics()); }
std::vector<std::string> MigrationPolicyNames() { return NamesIn(Migrations()); }

Result<std::unique_ptr<OrderPolicy>> MakeOrderPolicy(std::string_view name,
                                                     const EngineOptions& o) {
  return MakeFrom(Orders(), "ordering", name, o);
}
Result<std::unique_ptr<BackfillPolicy>> MakeBackfillPolicy(std::string_view name,
                                                           const EngineOptions& o) {
  return MakeFrom(Backfills(), "backfill", name, o);
}
Result<std::unique_ptr<PreemptionPolicy>> MakePreemptionPolicy(std::string_view name,
                                                               const EngineOptions& o) {
  return MakeFrom(Preemptions(), "preemption", name, o);
}
Result<std::unique_ptr<ReshapePolicy>> MakeElasticPolicy(std::string_view name,
                                                         const EngineOptions& o) {
  return MakeFrom(Elastics(), "elastic", name, o);
}
Result<std::unique_ptr<ReshapePolicy>> MakeMigrationPolicy(std::string_view name,
                                                           const EngineOptions& o) {
  return MakeFrom(Migrations(), "migration", name, o);
}
Status RegisterOrderPolicy(const std::string& name, PolicyFactory<OrderPolicy> f) {
  return RegisterIn(Orders(), "ordering", name, std::move(f));
}
Status RegisterBackfillPolicy(const std::string& name, PolicyFactory<BackfillPolicy> f) {
  return RegisterIn(Backfills(), "backfill", name, std::move(f));
}
Status RegisterPreemptionPolicy(const std::string& name, PolicyFactory<PreemptionPolicy> f) {
  return RegisterIn(Preemptions(), "preemption", name, std::move(f));
}
Status RegisterElasticPolicy(const std::string& name, PolicyFactory<ReshapePolicy> f) {
  return RegisterIn(Elastics(), "elastic", name, std::move(f));
}
Status RegisterMigrationPolicy(const std::string& name, PolicyFactory<ReshapePolicy> f) {
  return RegisterIn(Migrations(), "migration", name, std::move(f));
}

std::optional<placement::Outcome> Policies::NeverPlaced(const model::ClusterState& idle,
                                                        const placement::PlacementRequest& r,
                                                        const EngineOptions& o) const {
  std::vector<const placement::Strategy*> could;
  if (const placement::Strategy* small = SmallJobStrategy(r.ranks, o)) {
    could = {small};
  } else {
    could = {placement.get()};
    if (placement_large_queue) could.push_back(placement_large_queue.get());
  }
  std::optional<placement::Outcome> never;
  for (const placement::Strategy* s : could) {
    auto n = s->NeverPlaces(idle, r);
    if (!n) return std::nullopt;
    if (!never) never = std::move(n);
  }
  return never;
}

Result<std::unique_ptr<Policies>> Policies::Make(const EngineOptions& o) {
  auto p = std::make_unique<Policies>();
  auto order = MakeOrderPolicy(o.policies.order, o);
  if (!order) return std::unexpected(order.error());
  p->order = std::move(*order);
  auto bf = MakeBackfillPolicy(o.policies.backfill, o);
  if (!bf) return std::unexpected(bf.error());
  p->backfill = std::move(*bf);
  auto pr = MakePreemptionPolicy(o.policies.preemption, o);
  if (!pr) return std::unexpected(pr.error());
  p->preemption = std::move(*pr);
  auto el = MakeElasticPolicy(o.policies.elastic, o);
  if (!el) return std::unexpected(el.error());
  p->elastic = std::move(*el);
  auto mg = MakeMigrationPolicy(o.policies.migration, o);
  if (!mg) return std::unexpected(mg.error());
  p->migration = std::move(*mg);
  placement::StrategyOptions so = o.strategy;
  so.seed = o.seed;
  auto st = placement::MakeStrategy(o.placement, so);
  if (!st) return std::unexpected(st.error());
  p->placement = std::move(*st);
  if (!o.placement_large_queue.empty() && o.placement_large_queue != o.placement) {
    auto big = placement::MakeStrategy(o.placement_large_queue, so);
    if (!big) return std::unexpected(big.error());
    p->placement_large_queue = std::move(*big);
  }
  if (!o.placement_small.empty() && o.placement_small != o.placement) {
    auto small = placement::MakeStrategy(o.placement_small, so);
    if (!small) return std::unexpected(small.error());
    p->placement_small = std::move(*small);
  }
  return p;
}

}  // namespace tianshu::engine
