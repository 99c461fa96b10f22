// A small, portable, seeded random source (SplitMix64), so that a seed gives the same choices
// on every platform and standard library.
//   Rng rng(42);
//   int i = rng.Below(10);
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tianshu::placement::internal {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0.
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (int i = static_cast<int>(v->size()) - 1; i > 0; --i)
      std::swap((*v)[i], (*v)[Below(i + 1)]);
  }

 private:
  uint64_t state_;
};

// Mixes a request name into a seed so that jobs of one batch draw different numbers.
inline uint64_t MixSeed(uint64_t seed, const std::string& name) {
  uint64_t h = seed ^ 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace tianshu::placement::internal
