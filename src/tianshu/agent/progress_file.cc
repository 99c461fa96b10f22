#include "tianshu/agent/progress_file.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

using nlohmann::json;

// A non-negative finite number no larger than `hi`, or nullopt.
std::optional<double> Number(const json& j, double hi) {
  if (!j.is_number()) return std::nullopt;
  const double x = j.get<double>();
  if (!std::isfinite(x) || x < 0 || x > hi) return std::nullopt;
  return x;
}

bool NonNegativeInt(const json& j) {
  return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
}

// One line's step and step time, or nullopt when the line is not a valid progress record.
std::optional<std::pair<int64_t, double>> ParseLine(std::string_view line) {
  if (line.size() > kProgressLineBytes || !JsonNestingWithin(line, 4)) return std::nullopt;
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto step = j.find("step");
  auto time = j.find("step_time_s");
  if (step == j.end() || time == j.end() || !NonNegativeInt(*step)) return std::nullopt;
  if (step->is_number_unsigned() &&
      step->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  auto step_time = Number(*time, 1e9);
  if (!step_time) return std::nullopt;
  // The optional fields, when present, must be what the format says.
  if (auto t = j.find("time"); t != j.end() && !Number(*t, 1e12)) return std::nullopt;
  if (auto s = j.find("samples_per_s"); s != j.end() && !Number(*s, 1e15)) return std::nullopt;
  if (auto n = j.find("total_steps"); n != j.end() && !NonNegativeInt(*n)) return std::nullopt;
  return std::pair{step->get<int64_t>(), *step_time};
}

}  // namespace

std::optional<ProgressSummary> SummariseProgress(std::string_view tail, bool from_start) {
  if (!from_start) {  // the first line was cut by the window
    const size_t nl = tail.find('\n');
    tail = nl == std::string_view::npos ? std::string_view() : tail.substr(nl + 1);
  }
  // A last line without its newline is still being written.
  const size_t last_nl = tail.rfind('\n');
  tail = last_nl == std::string_view::npos ? std::string_view() : tail.substr(0, last_nl + 1);
  ProgressSummary s;
  std::vector<double> recent;  // ring of the last kProgressMedianOf step times
  size_t next = 0;
  while (!tail.empty()) {
    const size_t nl = tail.find('\n');
    std::string_view line = Trim(tail.substr(0, nl));
    tail.remove_prefix(nl + 1);
    auto parsed = ParseLine(line);
    if (!parsed) continue;
    ++s.samples;
    s.step = parsed->first;
    if (recent.size() < static_cast<size_t>(kProgressMedianOf)) {
      recent.push_back(parsed->second);
    } else {
      recent[next] = parsed->second;
    }
    next = (next + 1) % kProgressMedianOf;
  }
  if (s.samples == 0) return std::nullopt;
  // The median: one slow step (a checkpoint, a straggling batch) does not move it.
  std::sort(recent.begin(), recent.end());
  const size_t n = recent.size();
  s.step_time_s = n % 2 == 1 ? recent[n / 2] : (recent[n / 2 - 1] + recent[n / 2]) / 2;
  return s;
}

std::optional<FileProgress> ReadProgressFile(SystemFiles& fs, const std::string& path) {
  auto tail = fs.ReadUntrustedTail(path, kProgressTailBytes);
  if (!tail) return std::nullopt;
  const bool from_start = tail->size <= static_cast<int64_t>(tail->data.size());
  auto summary = SummariseProgress(tail->data, from_start);
  if (!summary) return std::nullopt;
  return FileProgress{.summary = *summary, .updated_ms = tail->mtime_ns / 1'000'000};
}

}  // namespace tianshu::agent
