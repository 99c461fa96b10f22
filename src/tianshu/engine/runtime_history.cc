#include "tianshu/engine/runtime_history.h"

namespace tianshu::engine {

namespace {

void Keep(std::deque<double>& d, double v, size_t n) {
  d.push_back(v);
  while (d.size() > n) d.pop_front();
}

}  // namespace

double RuntimeHistory::Mean(const std::deque<double>& d) {
  double sum = 0;
  for (double v : d) sum += v;
  return d.empty() ? 0 : sum / static_cast<double>(d.size());
}

void RuntimeHistory::Add(const model::JobSpec& spec, int gpus, double run_s) {
  if (!(run_s > 0) || gpus < 0) return;
  Keep(by_kind_[{spec.queue, spec.model.profile, gpus}], run_s, kKept);
  Keep(by_size_[gpus], run_s, kKept);
  ++added_;
}

double RuntimeHistory::Predict(const model::JobSpec& spec, int gpus) const {
  if (auto it = by_kind_.find({spec.queue, spec.model.profile, gpus}); it != by_kind_.end()) {
    return Mean(it->second);
  }
  if (auto it = by_size_.find(gpus); it != by_size_.end()) return Mean(it->second);
  return 0;
}

}  // namespace tianshu::engine
