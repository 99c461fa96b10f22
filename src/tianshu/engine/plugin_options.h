// A plugin's own options, typed: the engine configuration's `plugins: {NAME: {KEY: VALUE}}`
// keeps each value as text with its place (model/ knows no plugin); the plugin reads its options
// through a PluginOptionReader, which names `plugins.NAME.KEY` and the file, line and column of
// a bad or unknown option. A plugin that takes options registers a check with
// RegisterPluginOptions, so that `tianshu validate` and Engine::Create refuse a bad file before
// anything runs; one that registers none takes no options.
//   PluginOptionReader r("elastic", config);
//   r.Double("restart_s", &o.restart_s, 0, 1e6);  if (auto d = r.Finish()) return
//   Fail(d->ToString());
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/engine_config.h"
#include "tianshu/model/load.h"

namespace tianshu::engine {

class PluginOptionReader {
 public:
  // The options `config` gives the plugin `plugin` (none: every read keeps its default).
  PluginOptionReader(std::string plugin, const model::EngineConfig& config);

  // Each reads KEY when it is given, into *out; a value that does not parse or lies outside
  // [min, max] is the reader's problem (the first one is kept) and leaves *out as it was.
  void Double(const std::string& key, double* out, double min, double max);
  void Int(const std::string& key, int* out, int min, int max);
  void String(const std::string& key, std::string* out);
  // One of `known` (named `what` in the message: "unknown placement strategy 'x'; registered:
  // ..."), given or not: a default outside `known` is a problem too.
  void Choice(const std::string& key, std::string* out, const std::vector<std::string>& known,
              const std::string& what);
  // A duration (plain seconds or with a unit: "90", "30s", "10m", "1h"), in seconds.
  void Seconds(const std::string& key, double* out, double min_s, double max_s);

  // The first problem: a bad value, or else an option no read asked for (with the nearest
  // known name). nullopt when every given option was read and valid.
  std::optional<model::Diagnostic> Finish() const;

 private:
  const model::EngineConfig::PluginOption* Find(const std::string& key);
  void Problem(const std::string& key, const model::EngineConfig::PluginOption& o,
               std::string message);

  std::string plugin_;
  const model::EngineConfig::PluginOptions* options_ = nullptr;
  std::set<std::string> read_;
  std::optional<model::Diagnostic> problem_;
};

// Checks the options `config` gives one plugin: the first problem, or nullopt.
using PluginOptionsCheck =
    std::function<std::optional<model::Diagnostic>(const model::EngineConfig& config)>;

// Registers the check of a plugin name's options (one per name; a second fails). Thread-safe.
[[nodiscard]] Status RegisterPluginOptions(const std::string& plugin, PluginOptionsCheck check);

// The problem with the config's `plugins:` entries, if any: an entry for a plugin no registry
// knows (with did-you-mean over `known`), options for a plugin that takes none, or what the
// plugin's own check finds.
std::optional<model::Diagnostic> FindPluginOptionsProblem(const model::EngineConfig& config,
                                                          const std::vector<std::string>& known);

}  // namespace tianshu::engine
