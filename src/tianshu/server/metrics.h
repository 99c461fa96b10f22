// What the server counts for /metrics between scrapes: the control plane's counters and
// histograms (guarded by its lock), and the HTTP requests by route and status (thread-safe).
// The families themselves are written in control_plane_metrics.cc and the /metrics route, in the
// Prometheus text format (base/exposition.h); docs/api.md lists them.
//   Metrics m;  m.cycle_seconds.Observe(0.004);  m.ObserveWait("default", 12.5);
//   HttpRequests http;  http.Count("GET", "/v1/jobs/{job}", 200);
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "tianshu/base/exposition.h"

namespace tianshu::server {

// Upper bounds of the queue-wait histogram (seconds): from a second to a day.
inline const std::vector<double> kQueueWaitBuckets = {
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400};

// Not thread-safe but for the atomics; the control plane's lock guards the rest.
struct Metrics {
  Histogram cycle_seconds{{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5}};
  // Per queue: seconds from entering the queue (submitted, or back after a failed attempt) to
  // being placed; one observation per start.
  std::map<std::string, Histogram> queue_wait_seconds;
  void ObserveWait(const std::string& queue, double seconds);
  std::map<std::string, int64_t> placement_outcomes;  // by OutcomeKindName
  int64_t cycles = 0;
  int64_t retries = 0;
  int64_t gang_timeouts = 0;  // gangs released because not every rank started in time
  int64_t preemptions = 0;
  int64_t resizes = 0;     // elastic resizes begun (checkpoint, relaunch at the new size)
  int64_t migrations = 0;  // moves begun (checkpoint, relaunch elsewhere)
  int64_t nodes_lost = 0;
  int64_t quarantined = 0;         // jobs failed at start for an unreadable record
  int64_t mass_silences = 0;       // times most nodes went silent at once
  int64_t idempotent_replays = 0;  // submissions answered with the job a key made before
  // The network watch's decisions (control_plane_watch.cc) by what was done: migrate,
  // replan, keep.
  std::map<std::string, int64_t> network_decisions;
  std::atomic<int64_t> submissions_accepted{0};
  std::atomic<int64_t> submissions_rejected{0};
};

// HTTP requests answered, by method, route pattern and status code. The route is the pattern
// that matched ("/v1/jobs/{job}/logs", see RoutePattern), never the raw path, so the number of
// series is bounded by the routes. Thread-safe.
class HttpRequests {
 public:
  void Count(std::string_view method, std::string_view route, int status);
  // The family tianshu_http_requests_total.
  void Append(Exposition& out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, int64_t> counts_;
};

// The route pattern of a request from the path and the spans its route's capture groups matched
// (offset, length): each span becomes {name}, the name being the path segment before it without
// a trailing "s" ("/v1/jobs/j-1/logs" with (9, 3) -> "/v1/jobs/{job}/logs"). A request that no
// route matched (no spans, and `matched` false) is "none".
std::string RoutePattern(std::string_view path, bool matched,
                         const std::vector<std::pair<size_t, size_t>>& spans);

}  // namespace tianshu::server
