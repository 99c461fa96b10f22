#include "tianshu/placement/openb.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tianshu/base/csv.h"
#include "tianshu/base/data_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/placement/fgd.h"
#include "tianshu/placement/internal/random.h"

namespace tianshu::placement {
namespace {

// A CSV's header and rows (base/csv.h); `lines[i]` is where row i starts in the file.
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;
  int Col(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    return -1;
  }
};

Result<Csv> ReadCsv(const std::string& path) {
  auto text = ReadDataFile(path);
  if (!text) return std::unexpected(text.error());
  auto records = ParseCsv(path, *text);
  if (!records) return std::unexpected(records.error().ToError());
  if (records->empty()) return Fail(path, ": empty file");
  Csv csv;
  csv.header = std::move(records->front().fields);
  for (size_t i = 1; i < records->size(); ++i) {
    csv.rows.push_back(std::move((*records)[i].fields));
    csv.lines.push_back((*records)[i].line);
  }
  return csv;
}

Result<int64_t> Int(const std::string& path, int line, const std::string& field,
                    const std::string& text) {
  int64_t v = 0;
  if (text.empty() || text == "nan") return 0;
  if (!ParseInt64(text, &v) || v < 0) {
    return Fail(path, ":", std::to_string(line), ": ", field, ": expected a whole number, got '",
                text, "'");
  }
  return v;
}

}  // namespace

