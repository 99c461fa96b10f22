// The genetic strategy: batch placement of several pending jobs at once.
//
// Chromosome: for every job of the batch, the nodes it uses and the ranks on each. Decoding
// walks the jobs in batch (priority) order on a working copy of the snapshot and repairs each
// gene so that every child is feasible (capacity, backend, labels, memory, storage): ranks a
// node can no longer take are dropped and refilled in the smallest subtree around the job's
// first node, else by the topology search; a job that still does not fit is left out (all or
// nothing). The repaired gene is written back (Lamarckian). Fitness is EvaluateBatch's cost
// (computed per job with the tier costs and switch loads cached once per call).
//
// "Improved": the population is seeded with the heuristics' solutions (topology, topology
// least-loaded-first, best-fit, first-fit, spread), the best of them after local search, and
// mutants of topology's and of that one; elitism; tournament selection; crossover that keeps
// whole subtrees (per job, or every job inside a random switch subtree from one parent); adaptive
// mutation (raised while the best stalls, reset on improvement); a seed and a step budget
// (generations x population decodes); an early stop after `patience` generations without
// improvement.
//
// Memetic: the best seed and the final best go through a local search that takes a few jobs
// out of the placement and puts them back one by one, each on its cheapest candidate given
// the others (per switch subtree, best-fit descent and the fewest nodes; per leaf, the best
// single node; ties go to the tightest fit): single jobs, then pairs in both orders (the moves
// that let a large job take a node a small one can leave); in batches of up to 8 jobs also
// pairs with the first job on its second or third choice, every triple and the whole batch
// reordered; then random groups of two or three. A move is kept only when the batch cost
// drops; the work is bounded in insertions.
//
// Where every job takes whole GPUs, decoding and the local search take GPUs as drafts (the
// first free ones of each node: what a node can take next depends only on how many are free)
// and the winner's GPUs are picked at the end as the other strategies do. The result is
// checked with EvaluateBatch against topology's own placement and never costs more.
#include <algorithm>
#include <numeric>
#include <optional>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/random.h"
#include "tianshu/placement/internal/tree_search.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement::internal {
namespace {

// A gene holding only this entry asks repair for the least-loaded topology choice.
constexpr int kLeastLoaded = -2;
constexpr double kEps = 1e-9;

struct Genome {
  std::vector<NodeCounts> genes;
  std::vector<Outcome> outcomes;
  double cost = 0;
};

NodeCounts GeneOf(const Outcome& o) {
  NodeCounts out;
  for (const RankSlot& s : o.ranks) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == s.node; });
    if (it == out.end()) {
      out.push_back({s.node, 1});
    } else {
      ++it->second;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// EvaluateBatch's cost of one job (objective.h), with the tier costs, the slowdowns and the
// snapshot's switch loads computed once.
class Pricer {
 public:
  Pricer(const ClusterState& s, const model::ResourceWeight& w)
      : t_(s.topology()), w_(w), c_(TierCosts(t_)), slow_(TypeSlowdowns(t_)) {
    levels_ = static_cast<int>(c_.size()) - 1;
    load_.resize(t_.switches.size());
    for (size_t sw = 0; sw < t_.switches.size(); ++sw)
      load_[sw] = s.SwitchLoad(static_cast<int>(sw));
  }

  double Load(int sw) const { return load_[sw]; }
  double Unplaced(const PlacementRequest& r) const { return kUnplacedPenalty * r.ranks; }

  double Placed(const PlacementRequest& r, const NodeCounts& counts) const {
    double compute = 0, memory = 0;
    int nodes = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const auto [n, k] = counts[i];
      bool seen = false;
      for (size_t p = 0; p < i && !seen; ++p) seen = counts[p].first == n;
      nodes += !seen;
      const auto& ty = t_.TypeOf(n);
      compute += k * slow_[t_.nodes[n].type];
      if (r.device_memory_bytes > 0 && ty.accelerator.memory_bytes > 0) {
        memory += k * (static_cast<double>(r.device_memory_bytes) /
                       static_cast<double>(ty.accelerator.memory_bytes));
      }
    }
    const double ranks = std::max(1, r.ranks);
    double network = c_[0] * (nodes - 1);
    blocks_.clear();
    for (int level = 0; level < levels_; ++level) {
      blocks_.clear();
      for (auto [n, k] : counts) {
        const int b = t_.AncestorAt(n, level);
        if (std::find(blocks_.begin(), blocks_.end(), b) != blocks_.end()) continue;
        blocks_.push_back(b);
        network += c_[1 + level] * (1 + load_[b]);
      }
      network -= c_[1 + level];
    }
    return w_.compute * compute / ranks + w_.network * network + w_.memory * memory / ranks;
  }

  double Of(const PlacementRequest& r, const Outcome& o) const {
    return o.placed() ? Placed(r, GeneOf(o)) : Unplaced(r);
  }

 private:
  const model::Topology& t_;
  model::ResourceWeight w_;
  std::vector<double> c_, slow_, load_;
  int levels_ = 0;
  mutable std::vector<int> blocks_;
};

