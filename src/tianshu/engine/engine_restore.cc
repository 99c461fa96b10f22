// What a caller that keeps its own records across engines (the server's ledger) hands back to
// a new one: a job running where the records say, since when it waits, the service it had and
// when its standing last changed.
#include <cmath>

#include "tianshu/engine/engine.h"

namespace tianshu::engine {

Status Engine::Restore(JobId id, const std::vector<placement::RankSlot>& ranks, double start_s,
                       bool colocated) {
  wake_.valid = false;  // a record may change
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail("restore: no job ", std::to_string(id));
  JobRecord& r = it->second;
  if (r.state != JobState::kPending)
    return Fail("restore: job ", std::to_string(id), " is not pending");
  Unbind(r);  // what it holds now is `ranks`
  // An elastic job may hold another number of ranks than it asked for.
  placement::PlacementRequest held = r.request;
  held.ranks = static_cast<int>(ranks.size());
  if (colocated) {
    for (const auto& s : ranks) {
      if (s.gpu < 0 || s.gpu >= static_cast<int>(overlay_.size()) ||
          overlay_[s.gpu] + held.gpu_milli > model::kMilliPerGpu) {
        return Fail("restore: job ", std::to_string(id), ": no overlay room on GPU ",
                    std::to_string(s.gpu));
      }
    }
  } else if (auto st = placement::Apply(&state_, held, placement::PlacedOutcome(ranks)); !st) {
    return Fail("restore: job ", std::to_string(id), ": ", st.error().message);
  }
  r.request = held;
  MarkEstimateStale(r);
  r.colocated = false;
  if (colocated) Occupy(r, ranks, /*colocated=*/true);  // the share was taken just above
  MarkRunning(r, ranks, start_s);
  return Ok();
}

Status Engine::SetPendingSince(JobId id, double since_s) {
  wake_.valid = false;  // a record may change
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.state != JobState::kPending) {
    return Fail("pending since: job ", std::to_string(id), " is not pending");
  }
  it->second.pending_since_s = since_s;
  return Ok();
}

Status Engine::SetSchedulable(int node, bool schedulable) {
  wake_.valid = false;  // what may start changed
  if (node < 0 || node >= topology_->NumNodes()) {
    return Fail("schedulable: unknown node ", std::to_string(node));
  }
  state_.SetHealthy(node, schedulable);
  return Ok();
}

Status Engine::SetAttainedService(JobId id, double gpu_s) {
  wake_.valid = false;  // a record may change
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail("attained service: no job ", std::to_string(id));
  if (!(gpu_s >= 0)) return Fail("attained service: job ", std::to_string(id), ": negative");
  it->second.attained_gpu_s = gpu_s;
  TrackChange(it->second, it->second.accrued_to_s);  // where it runs, its next change moved
  return Ok();
}

Status Engine::SetStandingSince(JobId id, double since_s) {
  wake_.valid = false;  // a record may change
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail("standing since: no job ", std::to_string(id));
  if (!std::isfinite(since_s))
    return Fail("standing since: job ", std::to_string(id), ": not a time");
  it->second.standing_since_s = since_s;
  return Ok();
}

}  // namespace tianshu::engine
