// Parsers of what clients send to the control plane: the job submission body (YAML or JSON,
// validated with the same diagnostics as `tianshu validate`, plus the optional `run:` section
// that says what each rank executes) and the query parameters of the list and event calls.
// They are pure functions of their input, never throw, and are what the fuzz target drives.
//
//   auto req = ParseSubmitBody("application/yaml", text, "job.yaml");
//   if (!req) return Respond(req.error().status, req.error().message, req.error().details);
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/model/job.h"
#include "tianshu/model/load.h"

namespace tianshu::server {

// A refusal of a request: HTTP status, a one-line message and optional detail lines
// (diagnostics "file:line:col: path: message").
struct ApiError {
  int status = 400;
  std::string message;
  std::vector<std::string> details;
};
template <typename T>
using ApiResult = std::expected<T, ApiError>;

inline std::unexpected<ApiError> Refuse(int status, std::string message,
                                        std::vector<std::string> details = {}) {
  return std::unexpected(ApiError{status, std::move(message), std::move(details)});
}

// What each rank of a job runs: the job's `run:` section (see model::RunSpec).
using RunSpec = model::RunSpec;

struct SubmitRequest {
  std::string text;     // the body as submitted, byte for byte (run section included)
  std::string format;   // "yaml" or "json"
  model::JobSpec spec;  // validated
  RunSpec run;
  // The client's Idempotency-Key: a retry with the same key and body gets the job the first
  // try made, not a second one (kept for as long as that job's record is).
  std::string idempotency_key;
  std::string owner;   // who submits it (set by the server from the caller's identity)
  std::string run_as;  // the Unix user its ranks run as ("" = the agent's own)
  bool hold = false;   // submitted held: pending, not scheduled until released
  // A job array (sbatch --array): one job per task index, made in one change; empty: one job.
  std::vector<int> array;
};

// An array's task indexes (`?array=`): comma-separated indexes or ranges "A-B" with an optional
// step ":S" ("0-99", "1,3,5", "0-15:4,100"), each 0-999,999; at most 10,000 tasks, sorted, no
// duplicates. A throttle ("%4") is refused: every task is a job the scheduler orders anyway.
[[nodiscard]] ApiResult<std::vector<int>> ParseArraySpec(std::string_view spec);

// The body of POST /v1/jobs/hold and /release: {"ids": [...]}, 1-10,000 job ids.
[[nodiscard]] ApiResult<std::vector<std::string>> ParseJobIds(std::string_view body);

// An Idempotency-Key a client may send: 1-128 of [A-Za-z0-9._:-] (a UUID fits).
bool IsValidIdempotencyKey(std::string_view key);

inline constexpr size_t kMaxBodyBytes = 1 << 20;
// The deepest a JSON body may nest (a job spec nests 3; wire messages 4).
inline constexpr int kMaxJsonNesting = 64;

// Validates a spec as stored (`format` "yaml" or "json", `text` the body as submitted); a
// JSON body is read through its re-indented form, as at submission.
model::ValidationResult ValidateStoredSpec(const std::string& name, const std::string& format,
                                           const std::string& text);

// Parses and validates a submission. `content_type` "application/json" takes a JSON object
// (the job's keys plus optional "run"; a key given twice is refused); "application/yaml",
// "application/x-yaml", "text/yaml", "text/x-yaml" or "" take YAML. `file_name` names the document
// in diagnostics (sanitised). Errors: 400 with every diagnostic, 413 over kMaxBodyBytes, 415 for
// other content types.
[[nodiscard]] ApiResult<SubmitRequest> ParseSubmitBody(std::string_view content_type,
                                                       const std::string& body,
                                                       std::string_view file_name);

// Parses a non-negative integer query parameter within [lo, hi]; `fallback` when absent.
[[nodiscard]] ApiResult<int64_t> ParseIntParam(const std::map<std::string, std::string>& params,
                                               const std::string& name, int64_t fallback,
                                               int64_t lo, int64_t hi);

// GET /v1/jobs?state=running,pending&queue=research&limit=100
// GET /v1/jobs?state=a,b&queue=Q&owner=U&node=N&order=newest|oldest&limit=M. The state "held"
// matches a held pending job (and "pending" every pending one, held or not).
struct JobFilter {
  std::vector<std::string> states;  // empty = all
  std::string queue;                // "" = all
  std::string owner;                // "" = all
  std::string node;                 // "" = all: else jobs with a rank on it (this attempt)
  bool newest_first = false;
  int64_t limit = 1000;
};
[[nodiscard]] ApiResult<JobFilter> ParseJobFilter(const std::map<std::string, std::string>& params);

// GET /v1/events?since=SEQ&wait_ms=N&limit=M
struct EventQuery {
  int64_t since = 0;
  int64_t wait_ms = 0;
  int64_t limit = 1000;
};
[[nodiscard]] ApiResult<EventQuery> ParseEventQuery(
    const std::map<std::string, std::string>& params);

// Rejects query parameters not in `known` ("unknown query parameter 'x'").
[[nodiscard]] ApiResult<bool> CheckParams(const std::map<std::string, std::string>& params,
                                          std::initializer_list<const char*> known);

// A job id as the API prints it ("j-" and six or more digits), or its number alone ("42", as
// Slurm and kubectl users type it). Returns the number.
[[nodiscard]] std::optional<int64_t> ParseJobId(std::string_view id);
std::string FormatJobId(int64_t seq);

// Job states the API shows.
const std::vector<std::string>& JobStateNames();

}  // namespace tianshu::server
