// When simulated nodes fail: exponential gaps of a given mean drawn from a splitmix64 stream
// of the run's seed, so failures are a function of the seed alone. Private to sim/.
//   FailureClock clock(/*seed=*/42);
//   double t_fail = now + clock.NextGap(/*mean_s=*/30 * 86400);
#pragma once

#include <cstdint>

namespace tianshu::sim::internal {

class FailureClock {
 public:
  explicit FailureClock(uint64_t seed);
  // The next gap between failures, exponential with mean `mean_s`; advances the stream.
  double NextGap(double mean_s);

 private:
  uint64_t state_;
};

}  // namespace tianshu::sim::internal
