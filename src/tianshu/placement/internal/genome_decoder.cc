#include "tianshu/placement/internal/genome_decoder.h"

#include <algorithm>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/tree_search.h"

namespace tianshu::placement::internal {

GenomeDecoder::GenomeDecoder(const ClusterState& s, std::span<const PlacementRequest> reqs,
                             const StrategyOptions& o)
    : s_(s), reqs_(reqs), work_(s), pricer_(s, o.weights), jobs_(static_cast<int>(reqs.size())) {
  for (const PlacementRequest& r : reqs) fast_ = fast_ && r.gpu_milli == model::kMilliPerGpu;
}

void GenomeDecoder::Decode(Genome* x) {
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

std::optional<std::vector<Outcome>> GenomeDecoder::Materialize(const Genome& x) const {
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

bool GenomeDecoder::Take(const PlacementRequest& r, const NodeCounts& counts, Outcome* o) {
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

bool GenomeDecoder::Fail(const PlacementRequest& r, Outcome* o) {
  if (!o->ranks.empty()) (void)Give(r, *o);
  *o = NotNow(r, 0);
  return false;
}

bool GenomeDecoder::Retake(const PlacementRequest& r, const Outcome& o) {
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
                               counts[p].second * r.memory_bytes_per_rank, r.storage_bps_per_node);
      }
      for (const RankSlot& slot : o.ranks) (void)work_.ReturnGpu(slot.gpu, model::kMilliPerGpu);
      return false;
    }
  }
  return true;
}

bool GenomeDecoder::Give(const PlacementRequest& r, const Outcome& o) {
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

void GenomeDecoder::Restore(const std::vector<Outcome>& outs) {
  for (int j = jobs_ - 1; j >= 0; --j) {
    if (outs[j].placed() && !Give(reqs_[j], outs[j])) {
      work_ = s_;
      return;
    }
  }
}

NodeCounts GenomeDecoder::Repair(const PlacementRequest& r, const NodeCounts& gene) const {
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

}  // namespace tianshu::placement::internal
