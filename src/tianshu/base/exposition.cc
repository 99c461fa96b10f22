#include "tianshu/base/exposition.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#ifndef TIANSHU_VERSION
#define TIANSHU_VERSION "unknown"
#endif

namespace tianshu {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double value) {
  // The first bucket whose upper bound is >= value (`le` is inclusive).
  const auto i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                     bounds_.begin());
  counts_[i]++;
  sum_ += value;
  count_++;
}

namespace {

// Go's strconv.FormatFloat(v, 'g', -1, 64), which the Prometheus client libraries write `le` with:
// the shortest digits that read back as `v`, in exponent form when the exponent is below -4 or 6
// and above ("1e-05", "1e+06"), plainly otherwise ("0.0001", "86400").
std::string GoFloat(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto sci = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string_view text(buf, static_cast<size_t>(sci.ptr - buf));
  const int exponent = std::stoi(std::string(text.substr(text.find('e') + 1)));
  if (exponent < -4 || exponent >= 6) return std::string(text);
  auto fixed = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, fixed.ptr);
}

}  // namespace

std::string MetricNumber(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    char buf[32];  // below 2^53: exact as an integer, written in full ("1000000")
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  return GoFloat(v);
}

std::string MetricLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Exposition& Exposition::Family(std::string_view name, std::string_view type,
                               std::string_view help) {
  family_ = std::string(name);
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  // HELP text escapes backslash and newline (not quotes).
  for (char c : help) {
    if (c == '\\') {
      out_ += "\\\\";
    } else if (c == '\n') {
      out_ += "\\n";
    } else {
      out_ += c;
    }
  }
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
  return *this;
}

void Exposition::Line(std::string_view suffix, const MetricLabels& labels, std::string_view value) {
  out_ += family_;
  out_ += suffix;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      out_ += MetricLabelValue(labels[i].second);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

Exposition& Exposition::Sample(const MetricLabels& labels, double value) {
  Line("", labels, MetricNumber(value));
  return *this;
}

Exposition& Exposition::FixedSample(const MetricLabels& labels, double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  Line("", labels, buf);
  return *this;
}

Exposition& Exposition::HistogramSamples(const Histogram& h, const MetricLabels& labels) {
  MetricLabels with_le = labels;
  with_le.emplace_back("le", "");
  int64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    with_le.back().second = GoFloat(h.bounds()[i]);
    Line("_bucket", with_le, std::to_string(cumulative));
  }
  cumulative += h.counts().back();
  with_le.back().second = "+Inf";
  Line("_bucket", with_le, std::to_string(cumulative));
  Line("_sum", labels, MetricNumber(h.sum()));
  Line("_count", labels, std::to_string(h.count()));
  return *this;
}

Exposition& Exposition::Raw(std::string_view text) {
  out_ += text;
  return *this;
}

void AppendProcessMetrics(Exposition& out) {
  // /proc/self/stat: the fields after the command's closing parenthesis, from field 3 (state).
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  std::vector<std::string> f;
  if (auto close = stat.rfind(')'); close != std::string::npos) {
    std::istringstream rest(stat.substr(close + 1));
    for (std::string w; rest >> w;) f.push_back(w);
  }
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // proc(5) numbers fields from 1; f[0] is field 3.
  auto field = [&f](size_t n) { return f.size() > n - 3 ? std::stod(f[n - 3]) : -1.0; };
  if (f.size() >= 22 && ticks > 0) {
    out.Family("process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.")
        .Sample((field(14) + field(15)) / ticks);
    out.Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
        .Sample(field(23));
    out.Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
        .Sample(field(24) * page);
    // Started at boot time (btime in /proc/stat) plus field 22 (ticks after boot).
    std::ifstream proc_stat("/proc/stat");
    for (std::string line; std::getline(proc_stat, line);) {
      if (line.rfind("btime ", 0) == 0) {
        out.Family("process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.")
            .Sample(std::stod(line.substr(6)) + field(22) / ticks);
        break;
      }
    }
  }
  std::error_code ec;
  int64_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (!ec) {
    out.Family("process_open_fds", "gauge", "Number of open file descriptors.")
        .Sample(static_cast<double>(fds));
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    out.Family("process_max_fds", "gauge", "Maximum number of open file descriptors.")
        .Sample(static_cast<double>(lim.rlim_cur));
  }
}

std::string_view BuildVersion() { return TIANSHU_VERSION; }

void AppendBuildInfo(Exposition& out, std::string_view name, std::string_view help) {
#if defined(__clang__)
  const std::string compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  const std::string compiler = "gcc " __VERSION__;
#else
  const std::string compiler = "unknown";
#endif
  out.Family(name, "gauge", help)
      .Sample({{"version", std::string(BuildVersion())}, {"compiler", compiler}}, 1);
}

}  // namespace tianshu
