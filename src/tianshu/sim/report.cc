#include "tianshu/sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"

namespace tianshu::sim {
namespace {

std::string Hours(double s) { return fmt::format("{:.2f}h", s / 3600.0); }

const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd",
                         "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};

std::string Esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

// Time-weighted averages of a sample field over `buckets` equal intervals of [0, end].
template <typename F>
std::vector<double> Bucket(const std::vector<Sample>& s, double end, int buckets, F field) {
  std::vector<double> sum(buckets, 0), wt(buckets, 0);
  if (s.empty() || end <= 0) return sum;
  double width = end / buckets;
  for (size_t i = 0; i < s.size(); ++i) {
    double a = s[i].t, b = i + 1 < s.size() ? s[i + 1].t : end;
    if (b <= a) continue;
    double v = field(s[i]);
    int k0 = std::clamp(static_cast<int>(a / width), 0, buckets - 1);
    int k1 = std::clamp(static_cast<int>(b / width), 0, buckets - 1);
    for (int k = k0; k <= k1; ++k) {
      double lo = std::max(a, k * width), hi = std::min(b, (k + 1) * width);
      if (hi > lo) {
        sum[k] += v * (hi - lo);
        wt[k] += hi - lo;
      }
    }
  }
  for (int k = 0; k < buckets; ++k) sum[k] = wt[k] > 0 ? sum[k] / wt[k] : 0;
  return sum;
}

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> pts;
};

// A tick or bar label: plain digits, with thousands separated, never an exponent.
std::string Number(double v) {
  if (v != 0 && std::abs(v) < 10) return fmt::format("{:.3g}", v);
  std::string digits = fmt::format("{:.0f}", std::abs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

// A line chart in SVG: axes, ticks, legend.
std::string LineChart(const std::string& title, const std::string& xlabel,
                      const std::string& ylabel, const std::vector<Series>& series,
                      double ymax_hint = 0, bool percent = false) {
  const double W = 640, H = 300, L = 60, R = 16, T = 32, B = 44;
  double xmax = 0, ymax = ymax_hint;
  for (const auto& s : series) {
    for (auto [x, y] : s.pts) {
      xmax = std::max(xmax, x);
      if (ymax_hint <= 0) ymax = std::max(ymax, y);
    }
  }
  if (xmax <= 0) xmax = 1;
  if (ymax <= 0) ymax = 1;
  auto X = [&](double x) { return L + (W - L - R) * x / xmax; };
  auto Y = [&](double y) { return H - B - (H - T - B) * std::min(y, ymax) / ymax; };
  std::ostringstream o;
  o << fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" class="chart">)svg", W, H);
  o << fmt::format(R"svg(<text x="{}" y="20" class="title">{}</text>)svg", L, Esc(title));
  for (int i = 0; i <= 4; ++i) {
    double y = ymax * i / 4;
    o << fmt::format(R"svg(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" class="grid"/>)svg", L,
                     W - R, Y(y), Y(y));
    o << fmt::format(R"svg(<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>)svg",
                     L - 6, Y(y) + 4, percent ? fmt::format("{:.0f}%", y * 100) : Number(y));
    double x = xmax * i / 4;
    o << fmt::format(R"svg(<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>)svg",
                     X(x), H - B + 16, Number(x));
  }
  o << fmt::format(R"svg(<line x1="{}" x2="{}" y1="{}" y2="{}" class="axis"/>)svg", L, W - R, H - B,
                   H - B);
  o << fmt::format(R"svg(<line x1="{}" x2="{}" y1="{}" y2="{}" class="axis"/>)svg", L, L, T, H - B);
  o << fmt::format(R"svg(<text x="{}" y="{}" class="label" text-anchor="middle">{}</text>)svg",
                   (L + W - R) / 2, H - 6, Esc(xlabel));
  o << fmt::format(
      R"svg(<text x="14" y="{}" class="label" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>)svg",
      (T + H - B) / 2, (T + H - B) / 2, Esc(ylabel));
  int li = 0;
  for (const auto& s : series) {
    std::string d;
    for (size_t i = 0; i < s.pts.size(); ++i) {
      d += fmt::format("{}{:.1f},{:.1f}", i ? " L" : "M", X(s.pts[i].first), Y(s.pts[i].second));
    }
    o << fmt::format(R"svg(<path d="{}" fill="none" stroke="{}" stroke-width="1.8"/>)svg", d,
                     s.color);
    double lx = W - R - 110.0 * static_cast<double>(series.size() - static_cast<size_t>(li));
    o << fmt::format(R"svg(<rect x="{}" y="{}" width="12" height="4" fill="{}"/>)svg", lx, T - 4,
                     s.color);
    o << fmt::format(R"svg(<text x="{}" y="{}" class="tick">{}</text>)svg", lx + 16, T + 1,
                     Esc(s.name));
    ++li;
  }
  o << "</svg>";
  return o.str();
}

std::string BarChart(const std::string& title, const std::string& unit,
                     const std::vector<std::pair<std::string, double>>& bars) {
  const double W = 640, H = 300, L = 60, R = 16, T = 48, B = 44;
  double ymax = 0;
  for (auto& [n, v] : bars) ymax = std::max(ymax, v);
  if (ymax <= 0) ymax = 1;
  std::ostringstream o;
  o << fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" class="chart">)svg", W, H);
  o << fmt::format(R"svg(<text x="{}" y="20" class="title">{}</text>)svg", L, Esc(title));
  double bw = (W - L - R) / static_cast<double>(std::max<size_t>(1, bars.size()));
  for (size_t i = 0; i < bars.size(); ++i) {
    double h = (H - T - B) * bars[i].second / ymax;
    double x = L + static_cast<double>(i) * bw + bw * 0.2;
    o << fmt::format(
        R"svg(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"/>)svg", x,
        H - B - h, bw * 0.6, h, kColors[i % 8]);
    o << fmt::format(
        R"svg(<text x="{:.1f}" y="{:.1f}" class="tick" text-anchor="middle">{} {}</text>)svg",
        x + bw * 0.3, H - B - h - 6, Number(bars[i].second), Esc(unit));
    o << fmt::format(
        R"svg(<text x="{:.1f}" y="{}" class="label" text-anchor="middle">{}</text>)svg",
        x + bw * 0.3, H - B + 18, Esc(bars[i].first));
  }
  o << fmt::format(R"svg(<line x1="{}" x2="{}" y1="{}" y2="{}" class="axis"/>)svg", L, W - R, H - B,
                   H - B);
  o << "</svg>";
  return o.str();
}

