// `tianshu simulate`: replays a workload on a described cluster under several scheduling
// configurations (presets or engine config files), side by side, with the very engine the
// server runs, on a virtual clock. Prints a table (or JSON), writes the per-job CSV and an
// HTML report on request.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "data_sets.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/engine/engine.h"
#include "tianshu/model/load.h"
#include "tianshu/policy/builtin.h"
#include "tianshu/sim/report.h"
#include "tianshu/sim/simulator.h"
#include "tianshu/sim/trace.h"

namespace tianshu::cli {
namespace {

struct SimulateFlags {
  std::string cluster;
  std::string trace;
  std::vector<std::string> configs;
  std::vector<std::string> vcs;
  std::string from, to;
  int max_jobs = 0;
  double time_scale = 1;
  double load = 0;
  uint64_t seed = 42;
  std::string durations = "model";
  std::string estimates = "trace";
  std::string jobs_csv;
  std::string report;
  std::string fail_nodes;
  std::string leaves;    // "minimum" or N: every job's topology.leaves
  std::string data_dir;  // "": found as data_sets.h says
  bool progress = false;
  bool no_progress = false;
  OutputFlag output;
};

Result<engine::EngineOptions> ConfigFor(const std::string& name) {
  for (const auto& p : engine::PresetNames()) {
    if (ToLower(name) == p) return engine::PresetOptions(p);
  }
  if (!std::filesystem::exists(name)) {
    return Fail("unknown configuration '", name, "': not a preset (",
                Join(engine::PresetNames(), ", "), ") nor an engine config file");
  }
  auto cfg = model::LoadEngineConfigFile(name);
  if (!cfg) return std::unexpected(cfg.error());
  // The file may name the policy library's plugins, their switches and their options.
  if (auto st = policy::RegisterBuiltinPolicies(); !st) return std::unexpected(st.error());
  auto o = engine::OptionsFromConfig(*cfg);
  if (!o) {  // a diagnostic names the file already
    const std::string& m = o.error().message;
    return m.starts_with(name + ":") ? Fail(m) : Fail(name, ": ", m);
  }
  o->preset = std::filesystem::path(name).stem().string();
  return o;
}

int Run(const SimulateFlags& f) {
  if (f.trace.empty()) {
    std::cerr << "tianshu simulate: --trace is required (philly, itp:cluster01, openb, "
                 "tiresias:FILE, FILE.yaml, llm:jobs=200,rate=2)\n";
    return kExitUsage;
  }
  sim::WorkloadOptions wo;
  wo.vcs = f.vcs;
  wo.from = f.from;
  wo.to = f.to;
  wo.max_jobs = f.max_jobs;
  wo.time_scale = f.time_scale;
  wo.seed = f.seed;
  auto trace_spec = ResolveTraceSpec(f.trace, f.data_dir);
  if (!trace_spec) {
    std::cerr << "tianshu simulate: " << trace_spec.error().message << "\n";
    return kExitInvalid;
  }
  // A scenario file may name its cluster; the flag wins.
  auto workload = sim::LoadWorkload(*trace_spec, wo);
  if (!workload) {
    std::cerr << "tianshu simulate: " << workload.error().message << "\n";
    return kExitInvalid;
  }
  std::string cluster_spec = !f.cluster.empty() ? f.cluster
                             : !workload->cluster.empty()
                                 ? workload->cluster
                                 : "fat-tree:nodes=256,gpus_per_node=8,gpu=A100-80GB";
  auto resolved = ResolveClusterSpec(cluster_spec, f.data_dir);
  if (!resolved) {
    std::cerr << "tianshu simulate: " << resolved.error().message << "\n";
    return kExitInvalid;
  }
  auto topo = model::LoadCluster(*resolved);
  if (!topo) {
    std::cerr << "tianshu simulate: " << topo.error().message << "\n";
    return kExitInvalid;
  }
  if (f.load > 0) {
    wo.load = f.load;
    wo.cluster_gpus = topo->NumGpus();
    auto again = sim::LoadWorkload(*trace_spec, wo);
    if (!again) {
      std::cerr << "tianshu simulate: " << again.error().message << "\n";
      return kExitInvalid;
    }
    again->cluster = workload->cluster;
    workload = std::move(again);
  }
  std::vector<std::string> names;
  for (const auto& c : f.configs) {
    for (const auto& part : SplitString(c, ',')) {
      if (!Trim(part).empty()) names.emplace_back(Trim(part));
    }
  }
  if (names.empty()) {
    names = workload->configs.empty() ? engine::ComparedPresetNames() : workload->configs;
  }
  std::vector<engine::EngineOptions> configs;
  for (const auto& n : names) {
    auto o = ConfigFor(n);
    if (!o) {
      std::cerr << "tianshu simulate: " << o.error().message << "\n";
      return kExitInvalid;
    }
    o->seed = f.seed;
    configs.push_back(*o);
  }
  sim::SimOptions so;
  so.seed = f.seed;
  so.fixed_durations = f.durations == "fixed";
  so.estimates = f.estimates == "history" ? sim::Estimates::kHistory
                 : f.estimates == "none"  ? sim::Estimates::kNone
                                          : sim::Estimates::kTrace;
  if (!f.leaves.empty()) {
    if (ToLower(f.leaves) == "minimum") {
      so.max_leaves = model::kFewestLeaves;
    } else if (int64_t n = 0; ParseInt64(f.leaves, &n) && n >= 1 && n <= 1'000'000) {
      so.max_leaves = static_cast<int>(n);
    } else {
      std::cerr << "tianshu simulate: --leaves: must be `minimum` or a whole number of leaf "
                   "switches (at least 1), got '"
                << f.leaves << "'\n";
      return kExitInvalid;
    }
  }
  if (!f.fail_nodes.empty()) {
    auto ns = ParseDurationNs(f.fail_nodes);
    if (!ns || *ns <= 0) {
      std::cerr << "tianshu simulate: --fail-nodes: a mean time between failures per node, "
                   "e.g. 30d\n";
      return kExitInvalid;
    }
    so.node_mtbf_s = static_cast<double>(*ns) / 1e9;
  }
  bool show = f.progress || (!f.no_progress && isatty(STDERR_FILENO));
  std::vector<sim::SimResult> results;
  for (size_t i = 0; i < configs.size(); ++i) {
    std::string label = configs[i].preset;
    if (show) {
      so.progress = [label](double frac) {
        int w = 30, k = static_cast<int>(frac * w);
        std::cerr << fmt::format("\r{:<12} [{}{}] {:5.1f}%", label, std::string(k, '#'),
                                 std::string(w - k, ' '), frac * 100)
                  << std::flush;
        if (frac >= 1) std::cerr << "\n";
      };
    } else {
      so.progress = nullptr;
    }
    auto r = sim::Simulate(*topo, *workload, configs[i], so);
    if (!r) {
      std::cerr << "tianshu simulate: " << label << ": " << r.error().message << "\n";
      return kExitInvalid;
    }
    results.push_back(std::move(*r));
  }
  std::string title =
      fmt::format("{} ({} jobs) on {}", workload->name, workload->jobs.size(), cluster_spec);
  if (f.output.Json()) {
    std::cout << sim::FormatJson(workload->name, cluster_spec, results) << "\n";
  } else {
    std::cout << title << ", " << topo->NumGpus() << " GPUs"
              << (so.fixed_durations ? ", fixed durations" : "")
              << (so.max_leaves != 0
                      ? ", every job within topology.leaves: " + model::LeafBoundName(so.max_leaves)
                      : std::string())
              << "\n"
              << sim::FormatTable(results);
  }
  if (!f.jobs_csv.empty()) {
    if (auto st = sim::WriteJobsCsv(f.jobs_csv, results, &*workload); !st) {
      std::cerr << "tianshu simulate: " << st.error().message << "\n";
      return kExitFailure;
    }
  }
  if (!f.report.empty()) {
    if (auto st = sim::WriteHtmlReport(f.report, title, *topo, results, &*workload); !st) {
      std::cerr << "tianshu simulate: " << st.error().message << "\n";
      return kExitFailure;
    }
    if (!f.output.Json()) std::cout << "report: " << f.report << "\n";
  }
  return kExitOk;
}

}  // namespace

std::string SimulationConfigProblem(const std::string& name) {
  auto o = ConfigFor(name);
  return o ? std::string() : o.error().message;
}

Runner RegisterSimulate(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  auto* cmd = app.add_subcommand(
      "simulate", "Replay a workload on a cluster under several scheduling configurations");
  cmd->add_option("--trace,--workload,-t", f->trace,
                  "philly | itp:clusterNN | openb | KIND:FILE (philly, itp, openb, tiresias, "
                  "yaml) | FILE.yaml (workload or scenario) | llm:jobs=N,rate=R,seed=S,mix=...");
  cmd->add_option("--cluster,-c", f->cluster,
                  "Cluster: YAML file, lingjun, openb, KIND:CSV, or fat-tree:nodes=256,...");
  cmd->add_option("--config", f->configs,
                  "Presets (" + Join(engine::PresetNames(), ", ") +
                      ") or engine config files; repeat or comma-separate (default: " +
                      Join(engine::ComparedPresetNames(), ", ") + ")");
  cmd->add_option("--vc", f->vcs, "Philly: virtual clusters to keep");
  cmd->add_option("--from", f->from, "Start of the window (\"2017-10-01\" or seconds)");
  cmd->add_option("--to", f->to, "End of the window");
  cmd->add_option("--max-jobs", f->max_jobs, "Keep the first N jobs");
  cmd->add_option("--time-scale", f->time_scale,
                  "Multiply arrival times and durations (0.1: ten times shorter)");
  cmd->add_option("--load", f->load, "Rescale arrivals to this offered load (e.g. 0.9)");
  cmd->add_option("--seed", f->seed, "Seed of searches, generators and failures");
  cmd->add_option("--durations", f->durations,
                  "model: duration from the performance model and contention; fixed: the "
                  "trace's duration whatever the placement")
      ->check(CLI::IsMember({"model", "fixed"}));
  cmd->add_option("--estimates", f->estimates,
                  "What the scheduler knows of run times: trace (each job's own duration, an "
                  "oracle), history (learned from completed jobs), none")
      ->check(CLI::IsMember({"trace", "history", "none"}));
  cmd->add_option("--jobs-csv", f->jobs_csv, "Write one row per job");
  cmd->add_option("--report", f->report, "Write a self-contained HTML report");
  cmd->add_option("--leaves", f->leaves,
                  "Every job asks for topology.leaves: minimum (the fewest leaf switches that "
                  "hold it) or N, a requirement rather than a preference");
  cmd->add_option("--fail-nodes", f->fail_nodes,
                  "Inject node failures: mean time between failures per node (e.g. 30d)");
  cmd->add_option("--data", f->data_dir,
                  "Folder of the data sets named philly, itp:clusterNN, openb, lingjun (default: "
                  "$TIANSHU_DATA, else share/tianshu/data beside the binary, else the source "
                  "tree's data/)");
  cmd->add_flag("--progress", f->progress, "Always show the progress bar on stderr");
  cmd->add_flag("--no-progress", f->no_progress, "Never show the progress bar");
  AddOutputFlag(cmd, &f->output);
  return [f] { return Run(*f); };
}

}  // namespace tianshu::cli