bool Valid(const PlacementRequest& r, const NodeCounts& counts) {
  if (counts.empty()) return false;
  int total = 0;
  for (auto [n, k] : counts) {
    if (k <= 0) return false;
    if (r.gpus_per_node > 0 && k != r.gpus_per_node) return false;
    total += k;
  }
  return total == r.ranks && (!r.single_node || counts.size() == 1);
}

// One PlaceBatch call: the snapshot, a working state that every step restores, the per-job
// candidate nodes and the pricing.
class Search {
 public:
  Search(const ClusterState& s, std::span<const PlacementRequest> reqs, const StrategyOptions& o)
      : s_(s), reqs_(reqs), work_(s), pricer_(s, o.weights), jobs_(static_cast<int>(reqs.size())) {
    eligible_.resize(jobs_);
    for (int j = 0; j < jobs_; ++j) {
      for (int n = 0; n < s.topology().NumNodes(); ++n) {
        if (NodeCapacity(s, n, reqs[j]) > 0) eligible_[j].push_back(n);
      }
    }
    for (const PlacementRequest& r : reqs) fast_ = fast_ && r.gpu_milli == model::kMilliPerGpu;
    for (const auto& sw : s.topology().switches)
      nodes_under_.push_back(s.topology().NodesUnder(sw.id));
  }

  const std::vector<std::vector<int>>& eligible() const { return eligible_; }

  // Repairs and decodes every gene in batch order; sets outcomes and cost.
  void Decode(Genome* x) {
    x->genes.resize(jobs_);
    x->outcomes.assign(jobs_, Outcome{});
    x->cost = 0;
    for (int j = 0; j < jobs_; ++j) {
      const PlacementRequest& r = reqs_[j];
      NodeCounts counts = Repair(r, x->genes[j]);
      Outcome o;
      if (!counts.empty() && Take(r, counts, &o)) {
        x->genes[j] = GeneOf(o);
        x->cost += pricer_.Placed(r, x->genes[j]);
        x->outcomes[j] = std::move(o);
      } else {
        x->genes[j].clear();
        x->cost += pricer_.Unplaced(r);
        x->outcomes[j] = NotNow(r, 0);
      }
    }
    Restore(x->outcomes);
  }

  // The outcomes of a genome as the other strategies build them (GPUs chosen by PickGpus,
  // ranks ordered), where decoding used drafts; nullopt if one no longer fits (not expected).
  std::optional<std::vector<Outcome>> Materialize(const Genome& x) const {
    if (!fast_) return x.outcomes;
    ClusterState m = s_;
    std::vector<Outcome> out(jobs_);
    for (int j = 0; j < jobs_; ++j) {
      if (!x.outcomes[j].placed()) {
        out[j] = x.outcomes[j];
        continue;
      }
      out[j] = FinishPlacement(m, reqs_[j], GeneOf(x.outcomes[j]));
      if (!out[j].placed() || !Apply(&m, reqs_[j], out[j])) return std::nullopt;
    }
    return out;
  }

