#include "tianshu/sim/trace.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>

#include "tianshu/base/csv.h"
#include "tianshu/base/data_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/timestamp.h"
#include "tianshu/base/units.h"
#include "tianshu/model/load.h"

namespace tianshu::sim {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// A small deterministic generator (same numbers on every platform, unlike std distributions).
struct Rng {
  uint64_t s;
  double Uniform() { return static_cast<double>((s = Mix(s)) >> 11) * 0x1.0p-53; }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }
};

// A trace's header and rows (base/csv.h); `lines[i]` is where row i starts in the file.
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;
  int Col(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i) {
      if (ToLower(std::string(Trim(header[i]))) == name) return static_cast<int>(i);
    }
    return -1;
  }
};

Result<Csv> ReadCsv(const std::string& path) {
  auto text = ReadDataFile(path);
  if (!text) return std::unexpected(text.error());
  auto records = ParseCsv(path, *text);
  if (!records) return std::unexpected(records.error().ToError());
  if (records->empty()) return Fail(path, ": empty file");
  Csv csv;
  csv.header = std::move(records->front().fields);
  csv.rows.reserve(records->size() - 1);
  csv.lines.reserve(records->size() - 1);
  for (size_t i = 1; i < records->size(); ++i) {
    csv.rows.push_back(std::move((*records)[i].fields));
    csv.lines.push_back((*records)[i].line);
  }
  return csv;
}

// "path:LINE" of row i, for errors.
std::string At(const std::string& path, const Csv& csv, size_t row) {
  return path + ":" + std::to_string(csv.lines[row]);
}

Result<double> Num(const std::string& path, const Csv& csv, size_t row, const std::string& s) {
  double v = 0;
  if (!ParseDouble(Trim(s), &v)) {
    return Fail(At(path, csv, row), ": not a number: '", s, "'");
  }
  return v;
}

