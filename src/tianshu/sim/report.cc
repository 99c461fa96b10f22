#include "tianshu/sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "tianshu/base/csv.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/sim/internal/report_views.h"
#include "tianshu/sim/internal/svg_chart.h"

namespace tianshu::sim {
namespace {

using internal::BarChart;
using internal::BarSeries;
using internal::Bucket;
using internal::BucketMax;
using internal::Cut;
using internal::Duration;
using internal::DurationScale;
using internal::Esc;
using internal::Frame;
using internal::HeatMap;
using internal::LargestJobs;
using internal::Legend;
using internal::LegendItem;
using internal::LinearScale;
using internal::LineChart;
using internal::Mean;
using internal::Number;
using internal::OpenSvg;
using internal::PlotRect;
using internal::Quantile;
using internal::Scale;
using internal::Series;
using internal::Timeline;
using internal::TitleText;
using internal::XAxis;

std::string Hours(double s) { return fmt::format("{:.2f}h", s / 3600.0); }

const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd",
                         "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};

std::string ColorOf(size_t i) { return kColors[i % 8]; }

// ---- Per-job views -------------------------------------------------------------------------

// Each job's queue, by id: its spec's queue when it names one other than the default, else its
// Philly virtual cluster, else "default".
std::unordered_map<int64_t, std::string> QueuesOf(const Workload* workload) {
  std::unordered_map<int64_t, std::string> out;
  if (workload == nullptr) return out;
  for (const TraceJob& j : workload->jobs) {
    std::string q = j.spec && j.spec->queue != "default" ? j.spec->queue
                    : !j.vc.empty()                      ? j.vc
                                                         : "default";
    out.emplace(j.id, std::move(q));
  }
  return out;
}

std::string QueueOf(const std::unordered_map<int64_t, std::string>& queues, int64_t id) {
  auto it = queues.find(id);
  return it == queues.end() ? "" : it->second;
}

// Waits (time not running between submission and completion) of the completed jobs, sorted.
std::vector<double> Waits(const SimResult& r) {
  std::vector<double> w;
  for (const auto& j : r.jobs) {
    if (j.jct_s >= 0 && j.queue_s >= 0) w.push_back(j.queue_s);
  }
  std::sort(w.begin(), w.end());
  return w;
}

// A CDF on a log duration axis: values at or below the axis's low end sit on its left edge.
Series CdfSeries(const std::string& name, const std::string& color,
                 const std::vector<double>& sorted, double lo) {
  Series s{name, color, {}};
  if (sorted.empty()) return s;
  const double n = static_cast<double>(sorted.size());
  const size_t at_lo =
      static_cast<size_t>(std::upper_bound(sorted.begin(), sorted.end(), lo) - sorted.begin());
  s.pts.emplace_back(lo, static_cast<double>(at_lo) / n);
  const size_t step = std::max<size_t>(1, (sorted.size() - at_lo) / 400);
  for (size_t k = at_lo; k < sorted.size(); k += step) {
    s.pts.emplace_back(sorted[k], static_cast<double>(k + 1) / n);
  }
  if (s.pts.back().second < 1) s.pts.emplace_back(sorted.back(), 1.0);
  return s;
}

// The smallest positive value in each of the sorted lists (1 when none).
double SmallestPositive(const std::vector<std::vector<double>>& lists) {
  double lo = 0;
  for (const auto& l : lists) {
    auto it = std::upper_bound(l.begin(), l.end(), 0.0);
    if (it != l.end()) lo = lo > 0 ? std::min(lo, *it) : *it;
  }
  return lo > 0 ? lo : 1;
}

double LargestOf(const std::vector<std::vector<double>>& lists) {
  double hi = 0;
  for (const auto& l : lists) {
    if (!l.empty()) hi = std::max(hi, l.back());
  }
  return hi;
}

// ---- The summary table ---------------------------------------------------------------------

struct TableRow {
  std::string label;       // as the text table prints it
  std::string html_label;  // as the HTML report prints it
  std::vector<std::string> values;
};

std::vector<TableRow> SummaryRows(const std::vector<SimResult>& results) {
  static const std::vector<std::pair<std::string, std::string>> kRows = {
      {"utilization", "GPU allocation (GPU-time held)"},
      {"effective util", "effective utilization (useful work)"},
      {"avg JCT", "avg JCT"},
      {"p50 JCT", "p50 JCT"},
      {"p99 JCT", "p99 JCT"},
      {"avg queue", "avg queue"},
      {"makespan", "makespan"},
      {"makespan LB", "makespan LB"},
      {"comm share", "comm share"},
      {"throughput (GPU-h/h)", "throughput (GPU-h/h)"},
      {"energy (kWh)", "energy (kWh)"},
      {"preemptions", "preemptions"},
      {"migrations", "migrations"},
      {"completed", "completed"},
      {"unfinished", "unfinished"},
      {"wall (s)", "wall (s)"},
      {"SLO attainment", "SLO attainment"},
      {"colocated", "colocated"}};
  const bool serving = std::any_of(results.begin(), results.end(), [](const SimResult& r) {
    return r.metrics.inference_services > 0;
  });
  std::vector<TableRow> rows;
  for (size_t k = 0; k < kRows.size(); ++k) {
    if (k >= 16 && !serving) continue;  // the inference rows, only where there are services
    TableRow row{kRows[k].first, kRows[k].second, {}};
    for (const auto& r : results) {
      const Metrics& m = r.metrics;
      std::string v;
      switch (k) {
        case 0:
          v = fmt::format("{:.1f}%", m.utilization * 100);
          break;
        case 1:
          v = fmt::format("{:.1f}%", m.effective_utilization * 100);
          break;
        case 2:
          v = Hours(m.avg_jct_s);
          break;
        case 3:
          v = Hours(m.p50_jct_s);
          break;
        case 4:
          v = Hours(m.p99_jct_s);
          break;
        case 5:
          v = Hours(m.avg_queue_s);
          break;
        case 6:
          v = Hours(m.makespan_s);
          break;
        case 7:
          v = Hours(m.makespan_lower_bound_s);
          break;
        case 8:
          v = fmt::format("{:.1f}%", m.comm_share * 100);
          break;
        case 9:
          v = fmt::format("{:.1f}", m.throughput);
          break;
        case 10:
          v = fmt::format("{:.0f}", m.energy_kwh);
          break;
        case 11:
          v = std::to_string(m.preemptions);
          break;
        case 12:
          v = std::to_string(m.migrations);
          break;
        case 13:
          v = std::to_string(m.jobs_completed);
          break;
        case 14:
          v = std::to_string(m.jobs_unfinished);
          break;
        case 15:
          v = fmt::format("{:.2f}", m.wall_seconds);
          break;
        case 16:
          v = m.slo_attainment < 0 ? "-" : fmt::format("{:.2f}%", m.slo_attainment * 100);
          break;
        case 17:
          v = fmt::format("{}/{}", m.inference_colocated, m.inference_services);
          break;
      }
      row.values.push_back(std::move(v));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---- Waits by queue ------------------------------------------------------------------------

struct QueueWaits {
  std::string queue;
  int64_t jobs = 0;                        // in the workload (first configuration's results)
  double gpu_hours = 0;                    // ideal GPU-hours of those jobs
  std::vector<std::vector<double>> waits;  // per configuration, completed jobs, sorted
};

std::vector<QueueWaits> WaitsByQueue(const std::vector<SimResult>& results,
                                     const std::unordered_map<int64_t, std::string>& queues) {
  std::map<std::string, QueueWaits> by;
  for (size_t c = 0; c < results.size(); ++c) {
    for (const auto& j : results[c].jobs) {
      std::string q = QueueOf(queues, j.id);
      QueueWaits& w = by[q];
      w.queue = q.empty() ? "(unknown)" : q;
      w.waits.resize(results.size());
      if (c == 0) {
        ++w.jobs;
        w.gpu_hours += j.gpus * j.ideal_s / 3600.0;
      }
      if (j.jct_s >= 0 && j.queue_s >= 0) w.waits[c].push_back(j.queue_s);
    }
  }
  std::vector<QueueWaits> out;
  for (auto& [q, w] : by) {
    for (auto& v : w.waits) std::sort(v.begin(), v.end());
    out.push_back(std::move(w));
  }
  std::sort(out.begin(), out.end(), [](const QueueWaits& a, const QueueWaits& b) {
    return a.jobs != b.jobs ? a.jobs > b.jobs : a.queue < b.queue;
  });
  return out;
}

// The per-job CSV, a row at a time (a run of Philly's 82,000 jobs under six configurations
// would otherwise be held whole in memory).
void WriteJobsCsvTo(std::ostream& out, const std::vector<SimResult>& results,
                    const Workload* workload) {
  const auto queues = QueuesOf(workload);
  const bool many = results.size() > 1;
  std::vector<std::string> header = {
      "job_id",         "queue",          "num_gpu",  "submit_time",
      "start_time",     "end_time",       "jct",      "queue_time",
      "slowdown",       "preemptions",    "nodes",    "leaves_spanned",
      "slo_attainment", "p99_latency_ms", "colocated"};
  if (many) header.insert(header.begin(), "config");
  out << CsvLine(header);
  for (const auto& r : results) {
    for (const auto& j : r.jobs) {
      std::vector<std::string> row;
      if (many) row.push_back(r.config);
      row.push_back(j.name);
      row.push_back(QueueOf(queues, j.id));
      row.push_back(std::to_string(j.gpus));
      for (double v : {j.submit_s, j.start_s, j.end_s, j.jct_s, j.queue_s}) {
        row.push_back(fmt::format("{:.0f}", v));
      }
      row.push_back(fmt::format("{:.4f}", j.slowdown));
      row.push_back(std::to_string(j.preemptions));
      row.push_back(std::to_string(j.nodes));
      row.push_back(std::to_string(j.leaves));
      // Inference figures only for priced services (empty otherwise).
      if (j.slo_attainment >= 0) {
        row.push_back(fmt::format("{:.4f}", j.slo_attainment));
        row.push_back(fmt::format("{:.0f}", j.p99_latency_ms));
        row.push_back(j.colocated ? "1" : "0");
      } else {
        row.insert(row.end(), {"", "", ""});
      }
      out << CsvLine(row);
    }
  }
}

}  // namespace

std::string FormatTable(const std::vector<SimResult>& results) {
  std::ostringstream o;
  o << fmt::format("{:<22}", "");
  for (const auto& r : results) o << fmt::format("{:>14}", r.config);
  o << "\n";
  for (const TableRow& row : SummaryRows(results)) {
    o << fmt::format("{:<22}", row.label);
    for (const auto& v : row.values) o << fmt::format("{:>14}", v);
    o << "\n";
  }
  return o.str();
}

std::string FormatJson(const std::string& workload, const std::string& cluster,
                       const std::vector<SimResult>& results) {
  nlohmann::json doc;
  doc["workload"] = workload;
  doc["cluster"] = cluster;
  doc["configs"] = nlohmann::json::array();
  for (const auto& r : results) {
    const Metrics& m = r.metrics;
    nlohmann::json c;
    c["config"] = r.config;
    c["utilization"] = m.utilization;
    c["effective_utilization"] = m.effective_utilization;
    c["effective_utilization_while_waiting"] = m.effective_utilization_while_waiting;
    c["waiting_hours"] = m.waiting_hours;
    c["avg_jct_s"] = m.avg_jct_s;
    c["p50_jct_s"] = m.p50_jct_s;
    c["p99_jct_s"] = m.p99_jct_s;
    c["avg_queue_s"] = m.avg_queue_s;
    c["makespan_s"] = m.makespan_s;
    c["makespan_lower_bound_s"] = m.makespan_lower_bound_s;
    c["comm_share"] = m.comm_share;
    c["throughput"] = m.throughput;
    c["energy_kwh"] = m.energy_kwh;
    c["preemptions"] = m.preemptions;
    c["migrations"] = m.migrations;
    c["retries"] = m.retries;
    c["jobs_completed"] = m.jobs_completed;
    c["jobs_unfinished"] = m.jobs_unfinished;
    c["jobs_failed"] = m.jobs_failed;
    c["gpu_hours_lost"] = m.gpu_hours_lost;
    c["inference_services"] = m.inference_services;
    c["inference_colocated"] = m.inference_colocated;
    c["slo_attainment"] = m.slo_attainment;
    c["inference_p99_ms"] = m.inference_p99_ms;
    c["colocated_training_gpu_h"] = m.colocated_training_gpu_h;
    c["colocation_training_loss"] = m.colocation_training_loss;
    c["wall_seconds"] = m.wall_seconds;
    c["events"] = m.events;
    c["cycles"] = m.cycles;
    c["cluster_gpus"] = r.cluster_gpus;
    doc["configs"].push_back(std::move(c));
  }
  return doc.dump(2);
}

std::string FormatJobsCsv(const std::vector<SimResult>& results, const Workload* workload) {
  std::ostringstream out;
  WriteJobsCsvTo(out, results, workload);
  return out.str();
}

Status WriteJobsCsv(const std::string& path, const std::vector<SimResult>& results,
                    const Workload* workload) {
  std::ofstream out(path);
  if (!out) return Fail("cannot write ", path);
  WriteJobsCsvTo(out, results, workload);
  if (!out) return Fail("cannot write ", path);
  return Ok();
}

std::string RenderHtml(const std::string& title, const model::Topology& topology,
                       const std::vector<SimResult>& results, const Workload* workload) {
  const int kBuckets = 200;
  double end = 0;
  for (const auto& r : results) end = std::max(end, r.metrics.makespan_s);
  const double hours = end / 3600.0;
  const std::string interval = Duration(end / kBuckets);
  std::vector<Series> util, queue, comm, wait_cdf, jct_cdf;
  std::vector<LegendItem> configs;
  std::vector<std::vector<double>> waits, jcts;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const std::string color = ColorOf(i);
    configs.push_back({r.config, color});
    const double gpus = std::max(1, r.cluster_gpus);
    auto eff =
        Bucket(r.samples, end, kBuckets, [&](const Sample& s) { return s.effective_gpus / gpus; });
    auto alloc =
        Bucket(r.samples, end, kBuckets, [&](const Sample& s) { return s.allocated_gpus / gpus; });
    auto q = BucketMax(r.samples, end, kBuckets, [](const Sample& s) { return double(s.queued); });
    auto c = Bucket(r.samples, end, kBuckets, [](const Sample& s) {
      return s.allocated_gpus > 0 ? s.comm_gpus / s.allocated_gpus : 0.0;
    });
    Series se{r.config, color, {}}, sa{r.config + " (allocated)", color, {}, true},
        sq{r.config, color, {}}, sc{r.config, color, {}};
    for (int k = 0; k < kBuckets; ++k) {
      const double x = (k + 0.5) * hours / kBuckets;
      se.pts.emplace_back(x, eff[k]);
      sa.pts.emplace_back(x, alloc[k]);
      sq.pts.emplace_back(x, q[k]);
      sc.pts.emplace_back(x, c[k]);
    }
    util.push_back(std::move(sa));
    util.push_back(std::move(se));
    queue.push_back(std::move(sq));
    comm.push_back(std::move(sc));
    waits.push_back(Waits(r));
    std::vector<double> j;
    for (const auto& jr : r.jobs) {
      if (jr.jct_s >= 0) j.push_back(jr.jct_s);
    }
    std::sort(j.begin(), j.end());
    jcts.push_back(std::move(j));
  }
  const double wait_lo = DurationScale(SmallestPositive(waits), 1).lo;
  const double jct_lo = DurationScale(SmallestPositive(jcts), 1).lo;
  std::vector<LegendItem> wait_legend;
  for (size_t i = 0; i < results.size(); ++i) {
    wait_cdf.push_back(CdfSeries(results[i].config, ColorOf(i), waits[i], wait_lo));
    jct_cdf.push_back(CdfSeries(results[i].config, ColorOf(i), jcts[i], jct_lo));
    wait_legend.push_back(
        {fmt::format("{} (median {}, p95 {})", results[i].config, Duration(Quantile(waits[i], 0.5)),
                     Duration(Quantile(waits[i], 0.95))),
         ColorOf(i)});
  }
  std::vector<LegendItem> util_legend = configs;
  util_legend.push_back({"solid: useful work", "#555"});
  util_legend.push_back({"dashed: allocated", "#555", true});
  double util_max = 1;
  for (const auto& s : util) {
    for (auto [x, y] : s.pts) util_max = std::max(util_max, y);
  }

  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" << Esc(title)
    << "</title><style>"
       "body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;"
       "background:#fafafa}h1{font-size:22px}h2{font-size:16px;margin-top:28px}"
       ".grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}"
       ".card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}"
       "svg.chart{width:100%;height:auto}.title{font-size:14px;font-weight:600}"
       ".tick{font-size:11px;fill:#444}.label{font-size:12px;fill:#333}.small{font-size:9px;"
       "fill:#444}.note{font-size:13px;fill:#888}.grid{stroke:#eee}.axis{stroke:#888}"
       ".plot{stroke:#ddd}.box{stroke:#bbb}"
       "table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;"
       "padding:4px 10px;text-align:right;font-size:13px}th{background:#f0f0f0}"
       "td:first-child,th:first-child{text-align:left}p.note{color:#555;font-size:13px}"
       "</style></head><body>";
  o << "<h1>" << Esc(title) << "</h1>";
  o << "<p>" << topology.NumGpus() << " GPUs on " << topology.NumNodes() << " nodes. "
    << "Produced by <code>tianshu simulate</code>; all figures are what the simulator measured."
    << "</p>";
  o << "<table id=\"summary\"><tr><th>metric</th>";
  for (const auto& r : results) o << "<th>" << Esc(r.config) << "</th>";
  o << "</tr>";
  for (const TableRow& row : SummaryRows(results)) {
    o << "<tr><td>" << Esc(row.html_label) << "</td>";
    for (const auto& v : row.values) o << "<td>" << Esc(v) << "</td>";
    o << "</tr>";
  }
  o << "</table>";
  o << "<p class=\"note\">GPU allocation is the share of GPU-time held by jobs (the text "
       "table's <code>utilization</code>); effective utilization weighs each job's GPUs by its "
       "speed against an ideal placement (the useful share). Time series are over "
    << kBuckets << " equal intervals of " << Esc(interval) << ".</p>";

  o << "<h2>Over time</h2><div class=\"grid2\">";
  o << "<div class=\"card\">"
    << LineChart("chart-utilization", "GPU utilization: useful work and allocation",
                 {.label = "hours", .max = hours},
                 {.label = "share of the cluster's GPUs", .max = util_max, .percent = true}, util,
                 util_legend)
    << "</div>";
  o << "<div class=\"card\">"
    << LineChart("chart-queue", "Pending jobs (most at once in each interval)",
                 {.label = "hours", .max = hours}, {.label = "pending jobs"}, queue, configs,
                 "no job waited in this run")
    << "</div>";
  o << "<div class=\"card\">"
    << LineChart("chart-comm", "Communication share of step time", {.label = "hours", .max = hours},
                 {.label = "exposed communication", .percent = true}, comm, configs)
    << "</div>";
  std::vector<std::string> names;
  BarSeries energy{"energy", "", {}};  // a bar per configuration, in its colour
  for (size_t i = 0; i < results.size(); ++i) {
    names.push_back(results[i].config);
    energy.values.push_back(results[i].metrics.energy_kwh);
    energy.colors.push_back(ColorOf(i));
  }
  o << "<div class=\"card\">"
    << BarChart("chart-energy", "Energy (accelerator boards)", {.label = "kWh"}, names, {energy},
                false, [](double v) { return Number(v) + " kWh"; })
    << "</div>";
  o << "</div>";

  o << "<h2>Waiting</h2><div class=\"grid2\">";
  o << "<div class=\"card\">"
    << LineChart("chart-wait-cdf",
                 fmt::format("Wait-time CDF (completed jobs; waits up to {} at the left edge)",
                             Duration(wait_lo)),
                 {.label = "wait (log scale)",
                  .max = LargestOf(waits),
                  .duration = true,
                  .min_positive = wait_lo},
                 {.label = "share of jobs", .max = 1, .percent = true}, wait_cdf, wait_legend)
    << "</div>";
  o << "<div class=\"card\">"
    << LineChart("chart-jct-cdf", "JCT CDF (completed jobs)",
                 {.label = "job completion time (log scale)",
                  .max = LargestOf(jcts),
                  .duration = true,
                  .min_positive = jct_lo},
                 {.label = "share of jobs", .max = 1, .percent = true}, jct_cdf, configs)
    << "</div>";
  const auto queues = QueuesOf(workload);
  const auto by_queue = WaitsByQueue(results, queues);
  const size_t kMaxQueues = 16;
  std::vector<std::string> qnames;
  std::vector<BarSeries> qbars;
  for (size_t i = 0; i < results.size(); ++i) qbars.push_back({results[i].config, ColorOf(i), {}});
  for (size_t k = 0; k < by_queue.size() && k < kMaxQueues; ++k) {
    qnames.push_back(by_queue[k].queue);
    for (size_t i = 0; i < results.size(); ++i) {
      qbars[i].values.push_back(Mean(by_queue[k].waits[i]) / 3600.0);
    }
  }
  o << "<div class=\"card\">"
    << BarChart("chart-queue-waits",
                by_queue.size() > kMaxQueues
                    ? fmt::format("Mean wait by queue (the {} with most jobs)", kMaxQueues)
                    : std::string("Mean wait by queue"),
                {.label = "mean wait (hours)"}, qnames, qbars, true,
                [](double h) { return Duration(h * 3600); })
    << "</div>";
  o << "</div>";
  o << "<table id=\"queue-waits\"><tr><th>queue</th><th>jobs</th><th>GPU-hours (ideal)</th>";
  for (const auto& r : results) {
    o << "<th>" << Esc(r.config) << " mean wait</th><th>" << Esc(r.config) << " p95 wait</th>";
  }
  o << "</tr>";
  for (const auto& q : by_queue) {
    o << "<tr class=\"queue-row\"><td>" << Esc(q.queue) << "</td><td>" << q.jobs << "</td><td>"
      << Number(q.gpu_hours) << "</td>";
    for (size_t i = 0; i < results.size(); ++i) {
      o << "<td>" << Duration(Mean(q.waits[i])) << "</td><td>"
        << Duration(Quantile(q.waits[i], 0.95)) << "</td>";
    }
    o << "</tr>";
  }
  o << "</table>";
  o << "<p class=\"note\">A job's queue is the one its job file names, else its Philly virtual "
       "cluster, else <code>default</code>. Waits are of completed jobs: the time between "
       "submission and completion that the job did not run.</p>";

  if (!results.empty()) {
    const size_t kLargest = 20;
    const auto ids = LargestJobs(results.front().jobs, kLargest);
    o << "<h2>The " << ids.size() << " largest jobs</h2><div class=\"grid2\">";
    for (size_t i = 0; i < results.size(); ++i) {
      std::unordered_map<int64_t, const JobResult*> by_id;
      for (const auto& j : results[i].jobs) by_id.emplace(j.id, &j);
      std::vector<const JobResult*> rows;
      for (int64_t id : ids) {
        if (auto it = by_id.find(id); it != by_id.end()) rows.push_back(it->second);
      }
      o << "<div class=\"card\">"
        << Timeline(fmt::format("chart-timeline-{}", i),
                    "Timeline, " + results[i].config + " (most GPUs first)", rows, end, ColorOf(i))
        << "</div>";
    }
    o << "</div>";
  }

  o << "<h2>The cluster at its busiest</h2><div class=\"grid2\">";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (r.heat.empty()) continue;
    o << "<div class=\"card\">"
      << HeatMap(fmt::format("chart-heat-{}", i),
                 "Busiest moment, " + r.config + " (nodes by leaf switch)", topology, r.heat,
                 r.heat_time_s)
      << "</div>";
  }
  o << "</div></body></html>\n";
  return o.str();
}

Status WriteHtmlReport(const std::string& path, const std::string& title,
                       const model::Topology& topology, const std::vector<SimResult>& results,
                       const Workload* workload) {
  std::ofstream out(path);
  if (!out) return Fail("cannot write ", path);
  out << RenderHtml(title, topology, results, workload);
  if (!out) return Fail("cannot write ", path);
  return Ok();
}

}  // namespace tianshu::sim
