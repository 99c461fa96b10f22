#include "tianshu/policy/defrag.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tianshu/placement/fit.h"
#include "tianshu/policy/internal/reshape.h"
#include "tianshu/policy/srtf.h"

namespace tianshu::policy {

using engine::CycleView;
using engine::Decision;
using engine::JobId;
using engine::JobRecord;
using placement::RankSlot;

namespace {

class DefragPolicy final : public engine::ReshapePolicy {
 public:
  DefragPolicy(MigrationOptions m, std::unique_ptr<placement::Strategy> strategy,
               std::unique_ptr<placement::Strategy> packer)
      : m_(std::move(m)), strategy_(std::move(strategy)), packer_(std::move(packer)) {}
  std::string_view Name() const override { return "defrag"; }

  std::vector<Decision> Propose(const CycleView& view,
                                const model::ClusterState& work) const override {
    if (view.pending.empty() || !internal::Quiescent(view, work)) return {};
    std::vector<JobId> waiting(view.pending.begin(), view.pending.end());
    std::sort(waiting.begin(), waiting.end(),
              [&](JobId a, JobId b) { return engine::QueuedBefore(view.Job(a), view.Job(b)); });
    int probes = 0;
    for (JobId wid : waiting) {
      if (++probes > kMaxProbes) break;  // bounded work per cycle, whatever the queue length
      const JobRecord& w = view.Job(wid);
      if (w.request.gpu_milli < model::kMilliPerGpu) continue;   // shared GPUs do not fragment
      if (strategy_->Place(work, w.request).placed()) continue;  // held back, not fragmented
      auto plan = Plan(view, work, w);
      if (!plan.empty()) return plan;
      break;  // only the first blocked job: moving for a later one could delay it
    }
    return {};
  }

 private:
  std::vector<Decision> Plan(const CycleView& view, const model::ClusterState& work,
                             const JobRecord& w) const {
    const model::Topology& topo = work.topology();
    const int gpn = w.request.gpus_per_node;
    std::vector<int> accepted;
    int64_t free_total = 0;
    for (int n = 0; n < topo.NumNodes(); ++n) {
      if (placement::StaticCheck(work, n, w.request) != placement::Reject::kNone) continue;
      if (gpn > 0 && topo.GpusOn(n) < gpn) continue;
      accepted.push_back(n);
      free_total += gpn > 0 ? std::min(work.FreeWholeGpus(n), gpn) : work.FreeWholeGpus(n);
    }
    if (free_total < w.request.ranks) return {};  // short of GPUs, not fragmented
    // Target: the freest acceptable nodes, leaf by leaf in id order on ties.
    std::sort(accepted.begin(), accepted.end(), [&](int a, int b) {
      return std::tuple(-work.FreeWholeGpus(a), topo.nodes[a].leaf, a) <
             std::tuple(-work.FreeWholeGpus(b), topo.nodes[b].leaf, b);
    });
    std::vector<int> target;
    int64_t cap = 0;
    for (int n : accepted) {
      if (cap >= w.request.ranks) break;
      target.push_back(n);
      cap += gpn > 0 ? gpn : topo.GpusOn(n);
    }
    if (cap < w.request.ranks) return {};
    std::vector<char> in_target(topo.NumNodes(), 0);
    for (int n : target) in_target[n] = 1;
    std::vector<JobId> movers;
    for (JobId id : view.running) {
      const JobRecord& j = view.Job(id);
      bool on = std::any_of(j.placement.begin(), j.placement.end(),
                            [&](const RankSlot& s) { return in_target[s.node] != 0; });
      if (!on) continue;
      if (j.spec.kind != model::JobKind::kTraining) return {};  // services are not migrated
      movers.push_back(id);
    }
    if (movers.empty() || static_cast<int>(movers.size()) > m_.max_moves) return {};
    std::sort(movers.begin(), movers.end(), [&](JobId a, JobId b) {
      return std::tuple(-view.Job(a).Gpus(), a) < std::tuple(-view.Job(b).Gpus(), b);
    });
    // Simulate: release the movers, fence off the target, re-place the movers, then the
    // waiting job.
    model::ClusterState trial = work;
    for (JobId id : movers) {
      const JobRecord& j = view.Job(id);
      if (!placement::Release(&trial, j.request, placement::PlacedOutcome(j.placement))) return {};
    }
    std::vector<std::pair<int, int>> fenced;
    for (int n : target) {
      const int g0 = topo.nodes[n].first_gpu;
      for (int g = g0; g < g0 + topo.GpusOn(n); ++g) {
        int f = trial.GpuFreeMilli(g);
        if (f > 0 && trial.TakeGpu(g, f)) fenced.emplace_back(g, f);
      }
    }
    std::map<JobId, std::vector<RankSlot>> moved;
    for (JobId id : movers) {
      const JobRecord& j = view.Job(id);
      placement::Outcome o = packer_->Place(trial, j.request);
      if (!o.placed() || !placement::Apply(&trial, j.request, o)) return {};
      moved[id] = std::move(o.ranks);
    }
    for (auto [g, f] : fenced) {
      if (!trial.ReturnGpu(g, f)) return {};
    }
    if (!strategy_->Place(trial, w.request).placed()) return {};
    // Gain and cost in GPU-seconds.
    double cost = 0;
    for (auto& [id, ranks] : moved) {
      const JobRecord& j = view.Job(id);
      cost +=
          j.Gpus() * internal::RestartCostS(topo, j.spec, internal::NodesOf(ranks), m_.restart_s);
    }
    const double gain = w.Gpus() * ExpectedWaitS(view, work, w);
    if (gain <= cost) return {};
    std::vector<Decision> out;
    out.reserve(movers.size());
    for (JobId id : movers) {
      out.emplace_back(std::in_place_type<engine::MigrateJob>,
                       engine::MigrateJob{.id = id, .ranks = std::move(moved[id])});
    }
    return out;
  }

