// Shortest remaining time first: the pending job with the least expected run time left runs
// first, where the left-over time is the runtime estimate (JobSpec::duration_s, at ideal
// placement) times the share of work not yet done (the progress it resumes from). Jobs without
// an estimate follow, FIFO.
//   auto order = MakeSrtfOrder();
//   order->Order(view, &queue);   // a preempted job at 95% of 1000 s goes before a new 200 s one
#pragma once

#include <memory>

#include "tianshu/engine/policy.h"

namespace tianshu::policy {

// Remaining run time of a job, or a negative value when it has no runtime estimate.
double RemainingS(const engine::JobRecord& job);

std::unique_ptr<engine::OrderPolicy> MakeSrtfOrder();

}  // namespace tianshu::policy