Result<std::vector<OpenbNode>> ReadOpenbNodes(const std::string& path) {
  auto csv = ReadCsv(path);
  if (!csv) return std::unexpected(csv.error());
  const int sn = csv->Col("sn"), cpu = csv->Col("cpu_milli"), mem = csv->Col("memory_mib"),
            gpu = csv->Col("gpu"), model = csv->Col("model");
  if (sn < 0 || cpu < 0 || mem < 0 || gpu < 0 || model < 0) {
    return Fail(path, ": expected columns sn,cpu_milli,memory_mib,gpu,model");
  }
  std::vector<OpenbNode> out;
  for (size_t i = 0; i < csv->rows.size(); ++i) {
    const auto& r = csv->rows[i];
    if (static_cast<int>(r.size()) < static_cast<int>(csv->header.size())) {
      return Fail(path, ":", std::to_string(csv->lines[i]), ": too few fields");
    }
    OpenbNode n;
    n.name = r[sn];
    auto c = Int(path, csv->lines[i], "cpu_milli", r[cpu]);
    auto m = Int(path, csv->lines[i], "memory_mib", r[mem]);
    auto g = Int(path, csv->lines[i], "gpu", r[gpu]);
    if (!c) return std::unexpected(c.error());
    if (!m) return std::unexpected(m.error());
    if (!g) return std::unexpected(g.error());
    n.cpu_milli = *c;
    n.memory_mib = *m;
    n.gpus = static_cast<int>(*g);
    n.model = r[model] == "nan" ? "" : r[model];
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<OpenbPod>> ReadOpenbPods(const std::string& path) {
  auto csv = ReadCsv(path);
  if (!csv) return std::unexpected(csv.error());
  const int name = csv->Col("name"), cpu = csv->Col("cpu_milli"), mem = csv->Col("memory_mib"),
            ng = csv->Col("num_gpu"), gm = csv->Col("gpu_milli"), spec = csv->Col("gpu_spec");
  if (name < 0 || cpu < 0 || mem < 0 || ng < 0 || gm < 0) {
    return Fail(path, ": expected columns name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]");
  }
  std::vector<OpenbPod> out;
  for (size_t i = 0; i < csv->rows.size(); ++i) {
    const auto& r = csv->rows[i];
    if (static_cast<int>(r.size()) < static_cast<int>(csv->header.size())) {
      return Fail(path, ":", std::to_string(csv->lines[i]), ": too few fields");
    }
    OpenbPod p;
    p.name = r[name];
    auto c = Int(path, csv->lines[i], "cpu_milli", r[cpu]);
    auto m = Int(path, csv->lines[i], "memory_mib", r[mem]);
    auto g = Int(path, csv->lines[i], "num_gpu", r[ng]);
    auto k = Int(path, csv->lines[i], "gpu_milli", r[gm]);
    if (!c) return std::unexpected(c.error());
    if (!m) return std::unexpected(m.error());
    if (!g) return std::unexpected(g.error());
    if (!k) return std::unexpected(k.error());
    if (*k > 1000) {
      return Fail(path, ":", std::to_string(csv->lines[i]), ": gpu_milli above 1000");
    }
    p.cpu_milli = *c;
    p.memory_mib = *m;
    p.num_gpu = static_cast<int>(*g);
    p.gpu_milli = static_cast<int>(*k);
    if (p.num_gpu > 0 && p.gpu_milli == 0) p.gpu_milli = 1000;
    if (spec >= 0 && !r[spec].empty() && r[spec] != "nan") p.gpu_spec = SplitString(r[spec], '|');
    out.push_back(std::move(p));
  }
  return out;
}

Result<model::Topology> OpenbTopology(const std::vector<OpenbNode>& nodes) {
  model::Topology t;
  t.name = "openb";
  t.tiers.push_back({"leaf", 1000, 1.0, Bandwidth::FromGbps(100)});
  t.switches.push_back({.name = "flat", .tier = 0});
  std::map<std::tuple<std::string, int, int64_t, int64_t>, int> types;
  for (const OpenbNode& n : nodes) {
    auto key = std::tuple(n.model, n.gpus, n.cpu_milli, n.memory_mib);
    auto it = types.find(key);
    if (it == types.end()) {
      model::ServerType ty;
      ty.group = (n.model.empty() ? std::string("cpu") : ToLower(n.model)) + "-" +
                 std::to_string(n.gpus) + "g-" + std::to_string(types.size());
      ty.accelerator.model = n.model;
      ty.accelerator.vendor = model::Vendor::kOther;
      ty.gpus_per_node = n.gpus;
      ty.backend = model::Backend::kCuda;
      ty.intra_kind = model::IntraNodeKind::kPcie;
      ty.intra_bandwidth = Bandwidth::FromGBps(25);
      ty.pcie_bandwidth = Bandwidth::FromGBps(25);
      ty.nvlink_domain_size = 1;
      for (int g = 0; g < n.gpus; ++g) {
        ty.gpu_numa.push_back(0);
        ty.gpu_pcie_switch.push_back(g / 2);
      }
      ty.nics.push_back({.rail = 0, .bandwidth = Bandwidth::FromGbps(100)});
      ty.cpu_milli = n.cpu_milli;
      ty.memory_bytes = n.memory_mib * 1024 * 1024;
      it = types.emplace(key, static_cast<int>(t.types.size())).first;
      t.types.push_back(std::move(ty));
    }
    t.nodes.push_back({.name = n.name, .type = it->second, .leaf = 0});
  }
  if (auto st = t.Finalize(); !st) return std::unexpected(st.error());
  return t;
}

PlacementRequest PodRequest(const OpenbPod& pod) {
  PlacementRequest r;
  r.name = pod.name;
  const int ranks = std::max(1, pod.num_gpu);
  r.ranks = ranks;
  r.gpu_milli = pod.num_gpu == 0 ? 0 : pod.gpu_milli;
  r.single_node = true;
  r.cpu_milli_per_rank = (pod.cpu_milli + ranks - 1) / ranks;
  r.memory_bytes_per_rank = (pod.memory_mib * 1024 * 1024 + ranks - 1) / ranks;
  r.accelerators = pod.gpu_spec;
  return r;
}

Result<FragmentationResult> RunFragmentation(const std::vector<OpenbNode>& nodes,
                                             const std::vector<OpenbPod>& pods,
                                             const std::string& strategy,
                                             const FragmentationOptions& options) {
  if (pods.empty()) return Fail("the pod list is empty");
  if (options.inflate <= 0) return Fail("--inflate must be positive");
  auto topo = OpenbTopology(nodes);
  if (!topo) return std::unexpected(topo.error());
  std::vector<PlacementRequest> originals;
  for (const OpenbPod& p : pods) originals.push_back(PodRequest(p));
  StrategyOptions so;
  so.seed = options.seed;
  so.workload = TypicalWorkload(originals, options.workload);  // FGD's target: the original pods
  so.fgd_score = options.score;
  so.fgd_ties = options.ties;
  auto s = MakeStrategy(strategy, so);
  if (!s) return std::unexpected(s.error());

  // Grow the workload to `inflate` x capacity with copies drawn with replacement, then shuffle.
  ClusterState state(*topo);
  for (int n = 0; n < topo->NumNodes(); ++n) {
    state.SetHostCapacity(n, nodes[n].cpu_milli, nodes[n].memory_mib * 1024 * 1024);
  }
  const double capacity = static_cast<double>(state.TotalGpuMilli());
  auto gpu_of = [](const OpenbPod& p) { return static_cast<double>(p.num_gpu) * p.gpu_milli; };
  std::vector<int> order(pods.size());
  double asked = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    order[i] = static_cast<int>(i);
    asked += gpu_of(pods[i]);
  }
  internal::Rng rng(options.seed);
  if (options.paper_order) {
    rng.Shuffle(&order);
    while (true) {
      int i = rng.Below(static_cast<int>(pods.size()));
      const double per_gpu = pods[i].num_gpu > 0 ? pods[i].gpu_milli : 0;
      if (asked + per_gpu > options.inflate * capacity) break;
      order.push_back(i);
      asked += gpu_of(pods[i]);
    }
  } else {
    while (asked < options.inflate * capacity) {
      int i = rng.Below(static_cast<int>(pods.size()));
      order.push_back(i);
      asked += gpu_of(pods[i]);
    }
    rng.Shuffle(&order);
  }

  FragmentationResult res;
  res.strategy = strategy;
  res.seed = options.seed;
  double arrived = 0;
  bool seen_100 = false;
  const long target_pct = std::lround(100 * options.inflate);
  double window_sum = 0, near_sum = 0;
  int window_n = 0, near_n = 0;
  for (int i : order) {
    const PlacementRequest& r = originals[i];
    arrived += gpu_of(pods[i]);
    Outcome o = (*s)->Place(state, r);
    if (o.placed() && Apply(&state, r, o)) {
      ++res.pods_placed;
    } else {
      ++res.pods_failed;
    }
    {
      const long pct = std::lround(100 * arrived / capacity);
      const double a = static_cast<double>(state.AllocatedGpuMilli()) / capacity;
      if (pct == target_pct) {
        window_sum += a;
        ++window_n;
      }
      if (pct >= target_pct - 1 && pct <= target_pct + 1) {
        near_sum += a;
        ++near_n;
      }
    }
    if (!seen_100 && arrived >= capacity) {
      seen_100 = true;
      res.allocation_ratio_at_100 = static_cast<double>(state.AllocatedGpuMilli()) / capacity;
    }
  }
  res.allocation_ratio = static_cast<double>(state.AllocatedGpuMilli()) / capacity;
  if (!seen_100) res.allocation_ratio_at_100 = res.allocation_ratio;
  res.arrived_ratio = arrived / capacity;
  res.allocation_ratio_window = window_n > 0 ? window_sum / window_n
                                : near_n > 0 ? near_sum / near_n
                                             : res.allocation_ratio;
  return res;
}

}  // namespace tianshu::placement
