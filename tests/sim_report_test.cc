// The simulator's HTML report on a run where jobs wait: the 2,000 jobs of the shipped Philly trace
// from 2017-10-02 at offered load 0.9 on 128 GPUs (16 nodes of 8 under 4 leaf switches), two
// configurations (about a tenth of a second of simulation). The page's structure is checked (every
// chart present with data, the queue chart populated, a wait-time CDF per configuration, waits by
// Philly virtual cluster, a timeline of the largest jobs, the heat map by leaf switch, legends
// outside the plots, ticks at round numbers), the per-job CSV read back with the CSV library, and
// headless Chromium takes a screenshot, kept as report.png in the test's temporary folder. The
// screenshot is skipped when chromium is not installed (`apt-get install -y chromium`); CTest label
// `chromium`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include "testing/chromium.h"
#include "tianshu/base/csv.h"
#include "tianshu/engine/engine.h"
#include "tianshu/sim/report.h"
#include "tianshu/sim/simulator.h"

namespace tianshu::sim {
namespace {

// The <svg> element with this id, whole ("" when absent).
std::string Svg(const std::string& html, const std::string& id) {
  const size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t open = html.rfind("<svg", at);
  const size_t close = html.find("</svg>", at);
  if (open == std::string::npos || close == std::string::npos) return "";
  return html.substr(open, close + 6 - open);
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Every value of `attr` on elements that carry `marker`, in order.
std::vector<double> Values(const std::string& svg, const std::string& marker,
                           const std::string& attr) {
  std::vector<double> out;
  const std::regex element("<[^>]*" + marker + "[^>]*>");
  const std::regex value(attr + "=\"([-0-9.e+]+)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), element), end; it != end; ++it) {
    const std::string e = it->str();
    std::smatch m;
    if (std::regex_search(e, m, value)) out.push_back(std::stod(m[1].str()));
  }
  return out;
}

std::string Attr(const std::string& element, const std::string& attr) {
  std::smatch m;
  const std::regex value(attr + "=\"([^\"]*)\"");
  return std::regex_search(element, m, value) ? m[1].str() : "";
}

// Linear ticks run 0, s, 2s, ... with s = 1, 2 or 5 x 10^k.
void ExpectRoundTicks(const std::vector<double>& ticks, const std::string& what) {
  ASSERT_GE(ticks.size(), 2u) << what;
  EXPECT_EQ(ticks[0], 0) << what;
  const double step = ticks[1] - ticks[0];
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
              std::abs(mantissa - 5) < 1e-6)
      << what << ": step " << step;
  for (size_t i = 1; i < ticks.size(); ++i) {
    EXPECT_NEAR(ticks[i] - ticks[i - 1], step, step * 1e-6) << what << " tick " << i;
  }
}

class SimReportPage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model::FatTreeOptions fo;
    fo.nodes = 16;
    fo.nodes_per_leaf = 4;
    fo.oversubscription = 2;
    topo_ = new model::Topology(*model::GenerateFatTree(fo));
    auto w = LoadWorkload(
        std::string("philly:") + TIANSHU_DATA_DIR + "/philly/philly.csv",
        {.from = "2017-10-02", .max_jobs = 2000, .load = 0.9, .cluster_gpus = topo_->NumGpus()});
    ASSERT_TRUE(w) << w.error().message;
    workload_ = new Workload(std::move(*w));
    results_ = new std::vector<SimResult>;
    for (const char* p : {"mainstream", "tianshu"}) {
      auto r = Simulate(*topo_, *workload_, *engine::PresetOptions(p));
      ASSERT_TRUE(r) << r.error().message;
      results_->push_back(std::move(*r));
    }
    html_ = new std::string(RenderHtml("philly at load 0.9", *topo_, *results_, workload_));
  }
  static void TearDownTestSuite() {
    delete html_;
    delete results_;
    delete workload_;
    delete topo_;
  }
  void SetUp() override { ASSERT_NE(html_, nullptr) << "the run failed"; }

