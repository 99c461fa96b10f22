// Sorting the keys of a cycle's queues in close to linear time where they come mostly in order
// already (the pending queue in submission order, the running jobs in start order): dealing
// keys into their few groups keeping the order met, and an insertion sort that gives up for
// std::sort when the keys are far from sorted. Each gives exactly what one std::sort of unique
// keys gives. And the few smallest of many values, in order, in one pass (SmallestK); and keys
// that change little from one cycle to the next, sorted from the last cycle's order
// (SortedAcrossCalls). Private to engine/.
//   std::vector<size_t> at = internal::DealByGroup(&keys, [](const Key& k) { return k.queue; });
//   for (size_t b = 0; b + 1 < at.size(); ++b) internal::SortMostlySorted(keys, at[b], at[b + 1]);
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace tianshu::engine::internal {

// Reorders `keys` stably by group(key) (few distinct groups, ordered by <) and returns where
// each group starts, then keys->size(): group b is [at[b], at[b + 1]).
template <typename T, typename GroupFn>
std::vector<size_t> DealByGroup(std::vector<T>* keys, GroupFn group) {
  using G = decltype(group(keys->front()));
  std::vector<G> groups;  // in the order met
  std::vector<size_t> group_of;
  group_of.reserve(keys->size());
  for (const T& k : *keys) {
    const G g = group(k);
    auto it = std::find(groups.begin(), groups.end(), g);
    group_of.push_back(static_cast<size_t>(it - groups.begin()));
    if (it == groups.end()) groups.push_back(g);
  }
  std::vector<size_t> rank(groups.size());  // each group's place in the sorted order
  for (size_t i = 0; i < groups.size(); ++i) {
    rank[i] = static_cast<size_t>(
        std::count_if(groups.begin(), groups.end(), [&](const G& g) { return g < groups[i]; }));
  }
  std::vector<size_t> at(groups.size() + 1, 0);
  for (size_t g : group_of) ++at[rank[g] + 1];
  for (size_t i = 1; i < at.size(); ++i) at[i] += at[i - 1];
  std::vector<T> dealt(keys->size());
  std::vector<size_t> next(at.begin(), at.end() - 1);
  for (size_t i = 0; i < keys->size(); ++i) dealt[next[rank[group_of[i]]]++] = (*keys)[i];
  *keys = std::move(dealt);
  return at;
}

// Sorts keys[from, to) by `less`: an insertion sort while it moves keys fewer than eight times
// their number (a few out of place, runs of ties), std::sort beyond.
template <typename T, typename Less = std::less<>>
void SortMostlySorted(std::vector<T>& keys, size_t from, size_t to, Less less = {}) {
  size_t budget = 8 * (to - from) + 64;
  for (size_t i = from + 1; i < to; ++i) {
    T x = std::move(keys[i]);
    size_t j = i;
    for (; j > from && less(x, keys[j - 1]); --j) {
      if (budget-- == 0) {
        keys[j] = std::move(x);  // a permutation again: sort it whole
        const auto base = keys.begin();
        std::sort(base + static_cast<std::ptrdiff_t>(from), base + static_cast<std::ptrdiff_t>(to),
                  less);
        return;
      }
      keys[j] = std::move(keys[j - 1]);
    }
    keys[j] = std::move(x);
  }
}

// The K smallest of the values offered, ascending, ties kept: the first K a min-heap of them all
// would pop, without building it. For a walk that usually needs only the first few of many.
//   SmallestK<std::pair<double, int64_t>, 16> first;  for (...) first.Offer({end, gpus});
//   for (const auto& e : first.Values()) ...;  if (!first.HoldsAll()) /* walk them all */;
template <typename T, size_t K>
class SmallestK {
 public:
  void Offer(const T& x) {
    if (n_ == K) {
      if (!(x < v_[K - 1])) {  // an equal value is the same value: the one kept stands for it
        all_ = false;
        return;
      }
      all_ = false;  // the largest kept goes
    } else {
      ++n_;
    }
    size_t j = n_ - 1;
    for (; j > 0 && x < v_[j - 1]; --j) v_[j] = v_[j - 1];
    v_[j] = x;
  }
  std::span<const T> Values() const { return {v_.data(), n_}; }
  bool HoldsAll() const { return all_; }  // nothing offered was left out

 private:
  std::array<T, K> v_{};
  size_t n_ = 0;
  bool all_ = true;
};

// Sorts unique keys (each with a member `id`) that mostly come back unchanged from one call to
// the next: the keys met last time and unchanged keep that order, the rest are sorted and merged
// in. The order of one std::sort, in linear time plus that of the changed few. Ids outside
// [0, kMaxId) are sorted the plain way (the index by id costs 16 bytes per id up to the largest:
// 32 MiB at most).
//   SortedAcrossCalls<Key> order;  order.Sort(&keys);  // each cycle
template <typename K>
class SortedAcrossCalls {
 public:
  static constexpr int64_t kMaxId = int64_t{1} << 21;
  void Sort(std::vector<K>* keys) {
    ++call_;
    for (const K& k : *keys) {
      if (k.id < 0 || k.id >= kMaxId) {
        std::sort(keys->begin(), keys->end());
        last_.clear();
        return;
      }
    }
    for (size_t i = 0; i < keys->size(); ++i) {
      const auto id = static_cast<size_t>((*keys)[i].id);
      if (id >= at_.size()) {
        at_.resize(std::min(static_cast<size_t>(kMaxId), std::max(id + 1, 2 * at_.size())));
      }
      at_[id] = {call_, i};
    }
    std::vector<char> kept(keys->size(), 0);
    std::vector<K> same;  // last time's keys still offered, unchanged: in order
    same.reserve(last_.size());
    for (const K& k : last_) {
      const auto id = static_cast<size_t>(k.id);
      // (A key offered twice is kept once here; the other copy is sorted with the changed.)
      if (id < at_.size() && at_[id].call == call_ && !kept[at_[id].index] &&
          (*keys)[at_[id].index] == k) {
        kept[at_[id].index] = 1;
        same.push_back(k);
      }
    }
    std::vector<K> changed;
    for (size_t i = 0; i < keys->size(); ++i) {
      if (!kept[i]) changed.push_back((*keys)[i]);
    }
    std::sort(changed.begin(), changed.end());
    std::merge(same.begin(), same.end(), changed.begin(), changed.end(), keys->begin());
    last_ = *keys;
  }

 private:
  struct Slot {
    uint64_t call = 0;
    size_t index = 0;
  };
  uint64_t call_ = 0;
  std::vector<Slot> at_;  // by id: the call that last offered it, and where
  std::vector<K> last_;   // sorted, as the last call left them
};

}  // namespace tianshu::engine::internal
