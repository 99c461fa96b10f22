// Loading and validating the three documents (engine config, cluster, job) and the cluster
// importers, with diagnostics that name file, line, column and field path.
//
//   auto job = LoadJobFile("examples/jobs/gpt3-175b.yaml");
//   if (!job) std::cerr << job.error().message;   // "f.yaml:4:9: parallelism.tp: ..."
//   auto cluster = LoadCluster("fat-tree:nodes=64");  // or a YAML file, lingjun:/openb: CSV
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/job.h"
#include "tianshu/model/topology.h"

namespace tianshu::model {

// One problem found in a document. `line` and `column` are 1-based; 0 when the problem is
// about the file as a whole.
struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string path;     // field path, "scheduler.resource_weight.compute", "node_groups[1].count"
  std::string message;  // what was expected

  // "file:line:column: path: message"; "path: message" without a file.
  std::string ToString() const;
};

// A problem with the engine config's value at `path`, placed where the file set it (plugin
// names and scheduler.binding keep their place in EngineConfig::plugin_at), or unplaced.
Diagnostic DiagnosticAt(const EngineConfig::SourcePos& at, std::string path, std::string message);
Diagnostic DiagnosticAt(const EngineConfig& config, std::string path, std::string message);

enum class DocumentKind {
  kEngineConfig,  // cluster:/scheduler:/task_scheduler: keys
  kCluster,       // node_groups: and fabric:, or an importable CSV
  kJob,           // a job spec
};
std::string_view DocumentKindName(DocumentKind k);

struct Document {
  DocumentKind kind = DocumentKind::kJob;
  std::variant<EngineConfig, Topology, JobSpec> value;
};

struct ValidationResult {
  std::string file;
  std::optional<Document> document;     // set when there are no diagnostics
  std::vector<Diagnostic> diagnostics;  // empty when valid
};

// Detects the kind (an explicit `kind:` key, else by its keys; CSV by header) and checks the
// document completely. Never throws; every problem becomes a diagnostic.
ValidationResult ValidateFile(const std::string& path);
// The text of a document file, refused (with the file in the message) when it cannot be read,
// is a directory, or is larger than a document may be (4 MiB).
[[nodiscard]] Result<std::string> ReadDocumentFile(const std::string& path);
// The same as ValidateFile, from text already in memory (`name` is used as the file in
// diagnostics).
ValidationResult ValidateText(const std::string& name, const std::string& text);

// Counts the YAML documents in `text`, stopping at `limit`. Throws YAML::Exception on a syntax
// error. yaml-cpp 0.7's LoadAll loops forever on some broken streams ("!,", "{a: 1},", a lone
// ","; jbeder/yaml-cpp#1040, fixed upstream by #1319): its parser keeps reporting one more empty
// document. Counting with a bound finds those before they get there.
int CountYamlDocuments(const std::string& text, int limit);

// Loaders: the Error message holds every diagnostic, one per line.
[[nodiscard]] Result<EngineConfig> LoadEngineConfigFile(const std::string& path);
[[nodiscard]] Result<JobSpec> LoadJobFile(const std::string& path);
[[nodiscard]] Result<JobSpec> LoadJobText(const std::string& name, const std::string& text);
// A cluster from a YAML file, a CSV the importers recognise, "lingjun:PATH", "openb:PATH",
// or an inline generator "fat-tree:nodes=256,...".
[[nodiscard]] Result<Topology> LoadCluster(const std::string& spec);

// Importers of the real clusters in shared/data (see docs/config.md for their assumptions).
// lingjun/topo.csv: host -> ASW (scoped by its PSW) -> PSW -> DSW, servers of `server_gpu`.
[[nodiscard]] Result<Topology> ImportLingjun(const std::string& path,
                                             const std::string& server_gpu = "A100-80GB");
// openb node list: sn,cpu_milli,memory_mib,gpu,model; nodes without GPUs are skipped unless
// `keep_cpu_nodes`. The trace has no network data: every node sits under one flat switch.
[[nodiscard]] Result<Topology> ImportOpenb(const std::string& path, bool keep_cpu_nodes = false);

}  // namespace tianshu::model
