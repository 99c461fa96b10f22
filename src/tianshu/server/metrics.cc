#include "tianshu/server/metrics.h"

#include <algorithm>
#include <iterator>

namespace tianshu::server {

void Metrics::ObserveWait(const std::string& queue, double seconds) {
  // Without `queues:` any name runs: past kMaxQueueSeries names, the rest share "other".
  constexpr size_t kMaxQueueSeries = 256;
  auto it = queue_wait_seconds.find(queue);
  if (it == queue_wait_seconds.end() && queue_wait_seconds.size() >= kMaxQueueSeries) {
    it = queue_wait_seconds.find("other");
  }
  if (it == queue_wait_seconds.end()) {
    const std::string name = queue_wait_seconds.size() >= kMaxQueueSeries ? "other" : queue;
    it = queue_wait_seconds.emplace(name, Histogram(kQueueWaitBuckets)).first;
  }
  it->second.Observe(seconds);
}

void HttpRequests::Count(std::string_view method, std::string_view route, int status) {
  // The method as the client sent it is anything (cpp-httplib keeps one it refuses): only the
  // known ones are labels of their own, so a client cannot make series without bound.
  static constexpr std::string_view kKnown[] = {"GET",  "POST",  "PUT",    "DELETE",
                                                "HEAD", "PATCH", "OPTIONS"};
  const bool known = std::find(std::begin(kKnown), std::end(kKnown), method) != std::end(kKnown);
  std::lock_guard l(mu_);
  ++counts_[{known ? std::string(method) : "other", std::string(route), status}];
}

void HttpRequests::Append(Exposition& out) const {
  out.Family("tianshu_http_requests_total", "counter",
             "HTTP requests answered, by method, route pattern (\"none\": answered before "
             "routing, e.g. a missing or wrong token, or no such route) and status code.");
  std::lock_guard l(mu_);
  for (const auto& [key, n] : counts_) {
    const auto& [method, route, code] = key;
    out.Sample({{"method", method}, {"route", route}, {"code", std::to_string(code)}},
               static_cast<double>(n));
  }
}

std::string RoutePattern(std::string_view path, bool matched,
                         const std::vector<std::pair<size_t, size_t>>& spans) {
  if (!matched) return "none";
  std::string out;
  size_t at = 0;
  for (const auto& [offset, length] : spans) {
    if (offset < at || offset + length > path.size()) return "none";  // not spans of this path
    out.append(path.substr(at, offset - at));
    // The segment before the span names it: /v1/jobs/(...) -> {job}; one that is itself a
    // captured value (/v1/nodes/(...)/(...)) names nothing: {param}, never what a client sent.
    std::string_view before = path.substr(0, offset);
    if (before.ends_with('/')) before.remove_suffix(1);
    const size_t segment = before.rfind('/') + 1;
    std::string name(segment >= at ? before.substr(segment) : std::string_view());
    if (name.ends_with('s')) name.pop_back();
    if (name.empty()) name = "param";
    out += "{" + name + "}";
    at = offset + length;
  }
  out.append(path.substr(at));
  return out;
}

}  // namespace tianshu::server
