#include "tianshu/server/network_map.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

namespace tianshu::server {

using nlohmann::json;

namespace {

constexpr const char* kPrefix = "net/pair/";

bool Finite(double v) { return std::isfinite(v) && v >= 0 && v < 1e6; }

}  // namespace

void NetworkMap::Record(MeasuredPair p) {
  auto k = Key(p.a, p.b);
  p.a = k.first;
  p.b = k.second;
  p.failures = 0;
  p.failed_ms = 0;
  auto was = pairs_.find(k);
  p.previous_gbps = was != pairs_.end() && was->second.measured_ms > 0 ? was->second.busbw_gbps
                                                                       : MeasuredPair::kNoFigure;
  pairs_[k] = std::move(p);
  ++version_;
}

void NetworkMap::RecordFailure(const std::string& a, const std::string& b, int64_t now_ms) {
  auto k = Key(a, b);
  MeasuredPair& p = pairs_[k];
  p.a = k.first;
  p.b = k.second;
  p.failures = std::min(p.failures + 1, 1000);
  p.failed_ms = now_ms;
  ++version_;
}

const MeasuredPair* NetworkMap::Find(const std::string& a, const std::string& b) const {
  auto it = pairs_.find(Key(a, b));
  return it == pairs_.end() ? nullptr : &it->second;
}

std::vector<std::string> NetworkMap::ForgetNode(const std::string& node) {
  std::vector<std::string> keys;
  std::erase_if(pairs_, [&](const auto& kv) {
    const bool of = kv.first.first == node || kv.first.second == node;
    if (of) keys.push_back(MetaKey(kv.first.first, kv.first.second));
    return of;
  });
  ++version_;
  return keys;
}

bool NetworkMap::IsMetaKey(const std::string& key) { return key.starts_with(kPrefix); }

std::string NetworkMap::MetaKey(const std::string& a, const std::string& b) {
  auto k = Key(a, b);
  return kPrefix + k.first + "|" + k.second;
}

std::string NetworkMap::MetaValue(const std::string& a, const std::string& b) const {
  const MeasuredPair* p = Find(a, b);
  if (!p) return "";  // an empty value deletes nothing but reads as absent
  json row{{"busbw_gbps", p->busbw_gbps},       {"forward_gbps", p->forward_gbps},
           {"backward_gbps", p->backward_gbps}, {"method", p->method},
           {"measured_ms", p->measured_ms},     {"failures", p->failures},
           {"failed_ms", p->failed_ms}};
  if (p->previous_gbps >= 0) row["previous_gbps"] = p->previous_gbps;
  return row.dump();
}

std::vector<std::string> NetworkMap::Load(const std::map<std::string, std::string>& meta) {
  std::vector<std::string> skipped;
  for (auto it = meta.lower_bound(kPrefix); it != meta.end() && IsMetaKey(it->first); ++it) {
    if (it->second.empty()) continue;
    const std::string names = it->first.substr(std::string(kPrefix).size());
    const size_t bar = names.find('|');
    json d = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    MeasuredPair p;
    bool ok = bar != std::string::npos && bar > 0 && bar + 1 < names.size() && d.is_object();
    if (ok) {
      p.a = names.substr(0, bar);
      p.b = names.substr(bar + 1);
      auto num = [&](const char* k) {
        auto v = d.find(k);
        return v != d.end() && v->is_number() ? v->get<double>() : -1.0;
      };
      p.busbw_gbps = num("busbw_gbps");
      p.forward_gbps = num("forward_gbps");
      p.backward_gbps = num("backward_gbps");
      // Absent in rows written before it (read as none: such a pair's next figure is judged
      // alone); present, it must be a figure.
      p.previous_gbps =
          d.contains("previous_gbps") ? num("previous_gbps") : MeasuredPair::kNoFigure;
      const double measured = num("measured_ms"), failures = num("failures"),
                   failed = num("failed_ms");
      ok = Finite(p.busbw_gbps) && Finite(p.forward_gbps) && Finite(p.backward_gbps) &&
           (!d.contains("previous_gbps") || Finite(p.previous_gbps)) && measured >= 0 &&
           failures >= 0 && failed >= 0 && d.value("method", json()).is_string();
      if (ok) {
        p.method = d["method"].get<std::string>().substr(0, 32);
        p.measured_ms = static_cast<int64_t>(measured);
        p.failures = static_cast<int>(std::min(failures, 1000.0));
        p.failed_ms = static_cast<int64_t>(failed);
      }
    }
    if (!ok) {
      skipped.push_back(it->first);
      continue;
    }
    pairs_[Key(p.a, p.b)] = p;
  }
  ++version_;
  return skipped;
}

std::vector<std::pair<std::string, std::string>> NetworkMap::CoverPairs(
    const std::vector<ProbeNode>& nodes, int full_mesh_max_nodes, int64_t round) {
  std::map<std::string, std::vector<std::string>> leaves;
  for (const auto& n : nodes) leaves[n.leaf].push_back(n.name);
  std::set<std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& a, const std::string& b) {
    if (a != b) out.insert(Key(a, b));
  };
  const auto r = static_cast<size_t>(std::max<int64_t>(round, 0));
  for (auto& [leaf, members] : leaves) {
    std::sort(members.begin(), members.end());
    const size_t n = members.size();
    if (n <= static_cast<size_t>(std::max(2, full_mesh_max_nodes))) {
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) add(members[i], members[j]);
      }
      continue;
    }
    // A ring covers every node's link twice (a slow pair points at one of its two nodes, the
    // other pair of each tells which); the chord moves on so that rounds cover more pairs.
    const size_t chord = 2 + r % (n - 2);
    for (size_t i = 0; i < n; ++i) {
      add(members[i], members[(i + 1) % n]);
      add(members[i], members[(i + chord) % n]);
    }
  }
  for (auto x = leaves.begin(); x != leaves.end(); ++x) {
    for (auto y = std::next(x); y != leaves.end(); ++y) {
      add(x->second[r % x->second.size()], y->second[(r / x->second.size()) % y->second.size()]);
    }
  }
  return {out.begin(), out.end()};
}

