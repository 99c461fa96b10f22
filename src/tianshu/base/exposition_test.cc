#include "tianshu/base/exposition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tianshu {
namespace {

TEST(Exposition, WritesFamiliesWithEscapedLabels) {
  Exposition out;
  out.Family("tianshu_node_gpus", "gauge", "GPUs.\nA \\ second line.")
      .Sample({{"node", "n\"0\\\n"}}, 8)
      .Sample({{"node", "n1"}, {"model", "A100"}}, 0.5);
  out.Family("tianshu_up", "gauge", "Up.").Sample(1).FixedSample({}, 2, 3);
  EXPECT_EQ(out.text(),
            "# HELP tianshu_node_gpus GPUs.\\nA \\\\ second line.\n"
            "# TYPE tianshu_node_gpus gauge\n"
            "tianshu_node_gpus{node=\"n\\\"0\\\\\\n\"} 8\n"
            "tianshu_node_gpus{node=\"n1\",model=\"A100\"} 0.5\n"
            "# HELP tianshu_up Up.\n# TYPE tianshu_up gauge\ntianshu_up 1\ntianshu_up 2.000\n");
}

TEST(Exposition, NumbersAsPrometheusParsesThem) {
  EXPECT_EQ(MetricNumber(3), "3");
  EXPECT_EQ(MetricNumber(-7), "-7");
  EXPECT_EQ(MetricNumber(1e6), "1000000");
  EXPECT_EQ(MetricNumber(0.25), "0.25");
  EXPECT_EQ(MetricNumber(1e20), "1e+20");
  EXPECT_EQ(MetricNumber(0.0001), "0.0001");
  EXPECT_EQ(MetricNumber(0.000015), "1.5e-05");
  EXPECT_EQ(MetricNumber(1234567.5), "1.2345675e+06");
  EXPECT_EQ(MetricNumber(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(MetricNumber(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(MetricNumber(std::nan("")), "NaN");
}

TEST(Exposition, HistogramBucketsAreCumulativeAndInclusive) {
  Histogram h({1, 0.1, 1e6});  // sorted on construction
  for (double v : {0.05, 0.1, 0.5, 1.0, 50.0}) h.Observe(v);
  Exposition out;
  out.Family("t_seconds", "histogram", "T.").HistogramSamples(h, {{"queue", "q"}});
  EXPECT_EQ(out.text(),
            "# HELP t_seconds T.\n# TYPE t_seconds histogram\n"
            "t_seconds_bucket{queue=\"q\",le=\"0.1\"} 2\n"
            "t_seconds_bucket{queue=\"q\",le=\"1\"} 4\n"
            "t_seconds_bucket{queue=\"q\",le=\"1e+06\"} 5\n"
            "t_seconds_bucket{queue=\"q\",le=\"+Inf\"} 5\n"
            "t_seconds_sum{queue=\"q\"} 51.65\n"
            "t_seconds_count{queue=\"q\"} 5\n");
}

TEST(Exposition, ProcessAndBuildFamilies) {
  Exposition out;
  AppendProcessMetrics(out);
  AppendBuildInfo(out, "tianshu_build_info", "Build.");
  const std::string& t = out.text();
  for (const char* name :
       {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
        "process_start_time_seconds ", "process_open_fds ", "tianshu_build_info{version=\""}) {
    EXPECT_NE(t.find(std::string("\n") + name), std::string::npos) << name << "\n" << t;
  }
  EXPECT_FALSE(BuildVersion().empty());
}

}  // namespace
}  // namespace tianshu
