#include "tianshu/server/requests.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tianshu/base/strings.h"
#include "tianshu/model/load.h"

namespace tianshu::server {
namespace {

std::string SanitiseName(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (out.size() >= 128) break;
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
        c == '/') {
      out.push_back(c);
    }
  }
  return out.empty() ? "request" : out;
}

// Refuses a JSON object with a key given twice at any depth (YAML refuses them too, and a
// later value silently replacing an earlier one hides what was meant).
class DuplicateKeyCheck : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string duplicate;  // "path.key" of the first repeated key
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      for (size_t i = 0; i + 1 < keys_.size(); ++i) duplicate += path_[i] + ".";
      duplicate += k;
      return false;
    }
    if (path_.size() < keys_.size()) path_.resize(keys_.size());
    path_[keys_.size() - 1] = k;
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    path_.resize(keys_.size());
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  std::vector<std::set<std::string>> keys_;
  std::vector<std::string> path_;  // the key being read at each open object above
};

ApiResult<SubmitRequest> Validate(SubmitRequest req, const std::string& file,
                                  std::vector<std::string> diags) {
  model::ValidationResult v = ValidateStoredSpec(file, req.format, req.text);
  for (const auto& d : v.diagnostics) diags.push_back(d.ToString());
  if (diags.empty() && v.document && v.document->kind != model::DocumentKind::kJob) {
    return Refuse(400, std::string("expected a job document, got ") +
                           std::string(model::DocumentKindName(v.document->kind)));
  }
  if (!diags.empty() || !v.document) {
    if (diags.empty()) diags.push_back(file + ": not a valid job document");
    return Refuse(400, "job spec is invalid", std::move(diags));
  }
  req.spec = std::get<model::JobSpec>(v.document->value);
  req.run = req.spec.run;
  // Rules for what is submitted from now on (records stored before them still load): a name
  // safe to print in listings, as Kubernetes restricts object names, and a workdir that
  // cannot climb out of where it is resolved.
  std::vector<std::string> rules;
  auto where = [&](const char* key, const char* sub_key) {
    try {  // the document parsed already; its marks give the diagnostic's line and column
      YAML::Node root =
          YAML::Load(req.format == "json" ? nlohmann::json::parse(req.text).dump(2) : req.text);
      YAML::Node n = sub_key ? root[key][sub_key] : root[key];
      return file + ":" + std::to_string(n.Mark().line + 1) + ":" +
             std::to_string(n.Mark().column + 1) + ": ";
    } catch (const std::exception&) {
      return file + ": ";
    }
  };
  if (!model::IsValidJobName(req.spec.name)) {
    rules.push_back(where("name", nullptr) +
                    "name: must be 1-128 letters, digits, '.', '_' or '-', starting and ending "
                    "with a letter or digit");
  }
  bool climbs = req.run.workdir.find('\0') != std::string::npos ||
                req.run.workdir.find('\n') != std::string::npos;
  for (const auto& part : SplitString(req.run.workdir, '/')) climbs = climbs || part == "..";
  if (climbs) {
    rules.push_back(where("run", "workdir") +
                    "run.workdir: must not contain '..', NUL or newline (an absolute path, or "
                    "one relative to the directory `tianshu submit` ran in)");
  }
  if (!rules.empty()) return Refuse(400, "job spec is invalid", std::move(rules));
  return req;
}

ApiResult<SubmitRequest> ParseYaml(const std::string& body, const std::string& file) {
  // One document only: the validator refuses more (and bounds yaml-cpp's document loop).
  // Kept byte for byte, run section included: the validator reads `run:` as part of the spec.
  SubmitRequest req;
  req.format = "yaml";
  req.text = body;
  return Validate(std::move(req), file, {});
}

