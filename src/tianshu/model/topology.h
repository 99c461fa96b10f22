// The cluster as the scheduler sees it: server types, nodes, and the switch tree above them.
//
// The fabric is held as a tree of logical switches, tier 0 = leaf (ToR or a rail group),
// tier 1 = spine, tier 2 = core. A "switch" here is the block of physical switches that serves
// one subtree (a rail-optimised leaf of 8 rail switches is one leaf block), which is what
// placement and the cost model reason about. Capacities are derived bottom-up: a leaf's
// downlink is the NIC bandwidth of its nodes, its uplink that divided by the tier's
// oversubscription, and so on up to the single root.
//   Topology t = *GenerateFatTree({.nodes = 256, .nodes_per_leaf = 16});
//   int tier = t.CommonTier(0, 17);   // 1: the two nodes meet at the spine
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/base/units.h"
#include "tianshu/model/accelerator.h"

namespace tianshu::model {

// How the accelerators inside one server talk to each other.
enum class IntraNodeKind {
  kNvSwitch,  // all-to-all NVLink through NVSwitch (HGX, Ascend HCCS full mesh)
  kNvLink,    // point-to-point NVLink/bridges inside islands of nvlink_domain_size GPUs
  kPcie,      // PCIe only
};
std::string_view IntraNodeKindName(IntraNodeKind k);

struct Nic {
  int rail = 0;         // rail index: NIC r of every node goes to rail switch r
  Bandwidth bandwidth;  // line rate
  int numa = 0;         // NUMA node the NIC hangs off
  int pcie_switch = 0;  // PCIe switch shared with GPUs of the same index
};

// The hardware of one node group; every node of the group is identical.
struct ServerType {
  std::string group;  // node group name, e.g. "a100"
  AcceleratorSpec accelerator;
  int gpus_per_node = 0;
  Backend backend = Backend::kCuda;
  IntraNodeKind intra_kind = IntraNodeKind::kNvSwitch;
  Bandwidth intra_bandwidth;  // per GPU, one direction (NVLink) or the PCIe link (PCIe)
  int64_t intra_latency_ns = 0;
  int nvlink_domain_size = 0;  // GPUs per NVLink island (= gpus_per_node for NVSwitch)
  Bandwidth pcie_bandwidth;    // GPU <-> host, one direction
  int numa_nodes = 1;
  std::vector<int> gpu_numa;         // NUMA node of each GPU
  std::vector<int> gpu_pcie_switch;  // PCIe switch of each GPU
  std::vector<Nic> nics;
  int64_t nvme_capacity_bytes = 0;
  Bandwidth nvme_write_bandwidth;
  Bandwidth nvme_read_bandwidth;
  int64_t cpu_milli = 0;     // CPU cores x 1000
  int64_t memory_bytes = 0;  // host memory
  std::map<std::string, std::string> labels;

  // Sum of NIC line rates: what the node can inject into the fabric.
  Bandwidth Injection() const;
  // NVLink island of a local GPU index.
  int NvlinkIsland(int local_gpu) const;
};

struct Node {
  int id = 0;
  std::string name;
  int type = 0;       // index into Topology::types
  int leaf = -1;      // switch id of its leaf
  int first_gpu = 0;  // global index of its GPU 0
};

// A tier of the fabric, bottom-up.
struct Tier {
  std::string name;             // "leaf", "spine", "core"
  int64_t latency_ns = 1000;    // one hop through a switch of this tier
  double oversubscription = 1;  // downlink capacity / uplink capacity of a switch
  Bandwidth link_bandwidth;     // speed of one uplink port (for link counts)
};

struct Switch {
  int id = 0;
  std::string name;
  int tier = 0;               // index into Topology::tiers
  int parent = -1;            // switch id, -1 at the root
  std::vector<int> children;  // child switch ids (tier > 0)
  std::vector<int> nodes;     // attached nodes (leaves only)
  Bandwidth downlink;         // aggregate capacity towards its children
  Bandwidth uplink;           // aggregate capacity towards its parent (0 at the root)
  int gpus = 0;               // GPUs below it
};

class Topology {
 public:
  std::string name;
  std::vector<ServerType> types;
  std::vector<Node> nodes;
  std::vector<Switch> switches;
  std::vector<Tier> tiers;

  // Derives children lists, GPU offsets, capacities and ancestor tables. Fails on a broken
  // tree (no root, several roots, a leaf with children, a cycle, a node on a non-leaf).
  [[nodiscard]] Status Finalize();

  int NumNodes() const { return static_cast<int>(nodes.size()); }
  int NumGpus() const { return num_gpus_; }
  int Root() const { return root_; }
  const ServerType& TypeOf(int node) const { return types[nodes[node].type]; }
  int GpusOn(int node) const { return TypeOf(node).gpus_per_node; }

  // Switch id of the node's ancestor at `tier` (0 = its leaf).
  int AncestorAt(int node, int tier) const { return ancestors_[node * tiers.size() + tier]; }
  // The lowest tier at which two nodes meet: -1 for the same node, 0 under the same leaf,
  // 1 under the same spine, ... The number of switch hops between them is 2 * tier + 1.
  int CommonTier(int a, int b) const;
  // Node ids below a switch, in id order.
  std::vector<int> NodesUnder(int switch_id) const;

  // Aggregate bandwidth across the root's balanced cut (see topology.cc for the method).
  Bandwidth BisectionBandwidth() const;

 private:
  int num_gpus_ = 0;
  int root_ = -1;
  std::vector<int> ancestors_;  // nodes.size() x tiers.size()
};

// Options of the fat-tree generator: `nodes` servers of one type, `nodes_per_leaf` per leaf
// block, `leaves_per_spine` leaves per spine block (0: one spine block for all, a 2-tier
// leaf/spine fabric); a core tier is added when there is more than one spine block.
struct FatTreeOptions {
  int nodes = 256;
  int gpus_per_node = 8;
  std::string gpu = "A100-80GB";
  int nodes_per_leaf = 16;
  int leaves_per_spine = 0;
  double oversubscription = 1;        // at the leaf uplinks
  double spine_oversubscription = 1;  // at the spine uplinks (3-tier only)
  int nics = 8;
  Bandwidth nic_bandwidth = Bandwidth::FromGbps(200);
  std::string name_prefix = "node";
};

// Builds the server type of the generator (NVSwitch, rails, 2 NUMA nodes, 2 TB NVMe).
[[nodiscard]] Result<ServerType> DefaultServerType(const std::string& gpu, int gpus_per_node,
                                                   int nics, Bandwidth nic_bandwidth);
[[nodiscard]] Result<Topology> GenerateFatTree(const FatTreeOptions& options);
// Parses "fat-tree:nodes=256,gpus_per_node=8,gpu=A100-80GB,leaf_radix=16,oversubscription=2".
[[nodiscard]] Result<FatTreeOptions> ParseFatTreeSpec(std::string_view spec);

}  // namespace tianshu::model
