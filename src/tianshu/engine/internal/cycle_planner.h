// The working state of one scheduling cycle and the steps that fill its decisions: admission
// of the ordered queue (never-fits rejections, co-located overlays, backfill behind a blocked
// head, the consolidation wait, preemption), topology upgrades of spread running jobs, and the
// elastic and migration proposals. It plans on a copy of the engine's snapshot and applies
// nothing to the engine; the Engine commits what Finish returns. Private to engine/.
//   internal::CyclePlanner p(inputs, queue.size());
//   p.Admit(queue);  p.UpgradeSpreadJobs();  p.AddReshapes();  CycleResult r = p.Finish();
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tianshu/engine/engine.h"
#include "tianshu/engine/internal/consolidation.h"
#include "tianshu/engine/policy.h"

namespace tianshu::engine::internal {

// What a cycle plans from; everything must outlive the planner.
struct CycleInputs {
  const CycleView* view = nullptr;  // the snapshot, the job table, the options, the time
  const Policies* policies = nullptr;
  const model::Topology* topology = nullptr;
  JobTable* jobs = nullptr;                   // spread_too_slow is noted on them
  std::vector<JobId>* held_spread = nullptr;  // and each job newly noted so is added here
  // Jobs judged never to fit at submission: rejected (and taken out) when the queue reaches them.
  std::unordered_map<JobId, std::string>* never_fits = nullptr;
  const std::vector<int>* overlay = nullptr;  // per GPU: milli of co-located inference
  bool elastic_on = false;                    // an elastic policy other than "none"
  bool all_whole_gpus = false;                // every pending job asks for whole GPUs
};

class CyclePlanner {
 public:
  // `queue_size`: the ordered queue's length (a long queue takes the cheaper strategy).
  CyclePlanner(const CycleInputs& in, size_t queue_size);

  // Walks the ordered queue: starts what fits (or may backfill), preempts for what outranks,
  // blocks at the first job that cannot start.
  void Admit(std::span<const JobId> queue);
  // Moves running jobs on placements predicted too slow to compact ones of the free capacity
  // when the time saved outweighs the restart (never while the head is blocked).
  void UpgradeSpreadJobs();
  // Adds the elastic and migration policies' proposals for jobs nothing else decided.
  void AddReshapes();
  // The decisions, in the order they were made, and the cycle's counts.
  CycleResult Finish() && { return std::move(result_); }

 private:
  enum class Next { kContinue, kStop };  // whether the queue walk goes on

  // Whether the per-cycle start limit or the scan limit behind a blocked head ends the walk.
  bool ScanLimitReached();
  // Binding by pods: whether no job left in the queue can bind or be rejected this cycle.
  bool NothingMoreCanBind() const;
  // Rejects `job` if it was judged never to fit; true when it did.
  bool RejectIfNeverFits(JobId id);
  // An inference service first tries to overlay training's GPUs (no free share needed).
  bool StartOverlaid(JobRecord& job);
  // Everything after the early outs for one job: place, hold, start, preempt or block.
  Next AdmitOne(JobRecord& job);
  // Binding by pods: places the pods of `job` one at a time; starts it when its last pod is
  // placed, else binds those placed (kPodEach) or gives them back (kPodGang). The walk always
  // goes on.
  Next AdmitPods(JobRecord& job);
  // Whether a job waiting for a compact placement skips the search (none can exist now).
  bool HoldForCompact(const JobRecord& job, bool compact_wait) const;
  // Evicts victims the preemption policy offers until `job` places; true when it started.
  bool PreemptFor(JobRecord& job, const placement::Strategy* use, bool compact_wait);
  // The queue is blocked at `job`: reserve for it, or end the walk.
  Next Block(const JobRecord& job);
  // Plans the blocked head on the nodes expected free at the reservation's shadow time and
  // hides them from jobs that would still run then (as Slurm's backfill plans the head on
  // nodes, not on a count), so that the head finds them whole.
  void ReserveNodes(const JobRecord& head);
  // The head placed on `then` as running jobs of `later` (ends after the shadow time) end, the
  // earliest that places it; moves the reservation's shadow time there. Not placed: none does.
  placement::Outcome PlaceAtLaterEnd(const JobRecord& head, const placement::Strategy* use,
                                     model::ClusterState then,
                                     std::vector<std::pair<double, JobId>> later);
  // The state `job` is placed on: the working state, or, behind a head holding nodes, the
  // working state without them unless `job` is expected to end before the head starts.
  const model::ClusterState& StateFor(const JobRecord& job) const;
  // Takes `o` in the working state and records the start.
  bool Start(JobRecord& job, placement::Outcome& o, bool backfilled);
  // GPUs held whole by a training job can carry overlaid services.
  void MarkTrained(const JobRecord& r, const std::vector<placement::RankSlot>& ranks);
  // Jobs that fit on one node take the small-job strategy, the others `otherwise`.
  const placement::Strategy* StrategyFor(const JobRecord& j,
                                         const placement::Strategy* otherwise) const;
  // A compact placement for running `r` (its GPUs released in the working state) that saves
  // more of its `remaining` run than the move's `cost`, counting each search in `tries`;
  // unplaced if none.
  placement::Outcome TryCompact(const JobRecord& r, double remaining, double cost, int* tries,
                                double* saved);
  // What moving running `r` costs it: the checkpoint it writes before it stops
  // (EngineOptions::checkpoint_write_s) and the restart pause (scheduler.restart_overhead)
  // before it makes progress again; a move pays when the run time it saves is longer.
  double MoveCostS(const JobRecord& r) const;
  // Whether this cycle already decided something for `id`.
  bool Decided(JobId id) const;
  void RefreshFree();

