// `tianshu validate FILE...`: detect each document's kind, check it fully, print every problem
// with file, line, column and field path. Exit 1 if any file has a problem.
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tianshu/model/load.h"

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

}  // namespace

Runner RegisterValidate(CLI::App& app) {
  struct Args {
    std::vector<std::string> files;
    OutputFlag out;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "validate", "Check job, cluster and engine config files (kind detected from content)");
  cmd->add_option("files", args->files, "Files to check (YAML, or a Lingjun/openb CSV)")
      ->required();
  AddOutputFlag(cmd, &args->out);
  return [args] {
    nlohmann::json report = nlohmann::json::array();
    bool all_ok = true;
    for (const auto& f : args->files) {
      model::ValidationResult v = model::ValidateFile(f);
      bool ok = v.diagnostics.empty();
      all_ok = all_ok && ok;
      if (args->out.Json()) {
        nlohmann::json entry = {{"file", f}, {"valid", ok}};
        if (ok) entry["kind"] = model::DocumentKindName(v.document->kind);
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
        std::cout << "ok: " << f << " (" << Summary(*v.document) << ")\n";
      } else {
        for (const auto& d : v.diagnostics) std::cerr << d.ToString() << "\n";
      }
    }
    if (args->out.Json()) std::cout << report.dump(2) << "\n";
    return all_ok ? kExitOk : kExitInvalid;
  };
}

}  // namespace tianshu::cli
