#include "tianshu/model/topology.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tianshu/base/strings.h"

namespace tianshu::model {

std::string_view IntraNodeKindName(IntraNodeKind k) {
  switch (k) {
    case IntraNodeKind::kNvSwitch:
      return "nvswitch";
    case IntraNodeKind::kNvLink:
      return "nvlink";
    case IntraNodeKind::kPcie:
      return "pcie";
  }
  return "pcie";
}

Bandwidth ServerType::Injection() const {
  Bandwidth total;
  for (const Nic& n : nics) total += n.bandwidth;
  return total;
}

int ServerType::NvlinkIsland(int local_gpu) const {
  int domain = nvlink_domain_size > 0 ? nvlink_domain_size : 1;
  return local_gpu / domain;
}

Status Topology::Finalize() {
  if (tiers.empty()) return Fail("the fabric has no tiers");
  const int num_switches = static_cast<int>(switches.size());
  for (auto& s : switches) {
    s.children.clear();
    s.nodes.clear();
    s.downlink = {};
    s.uplink = {};
    s.gpus = 0;
  }
  root_ = -1;
  for (int i = 0; i < num_switches; ++i) {
    Switch& s = switches[i];
    s.id = i;
    if (s.tier < 0 || s.tier >= static_cast<int>(tiers.size())) {
      return Fail("switch '", s.name, "' is on tier ", std::to_string(s.tier), " of ",
                  std::to_string(tiers.size()));
    }
    if (s.parent < 0) {
      if (root_ >= 0) {
        return Fail("the fabric has several top-level switches ('", switches[root_].name, "' and '",
                    s.name, "'); add a tier above them");
      }
      root_ = i;
      continue;
    }
    if (s.parent >= num_switches) return Fail("switch '", s.name, "' has no valid parent");
    if (switches[s.parent].tier <= s.tier) {
      return Fail("switch '", s.name, "' (tier ", tiers[s.tier].name, ") has parent '",
                  switches[s.parent].name, "' on tier ", tiers[switches[s.parent].tier].name,
                  ", which is not above it");
    }
    switches[s.parent].children.push_back(i);
  }
  if (root_ < 0) return Fail("the fabric has no top-level switch");

  num_gpus_ = 0;
  for (int n = 0; n < NumNodes(); ++n) {
    Node& node = nodes[n];
    node.id = n;
    if (node.type < 0 || node.type >= static_cast<int>(types.size())) {
      return Fail("node '", node.name, "' has no server type");
    }
    if (node.leaf < 0 || node.leaf >= num_switches) {
      return Fail("node '", node.name, "' is attached to no switch");
    }
    if (switches[node.leaf].tier != 0) {
      return Fail("node '", node.name, "' is attached to '", switches[node.leaf].name,
                  "', which is not a leaf switch");
    }
    node.first_gpu = num_gpus_;
    num_gpus_ += types[node.type].gpus_per_node;
    switches[node.leaf].nodes.push_back(n);
  }

  // Ancestors of every node at every tier. A tier may be skipped (a leaf directly under the
  // core): the ancestor at the skipped tier is then the next switch up.
  const int T = static_cast<int>(tiers.size());
  ancestors_.assign(nodes.size() * T, -1);
  for (int n = 0; n < NumNodes(); ++n) {
    int s = nodes[n].leaf;
    int steps = 0;
    for (int t = 0; t < T; ++t) {
      while (s >= 0 && switches[s].tier < t) {
        s = switches[s].parent;
        if (++steps > num_switches) return Fail("the switch tree has a cycle");
      }
      ancestors_[n * T + t] = s >= 0 ? s : root_;
    }
  }

  // Capacities bottom-up: tiers in increasing order.
  std::vector<int> order(num_switches);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return switches[a].tier < switches[b].tier; });
  for (int id : order) {
    Switch& s = switches[id];
    for (int n : s.nodes) {
      s.downlink += TypeOf(n).Injection();
      s.gpus += GpusOn(n);
    }
    for (int c : s.children) {
      s.downlink += switches[c].uplink;
      s.gpus += switches[c].gpus;
    }
    if (s.parent >= 0) {
      double over = std::max(1e-9, tiers[s.tier].oversubscription);
      s.uplink =
          Bandwidth{static_cast<int64_t>(static_cast<double>(s.downlink.bits_per_sec) / over)};
    }
  }
  return Ok();
}

int Topology::CommonTier(int a, int b) const {
  if (a == b) return -1;
  const int T = static_cast<int>(tiers.size());
  for (int t = 0; t < T; ++t) {
    if (ancestors_[a * T + t] == ancestors_[b * T + t]) return t;
  }
  return T - 1;
}

