#include "tianshu/agent/bandwidth_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "tianshu/base/strings.h"
#include "tianshu/wire/rank_env.h"

namespace tianshu::agent {
namespace {

using nlohmann::json;

// A vendor's all-reduce test: the backend it is "auto"'s choice for, and the programs it needs.
struct VendorTest {
  const char* method;
  const char* backend;
  std::vector<std::string> programs;  // the test first
};
const std::vector<VendorTest>& VendorTests() {
  static const std::vector<VendorTest> tests = {
      {"nccl-tests", "cuda", {"all_reduce_perf"}},
      {"rccl-tests", "rocm", {"all_reduce_perf"}},             // rccl-tests keeps nccl-tests' names
      {"hccl-test", "ascend", {"all_reduce_test", "mpirun"}},  // HCCL's runs only under MPI
  };
  return tests;
}

std::string FindProgram(const ProbeTools& tools, const std::string& name) {
  for (const std::string& dir : tools.path) {
    if (dir.empty() || dir[0] != '/') continue;  // a relative PATH entry means nothing here
    const std::string p = dir + "/" + name;
    if (tools.exists && tools.exists(p)) return p;
  }
  return "";
}

bool AllRanksHere(const wire::LaunchOrder& l) {
  return static_cast<int>(l.ranks.size()) == l.world_size;
}

// The vendor tests have no time limit of their own: the repeat count is what `seconds` allows
// at an assumed 10 GB/s, within [5, 10000].
int64_t VendorIterations(const wire::ProbeSpec& p) {
  const double n = p.seconds * 10e9 / static_cast<double>(std::max<int64_t>(p.bytes, 1));
  return std::clamp<int64_t>(static_cast<int64_t>(n), 5, 10000);
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> out;
  for (const std::string& w : SplitString(line, ' ')) {
    std::string_view t = Trim(w);
    if (!t.empty()) out.emplace_back(t);
  }
  return out;
}

bool GbpsValue(std::string_view s, double* out) {
  return ParseDouble(Trim(s), out) && std::isfinite(*out) && *out >= 0 && *out <= 1e6;
}

}  // namespace

Result<std::string> ProbeMethod(const wire::LaunchOrder& l, const ProbeTools& tools) {
  const std::string method = l.probe ? l.probe->method : "auto";
  if (method == "gloo") return method;
  for (const VendorTest& v : VendorTests()) {
    const bool installed = std::all_of(v.programs.begin(), v.programs.end(), [&](const auto& p) {
      return !FindProgram(tools, p).empty();
    });
    if (method == "auto") {
      if (l.backend == v.backend && AllRanksHere(l) && installed) return std::string(v.method);
      continue;
    }
    if (method != v.method) continue;
    if (!AllRanksHere(l)) {
      return Fail(method, " spans processes on several nodes only under MPI, which the agent ",
                  "does not launch; this probe has ranks on other nodes (use gloo or auto)");
    }
    for (const std::string& p : v.programs) {
      if (FindProgram(tools, p).empty()) return Fail(method, ": ", p, " is not on the PATH");
    }
    return method;
  }
  if (method == "auto") return std::string("gloo");
  return Fail("unknown probe method '", method, "'");
}

Result<ProbeRank> PlanProbeRank(const wire::LaunchOrder& l, const wire::RankLaunch& rank,
                                const ProbeTools& tools, const std::string& result_path) {
  auto method = ProbeMethod(l, tools);
  if (!method) return std::unexpected(method.error());
  const wire::ProbeSpec p = l.probe.value_or(wire::ProbeSpec{});
  ProbeRank out{.method = *method};
  if (*method == "gloo") {
    if (tools.script.empty()) {
      return Fail("no probe script (probes/gloo_bandwidth.py) found: start the agent with ",
                  "--probe-script PATH");
    }
    out.argv = {tools.python, tools.script,      "--bytes", std::to_string(p.bytes),
                "--seconds",  Seconds(p.seconds)};
    out.env["TIANSHU_PROBE_RESULT"] = result_path;
    return out;
  }
  // A vendor test: one process over every rank's device, run by the lowest rank.
  int first = std::numeric_limits<int>::max();
  std::vector<std::string> devices;
  std::set<int> seen;
  for (const wire::RankLaunch& r : l.ranks) {
    first = std::min(first, r.rank);
    for (int d : r.devices) {
      if (seen.insert(d).second) devices.push_back(std::to_string(d));
    }
  }
  if (rank.rank != first) {
    out.env["TIANSHU_DURATION_S"] = "0";  // a placeholder that ends at once
    return out;
  }
  if (devices.empty()) return Fail(*method, ": the probe's ranks hold no device");
  out.env[wire::VisibleDevicesVar(l.backend)] = Join(devices, ",");
  const std::string n = std::to_string(devices.size());
  const std::string bytes = std::to_string(p.bytes);
  const std::string iters = std::to_string(VendorIterations(p));
  if (*method == "hccl-test") {
    out.argv = {FindProgram(tools, "mpirun"),
                "-n",
                n,
                FindProgram(tools, "all_reduce_test"),
                "-b",
                bytes,
                "-e",
                bytes,
                "-f",
                "2",
                "-d",
                "fp32",
                "-o",
                "sum",
                "-p",
                n,
                "-w",
                "5",
                "-n",
                iters};
  } else {
    out.argv = {FindProgram(tools, "all_reduce_perf"),
                "-b",
                bytes,
                "-e",
                bytes,
                "-f",
                "2",
                "-g",
                n,
                "-w",
                "5",
                "-n",
                iters,
                "-c",
                "0"};
  }
  return out;
}

Result<wire::ProbeResult> ParseGlooProbeResult(std::string_view text) {
  if (text.size() > kProbeResultBytes || !JsonNestingWithin(text, 4)) {
    return Fail("probe result: larger than ", std::to_string(kProbeResultBytes),
                " bytes or nested");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Fail("probe result: not a JSON object");
  wire::ProbeResult r;
  const std::map<std::string, double*> rates = {{"busbw_gbps", &r.busbw_gbps},
                                                {"algbw_gbps", &r.algbw_gbps},
                                                {"forward_gbps", &r.forward_gbps},
                                                {"backward_gbps", &r.backward_gbps}};
  const std::map<std::string, int64_t*> counts = {{"bytes", &r.bytes},
                                                  {"iterations", &r.iterations}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "method") {
      if (!it->is_string() || it->get<std::string>() != "gloo") {
        return Fail("probe result: method: expected \"gloo\"");
      }
      r.method = "gloo";
    } else if (auto rate = rates.find(k); rate != rates.end()) {
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0 ||
          it->get<double>() > 1e6) {
        return Fail("probe result: ", k, ": expected a finite number >= 0");
      }
      *rate->second = it->get<double>();
    } else if (auto count = counts.find(k); count != counts.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 0) {
        return Fail("probe result: ", k, ": expected an integer >= 0");
      }
      *count->second = it->get<int64_t>();
    } else {
      return Fail("probe result: ", k, ": unknown field");
    }
  }
  if (r.method.empty()) return Fail("probe result: method: is required");
  return r;
}