std::string HeatMap(const std::string& title, const model::Topology& topo,
                    const std::vector<float>& heat, double t) {
  int n = static_cast<int>(heat.size());
  int cols = std::max(1, static_cast<int>(std::ceil(std::sqrt(n * 2.0))));
  int rows = (n + cols - 1) / std::max(1, cols);
  double cell = std::clamp(600.0 / cols, 3.0, 24.0);
  double W = std::max(640.0, cols * cell + 20), H = rows * cell + 44;
  std::ostringstream o;
  o << fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {:.0f} {:.0f}" class="chart">)svg",
      W, H);
  o << fmt::format(R"svg(<text x="10" y="20" class="title">{} at t = {}</text>)svg", Esc(title),
                   FormatSeconds(t));
  for (int i = 0; i < n; ++i) {
    double v = std::clamp<double>(heat[i], 0, 1);
    int r = static_cast<int>(255 - 200 * v), g = static_cast<int>(245 - 180 * v),
        b = static_cast<int>(240 - 60 * v);
    const int row = i / cols, col = i % cols;  // the node's cell in the grid
    double x = 10 + col * cell, y = 32 + row * cell;
    o << fmt::format(
        R"svg(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="rgb({},{},{})" stroke="#fff" stroke-width="0.5"><title>{}: {:.0f}%</title></rect>)svg",
        x, y, cell, cell, r, g, b, Esc(i < topo.NumNodes() ? topo.nodes[i].name : ""), v * 100);
  }
  o << "</svg>";
  return o.str();
}

}  // namespace

