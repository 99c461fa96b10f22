// Records by id at stable addresses (a reference stays valid until its record is erased),
// found through a flat index while ids are small non-negative numbers, as the simulator's and
// the server's sequential ids are, and through a hash map otherwise. It offers what the
// engine's job table used of std::unordered_map (find, at, count, emplace, erase, size) with
// fewer memory accesses per lookup: a cycle looks up every pending and running job several
// times. find() gives a pointer to the (id, record) pair, end() is nullptr.
//   IdTable<JobRecord> t;  t.emplace(7, JobRecord{});
//   if (auto* e = t.find(7); e != t.end()) e->second.progress = 0.5;
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tianshu::engine {

template <typename T>
class IdTable {
 public:
  using Entry = std::pair<const int64_t, T>;

  Entry* find(int64_t id) { return Lookup(id); }
  const Entry* find(int64_t id) const { return Lookup(id); }
  Entry* end() { return nullptr; }
  const Entry* end() const { return nullptr; }
  size_t count(int64_t id) const { return Lookup(id) != nullptr ? 1 : 0; }
  size_t size() const { return size_; }
  // (The flat index is looked up inline: a cycle calls this for every job it walks.)
  T& at(int64_t id) { return AtEntry(id)->second; }
  const T& at(int64_t id) const { return AtEntry(id)->second; }

  // Inserts (id, value) unless `id` is present: the entry, and whether it was inserted.
  std::pair<Entry*, bool> emplace(int64_t id, T value) {
    if (Entry* e = Lookup(id)) return {e, false};
    auto owned = std::make_unique<Entry>(id, std::move(value));
    Entry* e = owned.get();
    // The flat index grows with the ids it holds: at most eight slots per record (4,096 at
    // least), so that a few large ids cannot make it huge.
    const auto limit = static_cast<int64_t>(std::max<size_t>(4096, 8 * (size_ + 1)));
    if (id >= 0 && (id < limit || static_cast<size_t>(id) < flat_.size())) {
      const auto i = static_cast<size_t>(id);
      if (i >= flat_.size()) flat_.resize(std::max(i + 1, 2 * flat_.size()));
      flat_[i] = std::move(owned);
    } else {
      hashed_.emplace(id, std::move(owned));
    }
    ++size_;
    return {e, true};
  }

  // Erases the entry `e` (one of this table's).
  void erase(const Entry* e) {
    const int64_t id = e->first;
    if (id >= 0 && static_cast<size_t>(id) < flat_.size() &&
        flat_[static_cast<size_t>(id)].get() == e) {
      flat_[static_cast<size_t>(id)].reset();
    } else {
      hashed_.erase(id);
    }
    --size_;
  }

 private:
  Entry* Lookup(int64_t id) const {
    if (id >= 0 && static_cast<size_t>(id) < flat_.size()) {
      if (Entry* e = flat_[static_cast<size_t>(id)].get()) return e;
    }
    return LookupHashed(id);
  }
  Entry* LookupHashed(int64_t id) const {
    if (hashed_.empty()) return nullptr;
    auto it = hashed_.find(id);
    return it == hashed_.end() ? nullptr : it->second.get();
  }
  Entry* AtEntry(int64_t id) const {
    if (id >= 0 && static_cast<size_t>(id) < flat_.size()) [[likely]] {
      if (Entry* e = flat_[static_cast<size_t>(id)].get()) [[likely]]
        return e;
    }
    return AtHashed(id);
  }
  [[gnu::noinline]] Entry* AtHashed(int64_t id) const {
    Entry* e = LookupHashed(id);
    if (e == nullptr) throw std::out_of_range("no record " + std::to_string(id));
    return e;
  }

  std::vector<std::unique_ptr<Entry>> flat_;                    // by id, where ids are small
  std::unordered_map<int64_t, std::unique_ptr<Entry>> hashed_;  // the others
  size_t size_ = 0;
};

}  // namespace tianshu::engine
