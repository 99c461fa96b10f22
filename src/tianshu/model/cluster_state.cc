#include "tianshu/model/cluster_state.h"

#include <algorithm>

namespace tianshu::model {

ClusterState::ClusterState(const Topology& topology) : topology_(&topology) {
  const int n = topology.NumNodes();
  gpu_free_.assign(topology.NumGpus(), kMilliPerGpu);
  free_milli_ = int64_t{topology.NumGpus()} * kMilliPerGpu;
  auto gpu_node = std::make_shared<std::vector<int>>(topology.NumGpus());
  cpu_cap_.resize(n);
  mem_cap_.resize(n);
  storage_cap_.resize(n);
  for (int i = 0; i < n; ++i) {
    const ServerType& t = topology.TypeOf(i);
    for (int g = 0; g < t.gpus_per_node; ++g) (*gpu_node)[topology.nodes[i].first_gpu + g] = i;
    cpu_cap_[i] = t.cpu_milli;
    mem_cap_[i] = t.memory_bytes;
    storage_cap_[i] = t.nvme_write_bandwidth.bits_per_sec;
  }
  gpu_node_ = std::move(gpu_node);
  cpu_free_ = cpu_cap_;
  mem_free_ = mem_cap_;
  storage_free_ = storage_cap_;
  healthy_.assign(n, 1);
  labels_ = std::make_shared<Labels>(n);
  node_whole_.assign(n, 0);
  node_usable_.assign(n, 0);
  node_milli_.assign(n, 0);
  const size_t s = topology.switches.size();
  sw_whole_.assign(s, 0);
  sw_usable_.assign(s, 0);
  sw_max_node_whole_.assign(s, 0);
  sw_milli_.assign(s, 0);
  for (int i = 0; i < n; ++i) {
    int g = topology.GpusOn(i);
    node_whole_[i] = g;
    node_usable_[i] = g;
    node_milli_[i] = int64_t{g} * kMilliPerGpu;
    // Unhealthy nodes count as nothing free; all start healthy.
    for (int sw = topology.nodes[i].leaf; sw >= 0; sw = topology.switches[sw].parent) {
      sw_whole_[sw] += g;
      sw_usable_[sw] += g;
      sw_milli_[sw] += int64_t{g} * kMilliPerGpu;
      sw_max_node_whole_[sw] = std::max(sw_max_node_whole_[sw], g);
    }
  }
}

double ClusterState::SwitchLoad(int sw) const {
  const int gpus = topology_->switches[sw].gpus;
  if (gpus == 0) return 0;
  return 1.0 - static_cast<double>(sw_milli_[sw]) / (static_cast<double>(gpus) * kMilliPerGpu);
}

std::string ClusterState::Label(int node, const std::string& key) const {
  const auto& own_labels = (*labels_)[node];
  auto own = own_labels.find(key);
  if (own != own_labels.end()) return own->second;
  const ServerType& t = topology_->TypeOf(node);
  auto typed = t.labels.find(key);
  if (typed != t.labels.end()) return typed->second;
  if (key == "tianshu.io/gpu") return t.accelerator.model;
  if (key == "tianshu.io/group") return t.group;
  return {};
}

bool ClusterState::MatchesSelector(int node,
                                   const std::map<std::string, std::string>& selector) const {
  for (const auto& [k, v] : selector) {
    if (Label(node, k) != v) return false;
  }
  return true;
}

// Recomputes a node's counts from its GPUs and walks the change up the switch tree; the
// maximum per node is recomputed from the children of each ancestor (fan-out, not GPUs).
void ClusterState::RefreshNode(int node) {
  const Topology& t = *topology_;
  const int first = t.nodes[node].first_gpu;
  const int count = t.GpusOn(node);
  int whole = 0, usable = 0;
  int64_t milli = 0;
  if (healthy_[node]) {
    for (int g = first; g < first + count; ++g) {
      whole += gpu_free_[g] == kMilliPerGpu;
      usable += gpu_free_[g] > 0;
      milli += gpu_free_[g];
    }
  }
  const int dw = whole - node_whole_[node];
  const int du = usable - node_usable_[node];
  const int64_t dm = milli - node_milli_[node];
  // What the level below gives each switch on the way up, before and after.
  int below_was = node_whole_[node];
  int below_is = whole;
  node_whole_[node] = whole;
  node_usable_[node] = usable;
  node_milli_[node] = milli;
  for (int sw = t.nodes[node].leaf; sw >= 0; sw = t.switches[sw].parent) {
    sw_whole_[sw] += dw;
    sw_usable_[sw] += du;
    sw_milli_[sw] += dm;
    const int was = sw_max_node_whole_[sw];
    int best = std::max(was, below_is);
    if (below_is < was && below_was == was) {  // the largest may have shrunk: look again
      const Switch& s = t.switches[sw];
      best = 0;
      for (int n : s.nodes) best = std::max(best, node_whole_[n]);
      for (int c : s.children) best = std::max(best, sw_max_node_whole_[c]);
    }
    sw_max_node_whole_[sw] = best;
    below_was = was;
    below_is = best;
  }
}

Status ClusterState::TakeGpu(int gpu, int milli) {
  if (gpu < 0 || gpu >= static_cast<int>(gpu_free_.size()))
    return Fail("no GPU ", std::to_string(gpu));
  if (milli < 0 || milli > gpu_free_[gpu]) {
    return Fail("GPU ", std::to_string(gpu), " has ", std::to_string(gpu_free_[gpu]),
                " milli free, asked for ", std::to_string(milli));
  }
  gpu_free_[gpu] -= milli;
  free_milli_ -= milli;
  RefreshNode((*gpu_node_)[gpu]);
  return Ok();
}

Status ClusterState::ReturnGpu(int gpu, int milli) {
  if (gpu < 0 || gpu >= static_cast<int>(gpu_free_.size()))
    return Fail("no GPU ", std::to_string(gpu));
  if (milli < 0 || gpu_free_[gpu] + milli > kMilliPerGpu) {
    return Fail("GPU ", std::to_string(gpu), " cannot take back ", std::to_string(milli), " milli");
  }
  gpu_free_[gpu] += milli;
  free_milli_ += milli;
  RefreshNode((*gpu_node_)[gpu]);
  return Ok();
}

Status ClusterState::TakeHost(int node, int64_t cpu_milli, int64_t memory_bytes,
                              int64_t storage_bps) {
  if (node < 0 || node >= static_cast<int>(cpu_free_.size()))
    return Fail("no node ", std::to_string(node));
  if (cpu_milli > cpu_free_[node] || memory_bytes > mem_free_[node] ||
      storage_bps > storage_free_[node] || cpu_milli < 0 || memory_bytes < 0 || storage_bps < 0) {
    return Fail("node ", topology_->nodes[node].name,
                " lacks the CPU, memory or storage asked for");
  }
  cpu_free_[node] -= cpu_milli;
  mem_free_[node] -= memory_bytes;
  storage_free_[node] -= storage_bps;
  return Ok();
}

Status ClusterState::ReturnHost(int node, int64_t cpu_milli, int64_t memory_bytes,
                                int64_t storage_bps) {
  if (node < 0 || node >= static_cast<int>(cpu_free_.size()))
    return Fail("no node ", std::to_string(node));
  if (cpu_free_[node] + cpu_milli > cpu_cap_[node] ||
      mem_free_[node] + memory_bytes > mem_cap_[node] ||
      storage_free_[node] + storage_bps > storage_cap_[node]) {
    return Fail("node ", topology_->nodes[node].name, " would exceed its capacity");
  }
  cpu_free_[node] += cpu_milli;
  mem_free_[node] += memory_bytes;
  storage_free_[node] += storage_bps;
  return Ok();
}

void ClusterState::SetHealthy(int node, bool healthy) {
  healthy_[node] = healthy ? 1 : 0;
  RefreshNode(node);
}

void ClusterState::SetLabel(int node, const std::string& key, const std::string& value) {
  if (labels_.use_count() > 1) labels_ = std::make_shared<Labels>(*labels_);  // copy on write
  (*labels_)[node][key] = value;
}

void ClusterState::SetHostCapacity(int node, int64_t cpu_milli, int64_t memory_bytes) {
  cpu_cap_[node] = cpu_free_[node] = cpu_milli;
  mem_cap_[node] = mem_free_[node] = memory_bytes;
}

}  // namespace tianshu::model
