// The genetic strategy's price of one job: EvaluateBatch's cost (objective.h) of a job's node
// counts, with the tier costs, the type slowdowns and the snapshot's switch loads computed once.
//   Pricer pricer(snapshot, options.weights);
//   double cost = gene.empty() ? pricer.Unplaced(r) : pricer.Placed(r, gene);
#pragma once

#include <vector>

#include "tianshu/placement/internal/tree_search.h"
#include "tianshu/placement/objective.h"
#include "tianshu/placement/strategy.h"

namespace tianshu::placement::internal {

// EvaluateBatch's cost of one job (objective.h), with the tier costs, the slowdowns and the
// snapshot's switch loads computed once. Not thread-safe (Placed reuses a scratch vector).
class Pricer {
 public:
  Pricer(const ClusterState& s, const model::ResourceWeight& w);

  // The snapshot's load of switch `sw` (ClusterState::SwitchLoad).
  double Load(int sw) const { return load_[sw]; }
  // The cost of leaving r out of the batch.
  double Unplaced(const PlacementRequest& r) const { return kUnplacedPenalty * r.ranks; }
  // The cost of r on `counts` (node, ranks); a node may appear more than once.
  double Placed(const PlacementRequest& r, const NodeCounts& counts) const;
  // The cost of an outcome, placed or not.
  double Of(const PlacementRequest& r, const Outcome& o) const;

 private:
  const model::Topology& t_;
  model::ResourceWeight w_;
  std::vector<double> c_, slow_, load_;
  int levels_ = 0;
  mutable std::vector<int> blocks_;
};

}  // namespace tianshu::placement::internal
