#include <map>
#include <set>

#include "tianshu/base/strings.h"
#include "tianshu/model/internal/parsers.h"

namespace tianshu::model::internal {
namespace {

constexpr int kMaxNodes = 1'000'000;

// Reads one node group into a ServerType plus its count, node names and optional leaf.
struct GroupSpec {
  ServerType type;
  int count = 0;
  std::vector<std::string> names;
  std::string leaf;
  YAML::Node leaf_node;
  YAML::Node at;
};

void ParseAccelerator(YamlReader& r, const YAML::Node& a, const std::string& p, GroupSpec* g) {
  if (!r.ExpectMap(a, p)) return;
  r.CheckKeys(a, p,
              {"model", "vendor", "count", "memory", "peak_tflops", "hbm_bandwidth", "mig",
               "partitions", "busy_watts", "idle_watts"});
  AcceleratorSpec& spec = g->type.accelerator;
  std::string model;
  if (r.Require(a, p, "model") && r.String(a, p, "model", &model)) {
    if (const AcceleratorSpec* known = FindAccelerator(model)) {
      spec = *known;
    } else {
      spec.model = model;
      // A model outside the catalogue must give its own figures.
      for (const char* key : {"vendor", "memory", "peak_tflops", "hbm_bandwidth"}) {
        if (!r.Get(a, key).IsDefined()) {
          std::string near = NearestWord(model, AcceleratorModels());
          r.Error(r.Get(a, "model"), YamlReader::Child(p, "model"),
                  "'" + model + "' is not in the accelerator catalogue" +
                      (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                      "; give vendor, memory, peak_tflops and hbm_bandwidth for it");
          break;
        }
      }
    }
  }
  std::string vendor;
  if (r.Choice(a, p, "vendor", VendorNames(), &vendor)) spec.vendor = *ParseVendor(vendor);
  r.Int(a, p, "count", &g->type.gpus_per_node, 1, 1024);
  if (!r.Get(a, "count").IsDefined()) r.Error(a, YamlReader::Child(p, "count"), "is required");
  if (r.Size(a, p, "memory", &spec.memory_bytes) && spec.memory_bytes <= 0) {
    r.Error(r.Get(a, "memory"), YamlReader::Child(p, "memory"), "must be more than 0");
  }
  r.Double(a, p, "peak_tflops", &spec.peak_tflops, 0.001, 1e6);
  r.Bw(a, p, "hbm_bandwidth", &spec.hbm_bandwidth);
  r.Bool(a, p, "mig", &spec.mig_capable);
  r.Int(a, p, "partitions", &spec.max_partitions, 1, 64);
  r.Double(a, p, "busy_watts", &spec.busy_watts, 0, 100'000);
  r.Double(a, p, "idle_watts", &spec.idle_watts, 0, 100'000);
}

void ParseGroup(YamlReader& r, const YAML::Node& n, const std::string& p, GroupSpec* g) {
  g->at = n;
  if (!r.ExpectMap(n, p)) return;
  r.CheckKeys(n, p,
              {"name", "count", "nodes", "backend", "accelerator", "interconnect", "pcie", "nics",
               "nvme", "cpus", "memory", "labels", "leaf"});
  ServerType& t = g->type;
  if (r.Require(n, p, "name")) r.String(n, p, "name", &t.group);
  bool has_count = r.Int(n, p, "count", &g->count, 1, kMaxNodes);
  bool has_names = r.StringList(n, p, "nodes", &g->names);
  if (!r.Get(n, "count").IsDefined() && !r.Get(n, "nodes").IsDefined()) {
    r.Error(n, YamlReader::Child(p, "count"), "is required (or a list of node names in nodes)");
  }
  if (has_count && has_names && static_cast<int>(g->names.size()) != g->count) {
    r.Error(r.Get(n, "nodes"), YamlReader::Child(p, "nodes"),
            "lists " + std::to_string(g->names.size()) + " names but count is " +
                std::to_string(g->count));
  }
  if (!has_count && has_names) g->count = static_cast<int>(g->names.size());

  YAML::Node acc = r.Get(n, "accelerator");
  if (acc.IsDefined()) {
    ParseAccelerator(r, acc, YamlReader::Child(p, "accelerator"), g);
  } else {
    r.Error(n, YamlReader::Child(p, "accelerator"), "is required");
  }
  const int gpus = t.gpus_per_node;
  auto base = DefaultServerType(t.accelerator.model.empty() ? "A100-80GB" : t.accelerator.model,
                                std::max(1, gpus), 0, Bandwidth{});
  if (base && gpus > 0) {
    AcceleratorSpec spec = t.accelerator;
    std::string group = t.group;
    t = *base;
    t.accelerator = spec;
    t.group = group;
    t.gpus_per_node = gpus;
  }
  t.backend = DefaultBackend(t.accelerator.vendor);
  if (t.accelerator.nvlink_bandwidth.IsZero()) {
    t.intra_kind = IntraNodeKind::kPcie;
    t.intra_bandwidth = t.pcie_bandwidth;
    t.nvlink_domain_size = 1;
  }
  std::string backend;
  if (r.Choice(n, p, "backend", BackendNames(), &backend)) t.backend = *ParseBackend(backend);

  YAML::Node ic = r.Get(n, "interconnect");
  const std::string icp = YamlReader::Child(p, "interconnect");
  if (ic.IsDefined() && r.ExpectMap(ic, icp)) {
    r.CheckKeys(ic, icp, {"kind", "bandwidth", "latency", "domain_size"});
    std::string kind;
    if (r.Choice(ic, icp, "kind", {"nvswitch", "nvlink", "pcie"}, &kind)) {
      t.intra_kind = kind == "nvswitch" ? IntraNodeKind::kNvSwitch
                     : kind == "nvlink" ? IntraNodeKind::kNvLink
                                        : IntraNodeKind::kPcie;
      t.nvlink_domain_size = kind == "nvswitch" ? gpus : kind == "pcie" ? 1 : 2;
    }
    r.Bw(ic, icp, "bandwidth", &t.intra_bandwidth);
    r.DurationNs(ic, icp, "latency", &t.intra_latency_ns);
    if (r.Int(ic, icp, "domain_size", &t.nvlink_domain_size, 1, 1024) && gpus > 0 &&
        gpus % t.nvlink_domain_size != 0) {
      r.Error(r.Get(ic, "domain_size"), YamlReader::Child(icp, "domain_size"),
              "NVLink domains of " + std::to_string(t.nvlink_domain_size) +
                  " GPUs do not tile the " + std::to_string(gpus) + " GPUs of a node");
    }
  }

  YAML::Node pc = r.Get(n, "pcie");
  const std::string pcp = YamlReader::Child(p, "pcie");
  if (pc.IsDefined() && r.ExpectMap(pc, pcp)) {
    r.CheckKeys(pc, pcp, {"bandwidth", "numa_nodes", "gpu_numa", "gpu_switch"});
    r.Bw(pc, pcp, "bandwidth", &t.pcie_bandwidth);
    r.Int(pc, pcp, "numa_nodes", &t.numa_nodes, 1, 64);
    for (const char* key : {"gpu_numa", "gpu_switch"}) {
      std::vector<int>* v = std::string(key) == "gpu_numa" ? &t.gpu_numa : &t.gpu_pcie_switch;
      int max = std::string(key) == "gpu_numa" ? t.numa_nodes - 1 : 1024;
      if (r.IntList(pc, pcp, key, v, 0, max) && static_cast<int>(v->size()) != gpus) {
        r.Error(r.Get(pc, key), YamlReader::Child(pcp, key),
                "lists " + std::to_string(v->size()) + " entries for " + std::to_string(gpus) +
                    " GPUs");
      }
    }
  }
  if (static_cast<int>(t.gpu_numa.size()) != gpus ||
      static_cast<int>(t.gpu_pcie_switch.size()) != gpus) {
    t.gpu_numa.assign(std::max(0, gpus), 0);
    t.gpu_pcie_switch.assign(std::max(0, gpus), 0);
    for (int i = 0; i < gpus; ++i) {
      t.gpu_numa[i] = i * t.numa_nodes / gpus;
      t.gpu_pcie_switch[i] = i / 2;
    }
  }

  YAML::Node nics = r.Get(n, "nics");
  const std::string np = YamlReader::Child(p, "nics");
  if (nics.IsDefined() && r.ExpectMap(nics, np)) {
    r.CheckKeys(nics, np, {"count", "bandwidth", "rails", "numa", "pcie_switch"});
    int count = 0;
    Bandwidth bw;
    bool rails = true;
    bool ok = r.Int(nics, np, "count", &count, 1, 64) && r.Bw(nics, np, "bandwidth", &bw);
    if (!r.Get(nics, "count").IsDefined())
      r.Error(nics, YamlReader::Child(np, "count"), "is required");
    if (!r.Get(nics, "bandwidth").IsDefined()) {
      r.Error(nics, YamlReader::Child(np, "bandwidth"), "is required");
    }
    r.Bool(nics, np, "rails", &rails);
    std::vector<int> numa, sw;
    r.IntList(nics, np, "numa", &numa, 0, t.numa_nodes - 1);
    r.IntList(nics, np, "pcie_switch", &sw, 0, 1024);
    if (ok) {
      t.nics.clear();
      for (int i = 0; i < count; ++i) {
        Nic nic;
        nic.rail = rails ? i : 0;
        nic.bandwidth = bw;
        nic.numa = i < static_cast<int>(numa.size()) ? numa[i] : i * t.numa_nodes / count;
        nic.pcie_switch = i < static_cast<int>(sw.size()) ? sw[i] : (count >= gpus ? i / 2 : i);
        t.nics.push_back(nic);
      }
      for (const auto& [key, v] : {std::pair{"numa", &numa}, std::pair{"pcie_switch", &sw}}) {
        if (!v->empty() && static_cast<int>(v->size()) != count) {
          r.Error(r.Get(nics, key), YamlReader::Child(np, key),
                  "lists " + std::to_string(v->size()) + " entries for " + std::to_string(count) +
                      " NICs");
        }
      }
    }
  }

  YAML::Node nvme = r.Get(n, "nvme");
  const std::string vp = YamlReader::Child(p, "nvme");
  if (nvme.IsDefined() && r.ExpectMap(nvme, vp)) {
    r.CheckKeys(nvme, vp, {"capacity", "write_bandwidth", "read_bandwidth"});
    r.Size(nvme, vp, "capacity", &t.nvme_capacity_bytes);
    r.Bw(nvme, vp, "write_bandwidth", &t.nvme_write_bandwidth);
    r.Bw(nvme, vp, "read_bandwidth", &t.nvme_read_bandwidth);
  }
  int cpus = 0;
  if (r.Int(n, p, "cpus", &cpus, 1, 100'000)) t.cpu_milli = int64_t{cpus} * 1000;
  if (r.Size(n, p, "memory", &t.memory_bytes) && t.memory_bytes <= 0) {
    r.Error(r.Get(n, "memory"), YamlReader::Child(p, "memory"), "must be more than 0");
  }
  r.StringMap(n, p, "labels", &t.labels);
  g->leaf_node = r.Get(n, "leaf");
  r.String(n, p, "leaf", &g->leaf);
}

}  // namespace

Topology ParseCluster(YamlReader& r, const YAML::Node& root) {
  Topology topo;
  r.CheckKeys(root, "", {"kind", "name", "node_groups", "fabric"});
  topo.name = "cluster";
  r.String(root, "", "name", &topo.name);

  std::vector<GroupSpec> groups;
  YAML::Node ng = r.Get(root, "node_groups");
  if (!ng.IsDefined()) {
    r.Error(root, "node_groups", "is required: a list of node groups");
  } else if (r.ExpectSeq(ng, "node_groups")) {
    if (ng.size() == 0) r.Error(ng, "node_groups", "must list at least one node group");
    for (size_t i = 0; i < ng.size(); ++i) {
      groups.emplace_back();
      ParseGroup(r, ng[i], YamlReader::Index("node_groups", i), &groups.back());
    }
  }
  long total_nodes = 0;
  for (const auto& g : groups) total_nodes += g.count;
  if (total_nodes > kMaxNodes) {
    r.Error(ng, "node_groups",
            std::to_string(total_nodes) + " nodes is more than the " + std::to_string(kMaxNodes) +
                " a cluster may have");
    return topo;
  }

  // Fabric: tiers bottom-up, then either explicit switches or automatic leaves/spines.
  YAML::Node fab = r.Get(root, "fabric");
  int nodes_per_leaf = 0, leaves_per_spine = 0;
  std::map<std::string, int> tier_index;
  std::map<std::string, int> switch_index;
  std::vector<std::pair<std::string, YAML::Node>> parents;  // per switch: parent name
  bool explicit_switches = false;
  if (!fab.IsDefined()) {
    r.Error(root, "fabric", "is required: tiers and either nodes_per_leaf or switches");
  } else if (r.ExpectMap(fab, "fabric")) {
    r.CheckKeys(fab, "fabric", {"tiers", "nodes_per_leaf", "leaves_per_spine", "switches"});
    YAML::Node tiers = r.Get(fab, "tiers");
    if (!tiers.IsDefined()) {
      r.Error(fab, "fabric.tiers", "is required: e.g. [{name: leaf}, {name: spine}]");
    } else if (r.ExpectSeq(tiers, "fabric.tiers")) {
      if (tiers.size() == 0 || tiers.size() > 4) {
        r.Error(tiers, "fabric.tiers", "must list 1 to 4 tiers, bottom-up (leaf, spine, core)");
      }
      for (size_t i = 0; i < tiers.size(); ++i) {
        std::string tp = YamlReader::Index("fabric.tiers", i);
        if (!r.ExpectMap(tiers[i], tp)) continue;
        r.CheckKeys(tiers[i], tp, {"name", "latency", "oversubscription", "link_bandwidth"});
        Tier t;
        t.link_bandwidth = Bandwidth::FromGbps(400);
        if (r.Require(tiers[i], tp, "name")) r.String(tiers[i], tp, "name", &t.name);
        r.DurationNs(tiers[i], tp, "latency", &t.latency_ns);
        r.Double(tiers[i], tp, "oversubscription", &t.oversubscription, 1, 1000);
        r.Bw(tiers[i], tp, "link_bandwidth", &t.link_bandwidth);
        if (!t.name.empty() && !tier_index.emplace(t.name, static_cast<int>(i)).second) {
          r.Error(r.Get(tiers[i], "name"), YamlReader::Child(tp, "name"),
                  "duplicate tier name '" + t.name + "'");
        }
        topo.tiers.push_back(t);
      }
    }
    bool has_npl = r.Int(fab, "fabric", "nodes_per_leaf", &nodes_per_leaf, 1, kMaxNodes);
    r.Int(fab, "fabric", "leaves_per_spine", &leaves_per_spine, 1, kMaxNodes);
    YAML::Node sws = r.Get(fab, "switches");
    if (sws.IsDefined() && r.ExpectSeq(sws, "fabric.switches")) {
      explicit_switches = true;
      if (has_npl) {
        r.Error(r.Get(fab, "nodes_per_leaf"), "fabric.nodes_per_leaf",
                "give either nodes_per_leaf (automatic leaves) or switches, not both");
      }
      for (size_t i = 0; i < sws.size(); ++i) {
        std::string sp = YamlReader::Index("fabric.switches", i);
        if (!r.ExpectMap(sws[i], sp)) continue;
        r.CheckKeys(sws[i], sp, {"name", "tier", "parent"});
        Switch s;
        std::string tier;
        if (r.Require(sws[i], sp, "name")) r.String(sws[i], sp, "name", &s.name);
        if (r.Require(sws[i], sp, "tier") && r.String(sws[i], sp, "tier", &tier)) {
          auto it = tier_index.find(tier);
          if (it == tier_index.end()) {
            std::vector<std::string> names;
            for (const auto& t : topo.tiers) names.push_back(t.name);
            r.Error(r.Get(sws[i], "tier"), YamlReader::Child(sp, "tier"),
                    "no tier named '" + tier + "' (tiers: " + Join(names, ", ") + ")");
          } else {
            s.tier = it->second;
          }
        }
        std::string parent;
        r.String(sws[i], sp, "parent", &parent);
        parents.emplace_back(parent, r.Get(sws[i], "parent"));
        if (!s.name.empty() &&
            !switch_index.emplace(s.name, static_cast<int>(topo.switches.size())).second) {
          r.Error(r.Get(sws[i], "name"), YamlReader::Child(sp, "name"),
                  "duplicate switch name '" + s.name + "'");
        }
        topo.switches.push_back(s);
      }
      for (size_t i = 0; i < parents.size(); ++i) {
        if (parents[i].first.empty()) continue;
        auto it = switch_index.find(parents[i].first);
        if (it == switch_index.end()) {
          std::vector<std::string> names;
          for (const auto& [name, idx] : switch_index) names.push_back(name);
          std::string near = NearestWord(parents[i].first, names);
          r.Error(parents[i].second,
                  YamlReader::Child(YamlReader::Index("fabric.switches", i), "parent"),
                  "links to switch '" + parents[i].first + "', which is not defined" +
                      (near.empty() ? "" : " (did you mean '" + near + "'?)"));
        } else {
          topo.switches[i].parent = it->second;
        }
      }
    } else if (!has_npl && !r.Get(fab, "nodes_per_leaf").IsDefined()) {
      r.Error(fab, "fabric.nodes_per_leaf",
              "is required when no switches are listed (nodes are attached in order)");
    }
  }

  // Server types and nodes.
  std::set<std::string> node_names;
  std::set<std::string> group_names;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    GroupSpec& g = groups[gi];
    std::string gp = YamlReader::Index("node_groups", gi);
    if (!g.type.group.empty() && !group_names.insert(g.type.group).second) {
      r.Error(g.at, YamlReader::Child(gp, "name"),
              "duplicate node group name '" + g.type.group + "'");
    }
    int leaf = -1;
    if (!g.leaf.empty()) {
      if (!explicit_switches) {
        r.Error(g.leaf_node, YamlReader::Child(gp, "leaf"),
                "names a switch, but fabric lists no switches");
      } else if (auto it = switch_index.find(g.leaf); it == switch_index.end()) {
        r.Error(g.leaf_node, YamlReader::Child(gp, "leaf"),
                "links to switch '" + g.leaf + "', which is not defined");
      } else {
        leaf = it->second;
      }
    } else if (explicit_switches) {
      r.Error(g.at, YamlReader::Child(gp, "leaf"),
              "is required when fabric lists switches: the leaf switch of this group");
    }
    int type = static_cast<int>(topo.types.size());
    topo.types.push_back(g.type);
    for (int i = 0; i < g.count; ++i) {
      Node node;
      node.name = i < static_cast<int>(g.names.size()) ? g.names[i]
                                                       : g.type.group + "-" + std::to_string(i);
      node.type = type;
      node.leaf = leaf;
      if (!node_names.insert(node.name).second) {
        r.Error(g.names.empty() ? g.at : r.Get(g.at, "nodes"), YamlReader::Child(gp, "nodes"),
                "duplicate node name '" + node.name + "'");
        break;
      }
      topo.nodes.push_back(std::move(node));
    }
  }
  if (r.ErrorCount() > 0) return topo;

  if (!explicit_switches) {
    // Automatic attachment: leaves of nodes_per_leaf nodes in order, spine blocks of
    // leaves_per_spine leaves, a core above several spine blocks.
    const int n = topo.NumNodes();
    const int leaves = (n + nodes_per_leaf - 1) / nodes_per_leaf;
    const int per_spine = leaves_per_spine > 0 ? leaves_per_spine : leaves;
    const int spines = (leaves + per_spine - 1) / per_spine;
    int levels = leaves == 1 ? 1 : spines == 1 ? 2 : 3;
    if (static_cast<int>(topo.tiers.size()) < levels) {
      r.Error(r.Get(fab, "tiers"), "fabric.tiers",
              std::to_string(n) + " nodes in leaves of " + std::to_string(nodes_per_leaf) +
                  " need " + std::to_string(levels) + " tiers, but " +
                  std::to_string(topo.tiers.size()) + " are listed");
      return topo;
    }
    topo.tiers.resize(std::max<size_t>(static_cast<size_t>(levels), 1));
    int top = -1;
    if (levels == 3) {
      topo.switches.push_back({.name = topo.tiers[2].name + "0", .tier = 2});
      top = 0;
    }
    std::vector<int> spine_ids;
    if (levels >= 2) {
      for (int s = 0; s < spines; ++s) {
        spine_ids.push_back(static_cast<int>(topo.switches.size()));
        topo.switches.push_back(
            {.name = topo.tiers[1].name + std::to_string(s), .tier = 1, .parent = top});
      }
    }
    std::vector<int> leaf_ids;
    for (int l = 0; l < leaves; ++l) {
      leaf_ids.push_back(static_cast<int>(topo.switches.size()));
      topo.switches.push_back({.name = topo.tiers[0].name + std::to_string(l),
                               .tier = 0,
                               .parent = levels >= 2 ? spine_ids[l / per_spine] : -1});
    }
    for (int i = 0; i < n; ++i) topo.nodes[i].leaf = leaf_ids[i / nodes_per_leaf];
  }
  auto st = topo.Finalize();
  if (!st) r.Error(fab, "fabric", st.error().message);
  return topo;
}

}  // namespace tianshu::model::internal
