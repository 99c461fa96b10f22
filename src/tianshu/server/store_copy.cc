// `tianshu store copy` (store.h): every record from one store into an empty other, checked.
#include <algorithm>
#include <limits>
#include <tuple>

#include "tianshu/server/store.h"

namespace tianshu::server {

namespace {

constexpr size_t kRowsPerChange = 200;

// Rows in one order, whatever order a store loads them in.
auto Key(const JobRow& r) { return std::tie(r.id, r.seq, r.state, r.doc); }
auto Key(const NodeRow& r) { return std::tie(r.name, r.doc); }
auto Key(const OrderRow& r) { return std::tie(r.id, r.node, r.job_id, r.status, r.doc); }
auto Key(const EventRow& r) { return std::tie(r.seq, r.time_ms, r.doc); }
auto Key(const ProgressRow& r) { return std::tie(r.job_id, r.attempt, r.key, r.value); }

template <typename Row>
void SortRows(std::vector<Row>& rows) {
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return Key(a) < Key(b); });
}

template <typename Row>
std::string FirstDifference(const char* table, std::vector<Row> a, std::vector<Row> b) {
  SortRows(a);
  SortRows(b);
  if (a.size() != b.size()) {
    return std::string(table) + ": " + std::to_string(a.size()) + " in the source, " +
           std::to_string(b.size()) + " read back";
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (Key(a[i]) != Key(b[i]))
      return std::string(table) + ": row " + std::to_string(i) + " differs";
  }
  return "";
}

}  // namespace

Result<CopyCounts> CopyStore(Store& from, Store& to,
                             const std::function<void(int64_t, int64_t)>& progress) {
  auto src = from.Load(std::numeric_limits<int32_t>::max());
  if (!src) return Fail("reading ", from.Describe(), ": ", src.error().message);
  if (src->jobs.empty() && src->nodes.empty() && src->meta.empty()) {
    return Fail(from.Describe(),
                " holds no records (no job, node or server id): is it the right "
                "file or prefix? Nothing was written");
  }
  auto dst = to.Load(1);
  if (!dst) return Fail("reading ", to.Describe(), ": ", dst.error().message);
  if (!dst->jobs.empty() || !dst->nodes.empty() || !dst->orders.empty() || !dst->meta.empty() ||
      !dst->progress.empty() || !dst->events.empty()) {
    return Fail(to.Describe(), " already holds records (", std::to_string(dst->jobs.size()),
                " jobs, ", std::to_string(dst->nodes.size()),
                " nodes): copy into an empty store (a new file, or a new etcd prefix); nothing "
                "was written");
  }
  CopyCounts n{.jobs = int64_t(src->jobs.size()),
               .nodes = int64_t(src->nodes.size()),
               .orders = int64_t(src->orders.size()),
               .events = int64_t(src->events.size()),
               .meta = int64_t(src->meta.size()),
               .progress = int64_t(src->progress.size()),
               .events_in_source = int64_t(src->events.size())};
  const int64_t total = n.jobs + n.nodes + n.orders + n.events + n.meta + n.progress;
  std::vector<Change> changes(1);
  auto room = [&]() -> Change& {
    const Change& c = changes.back();
    const size_t rows = c.jobs.size() + c.nodes.size() + c.orders.size() + c.events.size() +
                        c.meta.size() + c.progress.size();
    if (rows >= kRowsPerChange) changes.emplace_back();
    return changes.back();
  };
  for (const auto& r : src->jobs) room().jobs.push_back(r);
  for (const auto& r : src->nodes) room().nodes.push_back(r);
  for (const auto& r : src->orders) room().orders.push_back(r);
  for (const auto& r : src->events) room().events.push_back(r);
  for (const auto& [k, v] : src->meta) room().meta[k] = v;
  for (const auto& r : src->progress) room().progress.push_back(r);
  int64_t written = 0;
  for (size_t i = 0; i < changes.size(); i += 16) {
    std::vector<const Change*> batch;
    for (size_t k = i; k < std::min(changes.size(), i + 16); ++k) {
      batch.push_back(&changes[k]);
      const Change& c = changes[k];
      written += int64_t(c.jobs.size() + c.nodes.size() + c.orders.size() + c.events.size() +
                         c.meta.size() + c.progress.size());
    }
    if (auto s = to.Write(batch); !s) {
      return Fail("writing ", to.Describe(), " (", std::to_string(written), " of ",
                  std::to_string(total), " records sent): ", s.error().message,
                  "; the destination holds part of the copy: remove it before trying again");
    }
    if (progress) progress(written, total);
  }
  auto back = to.Load(std::numeric_limits<int32_t>::max());
  if (!back) return Fail("reading back ", to.Describe(), ": ", back.error().message);
  // The destination may keep only the newest events: what it has must be the source's newest.
  n.events = int64_t(back->events.size());
  std::vector<EventRow> newest(
      src->events.end() - std::min(src->events.size(), back->events.size()), src->events.end());
  std::string diff = FirstDifference("jobs", src->jobs, back->jobs);
  if (diff.empty()) diff = FirstDifference("nodes", src->nodes, back->nodes);
  if (diff.empty()) diff = FirstDifference("orders", src->orders, back->orders);
  if (diff.empty()) diff = FirstDifference("events", newest, back->events);
  if (diff.empty()) diff = FirstDifference("progress", src->progress, back->progress);
  if (diff.empty() && src->meta != back->meta) diff = "meta differs";
  if (!diff.empty()) {
    return Fail("the copy in ", to.Describe(), " does not read back as the source: ", diff);
  }
  return n;
}

}  // namespace tianshu::server