  // When the waiting job could start with no move: running jobs end at their estimated times
  // (start + estimate of what was left), releasing their GPUs, until it places.
  double ExpectedWaitS(const CycleView& view, const model::ClusterState& work,
                       const JobRecord& w) const {
    std::vector<std::pair<double, JobId>> ends;
    for (JobId id : view.running) {
      const JobRecord& j = view.Job(id);
      double left = RemainingS(j);
      if (left < 0) continue;
      ends.emplace_back(std::max(view.now_s, j.start_s + left), id);
    }
    std::sort(ends.begin(), ends.end());
    model::ClusterState t = work;
    int steps = 0;
    for (const auto& [end, id] : ends) {
      const JobRecord& j = view.Job(id);
      if (!placement::Release(&t, j.request, placement::PlacedOutcome(j.placement))) continue;
      if (++steps > m_.max_wait_steps) break;
      if (strategy_->Place(t, w.request).placed()) return end - view.now_s;
    }
    return m_.unknown_wait_s;
  }

  static constexpr int kMaxProbes = 8;

  MigrationOptions m_;
  std::unique_ptr<placement::Strategy> strategy_;
  std::unique_ptr<placement::Strategy> packer_;
};

}  // namespace

Result<std::unique_ptr<engine::ReshapePolicy>> MakeDefragPolicy(
    const engine::EngineOptions& options, const MigrationOptions& migration) {
  if (auto st = migration.Validate(); !st) return std::unexpected(st.error());
  placement::StrategyOptions so = options.strategy;
  so.seed = options.seed;
  auto s = placement::MakeStrategy(options.placement, so);
  if (!s) return std::unexpected(s.error());
  auto packer = placement::MakeStrategy(migration.strategy, so);
  if (!packer) return std::unexpected(packer.error());
  return std::unique_ptr<engine::ReshapePolicy>(
      new DefragPolicy(migration, std::move(*s), std::move(*packer)));
}

}  // namespace tianshu::policy
