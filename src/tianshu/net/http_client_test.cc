#include "tianshu/net/http_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

namespace tianshu::net {
namespace {

// A replica on a loopback port that counts what it was asked; `answer` writes the answer.
struct Replica {
  explicit Replica(std::function<void(const httplib::Request&, httplib::Response&)> answer) {
    auto count = [this, answer](const httplib::Request& req, httplib::Response& res) {
      (req.method == "GET" ? gets : posts)++;
      answer(req, res);
    };
    http.Get("/.*", count);
    http.Post("/.*", count);
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Replica() {
    http.stop();
    thread.join();
  }
  std::string Url() const { return "127.0.0.1:" + std::to_string(port); }
  httplib::Server http;
  std::thread thread;
  int port = 0;
  std::atomic<int> gets{0}, posts{0};
};

// A follower answers reads and refuses writes, naming the leader in both.
void Follower(const Replica* leader, const httplib::Request& req, httplib::Response& res) {
  res.set_header("X-Tianshu-Role", "follower");
  res.set_header("X-Tianshu-Leader", "http://" + leader->Url());
  res.status = req.method == "GET" ? 200 : 503;
  res.set_content(req.method == "GET" ? "read" : "not the leader", "text/plain");
}

// Two followers and a leader, listed so that the leader is not next after the first: only a
// follower's naming it can lead a client there.
class ThreeReplicas : public ::testing::Test {
 protected:
  Replica leader{[](const httplib::Request&, httplib::Response& res) {
    res.status = 201;
    res.set_content("made", "text/plain");
  }};
  Replica other{
      [this](const httplib::Request& req, httplib::Response& res) { Follower(&leader, req, res); }};
  Replica first{
      [this](const httplib::Request& req, httplib::Response& res) { Follower(&leader, req, res); }};
  std::unique_ptr<ServerSet> Set() {
    auto set = ServerSet::Open(first.Url() + "," + other.Url() + "," + leader.Url(), "");
    EXPECT_TRUE(set) << set.error().message;
    return set ? std::move(*set) : nullptr;
  }
  static httplib::Result Write(ServerSet& set) {
    return set.Send([](httplib::Client& c) { return c.Post("/v1/jobs", "x", "text/plain"); });
  }
};

TEST_F(ThreeReplicas, AReadAFollowerAnswersIsKeptAndTheNextCallGoesToTheLeader) {
  auto set = Set();
  ASSERT_TRUE(set);
  auto read = set->Send([](httplib::Client& c) { return c.Get("/v1/jobs"); });
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200);
  EXPECT_EQ(read->body, "read");  // answered by the follower, not sent again
  EXPECT_EQ(first.gets, 1);
  EXPECT_EQ(leader.gets, 0);
  EXPECT_EQ(set->Current(), "http://" + leader.Url());
  auto write = Write(*set);
  ASSERT_TRUE(write);
  EXPECT_EQ(write->status, 201);
  EXPECT_EQ(first.posts + other.posts, 0) << "the write went to a follower first";
  EXPECT_EQ(leader.posts, 1);
}

TEST_F(ThreeReplicas, AWriteRefusedByAFollowerMovesToTheLeaderItNames) {
  auto set = Set();
  ASSERT_TRUE(set);
  auto write = Write(*set);
  ASSERT_TRUE(write);
  EXPECT_EQ(write->status, 201);
  EXPECT_EQ(first.posts, 1);
  EXPECT_EQ(other.posts, 0) << "the follower's hint was not followed";
  EXPECT_EQ(leader.posts, 1);
}

}  // namespace
}  // namespace tianshu::net