  static model::Topology* topo_;
  static Workload* workload_;
  static std::vector<SimResult>* results_;
  static std::string* html_;
};

model::Topology* SimReportPage::topo_ = nullptr;
Workload* SimReportPage::workload_ = nullptr;
std::vector<SimResult>* SimReportPage::results_ = nullptr;
std::string* SimReportPage::html_ = nullptr;

TEST_F(SimReportPage, TheRunMakesJobsWait) {
  for (const auto& r : *results_) {
    EXPECT_GT(r.metrics.avg_queue_s, 600) << r.config;
    EXPECT_GT(r.metrics.waiting_hours, 1) << r.config;
    std::cout << r.config << ": avg wait " << r.metrics.avg_queue_s / 3600 << " h, queue non-empty "
              << r.metrics.waiting_hours << " h of " << r.metrics.makespan_s / 3600 << " h\n";
  }
}

TEST_F(SimReportPage, EveryChartIsThereWithData) {
  const std::string& html = *html_;
  for (const char* id : {"chart-utilization", "chart-queue", "chart-comm", "chart-energy",
                         "chart-wait-cdf", "chart-jct-cdf", "chart-queue-waits", "chart-timeline-0",
                         "chart-timeline-1", "chart-heat-0", "chart-heat-1"}) {
    EXPECT_NE(Svg(html, id), "") << id;
  }
  // The page stands alone: no scripts, nothing fetched.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST_F(SimReportPage, WaitCdfHasALinePerConfiguration) {
  const std::string svg = Svg(*html_, "chart-wait-cdf");
  const auto points = Values(svg, "class=\"series\"", "data-points");
  ASSERT_EQ(points.size(), results_->size());
  for (double p : points) EXPECT_GT(p, 10);
  // A CDF ends at 100%.
  for (double m : Values(svg, "class=\"series\"", "data-max")) EXPECT_DOUBLE_EQ(m, 1);
  for (const auto& r : *results_) {
    EXPECT_NE(svg.find("data-series=\"" + r.config + "\""), std::string::npos) << r.config;
  }
  EXPECT_GT(Count(Svg(*html_, "chart-jct-cdf"), "class=\"series\""), 0u);
}

TEST_F(SimReportPage, QueueChartShowsTheWaitingJobs) {
  const std::string svg = Svg(*html_, "chart-queue");
  const auto tops = Values(svg, "class=\"series\"", "data-max");
  ASSERT_EQ(tops.size(), results_->size());
  for (size_t i = 0; i < tops.size(); ++i) {
    // The line reaches the longest queue that lasted any time.
    const auto& s = (*results_)[i].samples;
    int longest = 0;
    for (size_t k = 0; k + 1 < s.size(); ++k) {
      if (s[k + 1].t > s[k].t) longest = std::max(longest, s[k].queued);
    }
    EXPECT_GT(longest, 1) << (*results_)[i].config;
    EXPECT_EQ(tops[i], longest) << (*results_)[i].config;
  }
  EXPECT_EQ(svg.find("no job waited"), std::string::npos);
  // The y axis reaches the data, and not far beyond.
  const auto ticks = Values(svg, "ytick", "data-value");
  ASSERT_FALSE(ticks.empty());
  const double top = *std::max_element(tops.begin(), tops.end());
  EXPECT_GE(ticks.back(), top);
  EXPECT_LT(ticks.back(), 2 * top);
}

