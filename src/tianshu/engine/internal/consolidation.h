// The consolidation rules of the engine (Slurm's --switches=N@max-time, Tiresias' consolidated
// placement): whether a placement is compact, whether a spread one is predicted too slow to
// take, how long a job may wait for a compact one, and what a running job loses on a spread
// one. Holds only the topology and the options it judges by. Private to engine/.
//   internal::Consolidation c(topology, options);
//   if (c.InCompactWait(job, now_s) && c.TooSlowToStart(job, ranks)) { /* wait */ }
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tianshu/engine/engine.h"

namespace tianshu::engine::internal {

// Whether `ranks` use the fewest nodes and leaf switches a job of `need_milli` GPU thousandths
// could use on nodes like its first one.
bool Compact(const model::Topology& t, const std::vector<placement::RankSlot>& ranks,
             int64_t need_milli);

// Whether a compact placement of whole-GPU `r` could exist in `s` (a quick necessary check, so
// that a job waiting for one costs no placement search while none can exist). The GPUs of
// `held` count as free too: false then means none could exist once they are released either
// (a running job's own GPUs, checked before it is taken off them).
bool CompactMayExist(const model::ClusterState& s, const placement::PlacementRequest& r,
                     std::span<const placement::RankSlot> held = {});

// Progress of a running job at `now_s`: the last known progress plus the run since its start
// at the speed of its placement (as a fraction of its runtime estimate `est` > 0).
double ProgressNow(const JobRecord& r, double est, double now_s);

// A cheap view of the rules; both references must outlive it.
class Consolidation {
 public:
  Consolidation(const model::Topology& topology, const EngineOptions& options)
      : topology_(&topology), options_(&options) {}

  // Whether `ranks` spread `job` so that it should rather wait for a compact placement.
  bool TooSlowToStart(const JobRecord& job, const std::vector<placement::RankSlot>& ranks) const;
  // The predicted slowdown of `ranks` for `job` (1 when compact or without a prediction).
  double RunSlowdown(const JobRecord& job, const std::vector<placement::RankSlot>& ranks) const;
  // Whether the consolidation wait is on at all (compact_wait_ratio or compact_max_wait_s).
  bool WaitsOn() const;
  // Whether `job`, while in its wait, is held without a placement search when no compact
  // placement can exist: it was already found too slow spread, or there is no speed model.
  bool HeldWithoutSearch(const JobRecord& job) const;
  // Whether `job` may still wait for a compact placement at `now_s`.
  bool InCompactWait(const JobRecord& job, double now_s) const;
  // When `job`'s wait for a compact placement ends (nullopt: it never waits), so that a job
  // held for one is placed as soon as it may take what fits, not at the next event.
  std::optional<double> CompactWaitEnd(const JobRecord& job) const;
  // Whether spread running jobs move to compact placements (see EngineOptions).
  bool UpgradesOn() const;

 private:
  const model::Topology* topology_;
  const EngineOptions* options_;
};

}  // namespace tianshu::engine::internal
