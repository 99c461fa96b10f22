// Hand-drawn SVG charts for the simulator's HTML report (report.h): axes with ticks at round
// numbers (1, 2 or 5 x 10^k) or at round durations on a log scale, legends under the plot area,
// line and bar charts. Each function returns one self-contained <svg> element as text; no
// scripts, nothing fetched. Private to sim/.
//   Series s{"tianshu", "#1f77b4", {{0, 0.2}, {1, 0.9}}};
//   std::string svg = LineChart("chart-x", "Title", {.label = "hours"}, {.label = "GPUs"}, {s},
//   {});
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tianshu::sim::internal {

// Text made safe inside HTML or SVG (& < > ").
std::string Esc(const std::string& s);
// At most `n` characters of `s`, with an ellipsis when cut.
std::string Cut(const std::string& s, size_t n);
// A tick or bar label: plain digits, with thousands separated, never an exponent.
std::string Number(double v);

struct Tick {
  double value;
  std::string label;
};

// How values map to [0, 1] along an axis, and where its ticks go.
struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<Tick> ticks;
  double Frac(double v) const;  // clamped to [0, 1]
};

struct Axis {
  std::string label;
  double max = 0;           // largest value to show (linear axes start at 0); 0: the data's
  bool percent = false;     // values are fractions, labelled as percentages
  bool duration = false;    // values are seconds on a log scale (ticks 1 s, 10 s, 1 min, ...)
  double min_positive = 1;  // duration axes: the smallest value worth telling apart from 0
};

// "Nice numbers for graph labels" (Heckbert, Graphics Gems, 1990): a step of 1, 2 or 5 x 10^k
// that divides [0, max] into about `target` parts; ticks run to the first multiple >= max.
Scale LinearScale(double max, int target, bool percent);
// Log scale over seconds, from the round duration at or below `lo` (at least 1 s) to the one at
// or above `hi`: 1 s, 10 s, 1 min, 10 min, 1 h, 10 h, 1 d, 10 d, 100 d.
Scale DurationScale(double lo, double hi);
Scale ScaleOf(const Axis& a, int target);

struct LegendItem {
  std::string name;
  std::string color;
  bool dashed = false;
  bool box = false;  // a filled box (bars) rather than a line
};

// Legend entries in rows starting at (x, y), wrapping at `width`, in a <g class="legend">
// translated there; sets the height they take.
std::string Legend(const std::vector<LegendItem>& items, double x, double y, double width,
                   double* height);

// The layout of a chart: width, left and right margins, plot top and height.
struct Frame {
  double W = 640, L = 64, R = 20, T = 40, PH = 200;
  double PW() const { return W - L - R; }
  double Bottom() const { return T + PH; }
};

std::string OpenSvg(const std::string& id, double w, double h);
std::string TitleText(double x, const std::string& title);
// Y axis: grid lines and labels (class "ytick", data-value) at the scale's ticks, the axis line
// and its rotated label.
std::string YAxis(const Frame& f, const Scale& ys, const std::string& label);
// X axis under the plot: grid lines, labels (class "xtick", data-value), the axis, its label.
std::string XAxis(const Frame& f, const Scale& xs, const std::string& label);
// The plot area itself, <rect class="plot">: legends stay out of it.
std::string PlotRect(const Frame& f);

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> pts;
  bool dashed = false;
};

// A line chart: one path per series, a legend of `legend` under the plot. `empty_note` is
// written across the plot when no series has a point above 0. Each path carries its number of
// points, largest value and mean value (data-points, data-max, data-mean): on a time series of
// equal intervals the mean is the time average, which a reader (or a test) can check.
std::string LineChart(const std::string& id, const std::string& title, const Axis& x, const Axis& y,
                      const std::vector<Series>& series, const std::vector<LegendItem>& legend,
                      const std::string& empty_note = "");

// Bars side by side in groups: `groups` along x, one bar per series in each group.
struct BarSeries {
  std::string name;
  std::string color;
  std::vector<double> values;         // one per group
  std::vector<std::string> colors{};  // one per group, when the bars differ (else `color`)
};

// Bars (class "bar", a tooltip each with `format` of the value), labelled with their value when
// there is one series; group names slant when there are more than six; a legend of the series
// when `legend`.
std::string BarChart(const std::string& id, const std::string& title, const Axis& y,
                     const std::vector<std::string>& groups, const std::vector<BarSeries>& series,
                     bool legend, const std::function<std::string(double)>& format);

}  // namespace tianshu::sim::internal
