#include "tianshu/server/metrics.h"

#include <gtest/gtest.h>

namespace tianshu::server {
namespace {

TEST(RoutePattern, CapturedSpansBecomeNamedPlaceholders) {
  EXPECT_EQ(RoutePattern("/v1/jobs/j-000001/logs", true, {{9, 8}}), "/v1/jobs/{job}/logs");
  EXPECT_EQ(RoutePattern("/v1/agents/n0/heartbeat", true, {{11, 2}}),
            "/v1/agents/{agent}/heartbeat");
  EXPECT_EQ(RoutePattern("/v1/jobs/hold", true, {}), "/v1/jobs/hold");  // a literal route
  EXPECT_EQ(RoutePattern("/x/a/b", true, {{3, 1}, {5, 1}}), "/x/{x}/{param}");
  // A node name a client typed never becomes part of a label.
  EXPECT_EQ(RoutePattern("/v1/nodes/evil\xff/drain", true, {{10, 5}, {16, 5}}),
            "/v1/nodes/{node}/{param}");
  // No route matched (or answered before routing): one label value, whatever the path.
  EXPECT_EQ(RoutePattern("/v1/jobs/j-1/nonsense", false, {}), "none");
  EXPECT_EQ(RoutePattern("/a", true, {{1, 5}}), "none");  // spans not of this path
}

TEST(HttpRequests, CountsByMethodRouteAndCode) {
  HttpRequests r;
  r.Count("GET", "/v1/jobs/{job}", 200);
  r.Count("GET", "/v1/jobs/{job}", 200);
  r.Count("GET", "none", 401);
  r.Count(
      "X\xff"
      "1",
      "none", 400);  // whatever a client puts in the request line
  r.Count("BREW", "none", 400);
  Exposition out;
  r.Append(out);
  EXPECT_NE(out.text().find("\ntianshu_http_requests_total{method=\"GET\",route=\"/v1/jobs/{job}\","
                            "code=\"200\"} 2\n"),
            std::string::npos)
      << out.text();
  EXPECT_NE(out.text().find("{method=\"GET\",route=\"none\",code=\"401\"} 1\n"), std::string::npos);
  EXPECT_NE(out.text().find("{method=\"other\",route=\"none\",code=\"400\"} 2\n"),
            std::string::npos)
      << out.text();
  EXPECT_EQ(out.text().find("BREW"), std::string::npos);
}

TEST(Metrics, WaitsArePerQueue) {
  Metrics m;
  m.ObserveWait("a", 0.5);
  m.ObserveWait("a", 90);
  m.ObserveWait("b", 1e6);
  EXPECT_EQ(m.queue_wait_seconds.at("a").count(), 2);
  EXPECT_EQ(m.queue_wait_seconds.at("a").counts()[0], 1);      // le 1
  EXPECT_EQ(m.queue_wait_seconds.at("b").counts().back(), 1);  // +Inf
}

}  // namespace
}  // namespace tianshu::server