std::vector<std::string> LinkRateChanges(const std::optional<wire::NetworkSample>& before,
                                         const std::optional<wire::NetworkSample>& after) {
  std::vector<std::string> out;
  if (!before || !after) return out;
  std::map<std::string, int64_t> was;  // a name twice in a sample: its first
  for (const wire::LinkSample& l : before->links) was.emplace(l.name, l.speed_bps);
  auto rate = [](int64_t bps) {
    if (bps <= 0) return std::string("no line rate (down)");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g Gbit/s", static_cast<double>(bps) / 1e9);
    return std::string(buf);
  };
  for (const wire::LinkSample& l : after->links) {
    auto it = was.find(l.name);
    if (it == was.end()) continue;  // new, or named twice (its first was compared)
    const int64_t had = it->second;
    was.erase(it);
    if (had <= 0 || had == l.speed_bps) continue;
    out.push_back(l.name + " " + rate(had) + " -> " + rate(l.speed_bps));
  }
  return out;
}

std::optional<std::pair<std::string, std::string>> NetworkMap::NextProbe(
    const std::vector<ProbeNode>& nodes, const NominalOf& nominal,
    const model::NetworkConfig& config, int64_t now_ms) const {
  const int64_t interval_ms = std::max<int64_t>(config.probe_interval_s, 1) * 1000;
  std::map<std::string, const ProbeNode*> by_name;
  std::vector<std::string> names;
  for (const auto& n : nodes) {
    by_name[n.name] = &n;
    names.push_back(n.name);
  }
  // Slow on one figure: measured again soon, before placement acts on it.
  const int64_t minute = now_ms / 60'000;
  if (recheck_.version != version_ || recheck_.nodes != nodes.size() || recheck_.minute != minute) {
    recheck_ = {.version = version_, .nodes = nodes.size(), .minute = minute, .pairs = {}};
    for (const PairView& v : View(names, nominal, config, now_ms)) {
      if (v.slow && !v.confirmed) recheck_.pairs.insert(Key(v.measured.a, v.measured.b));
    }
  }
  const auto& recheck = recheck_.pairs;
  std::optional<std::pair<std::string, std::string>> best;
  int64_t best_due = 0;
  // The round's cover, and the pairs to check again (a chord of an earlier round among them).
  auto candidates = CoverPairs(nodes, config.full_mesh_max_nodes, now_ms / interval_ms);
  const auto covered = static_cast<std::ptrdiff_t>(candidates.size());  // sorted
  for (const auto& k : recheck) {
    if (!std::binary_search(candidates.begin(), candidates.begin() + covered, k)) {
      candidates.push_back(k);
    }
  }
  for (const auto& [a, b] : candidates) {
    const ProbeNode& na = *by_name.at(a);
    const ProbeNode& nb = *by_name.at(b);
    if (!na.idle || !nb.idle) continue;
    const MeasuredPair* p = Find(a, b);
    int64_t due = 0;  // never measured: due since forever
    if (p) {
      const int64_t changed = std::max(na.changed_ms, nb.changed_ms);
      const int64_t wait_ms =
          recheck.contains(Key(a, b)) ? std::min(kRecheckMs, interval_ms) : interval_ms;
      due = p->measured_ms > 0 && p->measured_ms >= changed ? p->measured_ms + wait_ms : 0;
      if (p->failures > 0) {
        due = std::max(due, p->failed_ms + interval_ms * std::min(p->failures, 8));
      }
    }
    if (due > now_ms) continue;
    if (!best || due < best_due) {
      best = {a, b};
      best_due = due;
    }
  }
  return best;
}