  // The local search described at the top; never raises the cost.
  void Improve(Genome* x, Rng* rng) {
    outs_ = x->outcomes;
    cost_.assign(jobs_, 0);
    for (int j = 0; j < jobs_; ++j) {
      if (outs_[j].placed() && !Retake(reqs_[j], outs_[j])) outs_[j] = NotNow(reqs_[j], 0);
      cost_[j] = pricer_.Of(reqs_[j], outs_[j]);
    }
    // Work bounded in insertions (each a candidate search over the cluster).
    budget_ = std::max(1200, 300 + 12 * jobs_);
    const bool all_pairs = jobs_ <= 12;
    const bool small = jobs_ <= 8;
    auto by_size = [&](std::vector<int> v) {
      std::stable_sort(v.begin(), v.end(),
                       [&](int a, int b) { return reqs_[a].ranks > reqs_[b].ranks; });
      return v;
    };
    bool improved = true;
    for (int round = 0; improved && round < 4 && budget_ > 0; ++round) {
      improved = false;
      for (int j = 0; j < jobs_; ++j) improved |= Move({j});
      for (int j = 0; j < jobs_ && budget_ > 0; ++j) {
        for (int k = j + 1; k < jobs_ && budget_ > 0; ++k) {
          if (!all_pairs && !Related(j, k)) continue;
          improved |= Move({j, k}) || Move({k, j});
          // Small batches: also with the first job on its second or third choice.
          for (int skip = 1; small && skip <= 2; ++skip) {
            improved |= Move({j, k}, skip) || Move({k, j}, skip);
          }
        }
      }
      if (!small) continue;
      // Small batches: every triple, each job first, then the rest largest first; and the
      // whole batch again, largest first or one job first.
      for (int a = 0; a < jobs_ && budget_ > 0; ++a) {
        for (int b = a + 1; b < jobs_; ++b) {
          for (int c = b + 1; c < jobs_; ++c) {
            const std::vector<int> group = by_size({a, b, c});
            for (int f = 0; f < 3; ++f) {
              std::vector<int> order = {group[f]};
              for (int o : group) {
                if (o != group[f]) order.push_back(o);
              }
              if (Move(order)) {
                improved = true;
                break;
              }
            }
          }
        }
      }
      std::vector<int> all(jobs_);
      std::iota(all.begin(), all.end(), 0);
      all = by_size(all);
      for (int f = 0; f < jobs_ && budget_ > 0; ++f) {
        std::vector<int> order = {all[f]};
        for (int o : all) {
          if (o != all[f]) order.push_back(o);
        }
        improved |= Move(order);
      }
    }
    for (int it = 0; it < 4 * jobs_ + 20 && budget_ > 0 && jobs_ >= 2; ++it) {
      const int size = std::min(jobs_, 2 + rng->Below(2));
      std::vector<int> group;
      while (static_cast<int>(group.size()) < size) {
        const int j = rng->Below(jobs_);
        if (std::find(group.begin(), group.end(), j) == group.end()) group.push_back(j);
      }
      if (rng->Unit() < 0.5) {
        std::stable_sort(group.begin(), group.end(),
                         [&](int a, int b) { return reqs_[a].ranks > reqs_[b].ranks; });
      } else {
        rng->Shuffle(&group);
      }
      Move(group);
    }
    Restore(outs_);
    double total = 0;
    for (double c : cost_) total += c;
    if (total < x->cost - kEps) {
      x->outcomes = outs_;
      for (int j = 0; j < jobs_; ++j)
        x->genes[j] = outs_[j].placed() ? GeneOf(outs_[j]) : NodeCounts{};
      x->cost = total;
    }
  }