std::vector<int> Topology::NodesUnder(int switch_id) const {
  std::vector<int> out;
  std::vector<int> stack = {switch_id};
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    const Switch& sw = switches[s];
    out.insert(out.end(), sw.nodes.begin(), sw.nodes.end());
    for (int c : sw.children) stack.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The bisection is taken at the root: its children (or, for a one-switch fabric, its nodes)
// are split into two halves of as equal GPU count as a greedy split finds, and the cut carries
// the smaller half's capacity towards the root. For a non-blocking fat tree this is half the
// injection bandwidth; each oversubscribed tier on the way divides it.
Bandwidth Topology::BisectionBandwidth() const {
  if (root_ < 0) return {};
  const Switch& root = switches[root_];
  struct Part {
    int gpus;
    int64_t bits;
  };
  std::vector<Part> parts;
  for (int c : root.children) parts.push_back({switches[c].gpus, switches[c].uplink.bits_per_sec});
  for (int n : root.nodes) parts.push_back({GpusOn(n), TypeOf(n).Injection().bits_per_sec});
  if (parts.size() < 2) return {};
  std::sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) {
    return x.gpus != y.gpus ? x.gpus > y.gpus : x.bits > y.bits;
  });
  int64_t gpus_a = 0, gpus_b = 0, bits_a = 0, bits_b = 0;
  for (const Part& p : parts) {
    if (gpus_a <= gpus_b) {
      gpus_a += p.gpus;
      bits_a += p.bits;
    } else {
      gpus_b += p.gpus;
      bits_b += p.bits;
    }
  }
  return Bandwidth{std::min(bits_a, bits_b)};
}

Result<ServerType> DefaultServerType(const std::string& gpu, int gpus_per_node, int nics,
                                     Bandwidth nic_bandwidth) {
  const AcceleratorSpec* spec = FindAccelerator(gpu);
  if (!spec) {
    return Fail("unknown accelerator model '", gpu, "' (known: ", Join(AcceleratorModels(), ", "),
                ")");
  }
  if (gpus_per_node <= 0) return Fail("gpus_per_node must be positive");
  if (nics < 0) return Fail("nics cannot be negative");
  ServerType t;
  t.group = ToLower(spec->model);
  t.accelerator = *spec;
  t.gpus_per_node = gpus_per_node;
  t.backend = DefaultBackend(spec->vendor);
  bool nvlink = !spec->nvlink_bandwidth.IsZero();
  t.intra_kind = nvlink ? IntraNodeKind::kNvSwitch : IntraNodeKind::kPcie;
  t.pcie_bandwidth = Bandwidth::FromGBps(25);  // PCIe Gen4 x16, one direction, achievable
  t.intra_bandwidth = nvlink ? spec->nvlink_bandwidth : t.pcie_bandwidth;
  t.intra_latency_ns = nvlink ? 700 : 1500;
  t.nvlink_domain_size = nvlink ? gpus_per_node : 1;
  t.numa_nodes = gpus_per_node >= 2 ? 2 : 1;
  for (int g = 0; g < gpus_per_node; ++g) {
    t.gpu_numa.push_back(g * t.numa_nodes / gpus_per_node);
    t.gpu_pcie_switch.push_back(g / 2);
  }
  for (int i = 0; i < nics; ++i) {
    Nic n;
    n.rail = i;
    n.bandwidth = nic_bandwidth;
    n.numa = nics > 0 ? i * t.numa_nodes / nics : 0;
    n.pcie_switch = nics >= gpus_per_node ? i / 2 : i;
    t.nics.push_back(n);
  }
  t.nvme_capacity_bytes = 2'000'000'000'000;
  t.nvme_write_bandwidth = Bandwidth::FromGBps(6);
  t.nvme_read_bandwidth = Bandwidth::FromGBps(12);
  t.cpu_milli = 128'000;
  t.memory_bytes = 2'000'000'000'000;
  return t;
}