Result<wire::ProbeResult> ParseAllReducePerf(std::string_view text, const std::string& method,
                                             int64_t bytes) {
  wire::ProbeResult r{.method = method, .bytes = bytes};
  bool row = false, exact = false, avg = false;
  double avg_busbw = 0;
  for (const std::string& raw : SplitString(text, '\n')) {
    std::vector<std::string> w = Words(raw);
    if (w.empty()) continue;
    if (w[0][0] == '#') {
      // "# nThread 1 nGpus 2 minBytes .. warmup iters: 5 iters: 20 agg iters: 1 ..."
      for (size_t i = 1; i + 1 < w.size(); ++i) {
        if (w[i] == "iters:" && w[i - 1] != "warmup" && w[i - 1] != "agg") {
          (void)ParseInt64(w[i + 1], &r.iterations);
        }
      }
      // "# Avg bus bandwidth    : 12.34"
      const size_t colon = raw.find(':');
      if (raw.find("Avg bus bandwidth") != std::string::npos && colon != std::string::npos) {
        avg = GbpsValue(std::string_view(raw).substr(colon + 1), &avg_busbw);
      }
      continue;
    }
    // size count type redop root | time algbw busbw #wrong (out-of-place) | the same in-place
    int64_t size = 0;
    double algbw = 0, busbw = 0;
    if (w.size() < 8 || !ParseInt64(w[0], &size) || !GbpsValue(w[6], &algbw) ||
        !GbpsValue(w[7], &busbw)) {
      continue;
    }
    if (exact && size != bytes) continue;  // the row of the probe's size, else the last one
    r.algbw_gbps = algbw;
    r.busbw_gbps = busbw;
    r.bytes = size;
    row = true;
    exact = exact || size == bytes;
  }
  if (!row && !avg) return Fail(method, ": no result in all_reduce_perf's output");
  if (!row) r.busbw_gbps = avg_busbw;  // the summary line alone
  return r;
}

