#include "tianshu/policy/srtf.h"

#include <algorithm>

namespace tianshu::policy {

using engine::JobId;
using engine::JobRecord;

double RemainingS(const JobRecord& job) {
  if (job.spec.duration_s <= 0) return -1;
  return job.spec.duration_s * std::clamp(1.0 - job.progress, 0.0, 1.0);
}

namespace {

// SRTF (Schrage 1968) is optimal for mean completion time on one machine with preemption;
// with gangs it is a heuristic, as in Gandiva and in the SRTF baselines of Tiresias and Gavel.
class SrtfOrder final : public engine::OrderPolicy {
 public:
  std::string_view Name() const override { return "srtf"; }
  void Order(const engine::CycleView& v, std::vector<JobId>* q) const override {
    std::stable_sort(q->begin(), q->end(), [&](JobId a, JobId b) {
      const JobRecord& x = v.Job(a);
      const JobRecord& y = v.Job(b);
      const double rx = RemainingS(x);
      const double ry = RemainingS(y);
      const bool kx = rx >= 0;
      const bool ky = ry >= 0;
      if (kx != ky) return kx;
      if (kx && rx != ry) return rx < ry;
      if (x.submit_s != y.submit_s) return x.submit_s < y.submit_s;
      return x.id < y.id;
    });
  }
};

}  // namespace

std::unique_ptr<engine::OrderPolicy> MakeSrtfOrder() { return std::make_unique<SrtfOrder>(); }

}  // namespace tianshu::policy
