#include "tianshu/placement/groups.h"

#include <algorithm>
#include <map>
#include <string>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/leaves.h"

namespace tianshu::placement {
namespace {

using model::GroupScope;
using model::RankGroup;

// The domain of a slot at a scope: nvlink -> (node, island), node -> node, leaf -> leaf.
int64_t DomainOf(const model::Topology& t, const RankSlot& s, GroupScope scope) {
  switch (scope) {
    case GroupScope::kNvlink: {
      const int local = s.gpu >= 0 ? s.gpu - t.nodes[s.node].first_gpu : 0;
      return int64_t{s.node} * 4096 + t.TypeOf(s.node).NvlinkIsland(local);
    }
    case GroupScope::kNode:
      return s.node;
    case GroupScope::kLeaf:
      return t.nodes[s.node].leaf;
  }
  return s.node;
}

// Orders `slots` so that the levels 0..level hold, or returns false.
bool Arrange(const model::Topology& t, std::span<const RankGroup> groups, int level,
             std::vector<RankSlot>* slots) {
  if (level < 0) {
    std::sort(slots->begin(), slots->end());  // node, then GPU: contiguous inside islands
    return true;
  }
  const RankGroup& g = groups[static_cast<size_t>(level)];
  std::vector<int64_t> order;  // domains, by first appearance
  std::map<int64_t, std::vector<RankSlot>> by_domain;
  for (const RankSlot& s : *slots) {
    const int64_t d = DomainOf(t, s, g.within);
    auto [it, fresh] = by_domain.try_emplace(d);
    if (fresh) order.push_back(d);
    it->second.push_back(s);
  }
  std::vector<RankSlot> out;
  out.reserve(slots->size());
  for (int64_t d : order) {
    std::vector<RankSlot>& part = by_domain[d];
    if (part.size() % static_cast<size_t>(g.size) != 0) return false;
    if (!Arrange(t, groups, level - 1, &part)) return false;
    out.insert(out.end(), part.begin(), part.end());
  }
  *slots = std::move(out);
  return true;
}

int MaxDomainGpus(const model::Topology& t, GroupScope scope) {
  int best = 0;
  switch (scope) {
    case GroupScope::kNvlink:
      // The islands DomainOf counts (ServerType::NvlinkIsland: nvlink_domain_size GPUs).
      for (const auto& ty : t.types) {
        best = std::max(best, std::min(std::max(1, ty.nvlink_domain_size), ty.gpus_per_node));
      }
      break;
    case GroupScope::kNode:
      for (const auto& n : t.nodes) best = std::max(best, t.GpusOn(n.id));
      break;
    case GroupScope::kLeaf:
      for (const auto& sw : t.switches) {
        if (!sw.nodes.empty()) best = std::max(best, sw.gpus);
      }
      if (best == 0) {  // no switches: one flat domain
        for (const auto& n : t.nodes) best += t.GpusOn(n.id);
      }
      break;
  }
  return best;
}

// The group-aware search. Units: whole groups of one level inside one domain of its scope.
class GroupSearch {
 public:
  GroupSearch(const model::ClusterState& s, const PlacementRequest& r)
      : s_(s), t_(s.topology()), r_(r), groups_(r.groups) {}

  std::optional<std::vector<RankSlot>> Run() {
    // Free slots per node (GPUs with room for one rank, usable as the node's filters allow).
    PlacementRequest one = r_;
    one.ranks = 1 << 20;
    one.gpus_per_node = 0;
    one.single_node = false;
    for (const auto& n : t_.nodes) {
      int cap = r_.gpus_per_node > 0 ? NodeCapacity(s_, n.id, r_) : NodeCapacity(s_, n.id, one);
      if (cap <= 0) continue;
      std::vector<int> gpus;
      const int first = n.first_gpu, count = t_.GpusOn(n.id);
      for (int g = first; g < first + count; ++g) {
        if (s_.GpuFreeMilli(g) >= r_.gpu_milli) gpus.push_back(g);
      }
      if (gpus.empty()) continue;
      node_cap_[n.id] = std::min<int>(cap, static_cast<int>(gpus.size()));
      free_[n.id] = std::move(gpus);
    }
    const int top = static_cast<int>(groups_.size()) - 1;
    const int need = r_.ranks / groups_[static_cast<size_t>(top)].size;
    std::vector<RankSlot> out;
    if (!Fill(top, AllSlots(), need, &out)) return std::nullopt;
    return out;
  }

 private:
  std::vector<RankSlot> AllSlots() const {
    std::vector<RankSlot> all;
    for (const auto& [node, gpus] : free_) {
      for (int g : gpus) all.push_back({.node = node, .gpu = g});
    }
    return all;
  }

  // Whole groups of `level` that `slots` (all in one domain of the level above) can hold.
  int Units(int level, const std::vector<RankSlot>& slots) const {
    if (level < 0) return static_cast<int>(slots.size());
    const RankGroup& g = groups_[static_cast<size_t>(level)];
    const int inner = level > 0 ? groups_[static_cast<size_t>(level - 1)].size : 1;
    int units = 0;
    for (const auto& [d, part] : Split(level, slots)) {
      units += Units(level - 1, part) * inner / g.size;
    }
    return units;
  }

