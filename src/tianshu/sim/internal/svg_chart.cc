#include "tianshu/sim/internal/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tianshu::sim::internal {

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

// At most `n` characters of `s`, with an ellipsis when cut.
std::string Cut(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n > 1 ? n - 1 : 0) + "\u2026";
}

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

// ---- Axes -----------------------------------------------------------------------------------

// "Nice numbers for graph labels" (Heckbert, Graphics Gems, 1990): a step of 1, 2 or 5 x 10^k
// that divides [0, max] into about `target` parts; ticks run to the first multiple >= max.
double Scale::Frac(double v) const {
  const double f =
      log ? (std::log10(std::max(v, lo)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
          : (v - lo) / (hi - lo);
  return std::clamp(f, 0.0, 1.0);
}

Scale LinearScale(double max, int target, bool percent) {
  if (!(max > 0) || !std::isfinite(max)) max = 1;
  const double raw = max / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  const int n = std::max(1, static_cast<int>(std::ceil(max / step - 1e-9)));
  Scale s;
  s.hi = n * step;
  const double shown = percent ? step * 100 : step;
  const int decimals = shown >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(shown) - 1e-9));
  for (int i = 0; i <= n; ++i) {
    const double v = i * step;
    const double u = percent ? v * 100 : v;
    std::string label = decimals > 0 ? fmt::format("{:.{}f}", u, decimals) : Number(u);
    s.ticks.push_back({v, percent ? label + "%" : label});
  }
  return s;
}

// Log scale over seconds, from the tick at or below `lo` to the one at or above `hi`.
Scale DurationScale(double lo, double hi) {
  static const std::vector<Tick> kTicks = {{1, "1 s"},      {10, "10 s"},     {60, "1 min"},
                                           {600, "10 min"}, {3600, "1 h"},    {36000, "10 h"},
                                           {86400, "1 d"},  {864000, "10 d"}, {8640000, "100 d"}};
  lo = std::max(lo, 1.0);
  hi = std::max(hi, lo);
  size_t a = 0, b = kTicks.size() - 1;
  while (a + 1 < kTicks.size() && kTicks[a + 1].value <= lo) ++a;
  while (b > a + 1 && kTicks[b - 1].value >= hi) --b;
  Scale s;
  s.log = true;
  s.lo = kTicks[a].value;
  s.hi = kTicks[b].value;
  s.ticks.assign(kTicks.begin() + static_cast<std::ptrdiff_t>(a),
                 kTicks.begin() + static_cast<std::ptrdiff_t>(b) + 1);
  return s;
}

Scale ScaleOf(const Axis& a, int target) {
  return a.duration ? DurationScale(a.min_positive, a.max) : LinearScale(a.max, target, a.percent);
}

// ---- Chart frame: title, plot area, axes, legend below the plot ---------------------------

// Legend entries in rows under the plot, wrapping at `width`; returns the SVG and sets the
// height it takes.
std::string Legend(const std::vector<LegendItem>& items, double x, double y, double width,
                   double* height) {
  std::ostringstream o;
  o << fmt::format(R"svg(<g class="legend" transform="translate({:.0f},{:.0f})">)svg", x, y);
  double cx = 0, cy = 0;
  for (const auto& it : items) {
    const double w = 30 + 6.4 * static_cast<double>(it.name.size());
    if (cx > 0 && cx + w > width) {
      cx = 0;
      cy += 16;
    }
    if (it.box) {
      o << fmt::format(R"svg(<rect x="{:.0f}" y="{:.0f}" width="12" height="10" fill="{}"/>)svg",
                       cx, cy - 4, it.color);
    } else {
      o << fmt::format(
          R"svg(<line x1="{:.0f}" x2="{:.0f}" y1="{:.0f}" y2="{:.0f}" stroke="{}" stroke-width="2.5"{}/>)svg",
          cx, cx + 18, cy + 1, cy + 1, it.color,
          it.dashed ? R"svg( stroke-dasharray="5 3")svg" : "");
    }
    o << fmt::format(R"svg(<text x="{:.0f}" y="{:.0f}" class="tick">{}</text>)svg", cx + 22, cy + 5,
                     Esc(it.name));
    cx += w;
  }
  o << "</g>";
  *height = items.empty() ? 0 : cy + 16;
  return o.str();
}

std::string OpenSvg(const std::string& id, double w, double h) {
  return fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" id="{}" viewBox="0 0 {:.0f} {:.0f}" class="chart">)svg",
      id, w, h);
}

