#include "tianshu/server/metrics.h"

namespace tianshu::server {

void Metrics::ObserveWait(const std::string& queue, double seconds) {
  auto it = queue_wait_seconds.find(queue);
  if (it == queue_wait_seconds.end()) {
    it = queue_wait_seconds.emplace(queue, Histogram(kQueueWaitBuckets)).first;
  }
  it->second.Observe(seconds);
}

void HttpRequests::Count(std::string_view method, std::string_view route, int status) {
  std::lock_guard l(mu_);
  ++counts_[{std::string(method), std::string(route), status}];
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
    // The segment before the span names it: /v1/jobs/(...) -> {job}.
    std::string_view before = path.substr(0, offset);
    if (before.ends_with('/')) before.remove_suffix(1);
    std::string name(before.substr(before.rfind('/') + 1));
    if (name.ends_with('s')) name.pop_back();
    if (name.empty()) name = "param";
    out += "{" + name + "}";
    at = offset + length;
  }
  out.append(path.substr(at));
  return out;
}

}  // namespace tianshu::server