  std::map<int64_t, std::vector<RankSlot>> Split(int level,
                                                 const std::vector<RankSlot>& slots) const {
    std::map<int64_t, std::vector<RankSlot>> by;
    for (const RankSlot& s : slots) {
      by[DomainOf(t_, s, groups_[static_cast<size_t>(level)].within)].push_back(s);
    }
    return by;
  }

  // Takes `need` whole groups of `level` from `slots`, appending their ranks to `out`.
  bool Fill(int level, const std::vector<RankSlot>& slots, int need, std::vector<RankSlot>* out) {
    if (need <= 0) return true;
    if (level < 0) {
      // `need` single ranks from one innermost domain: respect each node's capacity.
      std::vector<RankSlot> take;
      for (const RankSlot& s : slots) {
        if (static_cast<int>(take.size()) == need) break;
        if (used_[s.node] >= node_cap_[s.node]) continue;
        ++used_[s.node];
        take.push_back(s);
      }
      if (static_cast<int>(take.size()) < need) {
        for (const RankSlot& s : take) --used_[s.node];
        return false;
      }
      std::sort(take.begin(), take.end());
      out->insert(out->end(), take.begin(), take.end());
      return true;
    }
    const RankGroup& g = groups_[static_cast<size_t>(level)];
    const int inner = level > 0 ? groups_[static_cast<size_t>(level - 1)].size : 1;
    const int per_group = g.size / inner;  // inner units per group of this level
    // Domains of this level with the groups each can hold; the fullest domain that suffices
    // on its own first (best fit keeps large holes whole), else the largest ones.
    struct Dom {
      int64_t id;
      int units;
      std::vector<RankSlot> slots;
    };
    std::vector<Dom> doms;
    for (auto& [d, part] : Split(level, slots)) {
      int u = Units(level - 1, part) / per_group;
      if (u > 0) doms.push_back({d, u, std::move(part)});
    }
    std::sort(doms.begin(), doms.end(), [](const Dom& a, const Dom& b) {
      return std::tie(b.units, a.id) < std::tie(a.units, b.id);  // most units first
    });
    auto suffices =
        std::find_if(doms.rbegin(), doms.rend(), [&](const Dom& d) { return d.units >= need; });
    if (suffices != doms.rend()) std::iter_swap(doms.begin(), std::prev(suffices.base()));
    int left = need;
    for (Dom& d : doms) {
      int take = std::min(left, d.units);
      for (int k = 0; k < take; ++k) {
        const size_t mark = out->size();
        if (!Fill(level - 1, d.slots, per_group, out)) {
          // Capacity shared between domains ran out: give back this group's ranks.
          for (size_t i = mark; i < out->size(); ++i) --used_[(*out)[i].node];
          out->resize(mark);
          break;
        }
        // The ranks taken are no longer free in this domain.
        std::vector<RankSlot> rest;
        for (const RankSlot& s : d.slots) {
          if (std::find(out->begin() + static_cast<std::ptrdiff_t>(mark), out->end(), s) ==
              out->end()) {
            rest.push_back(s);
          }
        }
        d.slots = std::move(rest);
        --left;
      }
      if (left == 0) return true;
    }
    return false;
  }

  const model::ClusterState& s_;
  const model::Topology& t_;
  const PlacementRequest& r_;
  std::span<const RankGroup> groups_;
  std::map<int, std::vector<int>> free_;
  std::map<int, int> node_cap_, used_;
};

class Grouped final : public Strategy {
 public:
  explicit Grouped(std::unique_ptr<Strategy> inner) : inner_(std::move(inner)) {}
  std::string_view Name() const override { return inner_->Name(); }

  // The inner strategy's rule judges the whole gang; a grouped one it places group by group.
  std::optional<Outcome> NeverPlaces(const ClusterState& idle,
                                     const PlacementRequest& r) const override {
    return r.groups.empty() ? inner_->NeverPlaces(idle, r) : std::nullopt;
  }

  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    const int limit = LeafLimit(s, r);
    if (limit <= 0) return PlaceInGroups(s, r);
    if (auto never = NeverWithinLeaves(s, r)) return *never;
    Outcome o = PlaceInGroups(s, r);
    if (!o.placed() || WithinLeaves(s.topology(), limit, o.ranks)) return o;
    return PlaceWithinLeaves(s, r, limit,
                             [&](const ClusterState& only) { return PlaceInGroups(only, r); });
  }