std::string TitleText(double x, const std::string& title) {
  return fmt::format(R"svg(<text x="{:.0f}" y="20" class="title">{}</text>)svg", x, Esc(title));
}

// Y axis: grid lines and labels at the scale's ticks, the axis line and its rotated label.
std::string YAxis(const Frame& f, const Scale& ys, const std::string& label) {
  std::ostringstream o;
  for (const Tick& t : ys.ticks) {
    const double y = f.Bottom() - f.PH * ys.Frac(t.value);
    o << fmt::format(
        R"svg(<line x1="{:.0f}" x2="{:.0f}" y1="{:.1f}" y2="{:.1f}" class="grid"/>)svg", f.L,
        f.W - f.R, y, y);
    o << fmt::format(
        R"svg(<text x="{:.0f}" y="{:.1f}" class="tick ytick" data-value="{}" text-anchor="end">{}</text>)svg",
        f.L - 6, y + 4, t.value, Esc(t.label));
  }
  o << fmt::format(R"svg(<line x1="{:.0f}" x2="{:.0f}" y1="{:.0f}" y2="{:.0f}" class="axis"/>)svg",
                   f.L, f.L, f.T, f.Bottom());
  const double mid = f.T + f.PH / 2;
  o << fmt::format(
      R"svg(<text x="14" y="{:.0f}" class="label" text-anchor="middle" transform="rotate(-90 14 {:.0f})">{}</text>)svg",
      mid, mid, Esc(label));
  return o.str();
}

// X axis under the plot: tick marks and labels, the axis line, its label.
std::string XAxis(const Frame& f, const Scale& xs, const std::string& label) {
  std::ostringstream o;
  for (const Tick& t : xs.ticks) {
    const double x = f.L + f.PW() * xs.Frac(t.value);
    o << fmt::format(
        R"svg(<line x1="{:.1f}" x2="{:.1f}" y1="{:.0f}" y2="{:.0f}" class="grid"/>)svg", x, x, f.T,
        f.Bottom());
    o << fmt::format(
        R"svg(<text x="{:.1f}" y="{:.0f}" class="tick xtick" data-value="{}" text-anchor="middle">{}</text>)svg",
        x, f.Bottom() + 16, t.value, Esc(t.label));
  }
  o << fmt::format(R"svg(<line x1="{:.0f}" x2="{:.0f}" y1="{:.0f}" y2="{:.0f}" class="axis"/>)svg",
                   f.L, f.W - f.R, f.Bottom(), f.Bottom());
  o << fmt::format(
      R"svg(<text x="{:.0f}" y="{:.0f}" class="label" text-anchor="middle">{}</text>)svg",
      f.L + f.PW() / 2, f.Bottom() + 34, Esc(label));
  return o.str();
}

// The plot area itself (the test checks that legends stay out of it).
std::string PlotRect(const Frame& f) {
  return fmt::format(
      R"svg(<rect class="plot" x="{:.0f}" y="{:.0f}" width="{:.0f}" height="{:.0f}" fill="none"/>)svg",
      f.L, f.T, f.PW(), f.PH);
}

// A line chart: one path per series, a legend of `legend` under the plot. `empty_note` is
// written across the plot when no series has a point above 0. Each path carries its number of
// points, largest value and mean value (data-points, data-max, data-mean): on a time series of
// equal intervals the mean is the time average, which a reader (or a test) can check.
std::string LineChart(const std::string& id, const std::string& title, const Axis& x, const Axis& y,
                      const std::vector<Series>& series, const std::vector<LegendItem>& legend,
                      const std::string& empty_note) {
  Frame f;
  // An axis without a given end reaches the data's largest value.
  Axis xa = x, ya = y;
  for (const auto& s : series) {
    for (auto [px, py] : s.pts) {
      if (x.max <= 0) xa.max = std::max(xa.max, px);
      if (y.max <= 0) ya.max = std::max(ya.max, py);
    }
  }
  const Scale xs = ScaleOf(xa, 6), ys = ScaleOf(ya, 5);
  auto X = [&](double v) { return f.L + f.PW() * xs.Frac(v); };
  auto Y = [&](double v) { return f.Bottom() - f.PH * ys.Frac(v); };
  double legend_h = 0;
  const std::string leg = Legend(legend, f.L, f.Bottom() + 52, f.PW(), &legend_h);
  std::ostringstream o;
  o << OpenSvg(id, f.W, f.Bottom() + 52 + legend_h + 4) << TitleText(f.L, title);
  o << YAxis(f, ys, y.label) << XAxis(f, xs, x.label) << PlotRect(f);
  bool any = false;
  for (const auto& s : series) {
    if (s.pts.empty()) continue;
    std::string d;
    double top = 0, sum = 0;
    for (size_t i = 0; i < s.pts.size(); ++i) {
      d += fmt::format("{}{:.1f},{:.1f}", i ? " L" : "M", X(s.pts[i].first), Y(s.pts[i].second));
      top = std::max(top, s.pts[i].second);
      sum += s.pts[i].second;
    }
    any = any || top > 0;
    o << fmt::format(
        R"svg(<path class="series" data-series="{}" data-points="{}" data-max="{:.6g}" data-mean="{:.6g}" d="{}" fill="none" stroke="{}" stroke-width="1.8"{}/>)svg",
        Esc(s.name), s.pts.size(), top, sum / static_cast<double>(s.pts.size()), d, s.color,
        s.dashed ? R"svg( stroke-dasharray="5 3" stroke-opacity="0.7")svg" : "");
  }
  if (!any && !empty_note.empty()) {
    o << fmt::format(
        R"svg(<text x="{:.0f}" y="{:.0f}" class="note" text-anchor="middle">{}</text>)svg",
        f.L + f.PW() / 2, f.T + f.PH / 2, Esc(empty_note));
  }
  o << leg << "</svg>";
  return o.str();
}

