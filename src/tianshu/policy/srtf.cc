#include "tianshu/policy/srtf.h"

#include <algorithm>

namespace tianshu::policy {

using engine::JobId;
using engine::JobRecord;

double RemainingS(const JobRecord& job) {
  const double est = job.EstimatedDurationS();
  if (est <= 0) return -1;
  return est * std::clamp(1.0 - job.progress, 0.0, 1.0);
}

namespace {

// SRTF (Schrage 1968) is optimal for mean completion time on one machine with preemption;
// with gangs it is a heuristic, as in Gandiva and in the SRTF baselines of Tiresias and Gavel.
// Priority classes still come first: SRTF orders the jobs of one class.
class SrtfOrder final : public engine::OrderPolicy {
 public:
  std::string_view Name() const override { return "srtf"; }
  void Order(const engine::CycleView& v, std::vector<JobId>* q) const override {
    // Keys once, not a job lookup per comparison. Unknown estimates sort after known ones.
    struct Key {
      int neg_priority;
      int unknown;
      double left;
      double submit;
      double batch_key;  // (submission order's tie: engine::SubmittedBefore)
      JobId id;
      auto operator<=>(const Key&) const = default;  // NOLINT(modernize-use-nullptr)
    };
    std::vector<Key> keys;
    keys.reserve(q->size());
    for (JobId id : *q) {
      const JobRecord& r = v.Job(id);
      const double left = RemainingS(r);
      keys.push_back({-r.spec.priority, left >= 0 ? 0 : 1, std::max(left, 0.0), r.submit_s,
                      r.batch_key, r.id});
    }
    std::sort(keys.begin(), keys.end());
    for (size_t i = 0; i < keys.size(); ++i) (*q)[i] = keys[i].id;
  }
};

// Preemption by remaining time: a waiting job may evict running jobs of a lower priority class,
// and jobs of its own class whose remaining time is more than kRatio times its own and longer by
// at least kMarginS (so that the restart a victim pays is small against the time the evictor
// saves). A victim's remaining time does not change while it waits and the evictor's only
// shrinks, so the victim can never evict its evictor back. Victims: lower classes first, then
// jobs at least as large as the evictor (one whole gang is enough), smallest first, then the
// longest remaining.
class SrtfPreemption final : public engine::PreemptionPolicy {
 public:
  static constexpr double kRatio = 2;
  static constexpr double kMarginS = 1800;

  std::string_view Name() const override { return "srtf"; }
  std::vector<JobId> Victims(const engine::CycleView& v, const JobRecord& c) const override {
    const double rc = RemainingS(c);
    struct Cand {
      bool same_class;
      bool smaller;
      int gpus;
      double left;
      JobId id;
    };
    std::vector<Cand> cand;
    for (JobId id : v.running) {
      const JobRecord& r = v.Job(id);
      if (r.spec.priority > c.spec.priority) continue;
      const bool same = r.spec.priority == c.spec.priority;
      const double left = RunningRemainingS(r, v.now_s);
      if (same && (rc < 0 || left < 0 || left < kRatio * rc || left - rc < kMarginS)) continue;
      cand.push_back({same, r.Gpus() < c.Gpus(), r.Gpus(), left, id});
    }
    std::sort(cand.begin(), cand.end(), [](const Cand& a, const Cand& b) {
      if (a.same_class != b.same_class) return !a.same_class;
      if (a.smaller != b.smaller) return !a.smaller;
      if (a.gpus != b.gpus) return a.smaller ? a.gpus > b.gpus : a.gpus < b.gpus;
      if (a.left != b.left) return a.left > b.left;
      return a.id > b.id;
    });
    std::vector<JobId> out;
    out.reserve(cand.size());
    for (const Cand& x : cand) out.push_back(x.id);
    return out;
  }
};

}  // namespace

double RunningRemainingS(const JobRecord& job, double now_s) {
  double left = RemainingS(job);
  if (left < 0 || job.start_s < 0) return left;
  return std::max(0.0, left - (now_s - job.start_s));
}

std::unique_ptr<engine::PreemptionPolicy> MakeSrtfPreemption() {
  return std::make_unique<SrtfPreemption>();
}

std::unique_ptr<engine::OrderPolicy> MakeSrtfOrder() { return std::make_unique<SrtfOrder>(); }

}  // namespace tianshu::policy
