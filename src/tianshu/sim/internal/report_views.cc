// The pieces of the HTML report that draw the cluster and its jobs: the node heat map by leaf
// switch, the timeline of the largest jobs, and the quantiles and durations they print
// (report_views.h).
#include "tianshu/sim/internal/report_views.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "tianshu/sim/internal/svg_chart.h"

namespace tianshu::sim::internal {

// The value at quantile q (0..1) of sorted values, nearest rank; 0 when empty.
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, double(sorted.size()))) - 1;
  return sorted[i];
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// A duration for people: "0 s", "45 s", "12 min", "3.4 h", "2.1 d".
std::string Duration(double s) {
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min", s / 60);
  if (s < 2 * 86400) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.1f} d", s / 86400);
}

// ---- The cluster by leaf switch ------------------------------------------------------------

// A cell per node, the nodes of a leaf switch boxed together under its name, darker = more of
// the node's GPUs allocated.
std::string HeatMap(const std::string& id, const std::string& title, const model::Topology& topo,
                    const std::vector<float>& heat, double t) {
  const double W = 640, margin = 10, top = 48;
  auto rgb = [](double v) {
    return fmt::format("rgb({},{},{})", static_cast<int>(255 - 200 * v),
                       static_cast<int>(245 - 180 * v), static_cast<int>(240 - 60 * v));
  };
  std::map<int, std::vector<int>> by_leaf;  // leaf switch id (-1: none) -> nodes
  const int n = static_cast<int>(heat.size());
  for (int i = 0; i < n; ++i) by_leaf[i < topo.NumNodes() ? topo.nodes[i].leaf : -1].push_back(i);
  const double cell = std::clamp(std::floor(std::sqrt(600.0 * 380.0 / std::max(1, n))), 5.0, 28.0);
  const int max_cols = std::max(1, static_cast<int>((W - 2 * margin) / cell));
  std::ostringstream body;
  double x = margin, y = top, row_h = 0;
  for (const auto& [leaf, nodes] : by_leaf) {
    const int count = static_cast<int>(nodes.size());
    int cols =
        count <= 64 ? std::min(count, 8) : static_cast<int>(std::ceil(std::sqrt(2.0 * count)));
    cols = std::min(cols, max_cols);
    const int rows = (count + cols - 1) / cols;
    const double gw = std::max(cols * cell, 36.0), gh = 13 + rows * cell;
    if (x > margin && x + gw > W - margin) {
      x = margin;
      y += row_h + 8;
      row_h = 0;
    }
    const std::string name = leaf >= 0 && leaf < static_cast<int>(topo.switches.size())
                                 ? topo.switches[leaf].name
                                 : "no switch";
    double sum = 0;
    for (int i : nodes) sum += std::clamp<double>(heat[i], 0, 1);
    body << fmt::format(
        R"svg(<g class="leaf" data-leaf="{}" data-nodes="{}"><title>{}: {} nodes, {:.0f}% allocated</title>)svg",
        Esc(name), count, Esc(name), count, 100 * sum / std::max(1, count));
    body << fmt::format(R"svg(<text x="{:.1f}" y="{:.1f}" class="small">{}</text>)svg", x, y + 9,
                        Esc(Cut(name, static_cast<size_t>(std::max(4.0, gw / 5.5)))));
    for (int k = 0; k < count; ++k) {
      const int i = nodes[static_cast<size_t>(k)];
      const double v = std::clamp<double>(heat[i], 0, 1);
      const int row = k / cols, col = k % cols;  // the node's cell in its leaf's box
      body << fmt::format(
          R"svg(<rect class="node" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" stroke="#fff" stroke-width="0.5"><title>{}: {:.0f}%</title></rect>)svg",
          x + col * cell, y + 13 + row * cell, cell, cell, rgb(v),
          Esc(i < topo.NumNodes() ? topo.nodes[i].name : ""), v * 100);
    }
    body << fmt::format(
        R"svg(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" class="box"/></g>)svg",
        x - 1, y + 12, cols * cell + 2, rows * cell + 2);
    x += gw + 10;
    row_h = std::max(row_h, gh);
  }
  const double H = y + row_h + margin;
  std::ostringstream o;
  o << OpenSvg(id, W, H);
  o << fmt::format(R"svg(<text x="{:.0f}" y="20" class="title">{} at t = {}</text>)svg", margin,
                   Esc(title), FormatSeconds(t));
  // Colour scale, on its own line between the title and the map.
  const std::string grad = id + "-scale";
  o << fmt::format(
      R"svg(<defs><linearGradient id="{}"><stop offset="0" stop-color="{}"/><stop offset="1" stop-color="{}"/></linearGradient></defs>)svg",
      grad, rgb(0), rgb(1));
  o << fmt::format(
      R"svg(<g class="legend"><text x="{:.0f}" y="36" class="tick">allocated share of a node's GPUs</text><text x="{:.0f}" y="36" class="tick" text-anchor="end">0%</text><rect x="{:.0f}" y="27" width="120" height="10" fill="url(#{})" stroke="#ccc"/><text x="{:.0f}" y="36" class="tick">100%</text></g>)svg",
      margin, margin + 226, margin + 230, grad, margin + 356);
  o << body.str() << "</svg>";
  return o.str();
}

