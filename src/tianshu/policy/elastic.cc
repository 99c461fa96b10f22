#include "tianshu/policy/elastic.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/leaves.h"
#include "tianshu/policy/internal/reshape.h"
#include "tianshu/policy/srtf.h"

namespace tianshu::policy {

using engine::CycleView;
using engine::Decision;
using engine::JobId;
using engine::JobRecord;
using placement::RankSlot;

namespace {

class ElasticPolicy final : public engine::ReshapePolicy {
 public:
  ElasticPolicy(const engine::EngineOptions& o, ElasticOptions e,
                std::unique_ptr<placement::Strategy> strategy)
      : config_(o.config), e_(e), strategy_(std::move(strategy)) {}
  std::string_view Name() const override { return "elastic"; }

  bool AdmitsByShrinking(const CycleView& view, const model::ClusterState& work,
                         JobId id) const override {
    return !PlanShrink(view, work, view.Job(id)).empty();
  }

  std::vector<Decision> Propose(const CycleView& view,
                                const model::ClusterState& work) const override {
    const bool any = std::any_of(view.running.begin(), view.running.end(),
                                 [&](JobId id) { return Elastic(view.Job(id)); });
    if (!any || !internal::Quiescent(view, work)) return {};
    std::vector<JobId> waiting(view.pending.begin(), view.pending.end());
    std::sort(waiting.begin(), waiting.end(),
              [&](JobId a, JobId b) { return engine::QueuedBefore(view.Job(a), view.Job(b)); });
    std::vector<Decision> out = Shrink(view, work, waiting);
    if (!out.empty()) return out;
    return Grow(view, work, waiting);
  }

 private:
  struct Bounds {
    int min_nodes = 1;
    int max_nodes = 0;  // 0: unbounded
  };

  bool Elastic(const JobRecord& j) const {
    return j.spec.elastic.enabled && j.spec.kind == model::JobKind::kTraining &&
           !j.placement.empty();
  }

  Bounds BoundsOf(const JobRecord& j) const {
    Bounds b;
    b.min_nodes = std::max({1, j.spec.elastic.min_nodes, config_.min_nodes});
    int job_max = j.spec.elastic.max_nodes;
    int cluster_max = config_.max_nodes;
    if (job_max > 0 && cluster_max > 0)
      b.max_nodes = std::min(job_max, cluster_max);
    else
      b.max_nodes = std::max(job_max, cluster_max);
    return b;
  }

  // The first waiting job (priority order) that does not fit now, admitted by taking whole
  // nodes from elastic jobs of no higher priority, lowest priority and largest surplus first.
  std::vector<Decision> Shrink(const CycleView& view, const model::ClusterState& work,
                               const std::vector<JobId>& waiting) const {
    int probes = 0;
    for (JobId wid : waiting) {
      // A bounded number of placement probes per cycle, whatever the queue length.
      if (++probes > kMaxProbes) break;
      const JobRecord& w = view.Job(wid);
      if (strategy_->Place(work, w.request).placed()) continue;  // held back by order, not room
      std::map<JobId, std::vector<RankSlot>> changed = PlanShrink(view, work, w);
      if (changed.empty()) continue;
      std::vector<Decision> out;
      for (auto& [id, ranks] : changed) {
        out.emplace_back(std::in_place_type<engine::ResizeJob>,
                         engine::ResizeJob{.id = id, .ranks = ranks});
        last_resize_s_[id] = view.now_s;
      }
      return out;
    }
    return {};
  }