Result<wire::ProbeResult> ParseHcclTest(std::string_view text, int64_t bytes, int ranks) {
  wire::ProbeResult r{.method = "hccl-test", .bytes = bytes};
  bool table = false, row = false, exact = false;
  for (const std::string& raw : SplitString(text, '\n')) {
    // "the minbytes is 8192, maxbytes is 67108864, iters is 20, warmup_iters is 5"
    if (size_t at = raw.find("iters is ");
        at != std::string::npos && at > 0 && raw[at - 1] == ' ') {
      std::string_view rest = std::string_view(raw).substr(at + 9);
      (void)ParseInt64(rest.substr(0, rest.find(',')), &r.iterations);
    }
    if (raw.find("alg_bandwidth") != std::string::npos) {
      table = true;
      continue;
    }
    if (!table) continue;
    std::vector<std::string> f = SplitString(raw, '|');
    int64_t size = 0;
    double algbw = 0;
    if (f.size() < 3 || !ParseInt64(Trim(f[0]), &size) || !GbpsValue(f[2], &algbw)) continue;
    if (exact && size != bytes) continue;
    r.bytes = size;
    r.algbw_gbps = algbw;
    row = true;
    exact = exact || size == bytes;
  }
  if (!row) return Fail("hccl-test: no result in all_reduce_test's output");
  // nccl-tests' bus bandwidth of an all-reduce (docs/PERFORMANCE.md there): algbw * 2(n-1)/n.
  const double n = std::max(1, ranks);
  r.busbw_gbps = r.algbw_gbps * 2 * (n - 1) / n;
  return r;
}

Result<wire::ProbeResult> CollectProbeResult(SystemFiles& fs, const std::string& method,
                                             const wire::LaunchOrder& l,
                                             const std::string& result_path,
                                             const std::string& log_path) {
  const int64_t bytes = l.probe ? l.probe->bytes : 0;
  if (method == "gloo") {
    auto text = fs.ReadUntrusted(result_path, kProbeResultBytes + 1);
    if (!text) return Fail("no probe result: ", text.error().message);
    return ParseGlooProbeResult(*text);
  }
  auto tail = fs.ReadUntrustedTail(log_path, kProbeLogTailBytes);
  if (!tail) return Fail("no probe output: ", tail.error().message);
  if (method == "hccl-test") {
    std::set<int> devices;
    for (const auto& r : l.ranks) devices.insert(r.devices.begin(), r.devices.end());
    return ParseHcclTest(tail->data, bytes, static_cast<int>(devices.size()));
  }
  return ParseAllReducePerf(tail->data, method, bytes);
}

}  // namespace tianshu::agent
