// The one table of constants of the communication cost model, with where each comes from.
//
// Efficiencies turn nominal link rates of the topology into the bus bandwidth collectives
// reach; latencies are per algorithm step on top of the link latencies the topology gives.
// Change a value here only with its source, and rerun the published-figure tests
// (cost_model_published_test.cc), which check them all together.
//   double busbw = nvlink_bytes_per_sec * kConstants.nvlink_efficiency;
//   double hop = topo_latency + kConstants.net_proto_us[2] * 1e-6;
#pragma once

namespace tianshu::comm {

struct Constants {
  // --- Bandwidth efficiencies (achieved bus bandwidth / nominal one-direction rate) ---
  // NVLink/NVSwitch ring: nccl-tests all_reduce_perf busbw on 8xA100 SXM ~230 GB/s of 300
  // (NVIDIA DGX A100 user guide / nccl-tests results) and 8xH100 SXM ring ~370 GB/s of 450
  // (NVIDIA NCCL 2.18 release figures): 0.77 and 0.82, one value for both.
  double nvlink_efficiency = 0.80;
  // Point-to-point over NVLink (one pair uses the links of one GPU, no pipelining across
  // peers): p2pBandwidthLatencyTest on A100 reaches ~0.85 of the unidirectional rate.
  double p2p_nvlink_efficiency = 0.85;
  // PCIe Gen4 x16: ~22 GB/s of 25 achievable (p2pBandwidthLatencyTest).
  double pcie_efficiency = 0.88;
  // Crossing the root complex of one CPU, or the CPU interconnect between sockets
  // (NCCL topology: PATH_PHB vs PATH_SYS; measured P2P through the host ~0.75 / ~0.6).
  double host_bridge_factor = 0.75;
  double cross_numa_factor = 0.6;
  // RDMA NIC goodput / line rate: multi-node DGX A100 with 8x HDR 200 Gb/s reaches
  // ~190 GB/s of 200 GB/s busbw in nccl-tests (NVIDIA DGX SuperPOD reference architecture).
  double net_efficiency = 0.93;
  // Double binary tree versus ring on the same links: NCCL derates tree by 0.9 and by a
  // medium-size correction (tuning.cc); Jeaugey, "Massively scale your deep learning
  // training with NCCL 2.4" (2019) shows tree at ~80-90% of ring bandwidth at large sizes.
  double tree_efficiency = 0.85;
  // NVLS AllReduce on 8xH100: ~480 GB/s busbw (NVIDIA, "NCCL 2.17 NVLink SHARP" notes),
  // i.e. algbw 274 GB/s = 0.61 of the 450 GB/s per-GPU NVLink rate.
  double nvls_efficiency = 0.61;
  // All-to-all: many small flows and incast; nccl-tests alltoall_perf on DGX A100 multi-node
  // reaches ~0.8 of the all_reduce busbw.
  double alltoall_efficiency = 0.80;

  // --- Protocol bandwidth factors (NCCL protocols; tuning.cc applies the same shape) ---
  double ll_bw_factor = 0.25;       // LL: 4 of 8 bytes are flags, one store per thread
  double ll_tree_bw_factor = 0.26;  // LL on trees
  double ll128_bw_factor = 0.92;    // LL128: 120 of 128 bytes carry data

  // --- Latencies in microseconds, per protocol {LL, LL128, Simple} ---
  // Launch and synchronisation base per collective: NCCL 2.1x measures 6-14 us.
  double base_us[3] = {6.0, 12.0, 9.0};
  // Per step inside a node, added to the topology's intra-node link latency:
  // NCCL per-hop NVLink ~0.5 / 1.9 / 3.4 us for LL / LL128 / Simple.
  double intra_proto_us[3] = {0.0, 1.0, 2.5};
  // Per step across the network, added to the NIC and switch latencies: NCCL ring net hop
  // ~2.7 / 4 / 9.6 us.
  double net_proto_us[3] = {0.5, 1.5, 6.5};
  // Tree steps with Simple move 256 KB chunks through a store-and-forward pipeline: NCCL
  // charges tens of microseconds for it.
  double tree_simple_extra_us = 20.0;
  // NIC + verbs send/receive overhead per network step (ConnectX-6 ib_write_lat ~1.5 us).
  double nic_hop_us = 1.5;
  // Fallback per-step latencies where the topology gives none.
  double nvlink_hop_us = 0.7;
  double pcie_hop_us = 1.5;
  // Point-to-point base (ncclSend/ncclRecv launch + handshake).
  double p2p_base_us = 5.0;
  // All-to-all: per-peer setup of the grouped send/receive calls.
  double alltoall_per_peer_us = 0.15;

  // --- Fallbacks for nodes the topology describes incompletely ---
  double fallback_pcie_gbytes = 22.0;  // PCIe Gen4 x16
  double fallback_nic_gbytes = 3.0;    // 25 GbE TCP when no NIC is listed
};

inline constexpr Constants kConstants{};

}  // namespace tianshu::comm