// The `count` largest jobs: most GPUs, then longest ideal run, then first submitted.
std::vector<int64_t> LargestJobs(const std::vector<JobResult>& jobs, size_t count) {
  std::vector<const JobResult*> order;
  for (const auto& j : jobs) order.push_back(&j);
  std::sort(order.begin(), order.end(), [](const JobResult* a, const JobResult* b) {
    if (a->gpus != b->gpus) return a->gpus > b->gpus;
    if (a->ideal_s != b->ideal_s) return a->ideal_s > b->ideal_s;
    return a->id < b->id;
  });
  std::vector<int64_t> ids;
  for (size_t i = 0; i < order.size() && i < count; ++i) ids.push_back(order[i]->id);
  return ids;
}

// A Gantt chart: a row per job, grey from submission to first start, coloured from first start
// to end (time it was preempted inside that span included).
std::string Timeline(const std::string& id, const std::string& title,
                     const std::vector<const JobResult*>& jobs, double end_s,
                     const std::string& color) {
  Frame f;
  f.L = 170;
  const double row = 14;
  f.PH = std::max(1.0, static_cast<double>(jobs.size())) * row + 4;
  const Scale xs = LinearScale(end_s / 3600.0, 6, false);
  auto X = [&](double s) { return f.L + f.PW() * xs.Frac(s / 3600.0); };
  double legend_h = 0;
  const std::string leg =
      Legend({{"waiting (submitted, not started)", "#bdbdbd", false, true},
              {"first start to end (preempted time included)", color, false, true}},
             f.L, f.Bottom() + 52, f.PW(), &legend_h);
  std::ostringstream o;
  o << OpenSvg(id, f.W, f.Bottom() + 52 + legend_h + 4) << TitleText(10, title);
  o << XAxis(f, xs, "hours") << PlotRect(f);
  for (size_t r = 0; r < jobs.size(); ++r) {
    const JobResult& j = *jobs[r];
    const double y = f.T + 2 + static_cast<double>(r) * row;
    std::string label = fmt::format("{} \u00b7 {} GPUs", Cut(j.name, 16), j.gpus);
    if (j.preemptions > 0) label += fmt::format(" \u00b7 {}\u00d7", j.preemptions);
    o << fmt::format(
        R"svg(<text x="{:.0f}" y="{:.1f}" class="small" text-anchor="end">{}</text>)svg", f.L - 6,
        y + row - 4, Esc(label));
    const double started = j.start_s >= 0 ? j.start_s : end_s;
    const double ended = j.end_s >= 0 ? j.end_s : end_s;
    const std::string tip = fmt::format(
        "{}: {} GPUs, submitted at {}, {}, {}{}", j.name, j.gpus, Duration(j.submit_s),
        j.start_s >= 0 ? "started at " + Duration(j.start_s) : "never started",
        j.end_s >= 0 ? "ended at " + Duration(j.end_s) : "not finished (" + j.state + ")",
        j.preemptions > 0 ? fmt::format(", preempted {} times", j.preemptions) : "");
    if (started > j.submit_s) {
      o << fmt::format(
          R"svg(<rect class="job-wait" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.0f}" fill="#bdbdbd"><title>{}</title></rect>)svg",
          X(j.submit_s), y + 1, std::max(1.0, X(started) - X(j.submit_s)), row - 3, Esc(tip));
    }
    if (j.start_s >= 0) {
      o << fmt::format(
          R"svg(<rect class="job-run" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.0f}" fill="{}"><title>{}</title></rect>)svg",
          X(started), y + 1, std::max(1.0, X(ended) - X(started)), row - 3, color, Esc(tip));
    }
  }
  o << leg << "</svg>";
  return o.str();
}

}  // namespace tianshu::sim::internal