ApiResult<SubmitRequest> ParseJson(const std::string& body, const std::string& file) {
  if (!JsonNestingWithin(body, kMaxJsonNesting)) {
    return Refuse(400, "JSON body nested deeper than " + std::to_string(kMaxJsonNesting) +
                           " levels: a job spec nests a few");
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Refuse(400, "malformed JSON body");
  DuplicateKeyCheck dup;
  nlohmann::json::sax_parse(body, &dup);
  if (!dup.duplicate.empty()) {
    return Refuse(400, "job spec is invalid",
                  {file + ": " + dup.duplicate + ": duplicate key (each key may appear once)"});
  }
  if (!j.is_object()) return Refuse(400, "expected a JSON object (the job's fields)");
  // YAML reads 1 and "1" alike; JSON says which it is, and the run section takes strings.
  std::vector<std::string> diags;
  if (auto run = j.find("run"); run != j.end() && run->is_object()) {
    if (auto cmd = run->find("command"); cmd != run->end() && cmd->is_array()) {
      for (size_t i = 0; i < cmd->size(); ++i) {
        if (!(*cmd)[i].is_string()) {
          diags.push_back(file + ": run.command[" + std::to_string(i) + "]: expected a string");
        }
      }
    }
    if (auto env = run->find("env"); env != run->end() && env->is_object()) {
      for (auto e = env->begin(); e != env->end(); ++e) {
        if (!e->is_string()) diags.push_back(file + ": run.env." + e.key() + ": expected a string");
      }
    }
  }
  SubmitRequest req;
  req.format = "json";
  req.text = body;  // kept byte for byte; validated as the YAML its objects read as
  return Validate(std::move(req), file, std::move(diags));
}

}  // namespace

bool IsValidIdempotencyKey(std::string_view key) {
  if (key.empty() || key.size() > 128) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

model::ValidationResult ValidateStoredSpec(const std::string& name, const std::string& format,
                                           const std::string& text) {
  if (format != "json") return model::ValidateText(name, text);
  // JSON is validated through its re-indented YAML reading, which keeps the validator's line
  // numbers meaningful; the depth bound keeps the re-indenting linear.
  const bool shallow = JsonNestingWithin(text, kMaxJsonNesting);
  nlohmann::json j = shallow ? nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false)
                             : nlohmann::json(nlohmann::json::value_t::discarded);
  if (j.is_discarded()) {
    model::ValidationResult v;
    v.diagnostics.push_back({.file = name, .message = "not a JSON object within the depth limit"});
    return v;
  }
  return model::ValidateText(name, j.dump(2));
}

ApiResult<SubmitRequest> ParseSubmitBody(std::string_view content_type, const std::string& body,
                                         std::string_view file_name) {
  if (body.size() > kMaxBodyBytes) {
    return Refuse(413, "request body of " + std::to_string(body.size()) +
                           " bytes is over the limit of " + std::to_string(kMaxBodyBytes));
  }
  std::string type = ToLower(Trim(content_type.substr(0, content_type.find(';'))));
  std::string file = SanitiseName(file_name);
  if (Trim(body).empty()) return Refuse(400, "empty request body: expected a job spec");
  if (type == "application/json") return ParseJson(body, file);
  if (type.empty() || type == "application/yaml" || type == "application/x-yaml" ||
      type == "text/yaml" || type == "text/x-yaml") {
    return ParseYaml(body, file);
  }
  return Refuse(
      415, "unsupported content type '" + type + "': send application/yaml or application/json");
}

