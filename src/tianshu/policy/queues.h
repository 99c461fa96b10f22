// Hierarchical queues with weights and GPU quotas, and the two policies that read them:
// "fair-share" orders the pending queue by weighted fair share down the tree (queues under their
// quota first, then the least served relative to weight) and holds back work a queue that may
// not borrow has no quota left for; "queue-reclaim" lets a job whose queue is within its quota
// evict work of queues running beyond theirs on borrowed capacity.
//   auto tree = QueueTree::Make({.queues = {{.name = "a", .quota_gpus = 16}}});
//   int q = tree->Find("a");   // tree->Path(q) = {q}; jobs of unknown queues go to "default"
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/engine/policy.h"
#include "tianshu/policy/options.h"

namespace tianshu::policy {

// A validated queue hierarchy. Plain copyable data; queries are O(depth).
class QueueTree {
 public:
  [[nodiscard]] static Result<QueueTree> Make(const QueueOptions& options);

  int size() const { return static_cast<int>(specs_.size()); }
  const QueueSpec& Spec(int q) const { return specs_[q]; }
  // Index of a queue by name; the "default" queue for an unknown name.
  int Find(std::string_view name) const;
  // The queue and its ancestors, the queue first.
  const std::vector<int>& Path(int q) const { return paths_[q]; }
  // Children of a queue; Children(-1) are the top-level queues. In name order.
  const std::vector<int>& Children(int q) const { return q < 0 ? roots_ : children_[q]; }
  int64_t QuotaMilli(int q) const { return specs_[q].quota_gpus * 1000; }
  // GPU share held by running jobs, in thousandths, per queue (a job counts on its whole path).
  std::vector<int64_t> Usage(const engine::CycleView& view) const;

 private:
  std::vector<QueueSpec> specs_;
  std::vector<std::vector<int>> paths_;
  std::vector<std::vector<int>> children_;
  std::vector<int> roots_;
  int default_ = 0;
};

// GPU thousandths a job holds (running) or asks for (pending).
int64_t JobMilli(const engine::JobRecord& job);

std::unique_ptr<engine::OrderPolicy> MakeFairShareOrder(QueueTree tree);
std::unique_ptr<engine::PreemptionPolicy> MakeQueueReclaim(QueueTree tree);

}  // namespace tianshu::policy
