// Typed, strict reading of YAML mappings that turns every problem into a Diagnostic with file,
// line, column and field path, instead of throwing. Private to model/.
//   YamlReader r("job.yaml", &diags);
//   r.CheckKeys(doc, "", {"name", "model"});  r.Int(doc, "", "gpus", &gpus, 1, 1 << 20);
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tianshu/base/units.h"
#include "tianshu/model/load.h"

namespace tianshu::model::internal {

// Longest scalar accepted anywhere in a document (names, labels, profiles).
inline constexpr size_t kMaxScalarLength = 4096;

class YamlReader {
 public:
  YamlReader(std::string file, std::vector<Diagnostic>* out) : file_(std::move(file)), out_(out) {}

  static std::string Child(const std::string& path, const std::string& key);
  static std::string Index(const std::string& path, size_t i);

  void Error(const YAML::Node& at, const std::string& path, std::string message);
  size_t ErrorCount() const { return out_->size(); }

  // True if `n` is a mapping; otherwise reports "expected a mapping".
  bool ExpectMap(const YAML::Node& n, const std::string& path);
  bool ExpectSeq(const YAML::Node& n, const std::string& path);
  // Reports unknown and duplicate keys, suggesting the nearest known key.
  void CheckKeys(const YAML::Node& map, const std::string& path,
                 const std::vector<std::string>& known);
  // Reports a missing required key at the mapping.
  bool Require(const YAML::Node& map, const std::string& path, const std::string& key);

  // Each getter leaves *out untouched when the key is absent, returns true when the key was
  // present and valid, and reports a diagnostic when present and invalid.
  bool Int(const YAML::Node& map, const std::string& path, const std::string& key, int64_t* out,
           int64_t min, int64_t max);
  bool Int(const YAML::Node& map, const std::string& path, const std::string& key, int* out,
           int min, int max);
  // A count that may carry K/M/B/T suffixes (thousand, million, billion, trillion): "175B".
  bool Count(const YAML::Node& map, const std::string& path, const std::string& key, int64_t* out,
             int64_t min);
  bool Double(const YAML::Node& map, const std::string& path, const std::string& key, double* out,
              double min, double max);
  bool Bool(const YAML::Node& map, const std::string& path, const std::string& key, bool* out);
  bool String(const YAML::Node& map, const std::string& path, const std::string& key,
              std::string* out);
  // One of `choices` (case-insensitive); *out gets the lower-case choice.
  bool Choice(const YAML::Node& map, const std::string& path, const std::string& key,
              const std::vector<std::string>& choices, std::string* out);
  // A plugin's name (lower-cased; letters, digits, '-', '.', '_'): what names exist is not
  // model/'s to know. (*where)[path] gets its place, for the later check's message.
  bool PluginName(const YAML::Node& map, const std::string& path, const std::string& key,
                  std::string* out, std::map<std::string, EngineConfig::SourcePos>* where);
  // Keeps in (*where)[path.key] where `key` of `map` is (for a check made after parsing).
  void Remember(const YAML::Node& map, const std::string& path, const std::string& key,
                std::map<std::string, EngineConfig::SourcePos>* where) const;
  // `plugins:`: a map of plugin names to maps of scalar options (at most 64 of each, values up
  // to 1,024 characters), kept as text with their places in c->plugins; each plugin's entry's
  // place goes in c->plugin_at["plugins.NAME"].
  void PluginOptions(const YAML::Node& plugins, EngineConfig* c);
  bool Size(const YAML::Node& map, const std::string& path, const std::string& key, int64_t* out);
  bool Bw(const YAML::Node& map, const std::string& path, const std::string& key, Bandwidth* out);
  // Seconds, from a plain number or a duration ("30m").
  bool Seconds(const YAML::Node& map, const std::string& path, const std::string& key,
               int64_t* out);
  bool DurationNs(const YAML::Node& map, const std::string& path, const std::string& key,
                  int64_t* out);
  bool StringList(const YAML::Node& map, const std::string& path, const std::string& key,
                  std::vector<std::string>* out);
  bool IntList(const YAML::Node& map, const std::string& path, const std::string& key,
               std::vector<int>* out, int min, int max);
  bool StringMap(const YAML::Node& map, const std::string& path, const std::string& key,
                 std::map<std::string, std::string>* out);

  // The scalar text of map[key] if it is a scalar (reporting otherwise), for custom checks.
  bool Scalar(const YAML::Node& map, const std::string& path, const std::string& key,
              std::string* out);
  YAML::Node Get(const YAML::Node& map, const std::string& key) const;

 private:
  bool ScalarOf(const YAML::Node& n, const std::string& path, std::string* out);

  std::string file_;
  std::vector<Diagnostic>* out_;
};

}  // namespace tianshu::model::internal
