#include "tianshu/model/internal/yaml_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "tianshu/base/strings.h"

namespace tianshu::model::internal {
namespace {

std::string Quote(const std::string& s) {
  if (s.size() > 40) return "'" + s.substr(0, 37) + "...'";
  return "'" + s + "'";
}

}  // namespace

std::string YamlReader::Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string YamlReader::Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void YamlReader::Error(const YAML::Node& at, const std::string& path, std::string message) {
  Diagnostic d;
  d.file = file_;
  YAML::Mark m = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  if (m.is_null()) {
    d.line = d.column = 0;
  } else {
    d.line = m.line + 1;
    d.column = m.column + 1;
  }
  d.path = path;
  d.message = std::move(message);
  out_->push_back(std::move(d));
}

YAML::Node YamlReader::Get(const YAML::Node& map, const std::string& key) const {
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool YamlReader::ExpectMap(const YAML::Node& n, const std::string& path) {
  if (n.IsMap()) return true;
  Error(n, path.empty() ? "(document)" : path,
        n.IsNull() ? "is empty; expected a mapping of keys" : "expected a mapping of keys");
  return false;
}

bool YamlReader::ExpectSeq(const YAML::Node& n, const std::string& path) {
  if (n.IsSequence()) return true;
  Error(n, path, "expected a list");
  return false;
}

void YamlReader::CheckKeys(const YAML::Node& map, const std::string& path,
                           const std::vector<std::string>& known) {
  if (!map.IsMap()) return;
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      Error(it->first, path, "a key must be a plain name");
      continue;
    }
    const std::string& key = it->first.Scalar();
    if (!seen.insert(key).second) {
      Error(it->first, Child(path, key), "duplicate key " + Quote(key));
      continue;
    }
    bool ok = false;
    for (const auto& k : known) ok = ok || k == key;
    if (ok) continue;
    std::string near = NearestWord(key, known);
    Error(it->first, Child(path, key),
          "unknown key " + Quote(key) +
              (near.empty() ? " (known: " + Join(known, ", ") + ")"
                            : " (did you mean '" + near + "'?)"));
  }
}

bool YamlReader::Require(const YAML::Node& map, const std::string& path, const std::string& key) {
  if (Get(map, key).IsDefined()) return true;
  Error(map, Child(path, key), "is required");
  return false;
}

bool YamlReader::ScalarOf(const YAML::Node& n, const std::string& path, std::string* out) {
  if (!n.IsScalar()) {
    Error(n, path, n.IsNull() ? "is empty; expected a value" : "expected a single value");
    return false;
  }
  if (n.Scalar().size() > kMaxScalarLength) {
    Error(n, path,
          "value of " + std::to_string(n.Scalar().size()) + " characters is longer than the " +
              std::to_string(kMaxScalarLength) + " allowed");
    return false;
  }
  *out = n.Scalar();
  return true;
}

bool YamlReader::Scalar(const YAML::Node& map, const std::string& path, const std::string& key,
                        std::string* out) {
  YAML::Node n = Get(map, key);
  if (!n.IsDefined()) return false;
  return ScalarOf(n, Child(path, key), out);
}

bool YamlReader::Int(const YAML::Node& map, const std::string& path, const std::string& key,
                     int64_t* out, int64_t min, int64_t max) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  int64_t v = 0;
  if (!ParseInt64(s, &v)) {
    Error(n, p, "expected a whole number, got " + Quote(s));
    return false;
  }
  if (v < min || v > max) {
    std::string range = max >= (int64_t{1} << 40)
                            ? "at least " + std::to_string(min)
                            : std::to_string(min) + ".." + std::to_string(max);
    Error(n, p, "must be " + range + ", got " + s);
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::Int(const YAML::Node& map, const std::string& path, const std::string& key,
                     int* out, int min, int max) {
  int64_t v = 0;
  if (!Int(map, path, key, &v, min, max)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool YamlReader::Count(const YAML::Node& map, const std::string& path, const std::string& key,
                       int64_t* out, int64_t min) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  std::string t(Trim(s));
  double factor = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K':
        factor = 1e3;
        break;
      case 'M':
        factor = 1e6;
        break;
      case 'B':
        factor = 1e9;
        break;
      case 'T':
        factor = 1e12;
        break;
      default:
        break;
    }
  }
  if (factor != 1) t.pop_back();
  double v = 0;
  if (!ParseDouble(t, &v) || !std::isfinite(v) || v * factor > 9e18) {
    Error(n, p, "expected a count such as 175000000000 or 175B, got " + Quote(s));
    return false;
  }
  if (v * factor < static_cast<double>(min)) {
    Error(n, p, "must be at least " + std::to_string(min) + ", got " + s);
    return false;
  }
  *out = static_cast<int64_t>(std::llround(v * factor));
  return true;
}

