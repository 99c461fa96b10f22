// Metrics in the Prometheus text exposition format (version 0.0.4), for the server's and the
// agent's /metrics: a writer that emits one family at a time (HELP and TYPE, then its samples,
// label values escaped, numbers as Prometheus parses them), a histogram with fixed buckets, and
// the families every Prometheus client library exports (process_*, build info). Debian 12 ships
// no C++ Prometheus client (prometheus-cpp is not packaged), hence this small writer; `promtool
// check metrics` checks its output in tests/prometheus_test.cc.
//   Exposition out;
//   out.Family("tianshu_node_gpus", "gauge", "Accelerators a node registered.");
//   out.Sample({{"node", "n0"}}, 8);
//   std::string text = out.Take();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tianshu {

// Label name and value pairs, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Observations counted into fixed buckets (upper bounds, inclusive: Prometheus's `le`). Not
// thread-safe; its owner guards it.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Observations per bucket, not cumulative; one more than bounds() (the +Inf bucket last).
  const std::vector<int64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  double sum_ = 0;
  int64_t count_ = 0;
};

// Appends families to a text; each family must be written whole before the next starts (the
// format requires a family's samples together). Not thread-safe.
class Exposition {
 public:
  // Starts family `name` of `type` ("counter", "gauge", "histogram" or "untyped").
  Exposition& Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the current family.
  Exposition& Sample(const MetricLabels& labels, double value);
  Exposition& Sample(double value) { return Sample({}, value); }
  // One sample with its value written with `decimals` digits after the point ("2.000").
  Exposition& FixedSample(const MetricLabels& labels, double value, int decimals);
  // The current family's _bucket, _sum and _count samples for `h` (a "histogram" family).
  Exposition& HistogramSamples(const Histogram& h, const MetricLabels& labels = {});
  // Text written elsewhere (whole families), appended as it is.
  Exposition& Raw(std::string_view text);
  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Line(std::string_view suffix, const MetricLabels& labels, std::string_view value);
  std::string family_;
  std::string out_;
};

// A sample value as Prometheus parses it: integers below 2^53 in full ("1000000"), others as Go's
// client library writes them: the shortest text that reads back as `v` ("0.1", "0.0001",
// "1.5e-05", "1e+20"), "+Inf", "-Inf" or "NaN". Histogram bounds (`le`) are written the Go way
// throughout ("1e+06"), so that a selector like {le="0.0001"} matches as it does elsewhere.
std::string MetricNumber(double v);
// Escapes a label value (backslash, double quote, newline).
std::string MetricLabelValue(std::string_view v);

// The process_* families of the Prometheus client libraries, from /proc/self:
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds, process_max_fds. A figure /proc does not give
// is left out.
void AppendProcessMetrics(Exposition& out);
// `name` (e.g. tianshu_build_info) = 1 with labels version (the project's) and compiler.
void AppendBuildInfo(Exposition& out, std::string_view name, std::string_view help);
// The version the binary was built as ("0.1.0").
std::string_view BuildVersion();

}  // namespace tianshu