TEST_F(SimReportPage, UtilizationChartsUsefulWorkBesideAllocation) {
  const std::string svg = Svg(*html_, "chart-utilization");
  double end = 0;
  for (const auto& r : *results_) end = std::max(end, r.metrics.makespan_s);
  for (const auto& r : *results_) {
    const std::regex useful("<path[^>]*data-series=\"" + r.config + "\"[^>]*>");
    const std::regex alloc("<path[^>]*data-series=\"" + r.config + " \\(allocated\\)\"[^>]*>");
    std::smatch u, a;
    ASSERT_TRUE(std::regex_search(svg, u, useful)) << r.config;
    ASSERT_TRUE(std::regex_search(svg, a, alloc)) << r.config;
    EXPECT_NE(a.str().find("stroke-dasharray"), std::string::npos);
    const double u_max = std::stod(Attr(u.str(), "data-max"));
    const double a_max = std::stod(Attr(a.str(), "data-max"));
    EXPECT_GT(u_max, 0) << r.config;
    EXPECT_LE(u_max, a_max + 1e-9) << r.config << ": useful work above allocation";
    // Time averages over the charted span (the longest makespan) give back the table's
    // figures: the solid line is effective utilization, the dashed one allocation.
    const double span = end / r.metrics.makespan_s;
    EXPECT_NEAR(std::stod(Attr(u.str(), "data-mean")) * span, r.metrics.effective_utilization, 0.01)
        << r.config;
    EXPECT_NEAR(std::stod(Attr(a.str(), "data-mean")) * span, r.metrics.utilization, 0.01)
        << r.config;
  }
  // Placement slows some jobs here, so useful work falls short of allocation.
  EXPECT_LT(results_->front().metrics.effective_utilization,
            results_->front().metrics.utilization - 0.05);
  EXPECT_NE(svg.find("useful work"), std::string::npos);
}

TEST_F(SimReportPage, WaitsByVirtualCluster) {
  std::set<std::string> vcs;
  for (const auto& j : workload_->jobs) vcs.insert(j.vc);
  ASSERT_GT(vcs.size(), 2u);
  const size_t at = html_->find("<table id=\"queue-waits\">");
  ASSERT_NE(at, std::string::npos);
  const std::string table = html_->substr(at, html_->find("</table>", at) - at);
  EXPECT_EQ(Count(table, "class=\"queue-row\""), vcs.size());
  for (const auto& vc : vcs) EXPECT_NE(table.find("<td>" + vc + "</td>"), std::string::npos) << vc;
  const std::string bars = Svg(*html_, "chart-queue-waits");
  EXPECT_EQ(Count(bars, "class=\"bar\""), std::min<size_t>(vcs.size(), 16) * results_->size());
}

TEST_F(SimReportPage, TimelineOfTheLargestJobs) {
  int most = 0;
  for (const auto& j : results_->front().jobs) most = std::max(most, j.gpus);
  for (size_t i = 0; i < results_->size(); ++i) {
    const std::string svg = Svg(*html_, "chart-timeline-" + std::to_string(i));
    EXPECT_EQ(Count(svg, "class=\"job-run\""), 20u) << i;
    EXPECT_NE(svg.find("\u00b7 " + std::to_string(most) + " GPUs"), std::string::npos) << i;
  }
  // Some large job waited under the first configuration.
  EXPECT_GT(Count(Svg(*html_, "chart-timeline-0"), "class=\"job-wait\""), 0u);
}

TEST_F(SimReportPage, HeatMapGroupsNodesByLeafSwitch) {
  for (size_t i = 0; i < results_->size(); ++i) {
    const std::string svg = Svg(*html_, "chart-heat-" + std::to_string(i));
    EXPECT_EQ(Count(svg, "class=\"leaf\""), 4u);
    const auto nodes = Values(svg, "class=\"leaf\"", "data-nodes");
    for (double n : nodes) EXPECT_EQ(n, 4);
    EXPECT_EQ(Count(svg, "class=\"node\""), 16u);
    for (const auto& sw : topo_->switches) {
      if (sw.tier == 0) {
        EXPECT_NE(svg.find("data-leaf=\"" + sw.name + "\""), std::string::npos) << sw.name;
      }
    }
  }
}