bool YamlReader::Double(const YAML::Node& map, const std::string& path, const std::string& key,
                        double* out, double min, double max) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  double v = 0;
  if (!ParseDouble(s, &v) || !std::isfinite(v)) {
    Error(n, p, "expected a number, got " + Quote(s));
    return false;
  }
  if (v < min || v > max) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "must be between %g and %g, got %s", min, max, s.c_str());
    Error(n, p, buf);
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::Bool(const YAML::Node& map, const std::string& path, const std::string& key,
                      bool* out) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  std::string l = ToLower(s);
  if (l == "true" || l == "yes" || l == "on") {
    *out = true;
    return true;
  }
  if (l == "false" || l == "no" || l == "off") {
    *out = false;
    return true;
  }
  Error(n, p, "expected true or false, got " + Quote(s));
  return false;
}

bool YamlReader::String(const YAML::Node& map, const std::string& path, const std::string& key,
                        std::string* out) {
  YAML::Node n = Get(map, key);
  std::string s;
  if (!n.IsDefined() || !ScalarOf(n, Child(path, key), &s)) return false;
  if (s.empty()) {
    Error(n, Child(path, key), "must not be empty");
    return false;
  }
  *out = s;
  return true;
}

bool YamlReader::Choice(const YAML::Node& map, const std::string& path, const std::string& key,
                        const std::vector<std::string>& choices, std::string* out) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  std::string l = ToLower(s);
  for (const auto& c : choices) {
    if (ToLower(c) == l) {
      *out = c;
      return true;
    }
  }
  std::string near = NearestWord(s, choices);
  Error(n, p,
        "expected one of " + Join(choices, ", ") + ", got " + Quote(s) +
            (near.empty() ? "" : " (did you mean '" + near + "'?)"));
  return false;
}

namespace {

// 1-64 letters, digits, '-', '.' or '_', starting with a letter.
bool IsPluginWord(const std::string& l) {
  return !l.empty() && l.size() <= 64 && std::isalpha(static_cast<unsigned char>(l[0])) &&
         std::all_of(l.begin(), l.end(), [](char ch) {
           return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' ||
                  ch == '_';
         });
}

}  // namespace

void YamlReader::PluginOptions(const YAML::Node& plugins, EngineConfig* c) {
  constexpr size_t kMaxEntries = 64, kMaxValue = 1024;
  if (plugins.size() > kMaxEntries) {
    Error(plugins, "plugins", "at most " + std::to_string(kMaxEntries) + " plugins");
    return;
  }
  for (const auto& entry : plugins) {
    std::string name;
    if (!ScalarOf(entry.first, "plugins", &name)) continue;
    if (!IsPluginWord(ToLower(name))) {
      Error(entry.first, Child("plugins", name),
            "expected a plugin name (1-64 letters, digits, '-', '.' or '_', "
            "starting with a letter), got " +
                Quote(name));
      continue;
    }
    name = ToLower(name);
    const std::string p = Child("plugins", name);
    if (c->plugins.contains(name)) {
      Error(entry.first, p, "duplicate key " + Quote(name));
      continue;
    }
    if (!ExpectMap(entry.second, p)) continue;
    if (entry.second.size() > kMaxEntries) {
      Error(entry.second, p, "at most " + std::to_string(kMaxEntries) + " options");
      continue;
    }
    const YAML::Mark at = entry.first.Mark();
    c->plugin_at[p] = {.file = file_, .line = at.line + 1, .column = at.column + 1};
    EngineConfig::PluginOptions& options = c->plugins[name];
    for (const auto& option : entry.second) {
      std::string key, value;
      if (!ScalarOf(option.first, p, &key)) continue;
      const std::string op = Child(p, key);
      if (!IsPluginWord(key)) {
        Error(option.first, op, "expected an option name, got " + Quote(key));
        continue;
      }
      if (options.contains(key)) {
        Error(option.first, op, "duplicate key " + Quote(key));
        continue;
      }
      if (!ScalarOf(option.second, op, &value)) continue;
      if (value.size() > kMaxValue) {
        Error(option.second, op, "longer than " + std::to_string(kMaxValue) + " characters");
        continue;
      }
      const YAML::Mark m = option.first.Mark();  // the key's place: the path names it
      options[key] = {.value = value,
                      .at = {.file = file_, .line = m.line + 1, .column = m.column + 1}};
    }
  }
}

