// The plugin points of the scheduling cycle: ordering, admission/backfill, preemption, elastic
// scaling and migration. Each policy is a named plugin built by a factory from the validated
// EngineOptions and found in a registry, like placement strategies; adding one never edits the
// cycle. Names of the policy library (policy/, registered by policy::RegisterBuiltinPolicies)
// are refused, with a message that names the library, by a program that did not load it; never
// silently replaced by another policy.
//   auto order = MakeOrderPolicy("las", options);          // 2D-LAS
//   order.value()->Order(view, &queue);                    // queue sorted, most urgent first
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/engine/engine.h"

namespace tianshu::engine {

// The read-only view a policy gets of one cycle: the snapshot and the job table. Policies are
// functions of it (plus their options) and never mutate it; a policy may keep what it computed
// for a cycle (by CycleView::cycle) to answer later questions of the same cycle.
struct CycleView {
  double now_s = 0;
  // The time of the engine's previous cycle (now_s for its first): what changed since then is
  // new to this one.
  double previous_cycle_s = 0;
  const model::ClusterState* state = nullptr;  // the snapshot
  const JobTable* jobs = nullptr;
  std::span<const JobId> pending;  // in submission order (SubmittedBefore)
  std::span<const JobId> running;
  // The priority class of every running job, where they are all of one.
  std::optional<int> running_priority;
  const EngineOptions* options = nullptr;
  // Every pending job has the same priority (then submission order is priority order).
  bool uniform_priority = true;
  int64_t cycle = 0;  // the engine's count of cycles, this one's