std::vector<PairView> NetworkMap::View(const std::vector<std::string>& nodes,
                                       const NominalOf& nominal, const model::NetworkConfig& config,
                                       int64_t now_ms) const {
  const std::set<std::string> known(nodes.begin(), nodes.end());
  std::vector<PairView> out;
  std::map<std::string, double> best;  // class -> best fresh figure
  for (const auto& [k, p] : pairs_) {
    if (!known.contains(k.first) || !known.contains(k.second)) continue;
    PairView v;
    v.measured = p;
    v.nominal = nominal(k.first, k.second);
    v.age_s = p.measured_ms > 0 ? static_cast<double>(now_ms - p.measured_ms) / 1000.0 : 0;
    v.stale = p.measured_ms <= 0 || v.age_s > static_cast<double>(config.measured_ttl_s);
    if (!v.stale) best[v.nominal.klass] = std::max(best[v.nominal.klass], p.busbw_gbps);
    out.push_back(std::move(v));
  }
  for (PairView& v : out) {
    v.class_best_gbps = best[v.nominal.klass];
    const double line = config.slow_link_ratio * v.class_best_gbps;
    v.slow = !v.stale && v.measured.busbw_gbps < line;
    v.confirmed = v.slow && v.measured.previous_gbps >= 0 && v.measured.previous_gbps < line;
    if (!v.stale && v.class_best_gbps > 0) {
      v.effective_gbps = v.nominal.gbps * std::min(1.0, v.measured.busbw_gbps / v.class_best_gbps);
    }
  }
  return out;
}

std::map<std::string, std::string> NetworkMap::MeasuredLeaves(const std::vector<ProbeNode>& nodes,
                                                              const NominalOf& nominal,
                                                              const model::NetworkConfig& config,
                                                              int64_t now_ms) const {
  std::vector<std::string> names;
  std::map<std::string, size_t> index;
  for (const auto& n : nodes) {
    index[n.name] = names.size();
    names.push_back(n.name);
  }
  // Union-find over the fresh pairs inside one nominal leaf that are not slow; the confirmed
  // slow ones are the evidence that keeps two of those groups apart. A pair slow on one figure
  // is no evidence either way until its second (NextProbe measures it again soon).
  std::vector<size_t> parent(names.size());
  std::iota(parent.begin(), parent.end(), size_t{0});
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<bool> measured(names.size(), false);
  std::vector<std::pair<size_t, size_t>> slow;
  for (const PairView& v : View(names, nominal, config, now_ms)) {
    if (v.stale) continue;
    const size_t a = index.at(v.measured.a), b = index.at(v.measured.b);
    if (nodes[a].leaf != nodes[b].leaf) continue;
    measured[a] = measured[b] = true;
    if (v.confirmed) {
      slow.emplace_back(a, b);
    } else if (!v.slow) {
      parent[find(a)] = find(b);
    }
  }
  std::set<std::pair<size_t, size_t>> apart;  // roots a confirmed slow pair lies between
  for (auto [a, b] : slow) {
    const size_t x = find(a), y = find(b);
    if (x != y) apart.insert({std::min(x, y), std::max(x, y)});
  }
  std::map<std::string, std::map<size_t, std::vector<size_t>>> groups;  // leaf -> root -> nodes
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (measured[i]) groups[nodes[i].leaf][find(i)].push_back(i);
  }
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < nodes.size(); ++i) out[nodes[i].name] = nodes[i].leaf;
  for (auto& [leaf, roots] : groups) {
    if (roots.size() < 2) continue;
    auto by_name = [&](size_t x, size_t y) { return names[x] < names[y]; };
    std::vector<std::pair<size_t, std::vector<size_t>>> parts(roots.begin(), roots.end());
    for (auto& [root, members] : parts) std::sort(members.begin(), members.end(), by_name);
    // Largest first, then by first name: stable names across calls.
    auto larger = [&](const std::vector<size_t>& x, const std::vector<size_t>& y) {
      if (x.size() != y.size()) return x.size() > y.size();
      return names[x.front()] < names[y.front()];
    };
    std::sort(parts.begin(), parts.end(),
              [&](const auto& x, const auto& y) { return larger(x.second, y.second); });
    // Groups nothing measured between say nothing of: each joins the first earlier group with
    // no confirmed slow pair to it (two fast pairs probed apart do not split a leaf).
    std::vector<std::vector<size_t>> group_roots, group_nodes;
    for (const auto& [root, members] : parts) {
      auto fits = [&, r = root](const std::vector<size_t>& rs) {
        return std::none_of(rs.begin(), rs.end(), [&](size_t o) {
          return apart.contains({std::min(r, o), std::max(r, o)});
        });
      };
      size_t g = 0;
      while (g < group_roots.size() && !fits(group_roots[g])) ++g;
      if (g == group_roots.size()) {
        group_roots.emplace_back();
        group_nodes.emplace_back();
      }
      group_roots[g].push_back(root);
      group_nodes[g].insert(group_nodes[g].end(), members.begin(), members.end());
    }
    if (group_nodes.size() < 2) continue;
    for (auto& g : group_nodes) std::sort(g.begin(), g.end(), by_name);
    std::sort(group_nodes.begin(), group_nodes.end(), larger);
    for (size_t k = 0; k < group_nodes.size(); ++k) {
      for (size_t i : group_nodes[k]) out[names[i]] = leaf + "~" + std::to_string(k + 1);
    }
    for (size_t i = 0; i < nodes.size(); ++i) {  // nothing says they are slow: the largest
      if (nodes[i].leaf == leaf && !measured[i]) out[names[i]] = leaf + "~1";
    }
  }
  return out;
}

}  // namespace tianshu::server