bool YamlReader::PluginName(const YAML::Node& map, const std::string& path, const std::string& key,
                            std::string* out,
                            std::map<std::string, EngineConfig::SourcePos>* where) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  const std::string l = ToLower(s);
  const bool ok = IsPluginWord(l);
  if (!ok) {
    Error(n, p,
          "expected a plugin name (1-64 letters, digits, '-', '.' or '_', starting with a "
          "letter), got " +
              Quote(s));
    return false;
  }
  *out = l;
  Remember(map, path, key, where);
  return true;
}

void YamlReader::Remember(const YAML::Node& map, const std::string& path, const std::string& key,
                          std::map<std::string, EngineConfig::SourcePos>* where) const {
  const YAML::Node n = Get(map, key);
  if (!n.IsDefined()) return;
  const YAML::Mark m = n.Mark();
  (*where)[Child(path, key)] = {.file = file_, .line = m.line + 1, .column = m.column + 1};
}

bool YamlReader::Size(const YAML::Node& map, const std::string& path, const std::string& key,
                      int64_t* out) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  auto v = ParseSize(s);
  if (!v) {
    Error(n, p, v.error().message);
    return false;
  }
  *out = *v;
  return true;
}

bool YamlReader::Bw(const YAML::Node& map, const std::string& path, const std::string& key,
                    Bandwidth* out) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  auto v = ParseBandwidth(s);
  if (!v) {
    Error(n, p, v.error().message);
    return false;
  }
  if (v->IsZero()) {
    Error(n, p, "must be more than zero");
    return false;
  }
  *out = *v;
  return true;
}

bool YamlReader::DurationNs(const YAML::Node& map, const std::string& path, const std::string& key,
                            int64_t* out) {
  YAML::Node n = Get(map, key);
  std::string s;
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ScalarOf(n, p, &s)) return false;
  auto v = ParseDurationNs(s);
  if (!v) {
    Error(n, p, v.error().message);
    return false;
  }
  *out = *v;
  return true;
}

bool YamlReader::Seconds(const YAML::Node& map, const std::string& path, const std::string& key,
                         int64_t* out) {
  int64_t ns = 0;
  if (!DurationNs(map, path, key, &ns)) return false;
  *out = ns / 1'000'000'000;
  return true;
}

bool YamlReader::StringList(const YAML::Node& map, const std::string& path, const std::string& key,
                            std::vector<std::string>* out) {
  YAML::Node n = Get(map, key);
  std::string p = Child(path, key);
  if (!n.IsDefined()) return false;
  std::vector<std::string> v;
  if (n.IsScalar()) {  // a single value stands for a list of one
    std::string s;
    if (!ScalarOf(n, p, &s)) return false;
    v.push_back(s);
  } else {
    if (!ExpectSeq(n, p)) return false;
    bool ok = true;
    for (size_t i = 0; i < n.size(); ++i) {
      std::string s;
      if (ScalarOf(n[i], Index(p, i), &s)) {
        v.push_back(s);
      } else {
        ok = false;
      }
    }
    if (!ok) return false;
  }
  *out = std::move(v);
  return true;
}

bool YamlReader::IntList(const YAML::Node& map, const std::string& path, const std::string& key,
                         std::vector<int>* out, int min, int max) {
  YAML::Node n = Get(map, key);
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ExpectSeq(n, p)) return false;
  std::vector<int> v;
  bool ok = true;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string s;
    int64_t x = 0;
    if (!ScalarOf(n[i], Index(p, i), &s)) {
      ok = false;
    } else if (!ParseInt64(s, &x) || x < min || x > max) {
      Error(n[i], Index(p, i),
            "expected a whole number " + std::to_string(min) + ".." + std::to_string(max) +
                ", got " + Quote(s));
      ok = false;
    } else {
      v.push_back(static_cast<int>(x));
    }
  }
  if (!ok) return false;
  *out = std::move(v);
  return true;
}

bool YamlReader::StringMap(const YAML::Node& map, const std::string& path, const std::string& key,
                           std::map<std::string, std::string>* out) {
  YAML::Node n = Get(map, key);
  std::string p = Child(path, key);
  if (!n.IsDefined() || !ExpectMap(n, p)) return false;
  std::map<std::string, std::string> v;
  bool ok = true;
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string k, val;
    if (!ScalarOf(it->first, p, &k)) {
      ok = false;
      continue;
    }
    if (!ScalarOf(it->second, Child(p, k), &val)) {
      ok = false;
      continue;
    }
    if (!v.emplace(k, val).second) {
      Error(it->first, Child(p, k), "duplicate key " + Quote(k));
      ok = false;
    }
  }
  if (!ok) return false;
  *out = std::move(v);
  return true;
}

}  // namespace tianshu::model::internal
