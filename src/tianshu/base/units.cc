#include "tianshu/base/units.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "tianshu/base/strings.h"

namespace tianshu {
namespace {

// Splits "12.5GiB" into the number and the suffix; false when there is no leading number.
bool SplitNumber(std::string_view text, double* number, std::string* suffix) {
  text = Trim(text);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             (i == 0 && (text[i] == '-' || text[i] == '+')))) {
    ++i;
  }
  if (i == 0) return false;
  if (!ParseDouble(text.substr(0, i), number)) return false;
  *suffix = std::string(Trim(text.substr(i)));
  return std::isfinite(*number);
}

struct Suffix {
  const char* name;
  double factor;
};

constexpr Suffix kSizeSuffixes[] = {
    {"", 1},
    {"B", 1},
    {"K", 1e3},
    {"KB", 1e3},
    {"M", 1e6},
    {"MB", 1e6},
    {"G", 1e9},
    {"GB", 1e9},
    {"T", 1e12},
    {"TB", 1e12},
    {"P", 1e15},
    {"PB", 1e15},
    {"Ki", 1024.0},
    {"KiB", 1024.0},
    {"Mi", 1048576.0},
    {"MiB", 1048576.0},
    {"Gi", 1073741824.0},
    {"GiB", 1073741824.0},
    {"Ti", 1099511627776.0},
    {"TiB", 1099511627776.0},
    {"Pi", 1125899906842624.0},
    {"PiB", 1125899906842624.0},
};

// Bandwidth suffixes in bits per second.
constexpr Suffix kBandwidthSuffixes[] = {
    {"bps", 1},
    {"Kbps", 1e3},
    {"Mbps", 1e6},
    {"Gbps", 1e9},
    {"Tbps", 1e12},
    {"b/s", 1},
    {"Kb/s", 1e3},
    {"Mb/s", 1e6},
    {"Gb/s", 1e9},
    {"Tb/s", 1e12},
    {"B/s", 8},
    {"KB/s", 8e3},
    {"MB/s", 8e6},
    {"GB/s", 8e9},
    {"TB/s", 8e12},
    {"KiB/s", 8.0 * 1024},
    {"MiB/s", 8.0 * 1048576},
    {"GiB/s", 8.0 * 1073741824.0},
};

constexpr Suffix kDurationSuffixes[] = {
    {"", 1e9},  {"ns", 1},   {"us", 1e3},   {"µs", 1e3},   {"ms", 1e6},
    {"s", 1e9}, {"m", 60e9}, {"min", 60e9}, {"h", 3600e9}, {"d", 86400e9},
};

std::string SuffixList(const Suffix* begin, const Suffix* end) {
  std::vector<std::string> names;
  for (const Suffix* s = begin; s != end; ++s) {
    if (*s->name) names.emplace_back(s->name);
  }
  return Join(names, ", ");
}

template <size_t N>
Result<double> ParseWithSuffixes(std::string_view text, const Suffix (&table)[N], const char* what,
                                 bool case_sensitive) {
  double number = 0;
  std::string suffix;
  if (!SplitNumber(text, &number, &suffix)) {
    return Fail("'", std::string(text), "' is not a ", what, " (expected a number with a unit)");
  }
  if (number < 0) return Fail("a ", what, " cannot be negative: '", std::string(text), "'");
  for (const Suffix& s : table) {
    bool match = case_sensitive ? suffix == s.name : ToLower(suffix) == ToLower(s.name);
    if (match) return number * s.factor;
  }
  return Fail("unknown ", what, " unit '", suffix, "' in '", std::string(text),
              "' (expected one of ", SuffixList(std::begin(table), std::end(table)), ")");
}

Result<int64_t> ToInt64(double v, std::string_view text, const char* what) {
  if (v > static_cast<double>(std::numeric_limits<int64_t>::max()) / 2) {
    return Fail("the ", what, " '", std::string(text), "' is too large");
  }
  return static_cast<int64_t>(std::llround(v));
}

}  // namespace

Result<int64_t> ParseSize(std::string_view text) {
  // Case matters for sizes only between bits and bytes, which sizes do not use; accept "8mb".
  auto v = ParseWithSuffixes(text, kSizeSuffixes, "size", /*case_sensitive=*/false);
  if (!v) return std::unexpected(v.error());
  if (*v != std::floor(*v)) {
    return Fail("the size '", std::string(text), "' is not a whole number of bytes");
  }
  return ToInt64(*v, text, "size");
}

Result<Bandwidth> ParseBandwidth(std::string_view text) {
  // Case-sensitive: "Gb/s" (bits) and "GB/s" (bytes) differ by a factor of eight.
  double number = 0;
  std::string suffix;
  if (SplitNumber(text, &number, &suffix) && suffix.empty()) {
    return Fail("the bandwidth '", std::string(text),
                "' needs a unit, e.g. '200Gbps' (bits) or '25GB/s' (bytes)");
  }
  auto v = ParseWithSuffixes(text, kBandwidthSuffixes, "bandwidth", /*case_sensitive=*/true);
  if (!v) return std::unexpected(v.error());
  auto bits = ToInt64(*v, text, "bandwidth");
  if (!bits) return std::unexpected(bits.error());
  return Bandwidth{*bits};
}

Result<int64_t> ParseDurationNs(std::string_view text) {
  auto v = ParseWithSuffixes(text, kDurationSuffixes, "duration", /*case_sensitive=*/true);
  if (!v) return std::unexpected(v.error());
  return ToInt64(*v, text, "duration");
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

std::string FormatBandwidth(Bandwidth bw) {
  double gbps = bw.Gbps();
  char buf[64];
  if (gbps >= 1000) {
    std::snprintf(buf, sizeof buf, "%.2f Tb/s", gbps / 1000);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f Gb/s", gbps);
  }
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[64];
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  } else if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  }
  return buf;
}

}  // namespace tianshu
