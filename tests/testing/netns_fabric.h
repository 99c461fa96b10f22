// A two-leaf network fabric built from Linux network namespaces on one machine (issue 18), for
// tests of what the scheduler measures about links: four node namespaces, two leaf bridges in a
// switch namespace joined by one veth pair (the inter-leaf link, which `tc` can slow down), and a
// management bridge in the root namespace where the server listens, off the shaped links.
//   auto fabric = NetnsFabric::Create();                 // Result<std::unique_ptr<NetnsFabric>>
//   (*fabric)->ShapeInterLeaf(200'000'000);              // the leaves joined at 200 Mbit/s
//
// Layout (P = the owner's pid, X = a second octet no root-namespace route uses):
//
//   root namespace    bridge tsfPm 10.X.0.254/24 (server_address) -- tsfPm1..tsfPm4 veths
//                                        |
//   tsfPn1..tsfPn4    mgmt0 10.X.0.i/24  |  data0 10.X.1.i/24 (one subnet for all nodes)
//                                               |
//   tsfPsw            d1..d4 on leaf bridges brA / brB; brA -upA==upB- brB (inter-leaf link)
//
// Leaf A = {n1, n3}, leaf B = {n2, n4}: in the order of their names the leaves interleave, so a
// first fit over nodes sorted by name takes a pair that crosses the inter-leaf link.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the `ip` and `tc` of iproute2; Available()
// says why not. One fabric per process at a time (names come from the pid). Nothing here is
// thread-safe; every method runs commands and waits for them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/status.h"

namespace tianshu::testing {

struct FabricNode {
  std::string name;          // "n1": the node name its agent registers
  std::string netns;         // "tsf<pid>n1"
  std::string leaf;          // "A" or "B"
  std::string data_address;  // on data0, "10.X.1.1": where ranks and probes talk
  std::string mgmt_address;  // on mgmt0, "10.X.0.1": where the agent talks to the server
};

// How much a shaped link queues before it drops, smallest last.
enum class LinkQueue {
  kDeep,     // 64 KiB burst (a veth's largest GSO packet), 50 ms: TCP fills it, hardly a drop
  kShallow,  // 16 KiB burst, 10 ms: a shallow switch port; bursts drop and TCP retransmits
};

class NetnsFabric {
 public:
  static constexpr std::string_view kDataInterface = "data0";
  static constexpr std::string_view kMgmtInterface = "mgmt0";

  // Ok when this process can build a fabric: it is root and a network namespace can be made and
  // deleted, and `ip` and `tc` are installed; else why not (a test skips with that message).
  [[nodiscard]] static Status Available();

  // Sweeps the fabrics of dead processes (SweepStale), then builds this process's fabric. On
  // failure whatever was made is removed again and the error names the command that failed.
  [[nodiscard]] static Result<std::unique_ptr<NetnsFabric>> Create();

  // Removes every fabric (namespaces, root-namespace bridge and veths, and with them their
  // qdiscs) whose owner pid no longer runs (/proc/PID is gone); kills the processes still in its
  // namespaces first. Returns the names of what it removed. Safe to call at any time from any
  // process: a live owner's fabric is left alone.
  static std::vector<std::string> SweepStale();

  // The namespaces and root-namespace interfaces that exist now for a fabric owned by `owner`
  // (empty once it is gone).
  static std::vector<std::string> Leftovers(pid_t owner);

  NetnsFabric(const NetnsFabric&) = delete;
  NetnsFabric& operator=(const NetnsFabric&) = delete;
  ~NetnsFabric();  // Teardown(), errors ignored

  // Kills the processes left in the fabric's namespaces (SIGKILL), deletes the root-namespace
  // veths and bridge, then the namespaces (with their interfaces and qdiscs). Idempotent; the
  // first error, after trying everything.
  [[nodiscard]] Status Teardown();

  pid_t owner() const { return owner_; }
  // "tsf<pid>": the start of every name the fabric gives a namespace or root interface.
  const std::string& prefix() const { return prefix_; }
  const std::vector<FabricNode>& nodes() const { return nodes_; }
  // The node called `name` ("n1".."n4"); nullptr when there is none.
  const FabricNode* Node(std::string_view name) const;
  // The node names of leaf "A" or "B", in name order.
  std::vector<std::string> LeafNodes(std::string_view leaf) const;
  // The root-namespace bridge's address, reachable from every node over mgmt0 only.
  const std::string& server_address() const { return server_address_; }
  const std::string& switch_netns() const { return switch_netns_; }
  // The argv prefix that runs a program inside `node`'s namespace: {"/usr/sbin/ip", "netns",
  // "exec", "tsf<pid>n1"} (the absolute path of `ip`, for execv). `ip netns exec` also mounts a
  // sysfs of that namespace on /sys, so /sys/class/net lists the node's interfaces. Empty for
  // an unknown node.
  std::vector<std::string> Exec(std::string_view node) const;
  // The same as a shell prefix, "ip netns exec tsf<pid>n1 " (for RunCommand).
  std::string ExecShell(std::string_view node) const;

  // Shapes both directions of a link to `rate_bits_per_s` (a token bucket, tc-tbf(8), on the
  // egress of each end; the bucket is at least 10 ms (deep) or 2 ms (shallow) at the rate when
  // that is more than the queue's burst). Replaces an earlier shaping of the same link. A deep
  // queue slows TCP without losses (what bandwidth probes should see); a shallow one also drops
  // what a burst brings beyond it, so the hosts' TCP counters show retransmissions, as behind a
  // congested switch. The inter-leaf link is upA==upB in the switch namespace; a node's link is
  // its data0 and the switch port d<i> facing it.
  [[nodiscard]] Status ShapeInterLeaf(int64_t rate_bits_per_s, LinkQueue queue = LinkQueue::kDeep);
  [[nodiscard]] Status UnshapeInterLeaf();  // idempotent
  [[nodiscard]] Status ShapeNodeLink(std::string_view node, int64_t rate_bits_per_s,
                                     LinkQueue queue = LinkQueue::kDeep);
  [[nodiscard]] Status UnshapeNodeLink(std::string_view node);  // idempotent

  // Whether `address` answers TCP from inside `node`'s namespace within 2 s (a connection made,
  // or refused by the host that holds the address); the error says what the probe saw.
  [[nodiscard]] Status Reaches(std::string_view node, const std::string& address) const;
  // TCP goodput from `from` to `to` over their data addresses, sending for `seconds`, in
  // Mbit/s (a Python socket sender and receiver run in the two namespaces).
  [[nodiscard]] Result<double> TcpMbps(std::string_view from, std::string_view to,
                                       double seconds) const;

 private:
  NetnsFabric(pid_t owner, int octet);
  Status Build();
  Status Shape(const std::string& netns, const std::string& dev, int64_t rate_bits_per_s,
               LinkQueue queue);
  Status Unshape(const std::string& netns, const std::string& dev);

  pid_t owner_;
  std::string prefix_;
  std::string switch_netns_;
  std::string mgmt_bridge_;
  std::string server_address_;
  std::vector<FabricNode> nodes_;
  bool torn_down_ = false;
};

}  // namespace tianshu::testing
