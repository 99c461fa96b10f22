#include "tianshu/server/placer.h"

#include <algorithm>

#include "tianshu/model/accelerator.h"

namespace tianshu::server {
namespace {

Result<model::ServerType> TypeFor(const wire::Hardware& hw) {
  std::vector<wire::Device> devices = hw.devices;
  std::sort(devices.begin(), devices.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  const std::string& model_name = devices.front().model;
  const int gpus = static_cast<int>(devices.size());
  auto type =
      model::DefaultServerType(model::FindAccelerator(model_name) ? model_name : "A100-80GB", gpus,
                               1, Bandwidth::FromGbps(100));
  if (!type) return type;
  if (!model::FindAccelerator(model_name)) {
    type->accelerator.model = model_name.empty() ? "unknown" : model_name;
    if (auto v = model::ParseVendor(devices.front().vendor)) type->accelerator.vendor = *v;
    type->accelerator.memory_bytes = devices.front().memory_bytes;
    type->backend = model::DefaultBackend(type->accelerator.vendor);
  }
  if (!hw.backend.empty()) {
    if (auto b = model::ParseBackend(hw.backend)) type->backend = *b;
  }
  if (hw.cpu_milli > 0) type->cpu_milli = hw.cpu_milli;
  if (hw.memory_bytes > 0) type->memory_bytes = hw.memory_bytes;
  type->numa_nodes = std::max(1, hw.numa_nodes);
  for (int g = 0; g < gpus; ++g) {
    int numa = devices[static_cast<size_t>(g)].numa;
    type->gpu_numa[static_cast<size_t>(g)] =
        numa >= 0 && numa < type->numa_nodes ? numa : g * type->numa_nodes / gpus;
  }
  for (auto& nic : type->nics) nic.numa = std::min(nic.numa, type->numa_nodes - 1);
  type->labels = hw.labels;  // node_selector matches them (the engine reads the topology's)
  return type;
}

std::string TypeKey(const model::ServerType& t) {
  std::string key = t.accelerator.model + "/" + std::to_string(t.gpus_per_node) + "/" +
                    std::to_string(t.cpu_milli) + "/" + std::to_string(t.memory_bytes) + "/" +
                    std::to_string(t.numa_nodes) + "/" + std::string(model::BackendName(t.backend));
  for (const auto& [k, v] : t.labels) key += "/" + k + "=" + v;
  return key;
}

}  // namespace

Result<std::unique_ptr<ClusterView>> BuildClusterView(
    const std::vector<NodeHardware>& nodes, const std::map<std::string, std::string>* leaves) {
  auto view = std::make_unique<ClusterView>();
  model::Topology& t = view->topology;
  t.name = "registered";
  t.tiers.push_back({"leaf", 1000, 1.0, Bandwidth::FromGbps(400)});
  t.tiers.push_back({"spine", 1000, 1.0, Bandwidth::FromGbps(400)});
  t.switches.push_back({.name = "spine0", .tier = 1, .parent = -1});
  std::map<std::string, int> leaf_ids, type_ids;
  for (const auto& n : nodes) {
    if (!n.hardware || n.hardware->devices.empty()) continue;
    auto type = TypeFor(*n.hardware);
    if (!type) return std::unexpected(Error{"node " + n.name + ": " + type.error().message});
    std::string key = TypeKey(*type);
    auto [tit, new_type] = type_ids.try_emplace(key, static_cast<int>(t.types.size()));
    if (new_type) {
      type->group = "type" + std::to_string(t.types.size());
      t.types.push_back(*type);
    }
    std::string leaf = "leaf0";
    if (auto it = n.hardware->labels.find("leaf"); it != n.hardware->labels.end()) {
      leaf = it->second;
    }
    if (leaves) {
      if (auto it = leaves->find(n.name); it != leaves->end()) leaf = it->second;
    }
    auto [lit, new_leaf] = leaf_ids.try_emplace(leaf, static_cast<int>(t.switches.size()));
    if (new_leaf) t.switches.push_back({.name = leaf, .tier = 0, .parent = 0});
    model::Node node;
    node.id = static_cast<int>(t.nodes.size());
    node.name = n.name;
    node.type = tit->second;
    node.leaf = lit->second;
    t.nodes.push_back(node);
    view->index[n.name] = node.id;
    view->node_names.push_back(n.name);
    std::vector<int> idx;
    for (const auto& d : n.hardware->devices) idx.push_back(d.index);
    std::sort(idx.begin(), idx.end());
    view->device_index.push_back(idx);
  }
  if (t.nodes.empty()) return view;
  for (size_t i = 0; i < t.switches.size(); ++i) t.switches[i].id = static_cast<int>(i);
  if (auto s = t.Finalize(); !s) return std::unexpected(s.error());
  return view;
}

}  // namespace tianshu::server
