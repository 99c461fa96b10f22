// Decoding of the genetic strategy's chromosomes on a working copy of the snapshot: repairs
// every gene into a feasible gang (in batch order, given the jobs before it), takes and gives
// back placements (as drafts where every job takes whole GPUs) and materialises the winner.
//   GenomeDecoder decoder(snapshot, requests, options);
//   decoder.Decode(&genome);  // genome.outcomes, genome.cost; the working copy is restored
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "tianshu/placement/internal/genome.h"
#include "tianshu/placement/internal/pricer.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

// One PlaceBatch call's snapshot, the working state that every step restores, and the pricing.
// Holds references to the snapshot and the requests, which must outlive it. Not thread-safe.
class GenomeDecoder {
 public:
  GenomeDecoder(const ClusterState& s, std::span<const PlacementRequest> reqs,
                const StrategyOptions& o);

  const ClusterState& snapshot() const { return s_; }
  // The working state: the snapshot plus whatever is taken now.
  const ClusterState& work() const { return work_; }
  const Pricer& pricer() const { return pricer_; }

  // Repairs and decodes every gene in batch order; sets outcomes and cost.
  void Decode(Genome* x);

  // The outcomes of a genome as the other strategies build them (GPUs chosen by PickGpus,
  // ranks ordered), where decoding used drafts; nullopt if one no longer fits (not expected).
  std::optional<std::vector<Outcome>> Materialize(const Genome& x) const;

  // Places `counts` of r in work_. Where every job of the batch takes whole GPUs, a draft:
  // the first free GPUs of each node, taken directly (what a node can take next depends only
  // on how many are free, so decoding gives the same node counts; Materialize picks the GPUs
  // at the end). Else FinishPlacement and Apply.
  bool Take(const PlacementRequest& r, const NodeCounts& counts, Outcome* o);

  // Puts back an outcome taken before (a draft or a real one).
  bool Retake(const PlacementRequest& r, const Outcome& o);

  // Gives back an outcome taken before (a draft or a real one); false if part of it was not
  // taken.
  bool Give(const PlacementRequest& r, const Outcome& o);

  // Releases every placed outcome (reverse order), so work_ equals the snapshot again.
  void Restore(const std::vector<Outcome>& outs);

 private:
  // Undoes a partial draft.
  bool Fail(const PlacementRequest& r, Outcome* o);

  // The gene made feasible on work_: its nodes as far as they still take ranks, completed in the
  // smallest subtree around its first node, else the topology search; empty if nothing fits.
  NodeCounts Repair(const PlacementRequest& r, const NodeCounts& gene) const;

  const ClusterState& s_;
  std::span<const PlacementRequest> reqs_;
  ClusterState work_;
  Pricer pricer_;
  int jobs_;
  bool fast_ = true;  // every job takes whole GPUs: drafts (see Take)
};

}  // namespace tianshu::placement::internal
