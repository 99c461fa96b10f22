// `tianshu validate FILE...`: detect each document's kind, check it fully, print every problem
// with file, line, column and field path. Exit 1 if any file has a problem.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "data_sets.h"
#include "tianshu/engine/engine.h"
#include "tianshu/model/load.h"
#include "tianshu/policy/builtin.h"
#include "tianshu/sim/trace.h"

namespace tianshu::cli {
namespace {

std::string Summary(const model::Document& d) {
  switch (d.kind) {
    case model::DocumentKind::kCluster: {
      const auto& t = std::get<model::Topology>(d.value);
      return "cluster '" + t.name + "': " + std::to_string(t.NumNodes()) + " nodes, " +
             std::to_string(t.NumGpus()) + " GPUs";
    }
    case model::DocumentKind::kJob: {
      const auto& j = std::get<model::JobSpec>(d.value);
      return std::string(model::JobKindName(j.kind)) + " job '" + j.name +
             "': " + std::to_string(j.gpus) + " GPUs";
    }
    case model::DocumentKind::kEngineConfig: {
      const auto& c = std::get<model::EngineConfig>(d.value);
      return "engine config: algorithm " + c.algorithm;
    }
  }
  return "";
}

// A simulation scenario (examples/scenarios/): a mapping with a `jobs:` list and no `kind`.
// Read the way `tianshu simulate` reads it (sim::LoadWorkload), plus the key checks the loader
// leaves out; the cluster it names must load too.
model::ValidationResult ValidateScenario(const std::string& path, const YAML::Node& root,
                                         std::string* summary) {
  model::ValidationResult v;
  v.file = path;
  auto add = [&](const YAML::Node& at, const std::string& field, const std::string& message) {
    v.diagnostics.push_back({path, at.Mark().line + 1, at.Mark().column + 1, field, message});
  };
  const std::set<std::string> top = {"name", "description", "cluster", "configs", "claims", "jobs"};
  const std::set<std::string> item = {"job", "spec", "submit", "duration", "count", "every"};
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string key = it->first.as<std::string>("");
    if (!top.contains(key)) {
      add(it->first, key,
          "unknown key '" + key +
              "' in a scenario (known: name, description, cluster, "
              "configs, claims, jobs)");
    }
  }
  const YAML::Node jobs = root["jobs"];
  if (jobs.IsSequence()) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i].IsMap()) continue;
      for (auto it = jobs[i].begin(); it != jobs[i].end(); ++it) {
        std::string key = it->first.as<std::string>("");
        if (!item.contains(key)) {
          add(it->first, "jobs[" + std::to_string(i) + "]." + key,
              "unknown key '" + key + "' (known: job, spec, submit, duration, count, every)");
        }
      }
    }
  }
  if (!v.diagnostics.empty()) return v;
  auto w = sim::LoadWorkload("yaml:" + path, {});
  if (!w) {
    std::string message = w.error().message;
    if (message.starts_with(path + ":") && !message.starts_with(path + ": ")) {
      v.diagnostics.push_back({"", 0, 0, "", message});  // placed already (file:line:column)
      return v;
    }
    if (message.starts_with(path + ": ")) message.erase(0, path.size() + 2);
    v.diagnostics.push_back({path, 0, 0, "", message});
    return v;
  }
  // Each configuration as `tianshu simulate` reads it (a file found beside the scenario).
  const YAML::Node configs = root["configs"];
  for (size_t i = 0; i < w->configs.size(); ++i) {
    const std::string problem = SimulationConfigProblem(w->configs[i]);
    if (!problem.empty()) {
      add(configs.IsSequence() && i < configs.size() ? configs[i] : configs,
          "configs[" + std::to_string(i) + "]", problem);
    }
  }
  if (!v.diagnostics.empty()) return v;
  if (!w->cluster.empty()) {
    // As `tianshu simulate` reads it: a file relative to the scenario (LoadWorkload resolved
    // it), else to the working directory; the bare names of the data sets found as there.
    auto spec = ResolveClusterSpec(w->cluster, "");
    if (!spec) {
      add(root["cluster"], "cluster", spec.error().message);
      return v;
    }
    auto topo = model::LoadCluster(*spec);
    if (!topo) {
      add(root["cluster"], "cluster", topo.error().message);
      return v;
    }
    *summary = "scenario '" + w->name + "': " + std::to_string(w->jobs.size()) + " jobs on " +
               std::to_string(topo->NumGpus()) + " GPUs";
  } else {
    *summary = "scenario '" + w->name + "': " + std::to_string(w->jobs.size()) + " jobs";
  }
  return v;
}

bool IsScenario(const std::string& text, YAML::Node* root) {
  try {
    if (model::CountYamlDocuments(text, 2) != 1) return false;
    *root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return false;
  }
  return root->IsMap() && (*root)["jobs"] && !(*root)["kind"];
}

// Reads and checks one file; the file is read once.
model::ValidationResult Check(const std::string& path, std::string* summary) {
  auto text = model::ReadDocumentFile(path);
  if (!text) return model::ValidateFile(path);  // which says why, as for any document
  YAML::Node scenario;
  if (IsScenario(*text, &scenario)) return ValidateScenario(path, scenario, summary);
  model::ValidationResult v = model::ValidateText(path, *text);
  if (v.diagnostics.empty() && v.document &&
      v.document->kind == model::DocumentKind::kEngineConfig) {
    // Plugin names against the registries (model/ knows none): the built-in policies and
    // strategies, as serve and simulate load them.
    if (Status st = policy::RegisterBuiltinPolicies(); !st) {
      v.diagnostics.push_back({.file = path, .message = st.error().message});
      return v;
    }
    if (auto d = engine::FindPluginNameProblem(std::get<model::EngineConfig>(v.document->value))) {
      v.diagnostics.push_back(std::move(*d));
      v.document.reset();
    }
  }
  return v;
}

}  // namespace

Runner RegisterValidate(CLI::App& app) {
  struct Args {
    std::vector<std::string> files;
    OutputFlag out;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Check job, cluster, engine config and scenario files (kind detected from content)");
  cmd->add_option("files", args->files, "Files to check (YAML, or a Lingjun/openb CSV)")
      ->required();
  AddOutputFlag(cmd, &args->out);
  return [args] {
    nlohmann::json report = nlohmann::json::array();
    bool all_ok = true;
    for (const auto& f : args->files) {
      std::string summary;
      model::ValidationResult v = Check(f, &summary);
      bool ok = v.diagnostics.empty();
      if (ok && v.document) summary = Summary(*v.document);
      all_ok = all_ok && ok;
      if (args->out.Json()) {
        nlohmann::json entry = {{"file", f}, {"valid", ok}};
        if (ok) entry["kind"] = v.document ? model::DocumentKindName(v.document->kind) : "scenario";
        entry["diagnostics"] = nlohmann::json::array();
        for (const auto& d : v.diagnostics) {
          entry["diagnostics"].push_back({{"line", d.line},
                                          {"column", d.column},
                                          {"path", d.path},
                                          {"message", d.message},
                                          {"text", d.ToString()}});
        }
        report.push_back(entry);
      } else if (ok) {
        std::cout << "ok: " << f << " (" << summary << ")\n";
      } else {
        for (const auto& d : v.diagnostics) std::cerr << d.ToString() << "\n";
      }
    }
    if (args->out.Json()) std::cout << report.dump(2) << "\n";
    return all_ok ? kExitOk : kExitInvalid;
  };
}

}  // namespace tianshu::cli