 private:
  // Places `counts` of r in work_. Where every job of the batch takes whole GPUs, a draft:
  // the first free GPUs of each node, taken directly (what a node can take next depends only
  // on how many are free, so decoding gives the same node counts; Materialize picks the GPUs
  // at the end). Else FinishPlacement and Apply.
  bool Take(const PlacementRequest& r, const NodeCounts& counts, Outcome* o) {
    if (!fast_) {
      *o = FinishPlacement(work_, r, counts);
      return o->placed() && Apply(&work_, r, *o);
    }
    o->ranks.clear();
    o->reason.clear();
    o->kind = OutcomeKind::kPlaced;
    int total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const auto [n, k] = counts[i];
      total += k;
      for (size_t p = 0; p < i; ++p) {
        if (counts[p].first == n) return Fail(r, o);
      }
      if (k <= 0 || work_.FreeWholeGpus(n) < k) return Fail(r, o);
      if (!work_.TakeHost(n, k * r.cpu_milli_per_rank, k * r.memory_bytes_per_rank,
                          r.storage_bps_per_node)) {
        return Fail(r, o);
      }
      const int first = work_.topology().nodes[n].first_gpu;
      int left = k;
      for (int g = first; left > 0 && g < first + work_.topology().GpusOn(n); ++g) {
        if (work_.GpuFreeMilli(g) != model::kMilliPerGpu) continue;
        (void)work_.TakeGpu(g, model::kMilliPerGpu);
        o->ranks.push_back({n, g});
        --left;
      }
    }
    if (total != r.ranks) return Fail(r, o);
    return true;
  }

  // Undoes a partial draft.
  bool Fail(const PlacementRequest& r, Outcome* o) {
    if (!o->ranks.empty()) (void)Give(r, *o);
    *o = NotNow(r, 0);
    return false;
  }

  // Puts back an outcome taken before (a draft or a real one).
  bool Retake(const PlacementRequest& r, const Outcome& o) {
    if (!fast_) return static_cast<bool>(Apply(&work_, r, o));
    for (size_t i = 0; i < o.ranks.size(); ++i) {
      if (!work_.TakeGpu(o.ranks[i].gpu, model::kMilliPerGpu)) {
        for (size_t p = 0; p < i; ++p) (void)work_.ReturnGpu(o.ranks[p].gpu, model::kMilliPerGpu);
        return false;
      }
    }
    const NodeCounts counts = GeneOf(o);
    for (size_t i = 0; i < counts.size(); ++i) {
      const auto [n, k] = counts[i];
      if (!work_.TakeHost(n, k * r.cpu_milli_per_rank, k * r.memory_bytes_per_rank,
                          r.storage_bps_per_node)) {
        for (size_t p = 0; p < i; ++p) {
          (void)work_.ReturnHost(counts[p].first, counts[p].second * r.cpu_milli_per_rank,
                                 counts[p].second * r.memory_bytes_per_rank,
                                 r.storage_bps_per_node);
        }
        for (const RankSlot& slot : o.ranks) (void)work_.ReturnGpu(slot.gpu, model::kMilliPerGpu);
        return false;
      }
    }
    return true;
  }

  bool Give(const PlacementRequest& r, const Outcome& o) {
    if (!fast_) return static_cast<bool>(Release(&work_, r, o));
    bool ok = true;
    for (const RankSlot& slot : o.ranks) ok = work_.ReturnGpu(slot.gpu, model::kMilliPerGpu) && ok;
    for (auto [n, k] : GeneOf(o)) {
      ok = work_.ReturnHost(n, k * r.cpu_milli_per_rank, k * r.memory_bytes_per_rank,
                            r.storage_bps_per_node) &&
           ok;
    }
    return ok;
  }

  // Releases every placed outcome (reverse order), so work_ equals the snapshot again.
  void Restore(const std::vector<Outcome>& outs) {
    for (int j = jobs_ - 1; j >= 0; --j) {
      if (outs[j].placed() && !Give(reqs_[j], outs[j])) {
        work_ = s_;
        return;
      }
    }
  }

  NodeCounts Repair(const PlacementRequest& r, const NodeCounts& gene) const {
    if (gene.size() == 1 && gene.front().first == kLeastLoaded) {
      auto fresh = TopologyChoose(work_, r, /*least_loaded=*/true);
      return fresh ? *fresh : NodeCounts{};
    }
    NodeCounts counts;
    int left = r.ranks;
    for (auto [n, k] : gene) {
      if (left == 0) break;
      int cap = NodeCapacity(work_, n, r);
      int take = std::min({k, cap, left});
      if (r.gpus_per_node > 0)
        take = (cap >= r.gpus_per_node && k >= r.gpus_per_node) ? r.gpus_per_node : 0;
      if (r.single_node) take = cap >= r.ranks && counts.empty() ? r.ranks : 0;
      if (take > 0) {
        counts.push_back({n, take});
        left -= take;
      }
    }
    if (left == 0) return counts;
    if (!counts.empty() && !r.single_node) {
      const int anchor = counts.front().first;
      const int tiers = static_cast<int>(work_.topology().tiers.size());
      for (int t = 0; t < tiers; ++t) {
        NodeCounts trial = counts;
        if (FillBelow(work_, r, work_.topology().AncestorAt(anchor, t), left, &trial)) return trial;
      }
    }
    auto fresh = TopologyChoose(work_, r);
    return fresh ? *fresh : NodeCounts{};
  }

  // Two jobs that share a leaf, or either left out: the pairs worth a joint move.
  bool Related(int j, int k) const {
    if (!outs_[j].placed() || !outs_[k].placed()) return true;
    const auto& t = s_.topology();
    for (const RankSlot& a : outs_[j].ranks) {
      for (const RankSlot& b : outs_[k].ranks) {
        if (t.AncestorAt(a.node, 0) == t.AncestorAt(b.node, 0)) return true;
      }
    }
    return false;
  }

  // Takes the jobs of `order` out and puts them back in that order; keeps the result when the
  // batch cost drops, else puts the old placements back.
  bool Move(const std::vector<int>& order, int first_skip = 0) {
    double before = 0;
    for (int j : order) before += cost_[j];
    std::vector<Outcome> saved;
    for (int j : order) {
      saved.push_back(outs_[j]);
      if (outs_[j].placed()) (void)Give(reqs_[j], outs_[j]);
    }
    std::vector<double> costs;
    double after = 0;
    size_t done = 0;
    for (; done < order.size(); ++done) {
      const int j = order[done];
      --budget_;
      double c = Insert(j, done == 0 ? first_skip : 0);
      costs.push_back(c);
      after += c;
      if (after >= before - kEps) {  // costs are never negative: no gain possible
        ++done;
        break;
      }
    }
    if (done == order.size() && after < before - kEps) {
      for (size_t i = 0; i < order.size(); ++i) cost_[order[i]] = costs[i];
      return true;
    }
    for (size_t i = done; i-- > 0;) {
      const int j = order[i];
      if (outs_[j].placed()) (void)Give(reqs_[j], outs_[j]);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      outs_[order[i]] = std::move(saved[i]);
      if (outs_[order[i]].placed() && !Retake(reqs_[order[i]], outs_[order[i]])) {
        outs_[order[i]] = NotNow(reqs_[order[i]], 0);  // not expected: it fitted before
        cost_[order[i]] = pricer_.Unplaced(reqs_[order[i]]);
      }
    }
    return false;
  }

  // Places job j on its cheapest candidate in work_; returns its cost.
  double Insert(int j, int skip = 0) {
    const PlacementRequest& r = reqs_[j];
    struct Cand {
      double cost;
      int slack;
      int index;
    };
    cands_.clear();
    const auto& t = work_.topology();
    cap_.assign(t.NumNodes(), 0);
    for (int n : eligible_[j]) cap_[n] = NodeCapacity(work_, n, r);
    std::vector<Cand> order;
    auto slack = [&](const NodeCounts& c) {
      int out = 0;
      for (auto [n, k] : c) out += cap_[n] - k;
      return out;
    };
    // One node: per leaf, the cheapest, then the tightest.
    if (r.gpus_per_node == 0 || r.gpus_per_node == r.ranks) {
      std::vector<std::pair<int, Cand>> best;  // leaf, candidate
      for (int n : eligible_[j]) {
        if (cap_[n] < r.ranks) continue;
        const NodeCounts c = {{n, r.ranks}};
        const Cand x = {pricer_.Placed(r, c), cap_[n] - r.ranks, n};
        const int leaf = t.AncestorAt(n, 0);
        auto it = std::find_if(best.begin(), best.end(), [&](auto& b) { return b.first == leaf; });
        if (it == best.end()) {
          best.push_back({leaf, x});
        } else if (x.cost < it->second.cost - kEps ||
                   (x.cost <= it->second.cost + kEps && x.slack < it->second.slack)) {
          it->second = x;
        }
      }
      for (auto& [leaf, x] : best) {
        cands_.push_back({{x.index, r.ranks}});
        order.push_back({x.cost, x.slack, static_cast<int>(cands_.size()) - 1});
      }
    }
    // Several nodes: per switch subtree, best-fit descent and the fewest nodes.
    if (!r.single_node) {
      for (const auto& sw : t.switches) {
        if (SwitchUpperBound(work_, r, sw.id) < r.ranks) continue;
        NodeCounts c;
        if (FillBelow(work_, r, sw.id, r.ranks, &c) && Valid(r, c)) cands_.push_back(c);
        if (FewestNodes(r, sw.id, &c) && Valid(r, c)) cands_.push_back(std::move(c));
      }
    }
    for (int i = static_cast<int>(order.size()); i < static_cast<int>(cands_.size()); ++i) {
      order.push_back({pricer_.Placed(r, cands_[i]), slack(cands_[i]), i});
    }
    std::sort(order.begin(), order.end(), [](const Cand& a, const Cand& b) {
      if (a.cost < b.cost - kEps || a.cost > b.cost + kEps) return a.cost < b.cost;
      if (a.slack != b.slack) return a.slack < b.slack;
      return a.index < b.index;
    });
    std::vector<int> skipped;  // distinct candidates passed over
    for (const Cand& c : order) {
      if (static_cast<int>(skipped.size()) < skip) {
        NodeCounts key = cands_[c.index];
        std::sort(key.begin(), key.end());
        bool seen = false;
        for (int i : skipped) {
          NodeCounts other = cands_[i];
          std::sort(other.begin(), other.end());
          seen = seen || other == key;
        }
        if (!seen) skipped.push_back(c.index);
        continue;
      }
      Outcome o;
      if (Take(r, cands_[c.index], &o)) {
        outs_[j] = std::move(o);
        return c.cost;
      }
    }
    outs_[j] = NotNow(r, 0);
    return pricer_.Unplaced(r);
  }

  // The fewest nodes below `sw` (the largest first, the last one the tightest that completes
  // the gang), preferring among equals nodes of leaves already used, then less loaded leaves.
  bool FewestNodes(const PlacementRequest& r, int sw, NodeCounts* out) {
    const auto& t = work_.topology();
    out->clear();
    pool_.clear();
    for (int n : nodes_under_[sw]) {
      if (cap_[n] > 0) pool_.push_back(n);
    }
    std::vector<int> leaves;
    int left = r.ranks;
    while (left > 0) {
      int pick = -1;
      bool pick_fits = false;
      for (size_t i = 0; i < pool_.size(); ++i) {
        const int n = pool_[i];
        if (n < 0) continue;
        const bool fits = cap_[n] >= left;
        if (pick >= 0) {
          if (pick_fits && !fits) continue;
          if (pick_fits == fits && cap_[n] != cap_[pick]) {
            // Completing: the tightest; else the largest.
            if (fits ? cap_[n] > cap_[pick] : cap_[n] < cap_[pick]) continue;
          } else if (pick_fits == fits) {
            const int ln = t.AncestorAt(n, 0), lp = t.AncestorAt(pick, 0);
            const bool un = std::find(leaves.begin(), leaves.end(), ln) != leaves.end();
            const bool up = std::find(leaves.begin(), leaves.end(), lp) != leaves.end();
            if (un != up) {
              if (!un) continue;
            } else if (pricer_.Load(ln) >= pricer_.Load(lp)) {
              continue;
            }
          }
        }
        pick = n;
        pick_fits = fits;
      }
      if (pick < 0) return false;
      const int take = std::min(cap_[pick], left);
      out->push_back({pick, take});
      left -= take;
      leaves.push_back(t.AncestorAt(pick, 0));
      *std::find(pool_.begin(), pool_.end(), pick) = -1;
    }
    return true;
  }

  const ClusterState& s_;
  std::span<const PlacementRequest> reqs_;
  ClusterState work_;
  Pricer pricer_;
  int jobs_;
  std::vector<std::vector<int>> eligible_;
  bool fast_ = true;  // every job takes whole GPUs: drafts (see Take)
  // Local search state.
  std::vector<Outcome> outs_;
  std::vector<double> cost_;
  std::vector<NodeCounts> cands_;
  std::vector<int> cap_, pool_;
  std::vector<std::vector<int>> nodes_under_;
  int budget_ = 0;
};