Result<Topology> GenerateFatTree(const FatTreeOptions& o) {
  if (o.nodes <= 0) return Fail("fat-tree: nodes must be positive");
  if (o.nodes_per_leaf <= 0) return Fail("fat-tree: leaf_radix must be positive");
  if (o.leaves_per_spine < 0) return Fail("fat-tree: spine_radix cannot be negative");
  if (o.oversubscription < 1 || o.spine_oversubscription < 1) {
    return Fail("fat-tree: oversubscription must be at least 1");
  }
  auto type = DefaultServerType(o.gpu, o.gpus_per_node, o.nics, o.nic_bandwidth);
  if (!type) return std::unexpected(type.error());

  Topology t;
  t.name = "fat-tree-" + std::to_string(o.nodes);
  type->group = o.name_prefix;
  t.types.push_back(*type);
  const int leaves = (o.nodes + o.nodes_per_leaf - 1) / o.nodes_per_leaf;
  const int per_spine = o.leaves_per_spine > 0 ? o.leaves_per_spine : leaves;
  const int spines = (leaves + per_spine - 1) / per_spine;
  const bool core = spines > 1;
  t.tiers.push_back({"leaf", 1000, o.oversubscription, Bandwidth::FromGbps(400)});
  t.tiers.push_back(
      {"spine", 1000, core ? o.spine_oversubscription : 1.0, Bandwidth::FromGbps(400)});
  if (core) t.tiers.push_back({"core", 1000, 1.0, Bandwidth::FromGbps(400)});

  int core_id = -1;
  if (core) {
    t.switches.push_back({.name = "core0", .tier = 2});
    core_id = 0;
  }
  std::vector<int> spine_ids;
  for (int s = 0; s < spines; ++s) {
    spine_ids.push_back(static_cast<int>(t.switches.size()));
    t.switches.push_back({.name = "spine" + std::to_string(s), .tier = 1, .parent = core_id});
  }
  std::vector<int> leaf_ids;
  for (int l = 0; l < leaves; ++l) {
    leaf_ids.push_back(static_cast<int>(t.switches.size()));
    t.switches.push_back(
        {.name = "leaf" + std::to_string(l), .tier = 0, .parent = spine_ids[l / per_spine]});
  }
  for (int n = 0; n < o.nodes; ++n) {
    Node node;
    node.name = o.name_prefix + "-" + std::to_string(n);
    node.type = 0;
    node.leaf = leaf_ids[n / o.nodes_per_leaf];
    t.nodes.push_back(std::move(node));
  }
  auto st = t.Finalize();
  if (!st) return std::unexpected(st.error());
  return t;
}

Result<FatTreeOptions> ParseFatTreeSpec(std::string_view spec) {
  FatTreeOptions o;
  std::string_view body = spec;
  if (StartsWith(body, "fat-tree:")) {
    body.remove_prefix(9);
  } else if (body == "fat-tree") {
    body = {};
  } else {
    return Fail("'", std::string(spec), "' is not a fat-tree spec (fat-tree:nodes=N,...)");
  }
  if (body.empty()) return o;
  static const std::vector<std::string> kKeys = {"nodes",
                                                 "gpus_per_node",
                                                 "gpu",
                                                 "leaf_radix",
                                                 "spine_radix",
                                                 "oversubscription",
                                                 "spine_oversubscription",
                                                 "nics",
                                                 "nic_bandwidth",
                                                 "name_prefix"};
  for (const std::string& kv : SplitString(body, ',')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) return Fail("fat-tree: '", kv, "' is not key=value");
    std::string key = std::string(Trim(kv.substr(0, eq)));
    std::string value = std::string(Trim(kv.substr(eq + 1)));
    int64_t i = 0;
    double d = 0;
    auto need_int = [&](int* out) -> Status {
      if (!ParseInt64(value, &i) || i < 0 || i > 1'000'000) {
        return Fail("fat-tree: ", key, " must be a whole number, got '", value, "'");
      }
      *out = static_cast<int>(i);
      return Ok();
    };
    Status st = Ok();
    if (key == "nodes") {
      st = need_int(&o.nodes);
    } else if (key == "gpus_per_node") {
      st = need_int(&o.gpus_per_node);
    } else if (key == "gpu") {
      o.gpu = value;
    } else if (key == "leaf_radix") {
      st = need_int(&o.nodes_per_leaf);
    } else if (key == "spine_radix") {
      st = need_int(&o.leaves_per_spine);
    } else if (key == "nics") {
      st = need_int(&o.nics);
    } else if (key == "oversubscription" || key == "spine_oversubscription") {
      if (!ParseDouble(value, &d)) {
        return Fail("fat-tree: ", key, " must be a number, got '", value, "'");
      }
      (key == "oversubscription" ? o.oversubscription : o.spine_oversubscription) = d;
    } else if (key == "nic_bandwidth") {
      auto bw = ParseBandwidth(value);
      if (!bw) return Fail("fat-tree: nic_bandwidth: ", bw.error().message);
      o.nic_bandwidth = *bw;
    } else if (key == "name_prefix") {
      o.name_prefix = value;
    } else {
      std::string near = NearestWord(key, kKeys);
      return Fail("fat-tree: unknown key '", key, "'",
                  near.empty() ? std::string() : " (did you mean '" + near + "'?)");
    }
    if (!st) return std::unexpected(st.error());
  }
  return o;
}

}  // namespace tianshu::model
