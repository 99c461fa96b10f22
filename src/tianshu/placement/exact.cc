// The exact strategy: the batch placement as a mixed-integer program solved with COIN-OR CBC,
// for small instances, as the optimum the other strategies' gaps are measured against. It
// states EvaluateBatch's objective (objective.h) exactly:
//   variables  z_j in {0,1} (job j placed), x_jn in 0..cap_jn (its ranks on node n),
//              u_jn in {0,1} (n used), v_jb in {0,1} (switch block b used, below the root);
//   minimise   sum_j P*ranks_j*(1 - z_j) + sum_n x_jn*(w_c*slow_n + w_m*mem_jn)/ranks_j
//              + w_n*(c_0*sum_n u_jn + sum_b c_b*(1 + load_b)*v_jb - (c_0 + sum_levels c_l)*z_j)
//   subject to sum_n x_jn = ranks_j*z_j;  x_jn <= cap_jn*u_jn (= gpus_per_node*u_jn);
//              u_jn <= v_j,leaf(n);  v_jb <= v_j,parent(b);  single-node jobs: sum_n u_jn <= 1;
//              per node: whole GPUs, GPU share, CPU, memory and storage of all jobs fit.
// CBC starts from genetic's solution (so exact is never worse than it, nor than topology) and
// runs branch and bound with probing, Gomory, knapsack, MIR and clique cuts. The step budget
// is CBC's node limit; beyond it the best solution found is used and the outcome says it is
// not proven optimal; past max_variables, topology's placement is returned.
#include <cmath>
#include <coin/CbcHeuristicFPump.hpp>
#include <coin/CbcHeuristicLocal.hpp>
#include <coin/CbcModel.hpp>
#include <coin/CglClique.hpp>
#include <coin/CglGomory.hpp>
#include <coin/CglKnapsackCover.hpp>
#include <coin/CglMixedIntegerRounding2.hpp>
#include <coin/CglProbing.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/CoinPackedVector.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "tianshu/placement/fit.h"
#include "tianshu/placement/internal/builtin.h"
#include "tianshu/placement/internal/tree_search.h"
#include "tianshu/placement/objective.h"

namespace tianshu::placement::internal {
namespace {

class Exact final : public Strategy {
 public:
  explicit Exact(const StrategyOptions& o) : options_(o) {}
  std::string_view Name() const override { return "exact"; }

  Outcome Place(const ClusterState& s, const PlacementRequest& r) const override {
    return PlaceBatch(s, std::span<const PlacementRequest>(&r, 1)).front();
  }

