#include "tianshu/server/order_outbox.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace tianshu::server {
namespace {

using Result = OrderOutbox::Batch::Result;

std::shared_ptr<const std::string> Text(const std::string& s) {
  return std::make_shared<const std::string>(s);
}

std::vector<std::string> Texts(const OrderOutbox::Batch& b) {
  std::vector<std::string> out;
  for (const auto& t : b.texts) out.push_back(*t);
  return out;
}

TEST(OrderOutbox, OnlyDurableOrdersGoOutInTheOrderMade) {
  std::atomic<uint64_t> durable{0};
  OrderOutbox box([&] { return durable.load(); });
  box.SetAgent("n1", "a1");
  box.Add("n1", {.id = "o1", .seq = 1, .ticket = 0, .text = Text("one")});  // loaded
  box.Add("n1", {.id = "o2", .seq = 2, .ticket = OrderOutbox::kPending, .text = Text("two")});
  box.Add("n1", {.id = "o3", .seq = 3, .ticket = OrderOutbox::kPending, .text = Text("three")});
  box.SetTicket("n1", 2, 5);
  box.SetTicket("n1", 3, 6);
  auto b = box.Take("n1", "a1", 0, 0);
  EXPECT_EQ(b.result, Result::kOk);
  EXPECT_EQ(Texts(b), std::vector<std::string>{"one"});
  EXPECT_EQ(b.last_seq, 1u);
  durable = 5;
  b = box.Take("n1", "a1", 1, 0);
  EXPECT_EQ(Texts(b), (std::vector<std::string>{"one", "two"}));  // outstanding ones again
  EXPECT_EQ(b.last_seq, 2u);
  box.Remove("n1", 1);
  durable = 6;
  b = box.Take("n1", "", 2, 0);  // an empty agent id matches any
  EXPECT_EQ(Texts(b), (std::vector<std::string>{"two", "three"}));
  EXPECT_EQ(b.last_seq, 3u);
  EXPECT_EQ(box.Count("n1"), 2u);
  EXPECT_EQ(box.Ids("n1"), (std::vector<std::string>{"o2", "o3"}));
}

TEST(OrderOutbox, RefusesUnknownNodesAndOtherAgents) {
  OrderOutbox box([] { return uint64_t{0}; });
  EXPECT_EQ(box.Take("n1", "a1", 0, 0).result, Result::kUnknownNode);
  box.Add("n1", {.id = "o1", .seq = 1, .ticket = 0, .text = Text("one")});  // not registered
  EXPECT_EQ(box.Take("n1", "a1", 0, 0).result, Result::kUnknownNode);
  box.SetAgent("n1", "a1");
  EXPECT_EQ(box.Take("n1", "a2", 0, 0).result, Result::kOtherAgent);
  box.SetAgent("n1", "a2");  // registered again by a new agent
  EXPECT_EQ(box.Take("n1", "a1", 0, 0).result, Result::kOtherAgent);
  EXPECT_EQ(box.Take("n1", "a2", 0, 0).result, Result::kOk);
  box.RemoveNode("n1");
  EXPECT_EQ(box.Take("n1", "a2", 0, 0).result, Result::kUnknownNode);
  EXPECT_EQ(box.Count("n1"), 0u);
}

// A held request returns once a newer order is durable and its node is woken, not at its
// timeout; an order durable but older than the cursor does not end the wait.
TEST(OrderOutbox, AHeldRequestReturnsWhenAnOrderBecomesDurable) {
  std::atomic<uint64_t> durable{0};
  OrderOutbox box([&] { return durable.load(); });
  box.SetAgent("n1", "a1");
  box.Add("n1", {.id = "o1", .seq = 1, .ticket = 0, .text = Text("one")});
  OrderOutbox::Batch got;
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    got = box.Take("n1", "a1", 1, 30'000);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  box.Add("n1", {.id = "o2", .seq = 2, .ticket = OrderOutbox::kPending, .text = Text("two")});
  box.SetTicket("n1", 2, 1);
  box.Wake({"n1"});  // not durable yet: the request goes on waiting
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned);
  const auto woken = std::chrono::steady_clock::now();
  durable = 1;
  box.Wake({"n1"});
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - woken, std::chrono::seconds(10));
  EXPECT_EQ(got.result, Result::kOk);
  EXPECT_EQ(Texts(got), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(got.last_seq, 2u);
}

// Each ends its request at once, not at its 30 s timeout.
TEST(OrderOutbox, RemovalANewAgentAndShutdownEndHeldRequests) {
  OrderOutbox box([] { return uint64_t{0}; });
  box.SetAgent("n1", "a1");
  box.SetAgent("n2", "a2");
  box.SetAgent("n3", "a3");
  box.Add("n2", {.id = "o1", .seq = 1, .ticket = 0, .text = Text("one")});
  const auto start = std::chrono::steady_clock::now();
  OrderOutbox::Batch removed, replaced, shut;
  std::thread w1([&] { removed = box.Take("n1", "a1", 0, 30'000); });
  std::thread w2([&] { replaced = box.Take("n2", "a2", 1, 30'000); });
  std::thread w3([&] { shut = box.Take("n3", "a3", 0, 30'000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  box.RemoveNode("n1");
  w1.join();
  EXPECT_EQ(removed.result, Result::kRemoved);
  box.SetAgent("n2", "a2-restarted");
  box.Wake({"n2"});
  w2.join();
  EXPECT_EQ(replaced.result, Result::kOtherAgent) << "the old agent gets no orders";
  EXPECT_TRUE(replaced.texts.empty());
  box.Shutdown();
  w3.join();
  EXPECT_EQ(shut.result, Result::kOk);
  EXPECT_TRUE(shut.texts.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // A removed node that registers again takes requests again.
  box.SetAgent("n1", "a1");
  EXPECT_EQ(box.Take("n1", "a1", 0, 0).result, Result::kOk);
}

}  // namespace
}  // namespace tianshu::server