  std::vector<Outcome> PlaceBatch(const ClusterState& s,
                                  std::span<const PlacementRequest> rs) const override {
    std::vector<Outcome> outs = inner_->PlaceBatch(s, rs);
    if (std::none_of(rs.begin(), rs.end(), [](const auto& r) { return r.Shaped(); })) {
      return outs;
    }
    // Walk the batch in order on a working copy: keep outcomes that hold and still fit,
    // re-place the others alone.
    ClusterState w = s;
    for (size_t i = 0; i < rs.size(); ++i) {
      Outcome& o = outs[i];
      if (o.placed() && !rs[i].groups.empty() && !GroupsHold(s.topology(), rs[i].groups, o.ranks)) {
        if (auto ranks = Regroup(s.topology(), rs[i].groups, o.ranks)) {
          o.ranks = std::move(*ranks);
        } else {
          o = PlaceGrouped(w, rs[i]);
        }
      }
      if (o.placed()) {
        const int limit = LeafLimit(s, rs[i]);
        if (limit > 0 && !WithinLeaves(s.topology(), limit, o.ranks)) o = Place(w, rs[i]);
      }
      if (o.placed() && !Apply(&w, rs[i], o)) {
        o = Place(w, rs[i]);
        if (o.placed() && !Apply(&w, rs[i], o)) o = NotNow(rs[i], 0);
      }
    }
    return outs;
  }

 private:
  // The inner strategy's placement where the groups hold (or hold reordered), else the
  // group-aware search's.
  Outcome PlaceInGroups(const ClusterState& s, const PlacementRequest& r) const {
    Outcome o = inner_->Place(s, r);
    if (r.groups.empty() || o.kind == OutcomeKind::kCanNeverFit) return o;
    if (o.placed()) {
      if (GroupsHold(s.topology(), r.groups, o.ranks)) return o;
      if (auto ranks = Regroup(s.topology(), r.groups, o.ranks)) {
        o.ranks = std::move(*ranks);
        return o;
      }
    }
    Outcome g = PlaceGrouped(s, r);
    if (g.kind == OutcomeKind::kCanNeverFit || g.placed()) return g;
    return o.placed() ? g : o;  // nothing fits now either way: the strategy's own reason
  }

  std::unique_ptr<Strategy> inner_;
};

}  // namespace

bool GroupsHold(const model::Topology& t, std::span<const RankGroup> groups,
                std::span<const RankSlot> ranks) {
  for (const RankGroup& g : groups) {
    if (g.size <= 0 || ranks.size() % static_cast<size_t>(g.size) != 0) return false;
    for (size_t b = 0; b < ranks.size(); b += static_cast<size_t>(g.size)) {
      const int64_t d = DomainOf(t, ranks[b], g.within);
      for (size_t i = b + 1; i < b + static_cast<size_t>(g.size); ++i) {
        if (DomainOf(t, ranks[i], g.within) != d) return false;
      }
    }
  }
  return true;
}

std::optional<std::vector<RankSlot>> Regroup(const model::Topology& t,
                                             std::span<const RankGroup> groups,
                                             std::span<const RankSlot> ranks) {
  std::vector<RankSlot> slots(ranks.begin(), ranks.end());
  if (groups.empty()) return slots;
  if (!Arrange(t, groups, static_cast<int>(groups.size()) - 1, &slots)) return std::nullopt;
  if (!GroupsHold(t, groups, slots)) return std::nullopt;
  return slots;
}

Outcome PlaceGrouped(const ClusterState& s, const PlacementRequest& r) {
  const model::Topology& t = s.topology();
  for (const RankGroup& g : r.groups) {
    const int most = MaxDomainGpus(t, g.within);
    if (g.size > most) {
      return Outcome{.kind = OutcomeKind::kCanNeverFit,
                     .ranks = {},
                     .reason = "a group of " + std::to_string(g.size) + " ranks within one " +
                               std::string(model::GroupScopeName(g.within)) +
                               " cannot fit: the largest holds " + std::to_string(most) + " GPUs"};
    }
  }
  if (r.groups.empty() || r.ranks <= 0) return NotNow(r, 0);
  GroupSearch search(s, r);
  auto ranks = search.Run();
  if (!ranks || !GroupsHold(t, r.groups, *ranks)) {
    const auto& outer = r.groups.back();
    return Outcome{.kind = OutcomeKind::kDoesNotFitNow,
                   .ranks = {},
                   .reason = "no free placement keeps every " + std::to_string(outer.size) +
                             "-rank group within one " +
                             std::string(model::GroupScopeName(outer.within)) + " now"};
  }
  if (r.gpus_per_node > 0) {  // each node used holds exactly gpus_per_node ranks
    std::map<int, int> per_node;
    for (const RankSlot& slot : *ranks) ++per_node[slot.node];
    for (const auto& [node, n] : per_node) {
      if (n != r.gpus_per_node) {
        return Outcome{.kind = OutcomeKind::kDoesNotFitNow,
                       .ranks = {},
                       .reason = "no free placement of whole nodes keeps the groups now"};
      }
    }
  }
  Outcome o = PlacedOutcome(std::move(*ranks));
  o.reason = "placed by the group-aware search";
  return o;
}

std::unique_ptr<Strategy> HonourConstraints(std::unique_ptr<Strategy> inner) {
  return std::make_unique<Grouped>(std::move(inner));
}

}  // namespace tianshu::placement