  std::vector<Outcome> PlaceBatch(const ClusterState& s,
                                  std::span<const PlacementRequest> reqs) const override {
    const auto& topo = s.topology();
    const model::ResourceWeight& w = options_.weights;
    const std::vector<double> c = TierCosts(topo);
    const std::vector<double> slow = TypeSlowdowns(topo);
    const int levels = static_cast<int>(c.size()) - 1;
    const int jobs = static_cast<int>(reqs.size());

    std::vector<double> lb, ub, obj;
    std::vector<char> integer;
    auto add_col = [&](double lo, double hi, double cost, bool is_int) {
      lb.push_back(lo);
      ub.push_back(hi);
      obj.push_back(cost);
      integer.push_back(is_int);
      return static_cast<int>(lb.size()) - 1;
    };
    CoinPackedMatrix m(false, 0, 0);
    std::vector<CoinPackedVector> rows;
    std::vector<double> rlo, rhi;
    auto add_row = [&](CoinPackedVector v, double lo, double hi) {
      rows.push_back(std::move(v));
      rlo.push_back(lo);
      rhi.push_back(hi);
    };

    struct JobVars {
      int z = -1;
      std::vector<std::pair<int, int>> x;  // node, column (u = column + 1)
    };
    std::vector<JobVars> vars(jobs);
    std::vector<std::map<std::pair<int, int>, int>> blocks_of(jobs);
    // Per node: the x columns of every job, for capacity rows.
    std::map<int, std::vector<std::pair<int, int>>> node_x;  // node -> (job, column)
    double constant = 0;
    for (int j = 0; j < jobs; ++j) {
      const PlacementRequest& r = reqs[j];
      const double ranks = std::max(1, r.ranks);
      constant += kUnplacedPenalty * r.ranks;
      double base = c[0];
      for (int l = 0; l < levels; ++l) base += c[1 + l];
      vars[j].z = add_col(0, 1, -kUnplacedPenalty * r.ranks - w.network * base, true);
      CoinPackedVector demand;
      CoinPackedVector single;
      std::map<std::pair<int, int>, int>& block_col = blocks_of[j];  // (level, switch) -> v
      auto block = [&](int level, int sw) {
        auto it = block_col.find({level, sw});
        if (it != block_col.end()) return it->second;
        int col = add_col(0, 1, w.network * c[1 + level] * (1 + s.SwitchLoad(sw)), true);
        block_col[{level, sw}] = col;
        return col;
      };
      for (int n = 0; n < topo.NumNodes(); ++n) {
        const int cap = NodeCapacity(s, n, r);
        if (cap <= 0) continue;
        const auto& ty = topo.TypeOf(n);
        double mem = r.device_memory_bytes > 0 && ty.accelerator.memory_bytes > 0
                         ? static_cast<double>(r.device_memory_bytes) /
                               static_cast<double>(ty.accelerator.memory_bytes)
                         : 0;
        const int x =
            add_col(0, cap, (w.compute * slow[topo.nodes[n].type] + w.memory * mem) / ranks, true);
        const int u = add_col(0, 1, w.network * c[0], true);
        vars[j].x.push_back({n, x});
        node_x[n].push_back({j, x});
        demand.insert(x, 1);
        single.insert(u, 1);
        CoinPackedVector link;
        link.insert(x, 1);
        link.insert(u, -(r.gpus_per_node > 0 ? r.gpus_per_node : cap));
        if (r.gpus_per_node > 0) {
          add_row(link, 0, 0);
        } else {
          add_row(link, -1e30, 0);
        }
        CoinPackedVector only_if_placed;  // u_jn <= z_j
        only_if_placed.insert(u, 1);
        only_if_placed.insert(vars[j].z, -1);
        add_row(only_if_placed, -1e30, 0);
        if (levels > 0) {
          CoinPackedVector up;
          up.insert(u, 1);
          up.insert(block(0, topo.AncestorAt(n, 0)), -1);
          add_row(up, -1e30, 0);
        }
      }
      // v_jb <= v_j,parent(b).
      for (auto [key, col] : std::map<std::pair<int, int>, int>(block_col)) {
        auto [level, sw] = key;
        if (level + 1 >= levels) continue;
        int parent = topo.switches[sw].parent;
        while (parent >= 0 && topo.switches[parent].tier < level + 1)
          parent = topo.switches[parent].parent;
        if (parent < 0) continue;
        CoinPackedVector up;
        up.insert(col, 1);
        up.insert(block(level + 1, parent), -1);
        add_row(up, -1e30, 0);
      }
      demand.insert(vars[j].z, -r.ranks);
      add_row(demand, 0, 0);
      if (r.single_node) add_row(single, -1e30, 1);
    }
    if (static_cast<int>(lb.size()) > options_.exact.max_variables) {
      std::vector<Outcome> out = NewTopology(options_)->PlaceBatch(s, reqs);
      for (Outcome& o : out) o.reason += " (exact: instance too large, topology used)";
      return out;
    }
    // Node capacity rows.
    for (const auto& [n, cols] : node_x) {
      CoinPackedVector whole, share, cpu, mem, sto;
      bool any_cpu = false, any_mem = false, any_sto = false;
      for (auto [j, x] : cols) {
        const PlacementRequest& r = reqs[j];
        if (r.gpu_milli >= model::kMilliPerGpu) whole.insert(x, 1);
        if (r.gpu_milli > 0) share.insert(x, r.gpu_milli);
        if (r.cpu_milli_per_rank > 0) {
          cpu.insert(x, static_cast<double>(r.cpu_milli_per_rank));
          any_cpu = true;
        }
        if (r.memory_bytes_per_rank > 0) {
          mem.insert(x, static_cast<double>(r.memory_bytes_per_rank) / 1e6);
          any_mem = true;
        }
        if (r.storage_bps_per_node > 0) {
          sto.insert(x + 1, static_cast<double>(r.storage_bps_per_node) / 1e6);
          any_sto = true;
        }
      }
      if (whole.getNumElements() > 0) add_row(whole, -1e30, s.FreeWholeGpus(n));
      if (share.getNumElements() > 0) add_row(share, -1e30, static_cast<double>(s.FreeMilli(n)));
      if (any_cpu) add_row(cpu, -1e30, static_cast<double>(s.CpuFreeMilli(n)));
      if (any_mem) add_row(mem, -1e30, static_cast<double>(s.MemoryFreeBytes(n)) / 1e6);
      if (any_sto) add_row(sto, -1e30, static_cast<double>(s.StorageFreeBps(n)) / 1e6);
    }
    const int ncols = static_cast<int>(lb.size());
    m.setDimensions(0, ncols);
    for (const auto& row : rows) m.appendRow(row);

    OsiClpSolverInterface solver;
    solver.messageHandler()->setLogLevel(0);
    solver.loadProblem(m, lb.data(), ub.data(), obj.data(), rlo.data(), rhi.data());
    for (int i = 0; i < ncols; ++i) {
      if (integer[i]) solver.setInteger(i);
    }
    // Warm start: genetic's batch (itself never worse than topology's), written as a column
    // vector, so the optimum found is never worse than the heuristics even within the budget.
    std::vector<double> start(ncols, 0);
    {
      std::vector<Outcome> seed = NewGenetic(options_)->PlaceBatch(s, reqs);
      for (int j = 0; j < jobs; ++j) {
        if (!seed[j].placed()) continue;
        std::map<int, int> per_node;
        for (const RankSlot& slot : seed[j].ranks) ++per_node[slot.node];
        bool ok = true;
        for (auto [n, k] : per_node) {
          const int node = n;  // a structured binding cannot be captured before C++20 in clang 14
          auto it = std::find_if(vars[j].x.begin(), vars[j].x.end(),
                                 [&](auto& p) { return p.first == node; });
          if (it == vars[j].x.end()) {
            ok = false;
            break;
          }
        }
        if (!ok) continue;
        start[vars[j].z] = 1;
        for (auto [n, k] : per_node) {
          const int node = n;  // a structured binding cannot be captured before C++20 in clang 14
          auto it = std::find_if(vars[j].x.begin(), vars[j].x.end(),
                                 [&](auto& p) { return p.first == node; });
          start[it->second] = k;
          start[it->second + 1] = 1;
          for (int l = 0; l < levels; ++l) {
            auto b = blocks_of[j].find({l, topo.AncestorAt(n, l)});
            if (b != blocks_of[j].end()) start[b->second] = 1;
          }
        }
      }
    }
    double start_obj = 0;
    for (int i = 0; i < ncols; ++i) start_obj += obj[i] * start[i];
    CbcModel model(solver);
    model.setLogLevel(0);
    model.messageHandler()->setLogLevel(0);
    model.solver()->messageHandler()->setLogLevel(0);
    model.setMaximumNodes(options_.exact.max_nodes);
    model.setNumberThreads(0);
    model.setBestSolution(start.data(), ncols, start_obj, /*check=*/true);
    CglProbing probing;
    probing.setUsingObjective(true);
    probing.setMaxPass(3);
    probing.setMaxProbe(100);
    probing.setMaxLook(50);
    CglGomory gomory;
    CglKnapsackCover knapsack;
    CglMixedIntegerRounding2 mir;
    CglClique clique;
    clique.setStarCliqueReport(false);
    clique.setRowCliqueReport(false);
    model.addCutGenerator(&probing, -1, "Probing");
    model.addCutGenerator(&gomory, -1, "Gomory");
    model.addCutGenerator(&knapsack, -1, "Knapsack");
    model.addCutGenerator(&mir, -1, "MIR2");
    model.addCutGenerator(&clique, -1, "Clique");
    CbcHeuristicFPump pump(model);
    model.addHeuristic(&pump);
    CbcHeuristicLocal local(model);
    model.addHeuristic(&local);
    model.branchAndBound();
    const double* sol = model.bestSolution();
    const bool proven = model.isProvenOptimal();

    // Decode in batch order on a working copy.
    ClusterState work = s;
    std::vector<Outcome> out(jobs);
    for (int j = 0; j < jobs; ++j) {
      const PlacementRequest& r = reqs[j];
      NodeCounts counts;
      if (sol != nullptr && sol[vars[j].z] > 0.5) {
        for (auto [n, x] : vars[j].x) {
          int k = static_cast<int>(std::lround(sol[x]));
          if (k > 0) counts.push_back({n, k});
        }
      }
      Outcome o;
      if (!counts.empty()) o = FinishPlacement(work, r, counts);
      if (o.placed() && Apply(&work, r, o)) {
        if (!proven) o.reason = "exact: best found within the node budget, not proven optimal";
        out[j] = std::move(o);
      } else if (auto never = NeverFits(s, r)) {
        out[j] = *never;
      } else {
        out[j] = NotNow(r, 0);
        if (!proven) out[j].reason += " (exact: not proven optimal)";
      }
    }
    (void)constant;
    return out;
  }

 private:
  StrategyOptions options_;
};

}  // namespace

std::unique_ptr<Strategy> NewExact(const StrategyOptions& o) { return std::make_unique<Exact>(o); }

}  // namespace tianshu::placement::internal
