#include "tianshu/placement/internal/local_search.h"

#include <algorithm>
#include <numeric>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/tree_search.h"

namespace tianshu::placement::internal {

LocalSearch::LocalSearch(GenomeDecoder* decoder, std::span<const PlacementRequest> reqs)
    : d_(*decoder), reqs_(reqs), jobs_(static_cast<int>(reqs.size())) {
  const ClusterState& s = d_.snapshot();
  eligible_.resize(jobs_);
  for (int j = 0; j < jobs_; ++j) {
    for (int n = 0; n < s.topology().NumNodes(); ++n) {
      if (NodeCapacity(s, n, reqs[j]) > 0) eligible_[j].push_back(n);
    }
  }
  for (const auto& sw : s.topology().switches)
    nodes_under_.push_back(s.topology().NodesUnder(sw.id));
}

void LocalSearch::Improve(Genome* x, Rng* rng) {
  outs_ = x->outcomes;
  cost_.assign(jobs_, 0);
  for (int j = 0; j < jobs_; ++j) {
    if (outs_[j].placed() && !d_.Retake(reqs_[j], outs_[j])) outs_[j] = NotNow(reqs_[j], 0);
    cost_[j] = d_.pricer().Of(reqs_[j], outs_[j]);
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
  d_.Restore(outs_);
  double total = 0;
  for (double c : cost_) total += c;
  if (total < x->cost - kCostEps) {
    x->outcomes = outs_;
    for (int j = 0; j < jobs_; ++j)
      x->genes[j] = outs_[j].placed() ? GeneOf(outs_[j]) : NodeCounts{};
    x->cost = total;
  }
}

bool LocalSearch::Related(int j, int k) const {
  if (!outs_[j].placed() || !outs_[k].placed()) return true;
  const auto& t = d_.snapshot().topology();
  for (const RankSlot& a : outs_[j].ranks) {
    for (const RankSlot& b : outs_[k].ranks) {
      if (t.AncestorAt(a.node, 0) == t.AncestorAt(b.node, 0)) return true;
    }
  }
  return false;
}

bool LocalSearch::Move(const std::vector<int>& order, int first_skip) {
  double before = 0;
  for (int j : order) before += cost_[j];
  std::vector<Outcome> saved;
  for (int j : order) {
    saved.push_back(outs_[j]);
    if (outs_[j].placed()) (void)d_.Give(reqs_[j], outs_[j]);
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
    if (after >= before - kCostEps) {  // costs are never negative: no gain possible
      ++done;
      break;
    }
  }
  if (done == order.size() && after < before - kCostEps) {
    for (size_t i = 0; i < order.size(); ++i) cost_[order[i]] = costs[i];
    return true;
  }
  for (size_t i = done; i-- > 0;) {
    const int j = order[i];
    if (outs_[j].placed()) (void)d_.Give(reqs_[j], outs_[j]);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    outs_[order[i]] = std::move(saved[i]);
    if (outs_[order[i]].placed() && !d_.Retake(reqs_[order[i]], outs_[order[i]])) {
      outs_[order[i]] = NotNow(reqs_[order[i]], 0);  // not expected: it fitted before
      cost_[order[i]] = d_.pricer().Unplaced(reqs_[order[i]]);
    }
  }
  return false;
}

double LocalSearch::Insert(int j, int skip) {
  const PlacementRequest& r = reqs_[j];
  struct Cand {
    double cost;
    int slack;
    int index;
  };
  cands_.clear();
  const auto& t = d_.work().topology();
  cap_.assign(t.NumNodes(), 0);
  for (int n : eligible_[j]) cap_[n] = NodeCapacity(d_.work(), n, r);
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
      const Cand x = {d_.pricer().Placed(r, c), cap_[n] - r.ranks, n};
      const int leaf = t.AncestorAt(n, 0);
      auto it = std::find_if(best.begin(), best.end(), [&](auto& b) { return b.first == leaf; });
      if (it == best.end()) {
        best.push_back({leaf, x});
      } else if (x.cost < it->second.cost - kCostEps ||
                 (x.cost <= it->second.cost + kCostEps && x.slack < it->second.slack)) {
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
      if (SwitchUpperBound(d_.work(), r, sw.id) < r.ranks) continue;
      NodeCounts c;
      if (FillBelow(d_.work(), r, sw.id, r.ranks, &c) && ValidGene(r, c)) cands_.push_back(c);
      if (FewestNodes(r, sw.id, &c) && ValidGene(r, c)) cands_.push_back(std::move(c));
    }
  }
  for (int i = static_cast<int>(order.size()); i < static_cast<int>(cands_.size()); ++i) {
    order.push_back({d_.pricer().Placed(r, cands_[i]), slack(cands_[i]), i});
  }
  std::sort(order.begin(), order.end(), [](const Cand& a, const Cand& b) {
    if (a.cost < b.cost - kCostEps || a.cost > b.cost + kCostEps) return a.cost < b.cost;
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
    if (d_.Take(r, cands_[c.index], &o)) {
      outs_[j] = std::move(o);
      return c.cost;
    }
  }
  outs_[j] = NotNow(r, 0);
  return d_.pricer().Unplaced(r);
}

bool LocalSearch::FewestNodes(const PlacementRequest& r, int sw, NodeCounts* out) {
  const auto& t = d_.work().topology();
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
          } else if (d_.pricer().Load(ln) >= d_.pricer().Load(lp)) {
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

}  // namespace tianshu::placement::internal
