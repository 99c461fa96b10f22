#include "tianshu/engine/plugin_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"

namespace tianshu::engine {

namespace {

// A value as the message shows it: at most 40 characters, control characters as '?'.
std::string Shown(const std::string& v) {
  std::string s = v.size() > 40 ? v.substr(0, 37) + "..." : v;
  for (char& ch : s) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  return "\"" + s + "\"";
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Checks {
  std::mutex mu;
  std::map<std::string, PluginOptionsCheck> by_plugin;
};

Checks& AllChecks() {
  static Checks* c = new Checks;
  return *c;
}

}  // namespace

PluginOptionReader::PluginOptionReader(std::string plugin, const model::EngineConfig& config)
    : plugin_(std::move(plugin)) {
  if (auto it = config.plugins.find(plugin_); it != config.plugins.end()) options_ = &it->second;
}

const model::EngineConfig::PluginOption* PluginOptionReader::Find(const std::string& key) {
  read_.insert(key);
  if (!options_) return nullptr;
  auto it = options_->find(key);
  return it == options_->end() ? nullptr : &it->second;
}

void PluginOptionReader::Problem(const std::string& key, const model::EngineConfig::PluginOption& o,
                                 std::string message) {
  if (!problem_)
    problem_ = model::DiagnosticAt(o.at, "plugins." + plugin_ + "." + key, std::move(message));
}

void PluginOptionReader::Double(const std::string& key, double* out, double min, double max) {
  const auto* o = Find(key);
  if (!o) return;
  double v = 0;
  if (!ParseDouble(o->value, &v) || !std::isfinite(v)) {
    Problem(key, *o, "expected a number, got " + Shown(o->value));
  } else if (v < min || v > max) {
    Problem(key, *o,
            "must be between " + Number(min) + " and " + Number(max) + ", got " + o->value);
  } else {
    *out = v;
  }
}

void PluginOptionReader::Int(const std::string& key, int* out, int min, int max) {
  const auto* o = Find(key);
  if (!o) return;
  int64_t v = 0;
  if (!ParseInt64(o->value, &v)) {
    Problem(key, *o, "expected a whole number, got " + Shown(o->value));
  } else if (v < min || v > max) {
    Problem(key, *o,
            "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
                Shown(o->value));
  } else {
    *out = static_cast<int>(v);
  }
}

void PluginOptionReader::Seconds(const std::string& key, double* out, double min_s, double max_s) {
  const auto* o = Find(key);
  if (!o) return;
  auto ns = ParseDurationNs(o->value);
  if (!ns) {
    Problem(key, *o, "expected a duration (90, 30s, 10m, 1h), got " + Shown(o->value));
    return;
  }
  const double s = static_cast<double>(*ns) / 1e9;
  if (s < min_s || s > max_s) {
    Problem(key, *o,
            "must be between " + Number(min_s) + " and " + Number(max_s) + " seconds, got " +
                Shown(o->value));
  } else {
    *out = s;
  }
}

void PluginOptionReader::String(const std::string& key, std::string* out) {
  const auto* o = Find(key);
  if (!o) return;
  if (o->value.empty()) {
    Problem(key, *o, "must not be empty");
  } else {
    *out = o->value;
  }
}

void PluginOptionReader::Choice(const std::string& key, std::string* out,
                                const std::vector<std::string>& known, const std::string& what) {
  String(key, out);
  if (problem_ || std::find(known.begin(), known.end(), *out) != known.end()) return;
  const auto* o = Find(key);
  const std::string message =
      "unknown " + what + " '" + *out + "'; registered: " + Join(known, ", ");
  if (o) {
    Problem(key, *o, message);
  } else {
    problem_ = model::Diagnostic{.path = "plugins." + plugin_ + "." + key, .message = message};
  }
}

std::optional<model::Diagnostic> PluginOptionReader::Finish() const {
  if (problem_) return problem_;
  if (!options_) return std::nullopt;
  const std::vector<std::string> known(read_.begin(), read_.end());
  for (const auto& [key, o] : *options_) {
    if (read_.contains(key)) continue;
    const std::string near = NearestWord(key, known);
    return model::DiagnosticAt(
        o.at, "plugins." + plugin_ + "." + key,
        "unknown option of " + plugin_ +
            (near.empty() ? std::string() : " (did you mean '" + near + "'?)") +
            (known.empty() ? "; it takes none" : "; known: " + Join(known, ", ")));
  }
  return std::nullopt;
}

Status RegisterPluginOptions(const std::string& plugin, PluginOptionsCheck check) {
  Checks& c = AllChecks();
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.by_plugin.emplace(plugin, std::move(check)).second) {
    return Fail("the options of plugin '", plugin, "' are already registered");
  }
  return Ok();
}

std::optional<model::Diagnostic> FindPluginOptionsProblem(const model::EngineConfig& config,
                                                          const std::vector<std::string>& known) {
  for (const auto& [plugin, options] : config.plugins) {
    PluginOptionsCheck check;
    {
      Checks& c = AllChecks();
      std::lock_guard<std::mutex> lock(c.mu);
      if (auto it = c.by_plugin.find(plugin); it != c.by_plugin.end()) check = it->second;
    }
    if (check) {
      if (auto d = check(config)) return d;
      continue;
    }
    if (std::find(known.begin(), known.end(), plugin) == known.end()) {
      const std::string near = NearestWord(plugin, known);
      return model::DiagnosticAt(
          config, "plugins." + plugin,
          "unknown plugin '" + plugin + "'" +
              (near.empty() ? std::string() : " (did you mean '" + near + "'?)") +
              "; registered: " + Join(known, ", "));
    }
    // A known plugin that registered no check takes no options.
    if (auto d = PluginOptionReader(plugin, config).Finish()) return d;
  }
  return std::nullopt;
}

}  // namespace tianshu::engine
