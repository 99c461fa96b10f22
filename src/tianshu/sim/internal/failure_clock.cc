#include "tianshu/sim/internal/failure_clock.h"

#include <cmath>

namespace tianshu::sim::internal {
namespace {

// splitmix64's finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

FailureClock::FailureClock(uint64_t seed) : state_(Mix(seed ^ 0x5eedULL)) {}

// Inverse transform: -mean * ln(1 - u), u uniform in [0, 1) from the top 53 bits.
double FailureClock::NextGap(double mean_s) {
  state_ = Mix(state_);
  double u = static_cast<double>(state_ >> 11) * 0x1.0p-53;
  return -mean_s * std::log(1.0 - u);
}

}  // namespace tianshu::sim::internal