  // The shrunk placements (by job) that let `w` start; empty when no shrink does.
  std::map<JobId, std::vector<RankSlot>> PlanShrink(const CycleView& view,
                                                    const model::ClusterState& work,
                                                    const JobRecord& w) const {
    const model::Topology& topo = work.topology();
    struct Donor {
      JobId id;
      int unit;
      int surplus;  // nodes it may still give
      std::vector<RankSlot> ranks;
    };
    std::vector<Donor> donors;
    for (JobId id : view.running) {
      const JobRecord& j = view.Job(id);
      if (!Elastic(j) || j.spec.priority > w.spec.priority) continue;
      int unit = internal::RanksPerNode(j, topo);
      int nodes = static_cast<int>(internal::NodesOf(j.placement).size());
      int surplus = nodes - BoundsOf(j).min_nodes;
      if (unit > 0 && surplus > 0) donors.push_back({id, unit, surplus, j.placement});
    }
    if (donors.empty()) return {};  // the common case: no copy of the state for nothing
    std::sort(donors.begin(), donors.end(), [&](const Donor& a, const Donor& b) {
      const JobRecord& x = view.Job(a.id);
      const JobRecord& y = view.Job(b.id);
      return std::tuple(x.spec.priority, -a.surplus, a.id) <
             std::tuple(y.spec.priority, -b.surplus, b.id);
    });
    model::ClusterState trial = work;
    std::map<JobId, std::vector<RankSlot>> changed;
    bool placed = false;
    for (Donor& d : donors) {
      const JobRecord& j = view.Job(d.id);
      while (d.surplus > 0 && !placed) {
        // Give back the node of the last rank: the remaining ranks keep their order.
        int node = d.ranks.back().node;
        std::vector<RankSlot> gone;
        std::vector<RankSlot> kept;
        for (const RankSlot& s : d.ranks) (s.node == node ? gone : kept).push_back(s);
        placement::PlacementRequest part = j.request;
        part.ranks = static_cast<int>(gone.size());
        if (!placement::Release(&trial, part, placement::PlacedOutcome(gone))) break;
        d.ranks = std::move(kept);
        --d.surplus;
        changed[d.id] = d.ranks;
        placed = strategy_->Place(trial, w.request).placed();
      }
      if (placed) break;
    }
    if (!placed) return {};
    return changed;
  }

  std::vector<Decision> Grow(const CycleView& view, const model::ClusterState& work,
                             const std::vector<JobId>& waiting) const {
    const model::Topology& topo = work.topology();
    // Whole GPUs per node that waiting jobs are counted on (greedily, on nodes they accept),
    // so that growth only takes capacity nobody waits for.
    std::vector<int> spare(topo.NumNodes());
    int64_t spare_total = 0;
    for (int n = 0; n < topo.NumNodes(); ++n) {
      spare[n] = work.FreeWholeGpus(n);
      spare_total += spare[n];
    }
    for (JobId wid : waiting) {
      if (spare_total == 0) break;
      const JobRecord& w = view.Job(wid);
      int64_t need = w.request.ranks;
      for (int n = 0; n < topo.NumNodes() && need > 0; ++n) {
        if (spare[n] == 0 || placement::StaticCheck(work, n, w.request) != placement::Reject::kNone)
          continue;
        int take = static_cast<int>(std::min<int64_t>(need, spare[n]));
        spare[n] -= take;
        spare_total -= take;
        need -= take;
      }
    }
    std::vector<JobId> jobs;
    for (JobId id : view.running) {
      if (Elastic(view.Job(id))) jobs.push_back(id);
    }
    std::sort(jobs.begin(), jobs.end(),
              [&](JobId a, JobId b) { return engine::QueuedBefore(view.Job(a), view.Job(b)); });
    model::ClusterState trial = work;
    std::vector<Decision> out;
    const double interval = static_cast<double>(config_.scaling_interval_s);
    for (JobId id : jobs) {
      const JobRecord& j = view.Job(id);
      double since = j.start_s;
      if (auto it = last_resize_s_.find(id); it != last_resize_s_.end()) {
        since = std::max(since, it->second);
      }
      if (view.now_s - since < interval) continue;
      const int unit = internal::RanksPerNode(j, topo);
      std::vector<int> nodes = internal::NodesOf(j.placement);
      const Bounds b = BoundsOf(j);
      int room = b.max_nodes > 0 ? b.max_nodes - static_cast<int>(nodes.size()) : topo.NumNodes();
      if (unit <= 0 || room <= 0) continue;
      std::vector<int> cand;
      for (int n = 0; n < topo.NumNodes(); ++n) {
        // Whole nodes that are idle, unclaimed and acceptable to the job.
        if (spare[n] < topo.GpusOn(n) || trial.FreeWholeGpus(n) < unit) continue;
        if (placement::StaticCheck(trial, n, j.request) != placement::Reject::kNone) continue;
        cand.push_back(n);
      }
      const int first = nodes.front();
      std::sort(cand.begin(), cand.end(), [&](int a, int c) {
        return std::tuple(topo.CommonTier(first, a), a) < std::tuple(topo.CommonTier(first, c), c);
      });
      const int kmax = std::min<int>(room, static_cast<int>(cand.size()));
      if (kmax <= 0) continue;
      // Sizes tried: +1, +2, +4, ... and the largest.
      std::vector<int> ks;
      for (int k = 1; k < kmax; k *= 2) ks.push_back(k);
      ks.push_back(kmax);
      const std::vector<int> gpus = internal::GpusOf(j.placement);
      const double base = internal::PredictThroughput(topo, j.spec, gpus, config_);
      if (base <= 0) continue;
      double best = base;
      std::vector<RankSlot> best_ranks;
      for (int k : ks) {
        model::ClusterState t2 = trial;
        if (!placement::Release(&t2, j.request, placement::PlacedOutcome(j.placement))) break;
        std::vector<std::pair<int, int>> counts;
        for (int n : nodes) {
          int c = 0;
          for (const RankSlot& s : j.placement) c += s.node == n;
          counts.emplace_back(n, c);
        }
        for (int i = 0; i < k; ++i) counts.emplace_back(cand[i], unit);
        placement::PlacementRequest req = j.request;
        req.ranks = j.request.ranks + k * unit;
        placement::Outcome o = placement::FinishPlacement(t2, req, counts);
        if (!o.placed()) continue;
        // A job's leaf bound (topology.leaves) holds for what it grows to as well.
        if (const int limit = placement::LeafLimit(t2, req);
            limit > 0 && !placement::WithinLeaves(topo, limit, o.ranks)) {
          continue;
        }
        double thr = internal::PredictThroughput(topo, j.spec, internal::GpusOf(o.ranks), config_);
        if (thr > best) {
          best = thr;
          best_ranks = std::move(o.ranks);
        }
      }
      if (best_ranks.empty() || best < base * (1 + e_.min_throughput_gain)) continue;
      // The restart must pay for itself over the work left, where that is known.
      const double left = RemainingS(j);
      if (left >= 0) {
        const std::vector<int> new_nodes = internal::NodesOf(best_ranks);
        double cost = internal::RestartCostS(topo, j.spec, new_nodes, e_.restart_s);
        if (cost + left * base / best >= left) continue;
      }
      placement::PlacementRequest req = j.request;
      req.ranks = static_cast<int>(best_ranks.size());
      if (!placement::Release(&trial, j.request, placement::PlacedOutcome(j.placement))) continue;
      if (!placement::Apply(&trial, req, placement::PlacedOutcome(best_ranks))) {
        (void)placement::Apply(&trial, j.request, placement::PlacedOutcome(j.placement));
        continue;
      }
      for (int n : internal::NodesOf(best_ranks)) {
        if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) spare[n] = 0;
      }
      last_resize_s_[id] = view.now_s;
      out.emplace_back(std::in_place_type<engine::ResizeJob>,
                       engine::ResizeJob{.id = id, .ranks = std::move(best_ranks)});
    }
    return out;
  }