std::string BarChart(const std::string& id, const std::string& title, const Axis& y,
                     const std::vector<std::string>& groups, const std::vector<BarSeries>& series,
                     bool legend, const std::function<std::string(double)>& format) {
  Frame f;
  const bool slanted = groups.size() > 6;
  double ymax = y.max;
  for (const auto& s : series) {
    for (double v : s.values) ymax = std::max(ymax, v);
  }
  Axis ya = y;
  ya.max = ymax;
  const Scale ys = ScaleOf(ya, 5);
  const double below = slanted ? 70 : 30;
  double legend_h = 0;
  std::vector<LegendItem> items;
  if (legend) {
    for (const auto& s : series) items.push_back({s.name, s.color, false, true});
  }
  const std::string leg = Legend(items, f.L, f.Bottom() + below + 6, f.PW(), &legend_h);
  std::ostringstream o;
  o << OpenSvg(id, f.W, f.Bottom() + below + 6 + legend_h + 4) << TitleText(f.L, title);
  o << YAxis(f, ys, y.label) << PlotRect(f);
  const double gw = f.PW() / static_cast<double>(std::max<size_t>(1, groups.size()));
  const double bw = gw * 0.7 / static_cast<double>(std::max<size_t>(1, series.size()));
  for (size_t g = 0; g < groups.size(); ++g) {
    const double gx = f.L + static_cast<double>(g) * gw + gw * 0.15;
    for (size_t k = 0; k < series.size(); ++k) {
      const double v = g < series[k].values.size() ? series[k].values[g] : 0;
      const double h = f.PH * ys.Frac(v);
      const double x = gx + static_cast<double>(k) * bw;
      o << fmt::format(
          R"svg(<rect class="bar" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{}, {}: {}</title></rect>)svg",
          x, f.Bottom() - h, bw * 0.92, h,
          g < series[k].colors.size() ? series[k].colors[g] : series[k].color, Esc(groups[g]),
          Esc(series[k].name), Esc(format(v)));
      if (series.size() == 1) {
        o << fmt::format(
            R"svg(<text x="{:.1f}" y="{:.1f}" class="tick" text-anchor="middle">{}</text>)svg",
            x + bw * 0.46, f.Bottom() - h - 5, Esc(format(v)));
      }
    }
    const double cx = gx + gw * 0.35;
    if (slanted) {
      o << fmt::format(
          R"svg(<text x="{:.1f}" y="{:.0f}" class="tick" text-anchor="end" transform="rotate(-40 {:.1f} {:.0f})">{}</text>)svg",
          cx, f.Bottom() + 14, cx, f.Bottom() + 14, Esc(Cut(groups[g], 14)));
    } else {
      o << fmt::format(
          R"svg(<text x="{:.1f}" y="{:.0f}" class="label" text-anchor="middle">{}</text>)svg", cx,
          f.Bottom() + 18, Esc(Cut(groups[g], 20)));
    }
  }
  o << fmt::format(R"svg(<line x1="{:.0f}" x2="{:.0f}" y1="{:.0f}" y2="{:.0f}" class="axis"/>)svg",
                   f.L, f.W - f.R, f.Bottom(), f.Bottom());
  o << leg << "</svg>";
  return o.str();
}

}  // namespace tianshu::sim::internal
