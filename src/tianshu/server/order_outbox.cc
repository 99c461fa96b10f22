// The order book by node, read by the agents' held work requests: see order_outbox.h.
#include "tianshu/server/order_outbox.h"

#include <algorithm>
#include <chrono>

namespace tianshu::server {

void OrderOutbox::SetAgent(const std::string& node, const std::string& agent_id) {
  std::lock_guard l(mu_);
  NodeBox& box = boxes_[node];
  box.agent_id = agent_id;
  box.registered = true;
}

void OrderOutbox::RemoveNode(const std::string& node) {
  std::lock_guard l(mu_);  // waking under the lock: a waiter between its check and its wait
  auto it = boxes_.find(node);
  if (it == boxes_.end()) return;
  it->second.registered = false;
  it->second.agent_id.clear();
  it->second.orders.clear();
  it->second.cv.notify_all();
}

void OrderOutbox::Add(const std::string& node, Order order) {
  std::lock_guard l(mu_);
  boxes_[node].orders.push_back(std::move(order));
}

void OrderOutbox::SetTicket(const std::string& node, uint64_t seq, uint64_t ticket) {
  std::lock_guard l(mu_);
  if (Order* o = FindLocked(node, seq)) o->ticket = ticket;
}

void OrderOutbox::Remove(const std::string& node, uint64_t seq) {
  std::lock_guard l(mu_);
  if (Order* o = FindLocked(node, seq)) {
    auto& orders = boxes_.at(node).orders;
    orders.erase(orders.begin() + (o - orders.data()));
  }
}

OrderOutbox::Order* OrderOutbox::FindLocked(const std::string& node, uint64_t seq) {
  auto it = boxes_.find(node);
  if (it == boxes_.end()) return nullptr;
  auto& orders = it->second.orders;  // by seq
  auto o = std::lower_bound(orders.begin(), orders.end(), seq,
                            [](const Order& a, uint64_t s) { return a.seq < s; });
  return o != orders.end() && o->seq == seq ? &*o : nullptr;
}

size_t OrderOutbox::Count(const std::string& node) const {
  std::lock_guard l(mu_);
  auto it = boxes_.find(node);
  return it == boxes_.end() ? 0 : it->second.orders.size();
}

std::vector<std::string> OrderOutbox::Ids(const std::string& node) const {
  std::lock_guard l(mu_);
  std::vector<std::string> out;
  if (auto it = boxes_.find(node); it != boxes_.end()) {
    for (const Order& o : it->second.orders) out.push_back(o.id);
  }
  return out;
}

void OrderOutbox::Wake(const std::set<std::string>& nodes) {
  if (nodes.empty()) return;
  std::lock_guard l(mu_);
  for (const auto& node : nodes) {
    if (auto it = boxes_.find(node); it != boxes_.end()) it->second.cv.notify_all();
  }
}

void OrderOutbox::Shutdown() {
  std::lock_guard l(mu_);
  shutdown_ = true;
  for (auto& [node, box] : boxes_) box.cv.notify_all();
}

OrderOutbox::Batch OrderOutbox::Take(const std::string& node, const std::string& agent_id,
                                     uint64_t after_seq, int64_t wait_ms) {
  std::unique_lock l(mu_);
  auto it = boxes_.find(node);
  if (it == boxes_.end() || !it->second.registered) return {.result = Batch::Result::kUnknownNode};
  NodeBox& box = it->second;  // std::map: stable while the lock is dropped in the wait
  auto ours = [&] { return agent_id.empty() || box.agent_id == agent_id; };
  if (!ours()) return {.result = Batch::Result::kOtherAgent};
  // An order a crash could lose never goes out (it could start a rank the restarted server
  // knows nothing of): only those whose commit is durable.
  if (wait_ms > 0) {
    auto newer = [&] {
      const uint64_t durable = durable_();
      return std::any_of(box.orders.begin(), box.orders.end(),
                         [&](const Order& o) { return o.seq > after_seq && o.ticket <= durable; });
    };
    box.cv.wait_for(l, std::chrono::milliseconds(wait_ms),
                    [&] { return shutdown_ || !box.registered || !ours() || newer(); });
    if (!box.registered) return {.result = Batch::Result::kRemoved};
    if (!ours()) return {.result = Batch::Result::kOtherAgent};  // registered again meanwhile
  }
  Batch out{.last_seq = after_seq};
  const uint64_t durable = durable_();
  for (const Order& o : box.orders) {
    if (o.ticket > durable) continue;
    out.texts.push_back(o.text);
    out.last_seq = std::max(out.last_seq, o.seq);
  }
  return out;
}

}  // namespace tianshu::server
