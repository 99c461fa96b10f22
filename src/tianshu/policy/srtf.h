// Shortest remaining time first: the pending job with the least expected run time left runs
// first, where the left-over time is the runtime estimate (JobSpec::duration_s, at ideal
// placement) times the share of work not yet done (the progress it resumes from). Higher
// priority classes first; inside a class, jobs without an estimate follow, FIFO.
//   auto order = MakeSrtfOrder();
//   order->Order(view, &queue);   // a preempted job at 95% of 1000 s goes before a new 200 s one
#pragma once

#include <memory>

#include "tianshu/engine/policy.h"

namespace tianshu::policy {

// Remaining run time of a job, or a negative value when it has no runtime estimate.
double RemainingS(const engine::JobRecord& job);

// Remaining run time of a running job at `now_s`: RemainingS less the time run since it started
// (the progress it started from is counted by RemainingS); RemainingS for a job not running.
double RunningRemainingS(const engine::JobRecord& job, double now_s);

std::unique_ptr<engine::OrderPolicy> MakeSrtfOrder();
// "srtf" preemption: evicts lower priority classes, and jobs of the same class with much more
// time left (more than twice the evictor's and 30 minutes more).
std::unique_ptr<engine::PreemptionPolicy> MakeSrtfPreemption();

}  // namespace tianshu::policy