  const CycleView& view_;
  const Policies& policies_;
  const EngineOptions& options_;
  const model::Topology& topology_;
  JobTable& jobs_;
  std::vector<JobId>* held_spread_;  // may be null
  std::unordered_map<JobId, std::string>& never_fits_;
  const Consolidation consolidation_;
  const bool elastic_on_;
  const bool can_preempt_;
  const bool preempt_behind_;     // scheduler.preempt_for: every-job
  bool awaiting_shrink_ = false;  // a job waits for an elastic shrink: no preemption behind it
  const bool colocate_;
  const bool all_whole_gpus_;

  CycleResult result_;
  const placement::Strategy* strategy_;  // for the queue's jobs (by the queue's length)
  model::ClusterState work_;             // the cycle's working copy; the view's is the snapshot
  std::vector<JobId> evicted_;           // victims of this cycle (not restarted in it)
  Reservation reservation_;
  // work_ with the nodes planned for the blocked head marked unusable (when nodes_reserved_).
  model::ClusterState reserved_work_;
  bool nodes_reserved_ = false;
  bool blocked_ = false;
  // Binding by pods: pods that found no node this cycle. Capacity only shrinks during a cycle
  // (a gang given back restores it exactly), so a pod asking at least as much of each resource
  // with the same filters finds none either and costs no search.
  std::vector<placement::PlacementRequest> failed_pods_;
  int biggest_node_gpus_ = 1;  // for PodRanks
  // Whole-GPU pods of `pod_ranks` the free capacity could hold, one node at a time (an upper
  // bound: filters and CPU only lower it), cached until the working state changes.
  int PodsThatFit(int pod_ranks);
  int64_t free_version_ = 0;  // bumped by RefreshFree
  int64_t pod_fit_version_ = -1;
  std::unordered_map<int, int> pod_fit_;
  // Whether a pod of `pod_ranks` ranks of `job` is known to fit nowhere this cycle.
  bool PodCannotFit(const placement::PlacementRequest& job, int pod_ranks) const;
  int scanned_behind_ = 0;
  int64_t free_whole_ = 0;
  int64_t free_milli_ = 0;
  // Co-location: GPUs held whole by training (running or started in this cycle), and the
  // overlay budget as this cycle changes it; built when the first service is tried
  // (PrepareOverlay), most cycles try none. Until then starts are listed by their decision.
  void PrepareOverlay();
  const std::vector<int>* overlay_in_ = nullptr;
  bool overlay_ready_ = false;
  std::vector<size_t> unmarked_starts_;
  std::vector<char> trained_;
  std::vector<int> overlay_work_;
};

}  // namespace tianshu::engine::internal
