// The HTML report's views of the cluster and its jobs (report.cc draws the rest): a node heat
// map boxed by leaf switch, and a timeline (Gantt chart) of jobs. Each returns one <svg>
// element as text. Private to sim/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tianshu/model/topology.h"
#include "tianshu/sim/simulator.h"

namespace tianshu::sim::internal {

// The value at quantile q (0..1) of sorted values, nearest rank; 0 when empty.
double Quantile(const std::vector<double>& sorted, double q);
// The mean of the values; 0 when empty.
double Mean(const std::vector<double>& v);

// The interval of sample i: from its time to the next sample's (or `end`).
inline std::pair<double, double> Span(const std::vector<Sample>& s, size_t i, double end) {
  return {s[i].t, i + 1 < s.size() ? s[i + 1].t : end};
}

// Calls visit(k, overlap) for each of `buckets` equal intervals of [0, end] that [a, b) overlaps.
template <typename V>
void ForBuckets(double a, double b, double end, int buckets, V visit) {
  const double width = end / buckets;
  const int k0 = std::clamp(static_cast<int>(a / width), 0, buckets - 1);
  const int k1 = std::clamp(static_cast<int>(b / width), 0, buckets - 1);
  for (int k = k0; k <= k1; ++k) {
    const double lo = std::max(a, k * width), hi = std::min(b, (k + 1) * width);
    if (hi > lo) visit(k, hi - lo);
  }
}

// Time-weighted averages of a sample field over `buckets` equal intervals of [0, end].
template <typename F>
std::vector<double> Bucket(const std::vector<Sample>& s, double end, int buckets, F field) {
  std::vector<double> sum(buckets, 0), wt(buckets, 0);
  if (s.empty() || end <= 0) return sum;
  for (size_t i = 0; i < s.size(); ++i) {
    auto [a, b] = Span(s, i, end);
    if (b <= a) continue;
    const double v = field(s[i]);
    ForBuckets(a, b, end, buckets, [&](int k, double w) {
      sum[k] += v * w;
      wt[k] += w;
    });
  }
  for (int k = 0; k < buckets; ++k) sum[k] = wt[k] > 0 ? sum[k] / wt[k] : 0;
  return sum;
}

// The largest value a sample field held for some time within each interval: a queue that
// fills for ten minutes shows in a bucket of hours, where an average would flatten it to 0.
template <typename F>
std::vector<double> BucketMax(const std::vector<Sample>& s, double end, int buckets, F field) {
  std::vector<double> top(buckets, 0);
  if (s.empty() || end <= 0) return top;
  for (size_t i = 0; i < s.size(); ++i) {
    auto [a, b] = Span(s, i, end);
    if (b <= a) continue;
    const double v = field(s[i]);
    ForBuckets(a, b, end, buckets, [&](int k, double) { top[k] = std::max(top[k], v); });
  }
  return top;
}

// A duration for people: "0 s", "45 s", "12 min", "3.4 h", "2.1 d".
std::string Duration(double s);

// A cell per node (heat: each node's allocated share at time t), the nodes of a leaf switch
// boxed together under its name.
std::string HeatMap(const std::string& id, const std::string& title, const model::Topology& topo,
                    const std::vector<float>& heat, double t);

// The ids of the `count` largest jobs: most GPUs, then longest ideal run, then first submitted.
std::vector<int64_t> LargestJobs(const std::vector<JobResult>& jobs, size_t count);

// A row per job: grey from submission to first start, `color` from first start to end.
std::string Timeline(const std::string& id, const std::string& title,
                     const std::vector<const JobResult*>& jobs, double end_s,
                     const std::string& color);

}  // namespace tianshu::sim::internal