  const JobRecord& Job(JobId id) const { return jobs->at(id); }
};

// Orders the pending queue. Implementations are const and deterministic (ties broken in
// submission order: SubmittedBefore, which puts a batch's fewest GPUs first).
class OrderPolicy {
 public:
  virtual ~OrderPolicy() = default;
  virtual std::string_view Name() const = 0;
  virtual void Order(const CycleView& view, std::vector<JobId>* queue) const = 0;
  // When a running job's standing changes by itself (a 2D-LAS threshold), the next such time
  // after `now_s`; while the job's record is unchanged, the same time for any `now_s` before it
  // (but within the threshold's rounding slack, 1e-6 GPU-seconds of service).
  virtual std::optional<double> NextChange(const JobRecord& running, double now_s) const {
    (void)running;
    (void)now_s;
    return std::nullopt;
  }
};

// No time: a reservation's shadow when the head is not expected to fit.
inline constexpr double kNever = 1e300;

// A job's estimated run time still ahead (its estimate times the work left), -1 without one.
inline double RemainingEstimateS(const JobRecord& j) {
  const double est = j.EstimatedDurationS();
  return est > 0 ? est * std::max(0.0, 1.0 - j.progress) : -1;
}

// When a running job is expected to end (its start plus its run left), kNever without an
// estimate: what backfill's shadow time and the cost model weigh.
inline double ExpectedEndS(const JobRecord& j) {
  const double left = RemainingEstimateS(j);
  return left >= 0 ? j.start_s + left : kNever;
}

// What a backfill policy reserves for the blocked head of the queue.
struct Reservation {
  JobId head = -1;
  double shadow_s = 0;     // earliest time the head is expected to start
  int64_t spare_gpus = 0;  // GPUs free at shadow_s beyond what the head needs
  bool active = false;
};

// Decides what may start once the head of the queue does not fit.
class BackfillPolicy {
 public:
  virtual ~BackfillPolicy() = default;
  virtual std::string_view Name() const = 0;
  // True: nothing behind a blocked head may start (strict FIFO admission).
  virtual bool StopAtBlockedHead() const = 0;
  // The reservation for a blocked head, given what is free in the working state.
  virtual Reservation Reserve(const CycleView& view, const JobRecord& head,
                              const model::ClusterState& working) const = 0;
  // Whether `candidate`, which fits now, may start without delaying the reservation; updates
  // the reservation's spare capacity when it uses it.
  virtual bool MayStart(const CycleView& view, const JobRecord& candidate,
                        Reservation* reservation) const = 0;
};

// Chooses running jobs a pending one may evict. The cycle simulates the eviction (releases the
// victims on a copy of the working state and places the candidate there) before committing, and
// takes whole gangs only.
class PreemptionPolicy {
 public:
  virtual ~PreemptionPolicy() = default;
  virtual std::string_view Name() const = 0;
  // Running jobs `candidate` outranks, most expendable first; empty when none.
  virtual std::vector<JobId> Victims(const CycleView& view, const JobRecord& candidate) const = 0;
  // At least the whole GPUs Victims(view, candidate) would free, less what this cycle evicted
  // (Evicted), and no more for a job behind `candidate` in the order: where it is 0 and nothing
  // is free, no job behind can start (scheduler.preempt_for: every-job stops its walk there).
  // kAnyGpus: not known (the walk goes on).
  static constexpr int64_t kAnyGpus = std::numeric_limits<int64_t>::max();
  virtual int64_t VictimGpusBound(const CycleView& /*view*/, const JobRecord& /*candidate*/) const {
    return kAnyGpus;
  }
  // Told of each victim the cycle evicts (it is no victim again in this cycle).
  virtual void Evicted(const CycleView& /*view*/, const JobRecord& /*victim*/) const {}
};

// Elastic scaling and migration: decisions proposed after admission, on the working state
// (also with nothing pending). The built-in "none" proposes nothing; policy/ has the others.
class ReshapePolicy {
 public:
  virtual ~ReshapePolicy() = default;
  virtual std::string_view Name() const = 0;
  virtual std::vector<Decision> Propose(const CycleView& view,
                                        const model::ClusterState& working) const = 0;
  // Whether giving back capacity (a shrink Propose makes in a cycle that changes nothing else)
  // would let the waiting job `id` start on `working`; the engine then does not preempt whole
  // gangs for it.
  virtual bool AdmitsByShrinking(const CycleView& /*view*/, const model::ClusterState& /*working*/,
                                 JobId /*id*/) const {
    return false;
  }
};

template <typename T>
using PolicyFactory = std::function<Result<std::unique_ptr<T>>(const EngineOptions&)>;

// Registries. Make* fails on an unknown name, listing the registered ones (a program that did
// not load the policy library lists only the engine's own). Register* fails if the name is
// taken; it is how policy/ and tests add plugins.
[[nodiscard]] Result<std::unique_ptr<OrderPolicy>> MakeOrderPolicy(std::string_view name,
                                                                   const EngineOptions& o);
[[nodiscard]] Result<std::unique_ptr<BackfillPolicy>> MakeBackfillPolicy(std::string_view name,
                                                                         const EngineOptions& o);
[[nodiscard]] Result<std::unique_ptr<PreemptionPolicy>> MakePreemptionPolicy(
    std::string_view name, const EngineOptions& o);
[[nodiscard]] Result<std::unique_ptr<ReshapePolicy>> MakeElasticPolicy(std::string_view name,
                                                                       const EngineOptions& o);
[[nodiscard]] Result<std::unique_ptr<ReshapePolicy>> MakeMigrationPolicy(std::string_view name,
                                                                         const EngineOptions& o);
// The names Make* accepts (registered), in name order.
std::vector<std::string> OrderPolicyNames();
std::vector<std::string> BackfillPolicyNames();
std::vector<std::string> PreemptionPolicyNames();
std::vector<std::string> ElasticPolicyNames();
std::vector<std::string> MigrationPolicyNames();
[[nodiscard]] Status RegisterOrderPolicy(const std::string& name, PolicyFactory<OrderPolicy> f);
[[nodiscard]] Status RegisterBackfillPolicy(const std::string& name,
                                            PolicyFactory<BackfillPolicy> f);
[[nodiscard]] Status RegisterPreemptionPolicy(const std::string& name,
                                              PolicyFactory<PreemptionPolicy> f);
[[nodiscard]] Status RegisterElasticPolicy(const std::string& name, PolicyFactory<ReshapePolicy> f);
[[nodiscard]] Status RegisterMigrationPolicy(const std::string& name,
                                             PolicyFactory<ReshapePolicy> f);

// What the configuration's switches select, bound by the library that registers the policy, so
// that the engine spells no other library's plugin names: the preemption policy that goes with
// an ordering policy under `preemption: true` (with none bound, "priority"), and the reshape
// policies `task_scheduler.elastic_scaling` and `scheduler.migration` turn on. A second bind of
// the same key to another name fails; to the same name it is a no-op.
//   BindPreemptionToOrder("srtf", "srtf");  BindElasticScaling("elastic");
[[nodiscard]] Status BindPreemptionToOrder(const std::string& order, const std::string& preemption);
[[nodiscard]] Status BindElasticScaling(const std::string& elastic_policy);
[[nodiscard]] Status BindMigration(const std::string& migration_policy);
std::string BoundPreemption(std::string_view order);
std::optional<std::string> BoundElasticScaling();  // nullopt: nothing bound
std::optional<std::string> BoundMigration();

// scheduler.preemption_cost_model: drops from `victims` (what the preemption policy offers
// `candidate`) the running jobs whose eviction is predicted not to pay, by the runtime
// estimates (a running job is expected to end as backfill expects it: its start plus
// RemainingEstimateS; a job past that is taken to end now):
//  - a job with no more left than the candidate's run plus `restart_s`: the swap lowers the sum
//    of completion times only when the victim has more left (the exchange argument behind SRPT);
//  - while other jobs wait too, the job expected to end last (on a tie, the highest id), if
//    every running job has an estimate and that job is not past its own: the cluster drains
//    when it ends, and evicted it would wait behind the waiting jobs of less service, moving
//    the drain by more than the candidate's run.
// Jobs in `gone` (evicted earlier in the cycle) are not running. Victims of a lower priority
// class stay (a class is a promise, not a trade), and so does every victim when the candidate's
// run time is unknown, and each victim without an estimate or past it: the policy's rule stands.
void KeepVictimsThatPay(const CycleView& view, const JobRecord& candidate, double restart_s,
                        std::span<const JobId> gone, std::vector<JobId>* victims);

// The 2D-LAS queue of an attained service (0 = highest priority).
int LasQueue(double attained_gpu_s, const LasOptions& options);
// Running `r`'s 2D-LAS queue at `now_s`. Its service is charged lazily (Engine::AccrueDue): in
// the last queue, or before the change kept for it, the service charged tells the queue.
inline int LasQueueNow(const JobRecord& r, double now_s, const LasOptions& options) {
  const int q = LasQueue(r.attained_gpu_s, options);
  const bool kept_ahead = r.next_change_s > now_s && std::isfinite(r.next_change_s);
  if (q == static_cast<int>(options.thresholds_gpu_s.size()) || kept_ahead) return q;
  return LasQueue(ServiceAt(r, now_s), options);
}

// The instantiated plugins of one engine.
class Policies {
 public:
  std::unique_ptr<OrderPolicy> order;
  std::unique_ptr<BackfillPolicy> backfill;
  std::unique_ptr<PreemptionPolicy> preemption;
  std::unique_ptr<ReshapePolicy> elastic;
  std::unique_ptr<ReshapePolicy> migration;
  std::unique_ptr<placement::Strategy> placement;
  std::unique_ptr<placement::Strategy> placement_large_queue;  // may be null
  std::unique_ptr<placement::Strategy> placement_small;        // may be null

  [[nodiscard]] static Result<std::unique_ptr<Policies>> Make(const EngineOptions& options);
  // The small-job strategy when there is one and a gang of `ranks` is small enough
  // (small_job_max_gpus) for it, else null: the job's other strategies place it.
  const placement::Strategy* SmallJobStrategy(int ranks, const EngineOptions& options) const {
    return placement_small && ranks <= options.small_job_max_gpus ? placement_small.get() : nullptr;
  }
  // Whether the placement strategies' own rules refuse `request` on every state of the
  // cluster (`idle`): every strategy that may place it says so (the small-job one for a job
  // within small_job_max_gpus, else the main one and the long-queue one). With the reason.
  std::optional<placement::Outcome> NeverPlaced(const model::ClusterState& idle,
                                                const placement::PlacementRequest& request,
                                                const EngineOptions& options) const;
};

}  // namespace tianshu::engine
