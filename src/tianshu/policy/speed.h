// Heterogeneous accelerators: the "by-speed" placement strategy puts a job on the fastest
// accelerator model it accepts that can hold it now (a faster model finishes the same work
// sooner), never mixing models or backends in one job unless no single model could ever hold
// it (then one backend, models mixed). Speed is the model's dense BF16 peak from the
// accelerator catalogue: placement requests do not carry the job's model shape, so the
// compute-bound proxy stands in for a per-job prediction.
//   auto s = MakeBySpeedStrategy("topology", {});
//   Outcome o = (*s)->Place(snapshot, request);   // H100 nodes before A100 nodes, if free
#pragma once

#include <memory>
#include <string>

#include "tianshu/base/status.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::policy {

// Wraps the strategy named `inner`, which places within each model tried. Fails when `inner`
// cannot be built.
[[nodiscard]] Result<std::unique_ptr<placement::Strategy>> MakeBySpeedStrategy(
    const std::string& inner, const placement::StrategyOptions& options);

}  // namespace tianshu::policy
