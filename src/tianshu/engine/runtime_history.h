// Learned runtime estimates for jobs that give none (no `duration:`): the mean of the last two
// completed runs of similar jobs, the predictor of Tsafrir, Etsion and Feitelson ("Backfilling
// using system-generated predictions rather than user runtime estimates", TPDS 2007), keyed
// here by (queue, model, GPUs) and, when that has no history, by GPUs alone.
//   RuntimeHistory h;
//   h.Add(spec, 8, 3600);  h.Add(spec, 8, 5400);
//   double s = h.Predict(spec, 8);  // 4500; 0 when nothing similar has completed
#pragma once

#include <deque>
#include <map>
#include <string>
#include <tuple>

#include "tianshu/model/job.h"

namespace tianshu::engine {

class RuntimeHistory {
 public:
  // A completed run of `spec` on `gpus` GPUs that took `run_s` seconds of holding them.
  void Add(const model::JobSpec& spec, int gpus, double run_s);
  // Seconds a job like `spec` on `gpus` GPUs is expected to run; 0 when unknown.
  double Predict(const model::JobSpec& spec, int gpus) const;
  size_t Size() const { return added_; }

 private:
  static constexpr size_t kKept = 2;  // "the last two"
  using Key = std::tuple<std::string, std::string, int>;
  static double Mean(const std::deque<double>& d);
  std::map<Key, std::deque<double>> by_kind_;
  std::map<int, std::deque<double>> by_size_;
  size_t added_ = 0;
};

}  // namespace tianshu::engine
