#include "tianshu/model/load.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tianshu/base/data_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/model/internal/importers.h"
#include "tianshu/model/internal/parsers.h"
#include "tianshu/model/internal/yaml_reader.h"

namespace tianshu::model {
namespace {

// The largest document accepted: a real cluster file of 100,000 accelerators is well under it.
constexpr size_t kMaxDocumentBytes = 4 * 1024 * 1024;

std::string JoinDiagnostics(const std::vector<Diagnostic>& d) {
  std::vector<std::string> lines;
  for (const auto& x : d) lines.push_back(x.ToString());
  return Join(lines, "\n");
}

bool IsCsvHeader(const std::string& text, const std::vector<std::string>& header) {
  std::string first = text.substr(0, text.find('\n'));
  if (!first.empty() && first.back() == '\r') first.pop_back();
  return first == Join(header, ",");
}

std::optional<DocumentKind> KindFromKeys(const YAML::Node& root) {
  auto has = [&](const char* k) {
    for (auto it = root.begin(); it != root.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == k) return true;
    }
    return false;
  };
  if (has("node_groups") || has("fabric")) return DocumentKind::kCluster;
  if (has("model") || has("parallelism") || has("gpus") || has("nodes")) return DocumentKind::kJob;
  if (has("scheduler") || has("task_scheduler") || has("cluster") || has("plugins") ||
      has("queues") || has("network") || has("NETWORK_BUFFER_SIZE") || has("ALLREDUCE_ALGO") ||
      has("CHECKPOINT_MODE") || has("SCHEDULER_BACKEND")) {
    return DocumentKind::kEngineConfig;
  }
  return std::nullopt;
}

}  // namespace

Result<std::string> ReadDocumentFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Fail(path, ": is a directory, not a document");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(path, ": cannot open: ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  in.seekg(0);
  if (size < 0) return Fail(path, ": cannot read");
  if (static_cast<size_t>(size) > kMaxDocumentBytes) {
    return Fail(path, ": the file is ", FormatBytes(static_cast<double>(size)),
                ", larger than the ", FormatBytes(kMaxDocumentBytes), " allowed for a document");
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), size);
  return text;
}

Diagnostic DiagnosticAt(const EngineConfig::SourcePos& at, std::string path, std::string message) {
  return {.file = at.file,
          .line = at.line,
          .column = at.column,
          .path = std::move(path),
          .message = std::move(message)};
}

Diagnostic DiagnosticAt(const EngineConfig& config, std::string path, std::string message) {
  auto at = config.plugin_at.find(path);
  return DiagnosticAt(at == config.plugin_at.end() ? EngineConfig::SourcePos{} : at->second,
                      std::move(path), std::move(message));
}

std::string Diagnostic::ToString() const {
  std::string s = file;
  if (line > 0) {
    s += ':';
    s += std::to_string(line);
    s += ':';
    s += std::to_string(column);
  }
  if (!s.empty()) s += ": ";  // a value set in code has no place
  if (!path.empty()) {
    s += path;
    s += ": ";
  }
  s += message;
  return s;
}

std::string_view DocumentKindName(DocumentKind k) {
  switch (k) {
    case DocumentKind::kEngineConfig:
      return "engine config";
    case DocumentKind::kCluster:
      return "cluster";
    case DocumentKind::kJob:
      return "job";
  }
  return "job";
}

namespace {

// Ignores every event: only the number of documents matters.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

int CountYamlDocuments(const std::string& text, int limit) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  int n = 0;
  while (n < limit && parser.HandleNextDocument(counter)) ++n;
  return n;
}