class Genetic final : public Strategy {
 public:
  explicit Genetic(const StrategyOptions& o) : options_(o) {}
  std::string_view Name() const override { return "genetic"; }

  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    return PlaceBatch(s, std::span<const PlacementRequest>(&r, 1)).front();
  }

  std::vector<Outcome> PlaceBatch(const ClusterState& s,
                                  std::span<const PlacementRequest> reqs) const override {
    if (reqs.empty()) return {};
    const GeneticOptions& g = options_.genetic;
    Rng rng(options_.seed);
    const int jobs = static_cast<int>(reqs.size());
    Search search(s, reqs, options_);
    const auto& eligible = search.eligible();

    std::vector<Genome> pop;
    // Seeds: the heuristics' batch solutions.
    auto seed_from = [&](const std::vector<Outcome>& placed) {
      Genome x;
      for (const Outcome& o : placed) x.genes.push_back(GeneOf(o));
      search.Decode(&x);
      pop.push_back(std::move(x));
    };
    const std::vector<Outcome> topology_out = NewTopology(options_)->PlaceBatch(s, reqs);
    if (jobs == 1 && !topology_out.front().placed()) return Finish(s, reqs, topology_out);
    seed_from(topology_out);
    const Genome topology_seed = pop.front();
    {
      // Every job on the least-loaded subtree that holds it.
      Genome x;
      x.genes.assign(jobs, NodeCounts{{kLeastLoaded, 0}});
      search.Decode(&x);
      pop.push_back(std::move(x));
    }
    seed_from(NewBestFit(options_)->PlaceBatch(s, reqs));
    seed_from(NewFirstFit(options_)->PlaceBatch(s, reqs));
    seed_from(NewSpread(options_)->PlaceBatch(s, reqs));
    auto by_cost = [](const Genome& a, const Genome& b) { return a.cost < b.cost; };
    std::stable_sort(pop.begin(), pop.end(), by_cost);
    // Memetic seed: the best heuristic solution after local search.
    {
      Genome x = pop.front();
      search.Improve(&x, &rng);
      pop.insert(pop.begin(), std::move(x));
    }
    while (static_cast<int>(pop.size()) < g.population) {
      Genome x = rng.Unit() < 0.5 ? topology_seed : pop.front();
      Mutate(reqs, eligible, 0.5, &rng, &x);
      search.Decode(&x);
      pop.push_back(std::move(x));
    }
    std::stable_sort(pop.begin(), pop.end(), by_cost);

    double best = pop.front().cost;
    double improved_from = best;
    double mutation = g.mutation;
    int stall = 0;
    for (int gen = 0; gen < g.generations && stall < g.patience; ++gen) {
      std::vector<Genome> next(pop.begin(),
                               pop.begin() + std::min<int>(g.elite, static_cast<int>(pop.size())));
      while (static_cast<int>(next.size()) < g.population) {
        const Genome& a = Tournament(pop, &rng);
        const Genome& b = Tournament(pop, &rng);
        Genome child;
        if (rng.Unit() < g.crossover) {
          child = Crossover(s, a, b, &rng);
        } else {
          child.genes = a.genes;
        }
        Mutate(reqs, eligible, mutation, &rng, &child);
        search.Decode(&child);
        next.push_back(std::move(child));
      }
      std::stable_sort(next.begin(), next.end(), by_cost);
      pop = std::move(next);
      if (pop.front().cost < best - kEps) {
        best = pop.front().cost;
        stall = 0;
        mutation = g.mutation;
      } else {
        ++stall;
        mutation = std::min(0.6, mutation * 1.5);
      }
    }
    // Memetic finish: local search on the best, unless it is the one already searched.
    if (pop.front().cost < improved_from - kEps) search.Improve(&pop.front(), &rng);
    // The guarantee, on the measure itself: never worse than topology's placement.
    const model::ResourceWeight& w = options_.weights;
    std::optional<std::vector<Outcome>> out = search.Materialize(pop.front());
    if (!out || EvaluateBatch(s, reqs, *out, w).total >
                    EvaluateBatch(s, reqs, topology_out, w).total + kEps) {
      out = topology_out;
    }
    return Finish(s, reqs, std::move(*out));
  }

 private:
  std::vector<Outcome> Finish(const ClusterState& s, std::span<const PlacementRequest> reqs,
                              std::vector<Outcome> out) const {
    for (size_t j = 0; j < out.size(); ++j) {
      if (out[j].placed()) continue;
      // Say why: never, or not now (given the jobs placed before it).
      if (auto never = NeverFits(s, reqs[j])) {
        out[j] = *never;
      } else if (out[j].reason.empty()) {
        out[j] = NotNow(reqs[j], 0);
      }
    }
    return out;
  }

  const Genome& Tournament(const std::vector<Genome>& pop, Rng* rng) const {
    int best = rng->Below(static_cast<int>(pop.size()));
    for (int i = 1; i < options_.genetic.tournament; ++i) {
      int c = rng->Below(static_cast<int>(pop.size()));
      if (pop[c].cost < pop[best].cost) best = c;
    }
    return pop[best];
  }

  // Whole genes only, so each job keeps the subtree it had in its parent.
  Genome Crossover(const ClusterState& s, const Genome& a, const Genome& b, Rng* rng) const {
    Genome child;
    const int jobs = static_cast<int>(a.genes.size());
    child.genes.resize(jobs);
    const auto& topo = s.topology();
    if (rng->Unit() < 0.5 || topo.switches.size() < 2) {
      for (int j = 0; j < jobs; ++j) child.genes[j] = rng->Unit() < 0.5 ? a.genes[j] : b.genes[j];
      return child;
    }
    // Every job that lies inside one random subtree in `a` comes from `a`, the rest from `b`.
    const int sw = rng->Below(static_cast<int>(topo.switches.size()));
    const int tier = topo.switches[sw].tier;
    for (int j = 0; j < jobs; ++j) {
      bool inside = !a.genes[j].empty();
      for (auto [n, k] : a.genes[j]) inside = inside && topo.AncestorAt(n, tier) == sw;
      child.genes[j] = inside ? a.genes[j] : b.genes[j];
    }
    return child;
  }

  void Mutate(std::span<const PlacementRequest> reqs, const std::vector<std::vector<int>>& eligible,
              double rate, Rng* rng, Genome* x) const {
    const int jobs = static_cast<int>(reqs.size());
    x->genes.resize(jobs);
    for (int j = 0; j < jobs; ++j) {
      if (rng->Unit() >= rate) continue;
      NodeCounts& gene = x->genes[j];
      const int kind = rng->Below(4);
      if (kind == 0 && !eligible[j].empty()) {
        // Re-anchor the job on a random node it may use; repair grows it around that node.
        gene = {{eligible[j][rng->Below(static_cast<int>(eligible[j].size()))], reqs[j].ranks}};
      } else if (kind == 3) {
        gene = {{kLeastLoaded, 0}};
      } else if (kind == 1 && !gene.empty()) {
        // Give up one node; repair refills nearby.
        gene.erase(gene.begin() + rng->Below(static_cast<int>(gene.size())));
      } else {
        // Let the topology search choose again, given the jobs decoded before it.
        gene.clear();
      }
    }
  }

  StrategyOptions options_;
};

}  // namespace

std::unique_ptr<Strategy> NewGenetic(const StrategyOptions& o) {
  return std::make_unique<Genetic>(o);
}

}  // namespace tianshu::placement::internal
