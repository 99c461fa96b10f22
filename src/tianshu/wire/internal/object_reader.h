// The strict field-checking reader behind every wire parser: reads one JSON object, rejects
// unknown keys, wrong types and out-of-range values, and collects each problem with its field
// path; Finish turns the collected problems into a Result naming the first one.
//   ObjectReader o(j, "heartbeat", &errors, {"agent_id", "health"});
//   o.Str("agent_id", &hb.agent_id, /*required=*/true);  return Finish(hb, errors);
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/base/status.h"
#include "tianshu/wire/wire.h"

namespace tianshu::wire::internal {

using nlohmann::json;

// A strict reader of one JSON object: every key must be known, every value of the right type
// and range. Problems are collected with the field path; the first one is reported.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, std::vector<std::string>* errors,
               std::initializer_list<const char*> keys)
      : j_(j), path_(std::move(path)), errors_(errors) {
    if (!j.is_object()) {
      Err(path_, "expected an object");
      ok_ = false;
      return;
    }
    std::set<std::string_view> known(keys.begin(), keys.end());
    known.insert("version");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!known.contains(it.key())) Err(Field(it.key()), "unknown field");
    }
    if (j.contains("version")) {
      const json& v = j["version"];
      if (!v.is_number_integer() || v.get<int64_t>() != kWireVersion) {
        Err(Field("version"), "unsupported wire version (this side speaks 1)");
      }
    }
  }

  bool ok() const { return ok_; }
  std::string Field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  void Err(const std::string& field, const std::string& msg) {
    errors_->push_back(field + ": " + msg);
  }

  const json* Get(const char* key, bool required) {
    if (!ok_) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (required) Err(Field(key), "is required");
      return nullptr;
    }
    return &*it;
  }

  void Str(const char* key, std::string* out, bool required = false, size_t max_len = 4096) {
    const json* v = Get(key, required);
    if (!v) return;
    if (!v->is_string()) return Err(Field(key), "expected a string");
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_len) return Err(Field(key), "longer than " + std::to_string(max_len));
    if (required && s.empty()) return Err(Field(key), "must not be empty");
    *out = s;
  }

  template <typename I>
  void Int(const char* key, I* out, int64_t lo, int64_t hi, bool required = false) {
    const json* v = Get(key, required);
    if (!v) return;
    int64_t x = 0;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Err(Field(key), "out of range");
      }
      x = v->get<int64_t>();
    } else {
      return Err(Field(key), "expected an integer");
    }
    if (x < lo || x > hi) {
      return Err(Field(key),
                 "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = static_cast<I>(x);
  }

  void Double(const char* key, double* out, double lo, double hi) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_number()) return Err(Field(key), "expected a number");
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      return Err(Field(key), "expected a number in [" + Num(lo) + ", " + Num(hi) + "]");
    }
    *out = x;
  }

  void Bool(const char* key, bool* out) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_boolean()) return Err(Field(key), "expected true or false");
    *out = v->get<bool>();
  }

  void StrMap(const char* key, std::map<std::string, std::string>* out) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_object()) return Err(Field(key), "expected an object of strings");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it->is_string()) return Err(Field(key) + "." + it.key(), "expected a string");
      (*out)[it.key()] = it->get<std::string>();
    }
  }

  void StrList(const char* key, std::vector<std::string>* out) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_array()) return Err(Field(key), "expected an array of strings");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return Err(Field(key) + "[" + std::to_string(i) + "]", "expected a string");
      }
      out->push_back((*v)[i].get<std::string>());
    }
  }

  void IntList(const char* key, std::vector<int>* out, int lo, int hi) {
    const json* v = Get(key, false);
    if (!v) return;
    if (!v->is_array()) return Err(Field(key), "expected an array of integers");
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < lo || e.get<int64_t>() > hi) {
        return Err(
            Field(key) + "[" + std::to_string(i) + "]",
            "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      out->push_back(static_cast<int>(e.get<int64_t>()));
    }
  }

  // Calls each(element, path) for every element of an array field; an array longer than
  // `max_items` is refused whole.
  void Array(const char* key, const std::function<void(const json&, const std::string&)>& each,
             bool required = false, size_t max_items = std::numeric_limits<size_t>::max()) {
    const json* v = Get(key, required);
    if (!v) return;
    if (!v->is_array()) return Err(Field(key), "expected an array");
    if (v->size() > max_items) {
      return Err(Field(key), "more than " + std::to_string(max_items) + " entries");
    }
    for (size_t i = 0; i < v->size(); ++i) {
      each((*v)[i], Field(key) + "[" + std::to_string(i) + "]");
    }
  }

  const json* Object(const char* key, bool required = false) {
    const json* v = Get(key, required);
    if (v && !v->is_object()) {
      Err(Field(key), "expected an object");
      return nullptr;
    }
    return v;
  }

 private:
  static std::string Num(double x) {
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const json& j_;
  std::string path_;
  std::vector<std::string>* errors_;
  bool ok_ = true;
};

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
constexpr int kMaxInt = std::numeric_limits<int>::max();

template <typename T>
Result<T> Finish(T value, const std::vector<std::string>& errors) {
  if (errors.empty()) return value;
  std::string msg = errors.front();
  if (errors.size() > 1) msg += " (and " + std::to_string(errors.size() - 1) + " more)";
  return std::unexpected(Error{msg});
}

// The JSON document of a message's text; refuses malformed JSON and nesting deeper than 64.
Result<json> ParseText(std::string_view text);

// `j` with `"version": kWireVersion` added, as every serialised message carries.
json Versioned(json j);

// The readers of the messages that also ride inside another (a heartbeat and its answer in a
// report batch and its answer); problems are added to `errors` with `path` in front.
Heartbeat ReadHeartbeat(const json& j, const std::string& path, std::vector<std::string>* errors);
HeartbeatResponse ReadHeartbeatResponse(const json& j, const std::string& path,
                                        std::vector<std::string>* errors);

}  // namespace tianshu::wire::internal