std::string FormatTable(const std::vector<SimResult>& results) {
  std::ostringstream o;
  std::vector<std::string> rows = {
      "utilization",  "effective util", "avg JCT",     "p50 JCT",    "p99 JCT",
      "avg queue",    "makespan",       "makespan LB", "comm share", "throughput (GPU-h/h)",
      "energy (kWh)", "preemptions",    "migrations",  "completed",  "unfinished",
      "wall (s)",     "SLO attainment", "colocated"};
  o << fmt::format("{:<22}", "");
  for (const auto& r : results) o << fmt::format("{:>14}", r.config);
  o << "\n";
  const bool serving = std::any_of(results.begin(), results.end(), [](const SimResult& r) {
    return r.metrics.inference_services > 0;
  });
  for (size_t k = 0; k < rows.size(); ++k) {
    if (k >= 16 && !serving) continue;  // the inference rows, only where there are services
    o << fmt::format("{:<22}", rows[k]);
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
      o << fmt::format("{:>14}", v);
    }
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

Status WriteJobsCsv(const std::string& path, const std::vector<SimResult>& results) {
  std::ofstream out(path);
  if (!out) return Fail("cannot write ", path);
  bool many = results.size() > 1;
  if (many) out << "config,";
  out << "job_id,num_gpu,submit_time,start_time,end_time,jct,queue_time,slowdown,preemptions,"
         "nodes,leaves_spanned,slo_attainment,p99_latency_ms,colocated\n";
  for (const auto& r : results) {
    for (const auto& j : r.jobs) {
      if (many) out << r.config << ",";
      out << fmt::format("{},{},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{:.4f},{},{},{},", j.name,
                         j.gpus, j.submit_s, j.start_s, j.end_s, j.jct_s, j.queue_s, j.slowdown,
                         j.preemptions, j.nodes, j.leaves);
      // Inference figures only for priced services (empty otherwise).
      if (j.slo_attainment >= 0) {
        out << fmt::format("{:.4f},{:.0f},{}\n", j.slo_attainment, j.p99_latency_ms,
                           j.colocated ? 1 : 0);
      } else {
        out << ",,\n";
      }
    }
  }
  if (!out) return Fail("cannot write ", path);
  return Ok();
}

std::string RenderHtml(const std::string& title, const model::Topology& topology,
                       const std::vector<SimResult>& results) {
  const int kBuckets = 200;
  double end = 0;
  for (const auto& r : results) end = std::max(end, r.metrics.makespan_s);
  double hours = end / 3600.0;
  std::vector<Series> util, queue, comm, cdf;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    std::string color = kColors[i % 8];
    double gpus = std::max(1, r.cluster_gpus);
    auto u =
        Bucket(r.samples, end, kBuckets, [&](const Sample& s) { return s.allocated_gpus / gpus; });
    auto q = Bucket(r.samples, end, kBuckets, [](const Sample& s) { return double(s.queued); });
    auto c = Bucket(r.samples, end, kBuckets, [](const Sample& s) {
      return s.allocated_gpus > 0 ? s.comm_gpus / s.allocated_gpus : 0.0;
    });
    Series su{r.config, color, {}}, sq{r.config, color, {}}, sc{r.config, color, {}};
    for (int k = 0; k < kBuckets; ++k) {
      double x = (k + 0.5) * hours / kBuckets;
      su.pts.emplace_back(x, u[k]);
      sq.pts.emplace_back(x, q[k]);
      sc.pts.emplace_back(x, c[k]);
    }
    util.push_back(su);
    queue.push_back(sq);
    comm.push_back(sc);
    std::vector<double> j;
    for (const auto& jr : r.jobs) {
      if (jr.jct_s >= 0) j.push_back(jr.jct_s / 3600.0);
    }
    std::sort(j.begin(), j.end());
    Series sd{r.config, color, {}};
    size_t step = std::max<size_t>(1, j.size() / 300);
    for (size_t k = 0; k < j.size(); k += step) {
      sd.pts.emplace_back(std::log10(std::max(j[k], 1e-3)) + 3,
                          static_cast<double>(k + 1) / static_cast<double>(j.size()));
    }
    if (!j.empty()) sd.pts.emplace_back(std::log10(std::max(j.back(), 1e-3)) + 3, 1.0);
    cdf.push_back(sd);
  }
  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" << Esc(title)
    << "</title><style>"
       "body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;"
       "background:#fafafa}h1{font-size:22px}h2{font-size:16px;margin-top:28px}"
       ".grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}"
       ".card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}"
       "svg.chart{width:100%;height:auto}.title{font-size:14px;font-weight:600}"
       ".tick{font-size:11px;fill:#444}.label{font-size:12px;fill:#333}"
       ".grid{stroke:#eee}.axis{stroke:#888}"
       "table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;"
       "padding:4px 10px;text-align:right;font-size:13px}th{background:#f0f0f0}"
       "td:first-child,th:first-child{text-align:left}</style></head><body>";
  o << "<h1>" << Esc(title) << "</h1>";
  o << "<p>" << topology.NumGpus() << " GPUs on " << topology.NumNodes() << " nodes. "
    << "Produced by <code>tianshu simulate</code>; all figures are what the simulator measured."
    << "</p>";
  o << "<table><tr><th>metric</th>";
  for (const auto& r : results) o << "<th>" << Esc(r.config) << "</th>";
  o << "</tr>";
  std::istringstream table(FormatTable(results));
  std::string line;
  std::getline(table, line);
  while (std::getline(table, line)) {
    o << "<tr><td>" << Esc(std::string(Trim(line.substr(0, 22)))) << "</td>";
    for (size_t i = 0; i < results.size(); ++i) {
      size_t at = 22 + i * 14;
      o << "<td>" << Esc(at < line.size() ? std::string(Trim(line.substr(at, 14))) : "") << "</td>";
    }
    o << "</tr>";
  }
  o << "</table>";
  o << "<div class=\"grid2\">";
  o << "<div class=\"card\">"
    << LineChart("GPU utilization over time", "hours", "allocated", util, 1, true) << "</div>";
  o << "<div class=\"card\">"
    << LineChart("JCT CDF", "JCT, log10(hours) + 3  (3 = 1 h, 4 = 10 h)", "fraction of jobs", cdf,
                 1, true)
    << "</div>";
  o << "<div class=\"card\">" << LineChart("Queue length", "hours", "pending jobs", queue)
    << "</div>";
  o << "<div class=\"card\">"
    << LineChart("Communication share of step time", "hours", "exposed comm", comm, 0, true)
    << "</div>";
  std::vector<std::pair<std::string, double>> energy;
  for (const auto& r : results) energy.emplace_back(r.config, r.metrics.energy_kwh);
  o << "<div class=\"card\">" << BarChart("Energy (accelerator boards)", "kWh", energy) << "</div>";
  for (const auto& r : results) {
    if (r.heat.empty()) continue;
    o << "<div class=\"card\">"
      << HeatMap("Busiest moment, " + r.config + " (a cell per node, darker = fuller)", topology,
                 r.heat, r.heat_time_s)
      << "</div>";
  }
  o << "</div></body></html>\n";
  return o.str();
}

Status WriteHtmlReport(const std::string& path, const std::string& title,
                       const model::Topology& topology, const std::vector<SimResult>& results) {
  std::ofstream out(path);
  if (!out) return Fail("cannot write ", path);
  out << RenderHtml(title, topology, results);
  if (!out) return Fail("cannot write ", path);
  return Ok();
}

}  // namespace tianshu::sim
