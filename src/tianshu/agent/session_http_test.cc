// The work watcher's held requests and the HTTP control plane (kept connections, older
// servers) against a real local HTTP server.
#include "tianshu/agent/session.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tianshu/agent/discovery.h"
#include "tianshu/agent/work_watcher.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

namespace tianshu::agent {
namespace {

class HeldWork final : public ControlPlane {
 public:
  std::mutex mu;
  std::condition_variable cv;
  std::vector<wire::WorkOrder> outstanding;
  uint64_t newest = 0;  // seq of the newest order
  bool aborted = false, refuse_cursor = false;
  std::atomic<int> requests{0};
  void Add(wire::WorkOrder o) {
    {
      std::lock_guard l(mu);
      outstanding.push_back(std::move(o));
      ++newest;
    }
    cv.notify_all();
  }
  Result<wire::RegisterResponse> Register(const wire::RegisterRequest&) override {
    return Fail("unused");
  }
  Result<wire::HeartbeatResponse> Heartbeat(const std::string&, const wire::Heartbeat&) override {
    return Fail("unused");
  }
  Result<wire::WorkBatch> FetchWork(const std::string&) override { return Fail("unused"); }
  Result<ReportsSent> SendReports(const std::string&, const wire::ReportBatch&) override {
    return Fail("unused");
  }
  Result<wire::WorkBatch> WaitWork(const std::string&, const std::string&, const std::string& after,
                                   int64_t wait_ms) override {
    ++requests;
    if (refuse_cursor && !after.empty()) {
      return Fail("work: HTTP 400: unknown query parameter 'after'");
    }
    uint64_t since = after.empty() ? 0 : std::stoull(after.substr(2));
    std::unique_lock l(mu);
    cv.wait_for(l, std::chrono::milliseconds(wait_ms), [&] { return aborted || newest > since; });
    if (aborted) return Fail("work: server unreachable (Canceled)");
    return wire::WorkBatch{.orders = outstanding, .cursor = "e." + std::to_string(newest)};
  }
  void Abort() override {
    {
      std::lock_guard l(mu);
      aborted = true;
    }
    cv.notify_all();
  }
};

wire::WorkOrder OrderNamed(const std::string& id) {
  return {.id = id, .kind = wire::OrderKind::kStop, .job_id = "j-1"};
}

TEST(WorkWatcher, BringsEachNewOrderAtOnceAndWakesTheMainLoop) {
  HeldWork server;
  std::mutex mu;
  std::condition_variable woken;
  int wakes = 0;
  WorkWatcher w({.node = "n0", .agent_id = "a", .wait_ms = 60000}, server, [&] {
    std::lock_guard l(mu);
    ++wakes;
    woken.notify_all();
  });
  auto wait_wakes = [&](int n) {
    std::unique_lock l(mu);
    return woken.wait_for(l, std::chrono::seconds(10), [&] { return wakes >= n; });
  };
  // Inactive (not registered): no request is made.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(server.requests.load(), 0);
  w.SetActive(true);
  server.Add(OrderNamed("o1"));
  ASSERT_TRUE(wait_wakes(1));  // long before the 60 s wait ran out
  auto got = w.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, "o1");
  // The next request carries the cursor: o1 (still outstanding) does not come back alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(w.Take().empty());
  server.Add(OrderNamed("o2"));
  ASSERT_TRUE(wait_wakes(2));
  got = w.Take();
  ASSERT_EQ(got.size(), 2u);  // every outstanding order, the repeat included
  EXPECT_EQ(got[1].id, "o2");
  EXPECT_FALSE(w.disabled());
}  // the destructor aborts the held request: this test ends at once, not after 60 s

TEST(WorkWatcher, AServerThatRefusesTheCursorLeavesWorkToTheHeartbeats) {
  HeldWork server;
  server.refuse_cursor = true;
  server.Add(OrderNamed("o1"));
  std::atomic<int> wakes{0};
  WorkWatcher w({.node = "n0", .agent_id = "a", .wait_ms = 1000}, server, [&] { ++wakes; });
  w.SetActive(true);
  for (int i = 0; i < 500 && !w.disabled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(w.disabled());
  EXPECT_EQ(wakes.load(), 1);  // the first request (no cursor yet) still brought o1
  EXPECT_EQ(server.requests.load(), 2);
}

// Over real HTTP: the default transport opens a connection per request; one asked to keep it
// (the work watcher's) sends its requests over one connection.
TEST(HttpControlPlane, KeepAliveSendsTheWatchersRequestsOverOneConnection) {
  httplib::Server http;
  std::mutex mu;
  std::vector<int> ports;  // the client's port, per request
  http.Get("/v1/agents/n0/work", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard l(mu);
      ports.push_back(req.remote_port);
    }
    res.set_content(wire::ToJson(wire::WorkBatch{.cursor = "e.1"}).dump(), "application/json");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { http.listen_after_bind(); });
  for (int i = 0; i < 500 && !http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto requests_over = [&](bool keep_alive) {
    {
      std::lock_guard l(mu);
      ports.clear();
    }
    auto cp = HttpControlPlane::Open("127.0.0.1:" + std::to_string(port), "token", "");
    EXPECT_TRUE(cp);
    if (!cp) return std::set<int>{};
    if (keep_alive) (*cp)->KeepAlive();
    for (int i = 0; i < 3; ++i) {
      auto batch = (*cp)->WaitWork("n0", "a", "", 0);
      EXPECT_TRUE(batch) << (batch ? "" : batch.error().message);
    }
    std::lock_guard l(mu);
    EXPECT_EQ(ports.size(), 3u);
    return std::set<int>(ports.begin(), ports.end());
  };
  EXPECT_EQ(requests_over(false).size(), 3u);
  EXPECT_EQ(requests_over(true).size(), 1u);
  http.stop();
  serving.join();
}

// A server from before heartbeats in report batches refuses the field (400, having taken
// nothing): the transport sends the reports again alone, says the heartbeat was not answered, and
// sends reports alone from then on, until the next registration. A node the server does not know
// is told apart from a failure.
TEST(HttpControlPlane, AnOlderServerGetsTheReportsAloneWithoutTheHeartbeat) {
  httplib::Server http;
  std::mutex mu;
  int with_beat = 0, alone = 0;
  bool unknown_node = false;
  std::string mode = "older";  // "older", "bad-heartbeat", "odd-answer"
  http.Post("/v1/agents/n0/reports", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard l(mu);
    if (mode == "bad-heartbeat" && req.body.find("\"heartbeat\"") != std::string::npos) {
      ++with_beat;
      res.status = 400;
      res.set_content(R"({"error":{"code":400,"message":"bad reports: heartbeat.progress: more"}})",
                      "application/json");
      return;
    }
    if (mode == "odd-answer") {  // taken, with an answer this agent cannot read
      ++with_beat;
      res.set_content(R"({"version":1,"accepted":1,"heartbeat":{"later":true}})",
                      "application/json");
      return;
    }
    if (unknown_node) {
      res.status = 404;
      res.set_content(R"({"error":{"code":404,"message":"unknown node n0: register first"}})",
                      "application/json");
      return;
    }
    if (req.body.find("\"heartbeat\"") != std::string::npos) {
      ++with_beat;
      res.status = 400;
      res.set_content(R"({"error":{"code":400,"message":"bad reports: heartbeat: unknown field"}})",
                      "application/json");
      return;
    }
    ++alone;
    res.set_content(R"({"version":1,"accepted":1})", "application/json");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { http.listen_after_bind(); });
  for (int i = 0; i < 500 && !http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto cp = HttpControlPlane::Open("127.0.0.1:" + std::to_string(port), "token", "");
  ASSERT_TRUE(cp);
  const wire::ReportBatch batch{.agent_id = "a",
                                .reports = {wire::Report{.order_id = "o"}},
                                .heartbeat = wire::Heartbeat{.agent_id = "a"}};
  auto counts = [&] {
    std::lock_guard l(mu);
    return std::pair{with_beat, alone};
  };
  auto sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_FALSE(sent->refused);
  EXPECT_FALSE(sent->heartbeat);
  EXPECT_EQ(counts(), (std::pair{1, 1}));
  sent = (*cp)->SendReports("n0", batch);  // alone at once
  ASSERT_TRUE(sent);
  EXPECT_EQ(counts(), (std::pair{1, 2}));
  (void)(*cp)->Register({.node = "n0", .agent_id = "a"});  // no such route here: it fails
  sent = (*cp)->SendReports("n0", batch);                  // tried with it again
  ASSERT_TRUE(sent);
  EXPECT_EQ(counts(), (std::pair{2, 3}));
  // Any other 400 for a batch with a heartbeat: the reports go again alone, and the next batch
  // still tries with its heartbeat.
  {
    std::lock_guard l(mu);
    mode = "bad-heartbeat";
  }
  (void)(*cp)->Register({.node = "n0", .agent_id = "a"});
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_FALSE(sent->heartbeat);
  EXPECT_EQ(counts(), (std::pair{3, 4}));
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent);
  EXPECT_EQ(counts(), (std::pair{4, 5}));
  // A 200 whose heartbeat answer cannot be read: the reports were taken, the heartbeat was not.
  {
    std::lock_guard l(mu);
    mode = "odd-answer";
  }
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_FALSE(sent->refused);
  EXPECT_FALSE(sent->heartbeat);
  {
    std::lock_guard l(mu);
    mode = "older";
    unknown_node = true;
  }
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent);
  EXPECT_TRUE(sent->refused);
  http.stop();
  serving.join();
}

// A kept connection that the server has closed by the time of the next request (its idle
// timeout; over TLS the client cannot tell): that request is sent once more on a new connection,
// not failed (the watcher would back off and orders would wait). The server here answers the
// first request on a connection and drops the connection at the second.
TEST(HttpControlPlane, AKeptConnectionTheServerDroppedIsTriedOnceMoreOnANewOne) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(::listen(lfd, 8), 0);
  std::atomic<int> accepted{0};
  std::thread server([&] {
    const std::string body = wire::ToJson(wire::WorkBatch{.cursor = "e.1"}).dump();
    const std::string answer =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Connection: keep-alive\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    for (int c = 0; c < 2; ++c) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      ++accepted;
      for (int request = 0; request < 2; ++request) {
        std::string got;
        char buf[4096];
        while (got.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0) break;
          got.append(buf, static_cast<size_t>(n));
        }
        if (got.empty() || request == 1) break;  // the second request: dropped unanswered
        (void)!::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
      }
      ::close(fd);
    }
  });
  auto cp = HttpControlPlane::Open("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "t", "");
  ASSERT_TRUE(cp);
  (*cp)->KeepAlive();
  auto first = (*cp)->WaitWork("n0", "a", "", 0);
  ASSERT_TRUE(first) << first.error().message;
  auto second = (*cp)->WaitWork("n0", "a", "e.1", 0);
  EXPECT_TRUE(second) << second.error().message;
  EXPECT_EQ(accepted.load(), 2);
  cp->reset();  // closes the kept connection: the server's read of it ends
  ::shutdown(lfd, SHUT_RDWR);
  ::close(lfd);
  server.join();
}

}  // namespace
}  // namespace tianshu::agent