  static constexpr int kMaxProbes = 8;

  model::EngineConfig config_;
  ElasticOptions e_;
  std::unique_ptr<placement::Strategy> strategy_;
  // When each job was last resized. The engine's JobRecord has no such field yet; Propose is
  // called once per cycle by the engine's single owner, so this memo stays deterministic.
  mutable std::map<JobId, double> last_resize_s_;
};

}  // namespace

Result<estimate::ParallelConfig> ReplanParallelism(const model::Topology& topo,
                                                   const model::JobSpec& job,
                                                   std::span<const RankSlot> ranks,
                                                   const model::EngineConfig& config) {
  const model::ModelSpec& m = job.model;
  if (m.layers <= 0 || m.hidden <= 0 || m.global_batch <= 0) {
    return Fail("job '", job.name, "' has no model shape to plan parallelism for");
  }
  std::vector<int> gpus;
  for (const RankSlot& s : ranks) {
    if (s.gpu >= 0) gpus.push_back(s.gpu);
  }
  auto r = internal::SearchFor(topo, job, gpus, config);
  if (!r) return std::unexpected(r.error());
  if (!r->found) return Fail("no parallel configuration fits: ", r->reason);
  return r->best.config;
}

Result<std::unique_ptr<engine::ReshapePolicy>> MakeElasticPolicy(
    const engine::EngineOptions& options, const ElasticOptions& elastic) {
  if (auto st = elastic.Validate(); !st) return std::unexpected(st.error());
  placement::StrategyOptions so = options.strategy;
  so.seed = options.seed;
  auto s = placement::MakeStrategy(options.placement, so);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<engine::ReshapePolicy>(new ElasticPolicy(options, elastic, std::move(*s)));
}

}  // namespace tianshu::policy