ApiResult<int64_t> ParseIntParam(const std::map<std::string, std::string>& params,
                                 const std::string& name, int64_t fallback, int64_t lo,
                                 int64_t hi) {
  auto it = params.find(name);
  if (it == params.end()) return fallback;
  int64_t v = 0;
  if (!ParseInt64(it->second, &v) || v < lo || v > hi) {
    return Refuse(400, "query parameter '" + name + "' must be an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

ApiResult<std::vector<std::string>> ParseJobIds(std::string_view body) {
  constexpr size_t kMaxIds = 10000;
  if (!JsonNestingWithin(body, kMaxJsonNesting)) {  // before parsing: no recursion to exhaust
    return Refuse(400, "JSON body nested deeper than " + std::to_string(kMaxJsonNesting) +
                           " levels: {\"ids\": [...]} nests two");
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Refuse(400, "expected a JSON object {\"ids\": [\"j-000001\", ...]}");
  }
  for (const auto& [k, v] : j.items()) {
    if (k != "ids") return Refuse(400, "unknown field '" + k.substr(0, 64) + "' (expected ids)");
  }
  const auto it = j.find("ids");
  if (it == j.end() || !it->is_array() || it->empty() || it->size() > kMaxIds) {
    return Refuse(400, "ids: expected an array of 1-" + std::to_string(kMaxIds) + " job ids");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& v = (*it)[i];
    if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
        v.get_ref<const std::string&>().size() > 64) {
      return Refuse(400, "ids[" + std::to_string(i) + "]: expected a job id (1-64 characters)");
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

ApiResult<std::vector<int>> ParseArraySpec(std::string_view spec) {
  constexpr int64_t kMaxIndex = 999'999;
  constexpr size_t kMaxTasks = 10'000;
  const std::string shown(spec.substr(0, 64));
  auto bad = [&](const std::string& why) {
    return Refuse(400, "array '" + shown + "': " + why +
                           " (expected indexes or ranges like 0-99, 1,3,5 or 0-15:4)");
  };
  if (spec.empty() || spec.size() > 1024) return bad("1-1,024 characters");
  if (spec.find('%') != std::string_view::npos) {
    return bad("a throttle (%N) is not supported: the scheduler orders every task");
  }
  std::set<int> out;
  for (const std::string& whole : SplitString(spec, ',')) {
    std::string_view part = whole;
    int64_t from = 0, to = 0, step = 1;
    const size_t colon = part.find(':');
    if (colon != std::string_view::npos) {
      if (!ParseInt64(part.substr(colon + 1), &step) || step < 1 || step > kMaxIndex) {
        return bad("a step is a whole number 1-999,999");
      }
      part = part.substr(0, colon);
    }
    const size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      if (colon != std::string_view::npos) return bad("a step needs a range");
      if (!ParseInt64(part, &from)) return bad("'" + std::string(part.substr(0, 16)) + "'");
      to = from;
    } else if (!ParseInt64(part.substr(0, dash), &from) ||
               !ParseInt64(part.substr(dash + 1), &to)) {
      return bad("'" + std::string(part.substr(0, 24)) + "'");
    }
    if (from < 0 || to > kMaxIndex || from > to) return bad("indexes are 0-999,999, low to high");
    for (int64_t i = from; i <= to; i += step) {
      out.insert(static_cast<int>(i));
      if (out.size() > kMaxTasks) return bad("more than 10,000 tasks");
    }
  }
  return std::vector<int>(out.begin(), out.end());
}

ApiResult<bool> CheckParams(const std::map<std::string, std::string>& params,
                            std::initializer_list<const char*> known) {
  for (const auto& [k, v] : params) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok) return Refuse(400, "unknown query parameter '" + k.substr(0, 64) + "'");
  }
  return true;
}

ApiResult<JobFilter> ParseJobFilter(const std::map<std::string, std::string>& params) {
  if (auto ok = CheckParams(params, {"state", "queue", "owner", "node", "order", "limit"}); !ok) {
    return std::unexpected(ok.error());
  }
  JobFilter f;
  if (auto it = params.find("state"); it != params.end()) {
    for (const auto& s : SplitString(it->second, ',')) {
      bool known = s == "held";
      for (const auto& n : JobStateNames()) known = known || n == s;
      if (!known) {
        return Refuse(400, "unknown job state '" + s.substr(0, 64) + "' (expected one of " +
                               Join(JobStateNames(), ", ") + ", held)");
      }
      f.states.push_back(s);
    }
  }
  if (auto it = params.find("queue"); it != params.end()) f.queue = it->second;
  if (auto it = params.find("owner"); it != params.end()) f.owner = it->second;
  if (auto it = params.find("node"); it != params.end()) f.node = it->second;
  if (auto it = params.find("order"); it != params.end()) {
    if (it->second != "newest" && it->second != "oldest") {
      return Refuse(400,
                    "order: expected newest or oldest, got '" + it->second.substr(0, 32) + "'");
    }
    f.newest_first = it->second == "newest";
  }
  auto limit = ParseIntParam(params, "limit", 1000, 1, 100000);
  if (!limit) return std::unexpected(limit.error());
  f.limit = *limit;
  return f;
}

ApiResult<EventQuery> ParseEventQuery(const std::map<std::string, std::string>& params) {
  if (auto ok = CheckParams(params, {"since", "wait_ms", "limit"}); !ok) {
    return std::unexpected(ok.error());
  }
  EventQuery q;
  auto since = ParseIntParam(params, "since", 0, 0, INT64_MAX);
  if (!since) return std::unexpected(since.error());
  auto wait = ParseIntParam(params, "wait_ms", 0, 0, 60000);
  if (!wait) return std::unexpected(wait.error());
  auto limit = ParseIntParam(params, "limit", 1000, 1, 10000);
  if (!limit) return std::unexpected(limit.error());
  q.since = *since;
  q.wait_ms = *wait;
  q.limit = *limit;
  return q;
}

std::optional<int64_t> ParseJobId(std::string_view id) {
  if (id.starts_with("j-")) id.remove_prefix(2);
  if (id.empty() || id.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : id) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string FormatJobId(int64_t seq) {
  std::string digits = std::to_string(seq);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return "j-" + digits;
}

const std::vector<std::string>& JobStateNames() {
  static const std::vector<std::string> kNames = {"pending",   "starting", "running",  "stopping",
                                                  "succeeded", "failed",   "cancelled"};
  return kNames;
}

}  // namespace tianshu::server