TEST_F(SimReportPage, LegendsSitOutsideThePlotsAndTicksAreRound) {
  for (const char* id : {"chart-utilization", "chart-queue", "chart-comm", "chart-wait-cdf",
                         "chart-jct-cdf", "chart-queue-waits", "chart-timeline-0"}) {
    const std::string svg = Svg(*html_, id);
    std::smatch plot, legend;
    ASSERT_TRUE(std::regex_search(svg, plot, std::regex("<rect class=\"plot\"[^>]*>"))) << id;
    ASSERT_TRUE(std::regex_search(
        svg, legend, std::regex("<g class=\"legend\" transform=\"translate\\(([0-9.]+),([0-9.]+)")))
        << id;
    const double bottom = std::stod(Attr(plot.str(), "y")) + std::stod(Attr(plot.str(), "height"));
    EXPECT_GT(std::stod(legend[2].str()), bottom) << id;
  }
  ExpectRoundTicks(Values(Svg(*html_, "chart-queue"), "ytick", "data-value"), "queue y");
  ExpectRoundTicks(Values(Svg(*html_, "chart-queue"), "xtick", "data-value"), "queue x");
  ExpectRoundTicks(Values(Svg(*html_, "chart-utilization"), "ytick", "data-value"), "util y");
  ExpectRoundTicks(Values(Svg(*html_, "chart-timeline-0"), "xtick", "data-value"), "timeline x");
  ExpectRoundTicks(Values(Svg(*html_, "chart-queue-waits"), "ytick", "data-value"), "waits y");
}

TEST_F(SimReportPage, JobsCsvHasAQueueColumnAndReadsBack) {
  const std::string csv = FormatJobsCsv(*results_, workload_);
  auto records = ParseCsv("jobs.csv", csv);
  ASSERT_TRUE(records) << records.error().ToString();
  ASSERT_EQ(records->size(), 1 + 2 * workload_->jobs.size());
  const auto& header = records->front().fields;
  ASSERT_GE(header.size(), 3u);
  EXPECT_EQ(header[0], "config");
  EXPECT_EQ(header[1], "job_id");
  EXPECT_EQ(header[2], "queue");
  std::map<std::string, std::string> vc_of;
  for (const auto& j : workload_->jobs) vc_of[j.name] = j.vc;
  for (size_t i = 1; i < records->size(); ++i) {
    const auto& f = (*records)[i].fields;
    ASSERT_EQ(f.size(), header.size()) << "row " << i;
    EXPECT_EQ(f[2], vc_of[f[1]]) << f[1];
  }
  // A name with a comma and a quote survives the trip.
  std::vector<SimResult> odd = {results_->front()};
  odd[0].jobs.resize(1);
  odd[0].jobs[0].name = "a \"b\", c";
  auto back = ParseCsv("odd.csv", FormatJobsCsv(odd));
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ((*back)[1].fields[0], "a \"b\", c");
}

TEST_F(SimReportPage, RendersInHeadlessChromium) {
  std::string chromium = tianshu::testing::FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed";
  auto dir = std::filesystem::temp_directory_path() / "tianshu_sim_report_test";
  std::filesystem::create_directories(dir);
  std::string html = (dir / "report.html").string(), png = (dir / "report.png").string();
  std::filesystem::remove(png);
  ASSERT_TRUE(WriteHtmlReport(html, "philly at load 0.9", *topo_, *results_, workload_));
  std::string cmd = chromium +
                    " --headless --no-sandbox --disable-gpu --disable-background-networking "
                    "--disable-component-update --disable-sync --hide-scrollbars --screenshot=" +
                    png + " --window-size=1400,3400 file://" + html + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(std::filesystem::exists(png));
  // A blank page compresses to a few KB; charts, tables and heat maps do not.
  EXPECT_GT(std::filesystem::file_size(png), 100'000u);
  std::cout << "screenshot: " << png << " (" << std::filesystem::file_size(png) << " bytes)\n";
}

}  // namespace
}  // namespace tianshu::sim
