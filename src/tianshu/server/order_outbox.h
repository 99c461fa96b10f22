// The order book by node, as the agents' held work requests (GET /v1/agents/{node}/work) read
// it: each node's outstanding orders in the order they were made, the registered agent, and
// the requests waiting for a newer durable order, under a lock of its own.
//
// The control plane changes it under its own lock (so both see the same orders), and a commit
// wakes the nodes whose orders it made durable. The held requests it wakes then collect their
// orders without the control plane's lock, which a scheduling cycle holds for tens of
// milliseconds on a loaded server: before, the 128 requests of a 1,024-GPU gang's nodes were
// answered over about 100 ms, one at a time between cycles and report batches.
//
//   outbox.SetAgent("n1", "agent-7");                     // registered
//   outbox.Add("n1", {.id = id, .seq = 4, .ticket = kPending, .text = text});
//   outbox.SetTicket("n1", 4, ticket);                    // enqueued for the store
//   outbox.Wake({"n1"});                                  // once ticket is durable
//   auto batch = outbox.Take("n1", "agent-7", /*after_seq=*/3, /*wait_ms=*/25000);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace tianshu::server {

class OrderOutbox {
 public:
  // An order's ticket before its change is handed to the committer.
  static constexpr uint64_t kPending = std::numeric_limits<uint64_t>::max();
  struct Order {
    std::string id;
    uint64_t seq = 0;     // in this server run's order of adding (the work cursors)
    uint64_t ticket = 0;  // the commit that makes it durable (0: loaded, durable)
    // The order as a work batch carries it (wire::OrderText), serialized once.
    std::shared_ptr<const std::string> text;
  };
  // `durable`: the highest ticket the store holds (every lower one too).
  explicit OrderOutbox(std::function<uint64_t()> durable) : durable_(std::move(durable)) {}

  // ---- changes, made under the control plane's lock ----
  void SetAgent(const std::string& node, const std::string& agent_id);  // registered, loaded
  // The node is forgotten with its orders; its held requests answer that it was removed.
  void RemoveNode(const std::string& node);
  void Add(const std::string& node, Order order);
  void SetTicket(const std::string& node, uint64_t seq, uint64_t ticket);
  void Remove(const std::string& node, uint64_t seq);
  // ---- reads ----
  size_t Count(const std::string& node) const;
  std::vector<std::string> Ids(const std::string& node) const;  // in the order made

  // Wakes the held requests of `nodes` (an order of theirs became durable, or their agent
  // changed). Called with no lock held.
  void Wake(const std::set<std::string>& nodes);
  void Shutdown();  // every held request answers now

  struct Batch {
    enum class Result { kOk, kUnknownNode, kOtherAgent, kRemoved } result = Result::kOk;
    std::vector<std::shared_ptr<const std::string>> texts;  // the durable orders, in order
    uint64_t last_seq = 0;  // the newest seq taken (after_seq when none is newer)
  };
  // The node's durable orders. With wait_ms > 0 it first waits, up to wait_ms, until one of
  // them is newer than after_seq, or the node goes (kRemoved), or another agent registers it
  // (kOtherAgent), or Shutdown. An empty agent_id matches any agent.
  Batch Take(const std::string& node, const std::string& agent_id, uint64_t after_seq,
             int64_t wait_ms);

 private:
  struct NodeBox {
    std::string agent_id;
    bool registered = false;
    std::vector<Order> orders;  // by seq
    std::condition_variable cv;
  };

  // The node's order with this seq (under mu_); null when there is none.
  Order* FindLocked(const std::string& node, uint64_t seq);

  std::function<uint64_t()> durable_;
  mutable std::mutex mu_;
  std::map<std::string, NodeBox> boxes_;  // never erased: a removed node's requests may wait
  bool shutdown_ = false;
};

}  // namespace tianshu::server
