// Measured bandwidths between node pairs or GPU pairs, which replace the nominal figures of
// the topology in the cost model wherever they cover a pair.
//
// File format (CSV, UTF-8; `#` starts a comment; blank lines ignored; an optional header
// line `a,b,gbps`):
//   node-3,node-7,23.1      node pair: bus bandwidth in GB/s (bytes) the two nodes reach
//                           with all their NICs, e.g. nccl-tests all_reduce busbw on 2 nodes
//   node-3:0,node-3:5,245   GPU pair (NODE:LOCAL_GPU): GB/s one GPU reaches to the other,
//                           e.g. a p2p probe or nccl-tests sendrecv busbw on that pair
// A pair given once applies in both directions; a second line for the reverse direction
// overrides it for that direction. Values are achieved figures: no efficiency is applied.
// A group that uses k of a node's N NICs gets k/N of a node-pair figure.
//   auto m = LoadBandwidthMatrix("probe.csv", topo);
//   CostOptions o{.measured = &*m};
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "tianshu/base/status.h"
#include "tianshu/model/topology.h"

namespace tianshu::comm {

class BandwidthMatrix {
 public:
  // Bytes per second between two nodes / two global GPU ids, if measured.
  std::optional<double> NodePair(int a, int b) const { return Find(node_pairs_, a, b); }
  std::optional<double> GpuPair(int a, int b) const { return Find(gpu_pairs_, a, b); }
  bool HasNodePairs() const { return !node_pairs_.empty(); }
  bool HasGpuPairs() const { return !gpu_pairs_.empty(); }
  size_t size() const { return node_pairs_.size() + gpu_pairs_.size(); }

  // Directional setters in GB/s; the reverse direction is set too unless already given
  // explicitly.
  void SetNodePair(int a, int b, double gbytes_per_sec) { Set(node_pairs_, a, b, gbytes_per_sec); }
  void SetGpuPair(int a, int b, double gbytes_per_sec) { Set(gpu_pairs_, a, b, gbytes_per_sec); }

 private:
  struct Entry {
    double bytes_per_sec = 0;
    bool explicit_direction = false;
  };
  using Map = std::unordered_map<uint64_t, Entry>;
  static uint64_t Key(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static std::optional<double> Find(const Map& m, int a, int b) {
    if (m.empty()) return std::nullopt;
    auto it = m.find(Key(a, b));
    if (it == m.end()) return std::nullopt;
    return it->second.bytes_per_sec;
  }
  static void Set(Map& m, int a, int b, double gbytes_per_sec) {
    m[Key(a, b)] = {gbytes_per_sec * 1e9, true};
    auto& rev = m[Key(b, a)];
    if (!rev.explicit_direction) rev.bytes_per_sec = gbytes_per_sec * 1e9;
  }
  Map node_pairs_;
  Map gpu_pairs_;
};

// Parses the format above, resolving names against `topo`. Errors name the line:
// "probe.csv:4: unknown node 'node-99'".
[[nodiscard]] Result<BandwidthMatrix> ParseBandwidthMatrix(const std::string& name,
                                                           const std::string& text,
                                                           const model::Topology& topo);
[[nodiscard]] Result<BandwidthMatrix> LoadBandwidthMatrix(const std::string& path,
                                                          const model::Topology& topo);

}  // namespace tianshu::comm