Result<std::vector<TraceJob>> LoadPhilly(const std::string& path, const WorkloadOptions& o) {
  auto csv = ReadCsv(path);
  if (!csv) return std::unexpected(csv.error());
  int ts = csv->Col("timestamp"), du = csv->Col("duration"), ng = csv->Col("num_gpus"),
      vc = csv->Col("cluster");
  if (ts < 0 || du < 0 || ng < 0) {
    return Fail(path, ": a Philly trace needs timestamp,duration,num_gpus columns");
  }
  std::vector<TraceJob> jobs;
  jobs.reserve(csv->rows.size());
  for (size_t i = 0; i < csv->rows.size(); ++i) {
    const auto& r = csv->rows[i];
    if (r.size() < csv->header.size()) return Fail(At(path, *csv, i), ": short row");
    auto t = ParseUtcTimestamp(Trim(r[ts]));
    if (!t) return Fail(At(path, *csv, i), ": bad timestamp '", r[ts], "'");
    auto d = Num(path, *csv, i, r[du]);
    if (!d) return std::unexpected(d.error());
    auto g = Num(path, *csv, i, r[ng]);
    if (!g) return std::unexpected(g.error());
    TraceJob j;
    j.id = static_cast<int64_t>(i);
    j.name = "philly-" + std::to_string(i);
    j.submit_s = *t;
    j.duration_s = *d;
    j.gpus = static_cast<int>(*g);
    if (vc >= 0) j.vc = std::string(Trim(r[vc]));
    if (!o.vcs.empty() && std::find(o.vcs.begin(), o.vcs.end(), j.vc) == o.vcs.end()) continue;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// The columns every simple trace has: submission time, duration, GPUs (row i of the CSV).
Result<TraceJob> SubmitDurationGpus(const std::string& path, const Csv& csv, size_t i, int st,
                                    int du, int ng) {
  const auto& r = csv.rows[i];
  if (r.size() < csv.header.size()) return Fail(At(path, csv, i), ": short row");
  auto s = Num(path, csv, i, r[static_cast<size_t>(st)]);
  auto d = Num(path, csv, i, r[static_cast<size_t>(du)]);
  auto g = Num(path, csv, i, r[static_cast<size_t>(ng)]);
  if (!s || !d || !g) return Fail(At(path, csv, i), ": bad number");
  TraceJob j;
  j.id = static_cast<int64_t>(i);
  j.submit_s = *s;
  j.duration_s = *d;
  j.gpus = static_cast<int>(*g);
  return j;
}

Result<std::vector<TraceJob>> LoadItp(const std::string& path) {
  auto csv = ReadCsv(path);
  if (!csv) return std::unexpected(csv.error());
  int id = csv->Col("job_id"), st = csv->Col("submission_time"), du = csv->Col("duration"),
      ng = csv->Col("num_gpu");
  if (st < 0 || du < 0 || ng < 0) {
    return Fail(path, ": an ITP trace needs job_id,submission_time,duration,num_gpu columns");
  }
  std::vector<TraceJob> jobs;
  for (size_t i = 0; i < csv->rows.size(); ++i) {
    auto j = SubmitDurationGpus(path, *csv, i, st, du, ng);
    if (!j) return std::unexpected(j.error());
    j->name = id >= 0 ? std::string(Trim(csv->rows[i][id])) : "itp-" + std::to_string(i);
    jobs.push_back(std::move(*j));
  }
  return jobs;
}

Result<std::vector<TraceJob>> LoadOpenbPods(const std::string& path) {
  auto csv = ReadCsv(path);
  if (!csv) return std::unexpected(csv.error());
  int name = csv->Col("name"), ng = csv->Col("num_gpu"), gm = csv->Col("gpu_milli"),
      ct = csv->Col("creation_time"), dt = csv->Col("deletion_time"),
      sc = csv->Col("scheduled_time");
  if (ng < 0 || gm < 0 || ct < 0 || dt < 0) {
    return Fail(path, ": an openb pod list needs num_gpu,gpu_milli,creation_time,deletion_time");
  }
  std::vector<TraceJob> jobs;
  for (size_t i = 0; i < csv->rows.size(); ++i) {
    const auto& r = csv->rows[i];
    if (r.size() < csv->header.size()) continue;
    double g = 0, m = 0, c = 0, d = 0, s = -1;
    if (!ParseDouble(r[ng], &g) || !ParseDouble(r[gm], &m) || !ParseDouble(r[ct], &c) ||
        !ParseDouble(r[dt], &d)) {
      return Fail(At(path, *csv, i), ": bad number");
    }
    if (sc >= 0) ParseDouble(r[sc], &s);
    if (g <= 0) continue;  // CPU-only pods do not use the accelerators
    TraceJob j;
    j.id = static_cast<int64_t>(i);
    j.name = name >= 0 ? r[name] : "pod-" + std::to_string(i);
    j.submit_s = c;
    double began = s >= c ? s : c;
    j.duration_s = std::max(1.0, d - began);
    j.gpus = static_cast<int>(g);
    j.gpu_milli = m > 0 ? static_cast<int>(m) : 1000;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// job_id,num_gpu,submit_time,iterations,model_name,duration,interval (Tiresias' simulator).
Result<std::vector<TraceJob>> LoadTiresias(const std::string& path) {
  auto csv = ReadCsv(path);
  if (!csv) return std::unexpected(csv.error());
  int id = csv->Col("job_id"), ng = csv->Col("num_gpu"), st = csv->Col("submit_time"),
      du = csv->Col("duration"), mn = csv->Col("model_name");
  if (ng < 0 || st < 0 || du < 0) {
    return Fail(path, ": a Tiresias trace needs job_id,num_gpu,submit_time,duration columns");
  }
  std::vector<TraceJob> jobs;
  for (size_t i = 0; i < csv->rows.size(); ++i) {
    const auto& r = csv->rows[i];
    auto row = SubmitDurationGpus(path, *csv, i, st, du, ng);
    if (!row) return std::unexpected(row.error());
    TraceJob j = std::move(*row);
    j.name = id >= 0 ? r[id] : std::to_string(i);
    if (mn >= 0) {
      // The trace names small CNN/NLP models; map to the nearest catalogue entries.
      std::string m = ToLower(r[mn]);
      model::JobSpec spec;
      spec.gpus = j.gpus;
      spec.duration_s = j.duration_s;
      const model::ModelSpec* p = model::FindModelProfile(
          m.find("bert") != std::string::npos || m.find("transformer") != std::string::npos ||
                  m.find("lstm") != std::string::npos
              ? "bert-large"
              : "resnet50");
      if (p) {
        spec.model = *p;
        spec.name = j.name;
        j.spec = spec;
      }
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// "llm:jobs=200,rate=2,seed=7,mix=small:0.6,medium:0.3,large:0.1": Poisson arrivals at
// `rate` jobs per hour; small = 8-64 GPUs of 7B/13B for 1-8 h, medium = 64-256 GPUs of 70B for
// 6-24 h, large = 256-1024 GPUs of 175B for 1-3 days (log-uniform).
Result<std::vector<TraceJob>> GenerateLlm(const std::string& args, uint64_t seed) {
  int n = 200;
  double rate = 2;
  std::map<std::string, double> mix = {{"small", 0.6}, {"medium", 0.3}, {"large", 0.1}};
  bool mix_cleared = false;
  for (std::string kv : SplitString(args, ',')) {
    kv = std::string(Trim(kv));
    if (kv.empty()) continue;
    if (StartsWith(kv, "mix=")) {
      if (!mix_cleared) mix.clear();
      mix_cleared = true;
      kv = kv.substr(4);
    }
    double d = 0;
    auto cpos = kv.find(':');
    if (cpos != std::string::npos && kv.find('=') == std::string::npos) {
      std::string k = kv.substr(0, cpos);
      if (k != "small" && k != "medium" && k != "large") {
        return Fail("llm: unknown size class '", k, "' (small, medium, large)");
      }
      if (!ParseDouble(kv.substr(cpos + 1), &d) || d < 0) return Fail("llm: bad weight for ", k);
      if (!mix_cleared) mix.clear();
      mix_cleared = true;
      mix[k] = d;
      continue;
    }
    auto eq = kv.find('=');
    std::string k = eq == std::string::npos ? kv : kv.substr(0, eq);
    std::string v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (!ParseDouble(v, &d)) return Fail("llm: '", k, "' needs a number");
    if (k == "jobs")
      n = static_cast<int>(d);
    else if (k == "rate")
      rate = d;
    else if (k == "seed")
      seed = static_cast<uint64_t>(d);
    else
      return Fail("llm: unknown key '", k, "' (jobs, rate, seed, mix)");
  }
  if (n <= 0 || rate <= 0) return Fail("llm: jobs and rate must be positive");
  double total = 0;
  for (auto& [k, w] : mix) total += w;
  if (total <= 0) return Fail("llm: the mix has no weight");
  Rng rng{seed};
  std::vector<TraceJob> jobs;
  double t = 0;
  auto log_uniform = [&](double lo, double hi) {
    return std::exp(std::log(lo) + rng.Uniform() * (std::log(hi) - std::log(lo)));
  };
  for (int i = 0; i < n; ++i) {
    t += rng.Exponential(3600.0 / rate);
    double u = rng.Uniform() * total;
    std::string cls = "small";
    for (auto& [k, w] : mix) {
      if (u < w) {
        cls = k;
        break;
      }
      u -= w;
    }
    TraceJob j;
    j.id = i;
    j.name = "llm-" + std::to_string(i);
    j.submit_s = t;
    model::JobSpec spec;
    const char* profile = "llama2-7b";
    if (cls == "small") {
      j.gpus = 8 << static_cast<int>(rng.Uniform() * 4);  // 8..64
      profile = rng.Uniform() < 0.5 ? "llama2-7b" : "llama2-13b";
      j.duration_s = log_uniform(3600, 8 * 3600);
    } else if (cls == "medium") {
      j.gpus = 64 << static_cast<int>(rng.Uniform() * 3);  // 64..256
      profile = "llama2-70b";
      j.duration_s = log_uniform(6 * 3600, 24 * 3600);
    } else {
      j.gpus = 256 << static_cast<int>(rng.Uniform() * 3);  // 256..1024
      profile = "gpt3-175b";
      j.duration_s = log_uniform(24 * 3600, 72 * 3600);
    }
    spec.name = j.name;
    spec.model = *model::FindModelProfile(profile);
    spec.gpus = j.gpus;
    spec.duration_s = j.duration_s;
    j.spec = spec;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

Result<double> YamlSeconds(const YAML::Node& n, const std::string& what) {
  auto s = n.as<std::string>();
  auto ns = ParseDurationNs(s);
  if (!ns) return Fail(what, ": ", ns.error().message);
  return static_cast<double>(*ns) / 1e9;
}

// The problems of job `index`'s inline spec, which was checked as the re-emitted `text`, each
// placed at the scenario's own node for the field (else the spec's) and named under
// jobs[index].spec, one per line.
std::string PlacedInScenario(const std::string& path, const YAML::Node& spec, int index,
                             const std::string& text) {
  const std::string field = "jobs[" + std::to_string(index) + "].spec";
  std::vector<std::string> lines;
  for (model::Diagnostic d : model::ValidateText(path, text).diagnostics) {
    const std::string head = d.path.substr(0, d.path.find_first_of(".["));
    const YAML::Node at = !head.empty() && spec.IsMap() && spec[head] ? spec[head] : spec;
    d.line = at.Mark().line + 1;
    d.column = at.Mark().column + 1;
    d.path = d.path.empty() ? field : field + "." + d.path;
    lines.push_back(d.ToString());
  }
  if (lines.empty()) lines.push_back(path + ": " + field + ": not a job spec");
  return Join(lines, "\n");
}

// Whether a file name says YAML (.yaml or .yml).
bool IsYamlName(const std::string& name) {
  return EndsWith(name, ".yaml") || EndsWith(name, ".yml");
}

// A YAML workload (also a scenario):
//   name: ...; description: ...; cluster: SPEC; configs: [mainstream, tianshu]; claims: [...]
//   (a cluster or config file relative to this file, else to the working directory)
//   jobs:
//     - job: ../jobs/dense-1.2t.yaml   # a job file (relative to this file), or
//       spec: {...}                    # an inline job document
//       submit: 0                      # seconds or a duration ("2h")
//       duration: 24h                  # ideal run time (else iterations x ideal step)
//       count: 1                       # copies, `every` apart
//       every: 0
Result<Workload> LoadYamlWorkload(const std::string& path) {
  Workload w;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Fail(path, ": ", e.what());
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  try {
    w.name =
        root["name"] ? root["name"].as<std::string>() : std::filesystem::path(path).stem().string();
    if (root["description"]) w.description = root["description"].as<std::string>();
    // A cluster or config file (a name ending in .yaml or .yml) relative to this file, as
    // `job:` files are; any other name (a preset, a data set, a fat-tree spec), and a file not
    // found there (a path from the working directory), as written.
    auto beside = [&](std::string name) {
      const std::filesystem::path as_written(name);
      std::error_code ec;
      const std::filesystem::path p = dir / as_written;
      if (IsYamlName(name) && as_written.is_relative() && std::filesystem::is_regular_file(p, ec)) {
        name = p.string();  // not normalised: `..` after a linked directory stays its parent's
      }
      return name;
    };
    if (root["cluster"]) w.cluster = beside(root["cluster"].as<std::string>());
    if (root["configs"]) {
      for (const auto& c : root["configs"]) w.configs.push_back(beside(c.as<std::string>()));
    }
    if (root["claims"]) {
      for (const auto& c : root["claims"]) w.claims.push_back(c.as<std::string>());
    }
    if (!root["jobs"] || !root["jobs"].IsSequence()) {
      return Fail(path, ": a workload needs a `jobs:` list");
    }
    int64_t next_id = 0;
    int index = 0;
    for (const auto& item : root["jobs"]) {
      std::string where = path + ": jobs[" + std::to_string(index++) + "]";
      Result<model::JobSpec> spec = Fail(where, ": needs `job:` (a file) or `spec:` (inline)");
      if (item["job"]) {
        std::filesystem::path p = item["job"].as<std::string>();
        if (p.is_relative()) p = dir / p;
        spec = model::LoadJobFile(p.string());
      } else if (item["spec"]) {
        YAML::Node sp = YAML::Clone(item["spec"]);
        if (sp.IsMap() && !sp["name"]) sp["name"] = w.name + "-" + std::to_string(index - 1);
        YAML::Emitter out;
        out << sp;
        spec = model::LoadJobText(where, out.c_str());
        if (!spec) return Fail(PlacedInScenario(path, item["spec"], index - 1, out.c_str()));
      }
      if (!spec) return Fail(where, ": ", spec.error().message);
      double submit = 0, duration = spec->duration_s, every = 0;
      int count = 1;
      if (item["submit"]) {
        auto s = YamlSeconds(item["submit"], where + ".submit");
        if (!s) return std::unexpected(s.error());
        submit = *s;
      }
      if (item["duration"]) {
        auto s = YamlSeconds(item["duration"], where + ".duration");
        if (!s) return std::unexpected(s.error());
        duration = *s;
      }
      if (item["every"]) {
        auto s = YamlSeconds(item["every"], where + ".every");
        if (!s) return std::unexpected(s.error());
        every = *s;
      }
      if (item["count"]) count = item["count"].as<int>();
      if (count < 1) return Fail(where, ".count: must be at least 1");
      int gpus = spec->TotalGpus();
      if (gpus <= 0) return Fail(where, ": the job asks for no GPUs");
      for (int c = 0; c < count; ++c) {
        TraceJob j;
        j.id = next_id++;
        j.name =
            (spec->name.empty() ? "job" : spec->name) + (count > 1 ? "-" + std::to_string(c) : "");
        j.submit_s = submit + c * every;
        j.duration_s = duration;  // 0: from iterations, resolved by the simulator
        j.gpus = gpus;
        j.gpu_milli = spec->gpu_milli;
        j.spec = *spec;
        j.spec->name = j.name;
        j.spec->gpus = gpus;
        w.jobs.push_back(std::move(j));
      }
    }
  } catch (const YAML::Exception& e) {
    return Fail(path, ": ", e.what());
  }
  return w;
}

// The workload kind of a file from its name or its header ("" when neither tells). An
// unreadable file is an error that says why (missing, truncated), not an unknown kind.
Result<std::string> DetectKind(const std::string& path) {
  if (IsYamlName(path)) return "yaml";
  auto text = ReadDataFile(path);
  if (!text) return std::unexpected(text.error());
  std::string header = ToLower(text->substr(0, text->find('\n')));
  if (header.find("timestamp") != std::string::npos) return "philly";
  if (header.find("submission_time") != std::string::npos) return "itp";
  if (header.find("gpu_milli") != std::string::npos) return "openb";
  if (header.find("submit_time") != std::string::npos) return "tiresias";
  return "";
}

std::optional<double> TimeArg(const std::string& s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  if (ParseDouble(s, &v)) return v;
  return ParseUtcTimestamp(s);
}

}  // namespace

double OfferedLoad(const std::vector<TraceJob>& jobs, int cluster_gpus) {
  if (jobs.empty() || cluster_gpus <= 0) return 0;
  double work = 0, lo = jobs.front().submit_s, hi = jobs.front().submit_s;
  for (const auto& j : jobs) {
    work += j.gpus * (j.gpu_milli / 1000.0) * j.duration_s;
    lo = std::min(lo, j.submit_s);
    hi = std::max(hi, j.submit_s);
  }
  double span = hi - lo;
  return span > 0 ? work / (cluster_gpus * span) : 0;
}

Result<Workload> LoadWorkload(const std::string& spec, const WorkloadOptions& o) {
  std::string kind, rest = spec;
  auto colon = spec.find(':');
  if (colon != std::string::npos && colon > 1) {  // "C:\..." is not a kind
    std::string k = ToLower(spec.substr(0, colon));
    if (k == "philly" || k == "itp" || k == "openb" || k == "tiresias" || k == "yaml" ||
        k == "llm") {
      kind = k;
      rest = spec.substr(colon + 1);
    }
  }
  if (kind.empty()) {
    auto detected = DetectKind(spec);
    if (!detected) return std::unexpected(detected.error());
    kind = *detected;
    if (kind.empty()) {
      return Fail("cannot tell the kind of workload '", spec,
                  "': use philly:, itp:, openb:, tiresias:, yaml: or llm:");
    }
  }
  Workload w;
  w.name = kind;
  Result<std::vector<TraceJob>> jobs = std::vector<TraceJob>{};
  if (kind == "philly") {
    jobs = LoadPhilly(rest, o);
  } else if (kind == "itp") {
    jobs = LoadItp(rest);
    std::string file = EndsWith(rest, ".gz") ? rest.substr(0, rest.size() - 3) : rest;
    w.name = "itp:" + std::filesystem::path(file).stem().string();
  } else if (kind == "openb") {
    jobs = LoadOpenbPods(rest);
  } else if (kind == "tiresias") {
    jobs = LoadTiresias(rest);
  } else if (kind == "llm") {
    jobs = GenerateLlm(rest, o.seed);
  } else {
    auto y = LoadYamlWorkload(rest);
    if (!y) return std::unexpected(y.error());
    w = std::move(*y);
    jobs = std::move(w.jobs);
  }
  if (!jobs) return std::unexpected(jobs.error());
  w.jobs = std::move(*jobs);
  std::erase_if(w.jobs, [](const TraceJob& j) { return j.gpus <= 0 || j.duration_s < 0; });
  std::stable_sort(w.jobs.begin(), w.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit_s < b.submit_s; });
  auto from = TimeArg(o.from), to = TimeArg(o.to);
  if (!o.from.empty() && !from) return Fail("--from: not a time: '", o.from, "'");
  if (!o.to.empty() && !to) return Fail("--to: not a time: '", o.to, "'");
  if (from || to) {
    std::erase_if(w.jobs, [&](const TraceJob& j) {
      return (from && j.submit_s < *from) || (to && j.submit_s >= *to);
    });
  }
  if (o.max_jobs > 0 && static_cast<int>(w.jobs.size()) > o.max_jobs) w.jobs.resize(o.max_jobs);
  if (!w.jobs.empty()) {
    double t0 = w.jobs.front().submit_s;
    for (auto& j : w.jobs) j.submit_s -= t0;
  }
  if (o.time_scale != 1) {
    if (o.time_scale <= 0) return Fail("--time-scale must be positive");
    for (auto& j : w.jobs) {
      j.submit_s *= o.time_scale;
      j.duration_s *= o.time_scale;
      if (j.spec) j.spec->duration_s = j.duration_s;
    }
  }
  if (o.load > 0) {
    double now = OfferedLoad(w.jobs, o.cluster_gpus);
    if (now <= 0) return Fail("--load: the workload has no arrival span to rescale");
    double k = now / o.load;
    for (auto& j : w.jobs) j.submit_s *= k;
  }
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    if (w.jobs[i].spec && w.jobs[i].spec->duration_s <= 0) {
      w.jobs[i].spec->duration_s = w.jobs[i].duration_s;
    }
  }
  return w;
}

model::JobSpec SpecFor(const TraceJob& job) {
  if (job.spec) {
    model::JobSpec s = *job.spec;
    if (s.duration_s <= 0) s.duration_s = job.duration_s;
    return s;
  }
  model::JobSpec s;
  s.name = job.name.empty() ? std::to_string(job.id) : job.name;
  s.gpus = job.gpus;
  s.gpu_milli = job.gpu_milli;
  s.duration_s = job.duration_s;
  uint64_t h = Mix(HashString(s.name) ^ static_cast<uint64_t>(job.id));
  std::vector<const char*> pick;
  if (job.gpus <= 8) {
    pick = {"resnet50", "bert-large"};
  } else if (job.gpus < 64) {
    pick = {"llama2-7b", "llama2-13b", "gpt3-13b"};
  } else if (job.gpus < 256) {
    pick = {"llama2-13b", "gpt3-13b", "llama2-70b"};
  } else if (job.gpus < 1024) {
    pick = {"gpt3-175b"};
  } else {
    pick = {"gpt3-175b", "gpt-530b"};
  }
  s.model = *model::FindModelProfile(pick[h % pick.size()]);
  return s;
}

}  // namespace tianshu::sim
