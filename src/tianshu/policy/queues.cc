#include "tianshu/policy/queues.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

namespace tianshu::policy {

using engine::CycleView;
using engine::JobId;
using engine::JobRecord;

int64_t JobMilli(const JobRecord& job) {
  return int64_t{job.request.ranks} * job.request.gpu_milli;
}

Result<QueueTree> QueueTree::Make(const QueueOptions& options) {
  if (auto st = options.Validate(); !st) return std::unexpected(st.error());
  QueueTree t;
  t.specs_ = options.queues;
  bool has_default = std::any_of(t.specs_.begin(), t.specs_.end(),
                                 [](const QueueSpec& s) { return s.name == "default"; });
  if (!has_default) t.specs_.push_back(QueueSpec{.name = "default"});
  // Name order makes every tie-break independent of how the file listed the queues.
  std::sort(t.specs_.begin(), t.specs_.end(),
            [](const QueueSpec& a, const QueueSpec& b) { return a.name < b.name; });
  std::map<std::string, int> index;
  for (int i = 0; i < t.size(); ++i) index[t.specs_[i].name] = i;
  t.default_ = index.at("default");
  t.children_.assign(t.size(), {});
  std::vector<int> parent(t.size(), -1);
  for (int i = 0; i < t.size(); ++i) {
    if (t.specs_[i].parent.empty()) {
      t.roots_.push_back(i);
    } else {
      parent[i] = index.at(t.specs_[i].parent);
      t.children_[parent[i]].push_back(i);
    }
  }
  t.paths_.assign(t.size(), {});
  for (int i = 0; i < t.size(); ++i) {
    for (int q = i; q >= 0; q = parent[q]) t.paths_[i].push_back(q);
  }
  // A parent without a quota of its own guarantees what its children are guaranteed; deepest
  // queues first so that the sums propagate upwards.
  std::vector<int> by_depth(t.size());
  for (int i = 0; i < t.size(); ++i) by_depth[i] = i;
  std::sort(by_depth.begin(), by_depth.end(), [&](int a, int b) {
    return std::tuple(t.paths_[a].size(), a) > std::tuple(t.paths_[b].size(), b);
  });
  for (int q : by_depth) {
    if (t.specs_[q].quota_gpus != 0 || t.children_[q].empty()) continue;
    int64_t sum = 0;
    for (int c : t.children_[q]) sum += t.specs_[c].quota_gpus;
    t.specs_[q].quota_gpus = sum;
  }
  return t;
}

int QueueTree::Find(std::string_view name) const {
  auto it = std::lower_bound(specs_.begin(), specs_.end(), name,
                             [](const QueueSpec& s, std::string_view n) { return s.name < n; });
  if (it != specs_.end() && it->name == name) return static_cast<int>(it - specs_.begin());
  return default_;
}

std::vector<int64_t> QueueTree::Usage(const CycleView& view) const {
  std::vector<int64_t> use(specs_.size(), 0);
  for (JobId id : view.running) {
    const JobRecord& j = view.Job(id);
    for (int q : Path(Find(j.spec.queue))) use[q] += JobMilli(j);
  }
  return use;
}

namespace {

// Hierarchical weighted fair share (the shape of YARN's fair scheduler and Volcano's
// proportion plugin): walking down from the root, the child queue with waiting work that is
// under its quota, else the one with the least usage per unit of weight, gets the next job;
// the usage it would add is counted before the next pick, so one cycle's order interleaves
// queues in proportion to their weights. A job whose start would take a queue that may not
// borrow past its quota is left out of this cycle's order (it stays pending).
class FairShareOrder final : public engine::OrderPolicy {
 public:
  explicit FairShareOrder(QueueTree tree) : tree_(std::move(tree)) {}
  std::string_view Name() const override { return "fair-share"; }

