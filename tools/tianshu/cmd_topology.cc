// `tianshu topology show CLUSTER`: what the scheduler sees of a cluster — nodes, accelerators
// by model, switch tiers with their uplinks and oversubscription, links, bisection bandwidth.
// `tianshu topology measured`: what a running server's probes measured between its nodes, beside
// the nominal figures (docs/network.md).
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "client_flags.h"
#include "commands.h"
#include "data_sets.h"
#include "tianshu/model/load.h"

namespace tianshu::cli {
namespace {

nlohmann::json Describe(const model::Topology& t) {
  nlohmann::json j;
  j["name"] = t.name;
  j["nodes"] = t.NumNodes();
  j["gpus"] = t.NumGpus();
  std::map<std::string, int> by_model;
  std::map<std::string, int> by_backend;
  int64_t nic_links = 0;
  for (const auto& n : t.nodes) {
    const auto& type = t.TypeOf(n.id);
    if (type.gpus_per_node > 0) {
      by_model[type.accelerator.model] += type.gpus_per_node;
      by_backend[std::string(model::BackendName(type.backend))] += type.gpus_per_node;
    }
    nic_links += static_cast<int64_t>(type.nics.size());
  }
  j["gpus_by_model"] = by_model;
  j["gpus_by_backend"] = by_backend;
  nlohmann::json groups = nlohmann::json::array();
  std::map<int, int> nodes_per_type;
  for (const auto& n : t.nodes) nodes_per_type[n.type]++;
  for (size_t i = 0; i < t.types.size(); ++i) {
    const auto& s = t.types[i];
    groups.push_back({{"name", s.group},
                      {"nodes", nodes_per_type[static_cast<int>(i)]},
                      {"accelerator", s.accelerator.model},
                      {"gpus_per_node", s.gpus_per_node},
                      {"backend", model::BackendName(s.backend)},
                      {"interconnect", model::IntraNodeKindName(s.intra_kind)},
                      {"interconnect_gbps", s.intra_bandwidth.Gbps()},
                      {"nvlink_domain_size", s.nvlink_domain_size},
                      {"nics", s.nics.size()},
                      {"injection_gbps", s.Injection().Gbps()},
                      {"nvme_bytes", s.nvme_capacity_bytes}});
  }
  j["node_groups"] = groups;
  nlohmann::json tiers = nlohmann::json::array();
  for (size_t ti = 0; ti < t.tiers.size(); ++ti) {
    int count = 0;
    double uplink = 0, max_uplink = 0, downlink = 0;
    for (const auto& s : t.switches) {
      if (s.tier != static_cast<int>(ti)) continue;
      ++count;
      uplink += s.uplink.Gbps();
      downlink += s.downlink.Gbps();
      max_uplink = std::max(max_uplink, s.uplink.Gbps());
    }
    const auto& tier = t.tiers[ti];
    // Links: from the nodes (one per NIC) into the leaves; from each switch to its parent, its
    // uplink capacity in ports of the tier's link speed.
    int64_t links_up = 0;
    if (tier.link_bandwidth.bits_per_sec > 0) {
      for (const auto& s : t.switches) {
        if (s.tier == static_cast<int>(ti) && s.parent >= 0) {
          links_up += static_cast<int64_t>(
              std::ceil(static_cast<double>(s.uplink.bits_per_sec) /
                        static_cast<double>(tier.link_bandwidth.bits_per_sec)));
        }
      }
    }
    tiers.push_back({{"name", tier.name},
                     {"switches", count},
                     {"downlink_gbps", downlink},
                     {"uplink_gbps", uplink},
                     {"uplink_gbps_per_switch", max_uplink},
                     {"oversubscription", tier.oversubscription},
                     {"latency_ns", tier.latency_ns},
                     {"links_down", ti == 0 ? nic_links : 0},
                     {"links_up", links_up}});
  }
  // Links into the leaves are the NICs; into higher tiers, the children's uplinks.
  for (size_t ti = 1; ti < tiers.size(); ++ti) tiers[ti]["links_down"] = tiers[ti - 1]["links_up"];
  j["tiers"] = tiers;
  j["bisection_gbps"] = t.BisectionBandwidth().Gbps();
  return j;
}

void PrintText(const nlohmann::json& j) {
  fmt::print("cluster {}: {} nodes, {} GPUs\n", j["name"].get<std::string>(), j["nodes"].get<int>(),
             j["gpus"].get<int>());
  fmt::print("\naccelerators by model:\n");
  for (auto& [model, n] : j["gpus_by_model"].items())
    fmt::print("  {:<14} {:>8}\n", model, n.get<int>());
  fmt::print("\nnode groups:\n  {:<22} {:>6} {:<12} {:>4} {:<9} {:>10} {:>5} {:>12}\n", "group",
             "nodes", "accelerator", "gpus", "intra", "intra Gb/s", "nics", "inject Gb/s");
  for (auto& g : j["node_groups"]) {
    fmt::print("  {:<22} {:>6} {:<12} {:>4} {:<9} {:>10.0f} {:>5} {:>12.0f}\n",
               g["name"].get<std::string>(), g["nodes"].get<int>(),
               g["accelerator"].get<std::string>(), g["gpus_per_node"].get<int>(),
               g["interconnect"].get<std::string>(), g["interconnect_gbps"].get<double>(),
               g["nics"].get<int>(), g["injection_gbps"].get<double>());
  }
  fmt::print("\nfabric tiers (bottom-up):\n  {:<8} {:>8} {:>16} {:>16} {:>8} {:>10} {:>10}\n",
             "tier", "switches", "downlink Gb/s", "uplink Gb/s", "oversub", "links in", "links up");
  for (auto& t : j["tiers"]) {
    fmt::print("  {:<8} {:>8} {:>16.0f} {:>16.0f} {:>8.2f} {:>10} {:>10}\n",
               t["name"].get<std::string>(), t["switches"].get<int>(),
               t["downlink_gbps"].get<double>(), t["uplink_gbps"].get<double>(),
               t["oversubscription"].get<double>(), t["links_down"].get<int64_t>(),
               t["links_up"].get<int64_t>());
  }
  fmt::print("\nbisection bandwidth: {:.0f} Gb/s\n", j["bisection_gbps"].get<double>());
}

// The measured network of a running server, as a table of pairs and the measured leaves.
int PrintMeasured(const Common& c) {
  auto client = MakeClient(c.client);
  if (!client) {
    std::cerr << "tianshu topology measured: " << client.error().message << "\n";
    return kExitInvalid;
  }
  auto r = (*client)->Get("/v1/topology/measured");
  if (auto code = Failed(r, "topology measured")) return *code;
  if (c.out.Structured()) {
    PrintStructured(r->body, c.out);
    return kExitOk;
  }
  Table t({"A", "B", "MEASURED", "NOMINAL", "CLASS BEST", "STATE", "METHOD", "AGE"}, {2, 3, 4});
  int slow = 0;
  for (const auto& p : r->body["pairs"]) {
    const bool is_slow = p.value("slow", false), stale = p.value("stale", false);
    slow += is_slow;
    const double failures = p.value("failures", 0.0);
    t.Add({S(p, "a"), S(p, "b"), fmt::format("{:.3g} GB/s", p.value("measured_gbps", 0.0)),
           fmt::format("{:.3g} GB/s", p.value("nominal_gbps", 0.0)),
           fmt::format("{:.3g} GB/s", p.value("class_best_gbps", 0.0)),
           std::string(is_slow ? (p.value("slow_confirmed", false) ? "slow" : "slow (once)")
                       : stale ? "stale"
                               : "ok") +
               (failures > 0 ? fmt::format(" ({} failed)", failures) : ""),
           S(p, "method"), Age(p.value("measured_ms", int64_t{0}))});
  }
  t.Print(std::cout);
  const auto& probes = r->body["probes"];
  std::cout << fmt::format(
      "{} pairs measured, {} slow; probes {}: {} running, {} done, {} failed, {} gave way\n",
      r->body["pairs"].size(), slow, probes.value("enabled", false) ? "on" : "off",
      probes.value("running", 0), probes.value("done", 0), probes.value("failed", 0),
      probes.value("gave_way", 0));
  for (const auto& g : r->body["groups"]) std::cout << "measured leaf: " << JoinArray(g) << "\n";
  return kExitOk;
}

}  // namespace

Runner RegisterTopology(CLI::App& app) {
  struct Args {
    std::string cluster;
    std::string server_gpu = "A100-80GB";
    std::string data;
    OutputFlag out;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("topology", "Inspect a cluster topology");
  cmd->require_subcommand(1);
  auto* show = cmd->add_subcommand("show", "Nodes, accelerators, tiers, links, bisection");
  show->add_option("cluster", args->cluster,
                   "A cluster YAML, a Lingjun topo.csv, an openb node list, the shipped "
                   "'lingjun' or 'openb', or fat-tree:nodes=N,...")
      ->required();
  show->add_option("--data", args->data,
                   "Folder of the shipped data sets (default: $TIANSHU_DATA, else "
                   "share/tianshu/data beside the binary, else the source tree's data/)");
  show->add_option("--server-gpu", args->server_gpu,
                   "Accelerator of the servers of an imported Lingjun topology (8 per host)")
      ->capture_default_str();
  AddOutputFlag(show, &args->out);
  auto measured_args = std::make_shared<Common>();
  auto* measured = cmd->add_subcommand(
      "measured", "What a running server's probes measured between its nodes (docs/network.md)");
  AddClientFlags(measured, &measured_args->client);
  AddClientOutputFlag(measured, &measured_args->out);
  return [args, measured, measured_args] {
    if (measured->parsed()) return PrintMeasured(*measured_args);
    Result<std::string> spec = ResolveClusterSpec(args->cluster, args->data);
    Result<model::Topology> t =
        spec ? model::LoadCluster(*spec) : Result<model::Topology>(std::unexpected(spec.error()));
    if (t && t->name == "lingjun" && args->server_gpu != "A100-80GB") {
      std::string file = *spec;
      if (file.starts_with("lingjun:")) file.erase(0, 8);
      t = model::ImportLingjun(file, args->server_gpu);
    }
    if (!t) {
      std::cerr << t.error().message << "\n";
      return kExitInvalid;
    }
    nlohmann::json j = Describe(*t);
    if (args->out.Json()) {
      std::cout << j.dump(2) << "\n";
    } else {
      PrintText(j);
    }
    return kExitOk;
  };
}

}  // namespace tianshu::cli