ValidationResult ValidateText(const std::string& name, const std::string& text) {
  ValidationResult out;
  out.file = name;
  auto& diags = out.diagnostics;
  if (text.size() > kMaxDocumentBytes) {
    diags.push_back({name, 0, 0, "",
                     "the document is " + FormatBytes(static_cast<double>(text.size())) +
                         ", larger than the " + FormatBytes(kMaxDocumentBytes) + " allowed"});
    return out;
  }
  if (auto nul = text.find('\0'); nul != std::string::npos) {
    diags.push_back(
        {name, 0, 0, "", "is not a YAML document: binary data at byte " + std::to_string(nul)});
    return out;
  }
  // CSV files of the real clusters.
  if (IsCsvHeader(text, internal::LingjunHeader()) || IsCsvHeader(text, internal::OpenbHeader())) {
    Topology t = IsCsvHeader(text, internal::LingjunHeader())
                     ? internal::ImportLingjunText(name, text, "A100-80GB", &diags)
                     : internal::ImportOpenbText(name, text, false, &diags);
    if (diags.empty()) out.document = Document{DocumentKind::kCluster, std::move(t)};
    return out;
  }

  constexpr int kMaxDocuments = 16;
  YAML::Node root;
  try {
    int count = CountYamlDocuments(text, kMaxDocuments);
    if (count > 1) {
      std::string msg = "holds ";
      msg += std::to_string(count);
      msg += count >= kMaxDocuments ? " or more YAML documents (or a stray ',' at the top level); "
                                      "put each document in its own file"
                                    : " YAML documents; put each in its own file";
      diags.push_back({name, 0, 0, "", std::move(msg)});
      return out;
    }
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    int col = e.mark.is_null() ? 0 : e.mark.column + 1;
    diags.push_back({name, line, col, "", "is not valid YAML: " + e.msg});
    return out;
  }
  if (!root.IsDefined() || root.IsNull()) {
    diags.push_back({name, 0, 0, "", "is empty; expected a job, cluster or engine config"});
    return out;
  }
  internal::YamlReader r(name, &diags);
  if (!root.IsMap()) {
    r.Error(root, "(document)", "expected a mapping of keys (a job, cluster or engine config)");
    return out;
  }
  std::optional<DocumentKind> kind;
  YAML::Node k = r.Get(root, "kind");
  if (k.IsDefined()) {
    std::string s = k.IsScalar() ? ToLower(k.Scalar()) : "";
    if (s == "job" || s == "training" || s == "inference") {
      kind = DocumentKind::kJob;
    } else if (s == "cluster" || s == "topology") {
      kind = DocumentKind::kCluster;
    } else if (s == "engine" || s == "config" || s == "engineconfig") {
      kind = DocumentKind::kEngineConfig;
    } else {
      std::vector<std::string> kinds = {"training", "inference", "job", "cluster", "engine"};
      std::string near = NearestWord(s, kinds);
      r.Error(k, "kind",
              "expected one of training, inference, job, cluster, engine, got '" +
                  (k.IsScalar() ? k.Scalar() : std::string("?")) + "'" +
                  (near.empty() ? "" : " (did you mean '" + near + "'?)"));
      return out;
    }
  } else {
    kind = KindFromKeys(root);
  }
  if (!kind) {
    r.Error(root, "(document)",
            "cannot tell what this document is; add 'kind: training', 'kind: cluster' or "
            "'kind: engine'");
    return out;
  }
  switch (*kind) {
    case DocumentKind::kEngineConfig: {
      EngineConfig c = internal::ParseEngineConfig(r, root);
      if (diags.empty()) out.document = Document{*kind, std::move(c)};
      break;
    }
    case DocumentKind::kCluster: {
      Topology t = internal::ParseCluster(r, root);
      if (diags.empty()) out.document = Document{*kind, std::move(t)};
      break;
    }
    case DocumentKind::kJob: {
      JobSpec j = internal::ParseJob(r, root);
      if (diags.empty()) out.document = Document{*kind, std::move(j)};
      break;
    }
  }
  return out;
}

ValidationResult ValidateFile(const std::string& path) {
  auto text = ReadDocumentFile(path);
  if (!text) {
    ValidationResult out;
    out.file = path;
    out.diagnostics.push_back({path, 0, 0, "", text.error().message.substr(path.size() + 2)});
    return out;
  }
  return ValidateText(path, *text);
}

namespace {
template <typename T>
Result<T> Expect(ValidationResult v, DocumentKind want) {
  if (!v.diagnostics.empty()) return Fail(JoinDiagnostics(v.diagnostics));
  if (v.document->kind != want) {
    return Fail(v.file, ": is of kind '", std::string(DocumentKindName(v.document->kind)),
                "', expected '", std::string(DocumentKindName(want)), "'");
  }
  return std::get<T>(std::move(v.document->value));
}
}  // namespace

Result<EngineConfig> LoadEngineConfigFile(const std::string& path) {
  return Expect<EngineConfig>(ValidateFile(path), DocumentKind::kEngineConfig);
}

Result<JobSpec> LoadJobFile(const std::string& path) {
  return Expect<JobSpec>(ValidateFile(path), DocumentKind::kJob);
}

Result<JobSpec> LoadJobText(const std::string& name, const std::string& text) {
  return Expect<JobSpec>(ValidateText(name, text), DocumentKind::kJob);
}

Result<Topology> ImportLingjun(const std::string& path, const std::string& server_gpu) {
  auto text = ReadDataFile(path);
  if (!text) return std::unexpected(text.error());
  std::vector<Diagnostic> d;
  Topology t = internal::ImportLingjunText(path, *text, server_gpu, &d);
  if (!d.empty()) return Fail(JoinDiagnostics(d));
  return t;
}

Result<Topology> ImportOpenb(const std::string& path, bool keep_cpu_nodes) {
  auto text = ReadDataFile(path);
  if (!text) return std::unexpected(text.error());
  std::vector<Diagnostic> d;
  Topology t = internal::ImportOpenbText(path, *text, keep_cpu_nodes, &d);
  if (!d.empty()) return Fail(JoinDiagnostics(d));
  return t;
}

Result<Topology> LoadCluster(const std::string& spec) {
  if (StartsWith(spec, "fat-tree")) {
    auto o = ParseFatTreeSpec(spec);
    if (!o) return std::unexpected(o.error());
    return GenerateFatTree(*o);
  }
  if (StartsWith(spec, "lingjun:")) return ImportLingjun(spec.substr(8));
  if (StartsWith(spec, "openb:")) return ImportOpenb(spec.substr(6));
  return Expect<Topology>(ValidateFile(spec), DocumentKind::kCluster);
}

}  // namespace tianshu::model
