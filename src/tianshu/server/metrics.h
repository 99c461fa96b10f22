// Counters and a latency histogram for /metrics, rendered in the Prometheus text format
// (version 0.0.4).
//   Histogram h({0.001, 0.01, 0.1});  h.Observe(0.004);
//   std::string text = h.Render("tianshu_cycle_seconds", "Scheduling cycle latency");
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tianshu::server {

// Not thread-safe; the owner guards it.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  std::string Render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); +Inf last
  double sum_ = 0;
  int64_t count_ = 0;
};

struct Metrics {
  Histogram cycle_seconds{{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5}};
  std::map<std::string, int64_t> placement_outcomes;  // by OutcomeKindName
  int64_t cycles = 0;
  int64_t retries = 0;
  int64_t gang_timeouts = 0;  // gangs released because not every rank started in time
  int64_t preemptions = 0;
  int64_t resizes = 0;     // elastic resizes begun (checkpoint, relaunch at the new size)
  int64_t migrations = 0;  // moves begun (checkpoint, relaunch elsewhere)
  int64_t nodes_lost = 0;
  int64_t quarantined = 0;         // jobs failed at start for an unreadable record
  int64_t mass_silences = 0;       // times most nodes went silent at once
  int64_t idempotent_replays = 0;  // submissions answered with the job a key made before
  std::atomic<int64_t> submissions_accepted{0};
  std::atomic<int64_t> submissions_rejected{0};
};

// "# HELP name help\n# TYPE name type\n"
std::string MetricHeader(const std::string& name, const std::string& type, const std::string& help);
// Escapes a label value (backslash, quote, newline).
std::string LabelValue(const std::string& v);

}  // namespace tianshu::server