  void Order(const CycleView& v, std::vector<JobId>* queue) const override {
    const int n = tree_.size();
    std::vector<int64_t> use = tree_.Usage(v);
    std::vector<std::deque<JobId>> own(n);
    std::vector<int> waiting(n, 0);  // jobs waiting in the subtree
    for (JobId id : *queue) {
      int q = tree_.Find(v.Job(id).spec.queue);
      own[q].push_back(id);
      for (int a : tree_.Path(q)) ++waiting[a];
    }
    for (auto& d : own) {
      std::sort(d.begin(), d.end(),
                [&](JobId a, JobId b) { return engine::QueuedBefore(v.Job(a), v.Job(b)); });
    }
    auto key = [&](int q) {
      const double share = static_cast<double>(use[q]) / tree_.Spec(q).weight;
      return std::tuple(use[q] >= tree_.QuotaMilli(q) ? 1 : 0, share, q);
    };
    std::vector<JobId> out;
    out.reserve(queue->size());
    while (true) {
      int cur = -1;
      // Jobs that name an inner queue go before its children's.
      while (cur < 0 || own[cur].empty()) {
        int best = -1;
        for (int c : tree_.Children(cur)) {
          if (waiting[c] > 0 && (best < 0 || key(c) < key(best))) best = c;
        }
        if (best < 0) break;
        cur = best;
      }
      if (cur < 0 || own[cur].empty()) break;
      JobId id = own[cur].front();
      own[cur].pop_front();
      const std::vector<int>& path = tree_.Path(cur);
      for (int a : path) --waiting[a];
      const int64_t need = JobMilli(v.Job(id));
      bool allowed = std::all_of(path.begin(), path.end(), [&](int a) {
        return tree_.Spec(a).borrow || use[a] + need <= tree_.QuotaMilli(a);
      });
      if (!allowed) continue;
      out.push_back(id);
      for (int a : path) use[a] += need;
    }
    *queue = std::move(out);
  }

 private:
  QueueTree tree_;
};

// Queue reclaim (the capacity scheduler's preemption, and Kueue's "reclaimWithinCohort"): a
// job whose start keeps its queue and every ancestor within their quota may evict jobs of
// queues that run beyond their own quota, and only as much of them as they borrowed (a victim
// is taken only while its branch is still over quota before it goes). Lowest priority first,
// then the most recently started (least work since its start to lose), whole jobs only; the
// engine simulates the eviction and stops at the first prefix that lets the candidate place
// (for a candidate with a leaf bound or groups, the victims of that prefix on nodes it does
// not take are spared).
// No cycles: after the eviction the evictor's queues are within quota, so nothing can reclaim
// from them, and a victim's queue was over quota with the victim in it, so the victim cannot
// meet the within-quota test to reclaim back.
class QueueReclaim final : public engine::PreemptionPolicy {
 public:
  explicit QueueReclaim(QueueTree tree) : tree_(std::move(tree)) {}
  std::string_view Name() const override { return "queue-reclaim"; }

  std::vector<JobId> Victims(const CycleView& v, const JobRecord& candidate) const override {
    std::vector<int64_t> use = tree_.Usage(v);
    const std::vector<int>& mine = tree_.Path(tree_.Find(candidate.spec.queue));
    const int64_t need = JobMilli(candidate);
    for (int q : mine) {
      if (use[q] + need > tree_.QuotaMilli(q)) return {};
    }
    std::vector<JobId> cand(v.running.begin(), v.running.end());
    std::sort(cand.begin(), cand.end(), [&](JobId a, JobId b) {
      const JobRecord& x = v.Job(a);
      const JobRecord& y = v.Job(b);
      if (x.spec.priority != y.spec.priority) return x.spec.priority < y.spec.priority;
      if (x.start_s != y.start_s) return x.start_s > y.start_s;
      return x.id > y.id;
    });
    std::vector<JobId> out;
    for (JobId id : cand) {
      const JobRecord& r = v.Job(id);
      const std::vector<int>& path = tree_.Path(tree_.Find(r.spec.queue));
      bool borrowed = std::any_of(path.begin(), path.end(), [&](int q) {
        return std::find(mine.begin(), mine.end(), q) == mine.end() && use[q] > tree_.QuotaMilli(q);
      });
      if (!borrowed) continue;
      out.push_back(id);
      for (int q : path) use[q] -= JobMilli(r);
    }
    return out;
  }

 private:
  QueueTree tree_;
};

}  // namespace

std::unique_ptr<engine::OrderPolicy> MakeFairShareOrder(QueueTree tree) {
  return std::make_unique<FairShareOrder>(std::move(tree));
}
std::unique_ptr<engine::PreemptionPolicy> MakeQueueReclaim(QueueTree tree) {
  return std::make_unique<QueueReclaim>(std::move(tree));
}

}  // namespace tianshu::policy
