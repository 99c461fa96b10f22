#include "testing/netns_fabric.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "testing/run_command.h"

namespace tianshu::testing {

namespace {

constexpr int kNodes = 4;
// The second octet of the fabric's 10.X.0.0/23 is tried from 100 + pid % 150 on, so that the
// fabrics of concurrent test processes start apart; 10.X.0.0/24 is the management network (in
// the root namespace: it must not overlap a route there), 10.X.1.0/24 the data network (inside
// the namespaces only).
constexpr int kFirstOctet = 100;
constexpr int kOctets = 150;
// Shaping (tc-tbf(8)), per LinkQueue: the bucket (burst) holds at least this many bytes, or this
// many milliseconds at the rate when that is more (tbf needs burst >= rate / HZ); a packet waits
// at most `latency_ms`, which with the burst bounds the queue. Deep: 64 KiB, a veth's largest GSO
// packet, and 50 ms. Shallow: at 2 Mbit/s, 16 KiB and 10 ms made gloo's TCP retransmit about a
// quarter of its segments (2 of 3852 with the deep queue) at the same step time.
struct QueueShape {
  int64_t min_burst_bytes;
  int64_t burst_ms;
  int latency_ms;
};
constexpr QueueShape kDeepQueue = {64 << 10, 10, 50};
constexpr QueueShape kShallowQueue = {16 << 10, 2, 10};
// The port the throughput receiver listens on inside a node namespace (no other process is
// there to take it).
constexpr int kThroughputPort = 47001;

const std::string& IpBinary() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (::access(p, X_OK) == 0) return std::string(p);
    }
    return std::string("ip");
  }();
  return path;
}

const std::string& TcBinary() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc"}) {
      if (::access(p, X_OK) == 0) return std::string(p);
    }
    return std::string("tc");
  }();
  return path;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Runs `command` (the names it carries are [a-z0-9.]: nothing to quote); the error names the
// command and what it printed.
Status Run(const std::string& command) {
  CommandResult r = RunCommand(command);
  if (r.exit_code != 0) {
    return Fail("`", command, "` exited ", std::to_string(r.exit_code), ": ", Trim(r.err + r.out));
  }
  return Ok();
}

std::string Prefix(pid_t owner) { return "tsf" + std::to_string(owner); }

bool Alive(pid_t pid) { return ::access(("/proc/" + std::to_string(pid)).c_str(), F_OK) == 0; }

// Every network namespace of a fabric (or of Available's trial): (name, owner pid).
std::vector<std::pair<std::string, pid_t>> FabricNamespaces() {
  static const std::regex re(R"(^tsf(\d+)(sw|n\d+|probe)$)");
  std::vector<std::pair<std::string, pid_t>> out;
  std::istringstream in(RunCommand(IpBinary() + " netns list").out);
  std::string line;
  while (std::getline(in, line)) {
    const std::string name = line.substr(0, line.find(' '));  // "NAME (id: 3)"
    std::smatch m;
    if (std::regex_match(name, m, re)) out.emplace_back(name, std::stoi(m[1]));
  }
  return out;
}

// Every root-namespace interface of a fabric, veths before bridges: (name, owner pid).
std::vector<std::pair<std::string, pid_t>> FabricLinks() {
  static const std::regex re(R"(^tsf(\d+)m(\d*)$)");
  std::vector<std::pair<std::string, pid_t>> veths, bridges;
  std::istringstream in(RunCommand(IpBinary() + " -o link show").out);
  std::string line;
  while (std::getline(in, line)) {
    // "12: tsf123m1@if3: <BROADCAST,...": the name between the first ": " and the next '@'/':'.
    const size_t start = line.find(": ");
    if (start == std::string::npos) continue;
    const std::string rest = line.substr(start + 2);
    const std::string name = rest.substr(0, rest.find_first_of("@:"));
    std::smatch m;
    if (!std::regex_match(name, m, re)) continue;
    (m[2].length() > 0 ? veths : bridges).emplace_back(name, std::stoi(m[1]));
  }
  veths.insert(veths.end(), bridges.begin(), bridges.end());
  return veths;
}

// Removes what exists of `owner`'s fabric: processes in its namespaces (SIGKILL), its root
// veths and bridge (a veth's deletion takes its peer with it, at once), then the namespaces
// (whose own interfaces the kernel removes in the background). The first error; the names
// removed are appended to `removed`.
Status RemoveFabric(pid_t owner, std::vector<std::string>* removed) {
  Status first = Ok();
  auto note = [&](Status s) {
    if (!s && first) first = std::move(s);
  };
  std::vector<std::string> namespaces;
  for (const auto& [name, pid] : FabricNamespaces()) {
    if (pid == owner) namespaces.push_back(name);
  }
  for (const std::string& ns : namespaces) {
    std::istringstream pids(RunCommand(IpBinary() + " netns pids " + ns).out);
    for (pid_t pid = 0; pids >> pid;) ::kill(pid, SIGKILL);
  }
  for (const auto& [name, pid] : FabricLinks()) {
    if (pid != owner) continue;
    note(Run(IpBinary() + " link del " + name));
    if (removed) removed->push_back(name);
  }
  for (const std::string& ns : namespaces) {
    note(Run(IpBinary() + " netns del " + ns));
    if (removed) removed->push_back(ns);
  }
  return first;
}

// The first 10.X.0.0/23 (X from a start derived from `owner`) that no route of the root
// namespace overlaps; failing that, one that only routes shorter than /16 cover (ours, more
// specific, wins for the test's duration); -1 when there is none.
int ChooseOctet(pid_t owner) {
  struct Route {
    uint32_t net;
    int len;
  };
  std::vector<Route> routes;
  static const std::set<std::string> kTypes = {"unicast", "local",       "broadcast", "multicast",
                                               "anycast", "unreachable", "blackhole", "prohibit",
                                               "throw",   "nat"};
  std::istringstream in(RunCommand(IpBinary() + " -4 -o route show table all").out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string w;
    while (words >> w && kTypes.contains(w)) {
    }
    if (w.empty() || w == "default") continue;
    const size_t slash = w.find('/');
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (std::sscanf(w.substr(0, slash).c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4) continue;
    const int len = slash == std::string::npos ? 32 : std::stoi(w.substr(slash + 1));
    routes.push_back({(a << 24) | (b << 16) | (c << 8) | d, len});
  }
  auto overlaps = [&](int octet, int shortest) {
    const uint32_t ours = (10u << 24) | (static_cast<uint32_t>(octet) << 16);
    for (const Route& r : routes) {
      if (r.len < shortest) continue;
      const int common = std::min(23, r.len);
      if (common == 0 || (ours >> (32 - common)) == (r.net >> (32 - common))) return true;
    }
    return false;
  };
  for (int shortest : {1, 16}) {
    for (int i = 0; i < kOctets; ++i) {
      const int octet = kFirstOctet + (static_cast<int>(owner) + i) % kOctets;
      if (!overlaps(octet, shortest)) return octet;
    }
  }
  return -1;
}

// Inside a node namespace: does sys.argv[1] answer TCP on port 9 (connected, or refused by its
// host)? Prints "connected", "refused" or "unreachable: WHY". No single quotes (shell-quoted).
constexpr const char* kReachScript = R"(
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=2).close()
    print("connected")
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print("unreachable: %s" % e)
)";

// Receives one connection on (argv[1], argv[2]) and prints its goodput in Mbit/s, from the first
// byte to the end of the stream.
constexpr const char* kReceiveScript = R"(
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(30)
n, t0 = 0, None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
print("%.3f" % (n * 8 / max(time.monotonic() - (t0 or 0), 1e-9) / 1e6))
)";

// Connects to (argv[1], argv[2]) (retrying for 10 s while the receiver starts) and sends for
// argv[3] seconds.
constexpr const char* kSendScript = R"(
import socket, sys, time
end = time.monotonic() + 10
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
        break
    except OSError:
        if time.monotonic() > end:
            raise
        time.sleep(0.05)
buf = b"x" * (1 << 18)
stop = time.monotonic() + float(sys.argv[3])
while time.monotonic() < stop:
    c.sendall(buf)
c.close()
)";

std::string Python(const char* script) {
  return std::string("/usr/bin/python3 -c '") + script + "'";
}

}  // namespace

Status NetnsFabric::Available() {
  if (::geteuid() != 0) return Fail("network namespaces need root (this process is not)");
  if (::access(IpBinary().c_str(), X_OK) != 0) return Fail("`ip` (iproute2) is not installed");
  if (::access(TcBinary().c_str(), X_OK) != 0) return Fail("`tc` (iproute2) is not installed");
  if (::access("/usr/bin/python3", X_OK) != 0) return Fail("/usr/bin/python3 is not installed");
  const std::string probe = Prefix(::getpid()) + "probe";
  if (Status s = Run(IpBinary() + " netns add " + probe); !s) {
    return Fail("cannot make a network namespace: ", s.error().message);
  }
  Status made_veth = Run(IpBinary() + " -n " + probe + " link add t0 type veth peer name t1");
  Status deleted = Run(IpBinary() + " netns del " + probe);
  if (!made_veth) return Fail("cannot make a veth pair: ", made_veth.error().message);
  if (!deleted) return Fail("cannot delete a network namespace: ", deleted.error().message);
  return Ok();
}

NetnsFabric::NetnsFabric(pid_t owner, int octet)
    : owner_(owner),
      prefix_(Prefix(owner)),
      switch_netns_(prefix_ + "sw"),
      mgmt_bridge_(prefix_ + "m"),
      server_address_("10." + std::to_string(octet) + ".0.254") {
  for (int i = 1; i <= kNodes; ++i) {
    const std::string n = std::to_string(i);
    nodes_.push_back({.name = "n" + n,
                      .netns = prefix_ + "n" + n,
                      .leaf = i % 2 == 1 ? "A" : "B",
                      .data_address = "10." + std::to_string(octet) + ".1." + n,
                      .mgmt_address = "10." + std::to_string(octet) + ".0." + n});
  }
}

Result<std::unique_ptr<NetnsFabric>> NetnsFabric::Create() {
  SweepStale();
  const pid_t owner = ::getpid();
  const int octet = ChooseOctet(owner);
  if (octet < 0) {
    return Fail("no 10.X.0.0/23 (X in ", std::to_string(kFirstOctet), "..",
                std::to_string(kFirstOctet + kOctets - 1),
                ") is free of the root namespace's routes");
  }
  std::unique_ptr<NetnsFabric> f(new NetnsFabric(owner, octet));
  if (Status s = f->Build(); !s) {
    (void)f->Teardown();
    return std::unexpected(s.error());
  }
  return f;
}

Status NetnsFabric::Build() {
  const std::string& ip = IpBinary();
  const std::string sw = ip + " -n " + switch_netns_ + " ";
  std::vector<std::string> commands;
  for (const std::string& ns : [&] {
         std::vector<std::string> all = {switch_netns_};
         for (const auto& n : nodes_) all.push_back(n.netns);
         return all;
       }()) {
    commands.push_back(ip + " netns add " + ns);
    commands.push_back(ip + " -n " + ns + " link set lo up");
  }
  // The switch: two leaf bridges joined by the inter-leaf veth pair.
  for (const char* leaf : {"A", "B"}) {
    commands.push_back(sw + "link add br" + leaf + " type bridge");
    commands.push_back(sw + "link set br" + leaf + " up");
  }
  commands.push_back(sw + "link add upA type veth peer name upB");
  commands.push_back(sw + "link set upA master brA up");
  commands.push_back(sw + "link set upB master brB up");
  // The management bridge, in the root namespace.
  commands.push_back(ip + " link add " + mgmt_bridge_ + " type bridge");
  commands.push_back(ip + " addr add " + server_address_ + "/24 dev " + mgmt_bridge_);
  commands.push_back(ip + " link set " + mgmt_bridge_ + " up");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const FabricNode& n = nodes_[i];
    const std::string in = ip + " -n " + n.netns + " ";
    const std::string port = "d" + std::to_string(i + 1);
    commands.push_back(sw + "link add " + port + " type veth peer name " +
                       std::string(kDataInterface) + " netns " + n.netns);
    commands.push_back(sw + "link set " + port + " master br" + n.leaf + " up");
    commands.push_back(in + "addr add " + n.data_address + "/24 dev " +
                       std::string(kDataInterface));
    commands.push_back(in + "link set " + std::string(kDataInterface) + " up");
    const std::string root_end = mgmt_bridge_ + std::to_string(i + 1);
    commands.push_back(ip + " link add " + root_end + " type veth peer name " +
                       std::string(kMgmtInterface) + " netns " + n.netns);
    commands.push_back(ip + " link set " + root_end + " master " + mgmt_bridge_ + " up");
    commands.push_back(in + "addr add " + n.mgmt_address + "/24 dev " +
                       std::string(kMgmtInterface));
    commands.push_back(in + "link set " + std::string(kMgmtInterface) + " up");
  }
  for (const std::string& c : commands) {
    if (Status s = Run(c); !s) return s;
  }
  return Ok();
}

NetnsFabric::~NetnsFabric() { (void)Teardown(); }

Status NetnsFabric::Teardown() {
  if (torn_down_) return Ok();
  Status s = RemoveFabric(owner_, nullptr);
  if (s) torn_down_ = true;
  return s;
}

std::vector<std::string> NetnsFabric::SweepStale() {
  std::set<pid_t> dead;
  for (const auto& [name, pid] : FabricNamespaces()) {
    if (!Alive(pid)) dead.insert(pid);
  }
  for (const auto& [name, pid] : FabricLinks()) {
    if (!Alive(pid)) dead.insert(pid);
  }
  std::vector<std::string> removed;
  for (pid_t pid : dead) (void)RemoveFabric(pid, &removed);
  return removed;
}

std::vector<std::string> NetnsFabric::Leftovers(pid_t owner) {
  std::vector<std::string> out;
  for (const auto& [name, pid] : FabricNamespaces()) {
    if (pid == owner) out.push_back(name);
  }
  for (const auto& [name, pid] : FabricLinks()) {
    if (pid == owner) out.push_back(name);
  }
  return out;
}

const FabricNode* NetnsFabric::Node(std::string_view name) const {
  for (const auto& n : nodes_) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

std::vector<std::string> NetnsFabric::LeafNodes(std::string_view leaf) const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) {
    if (n.leaf == leaf) out.push_back(n.name);
  }
  return out;
}

std::vector<std::string> NetnsFabric::Exec(std::string_view node) const {
  const FabricNode* n = Node(node);
  if (!n) return {};
  return {IpBinary(), "netns", "exec", n->netns};
}

std::string NetnsFabric::ExecShell(std::string_view node) const {
  std::string out;
  for (const std::string& w : Exec(node)) out += w + " ";
  return out;
}

Status NetnsFabric::Shape(const std::string& netns, const std::string& dev, int64_t rate_bits_per_s,
                          LinkQueue queue) {
  if (rate_bits_per_s <= 0) return Fail("a shaping rate must be positive");
  const QueueShape q = queue == LinkQueue::kShallow ? kShallowQueue : kDeepQueue;
  const int64_t burst = std::max(q.min_burst_bytes, rate_bits_per_s / 8 * q.burst_ms / 1000);
  return Run(TcBinary() + " -n " + netns + " qdisc replace dev " + dev + " root tbf rate " +
             std::to_string(rate_bits_per_s) + "bit burst " + std::to_string(burst) + "b latency " +
             std::to_string(q.latency_ms) + "ms");
}

Status NetnsFabric::Unshape(const std::string& netns, const std::string& dev) {
  const std::string show =
      RunCommand(TcBinary() + " -n " + netns + " qdisc show dev " + dev + " root").out;
  if (show.find("tbf") == std::string::npos) return Ok();  // nothing of ours there
  return Run(TcBinary() + " -n " + netns + " qdisc del dev " + dev + " root");
}

Status NetnsFabric::ShapeInterLeaf(int64_t rate_bits_per_s, LinkQueue queue) {
  if (Status s = Shape(switch_netns_, "upA", rate_bits_per_s, queue); !s) return s;
  return Shape(switch_netns_, "upB", rate_bits_per_s, queue);
}

Status NetnsFabric::UnshapeInterLeaf() {
  Status a = Unshape(switch_netns_, "upA");
  Status b = Unshape(switch_netns_, "upB");
  return !a ? a : b;
}

Status NetnsFabric::ShapeNodeLink(std::string_view node, int64_t rate_bits_per_s, LinkQueue queue) {
  const FabricNode* n = Node(node);
  if (!n) return Fail("no node ", std::string(node), " in the fabric");
  if (Status s = Shape(n->netns, std::string(kDataInterface), rate_bits_per_s, queue); !s) {
    return s;
  }
  return Shape(switch_netns_, "d" + n->name.substr(1), rate_bits_per_s, queue);
}

Status NetnsFabric::UnshapeNodeLink(std::string_view node) {
  const FabricNode* n = Node(node);
  if (!n) return Fail("no node ", std::string(node), " in the fabric");
  Status a = Unshape(n->netns, std::string(kDataInterface));
  Status b = Unshape(switch_netns_, "d" + n->name.substr(1));
  return !a ? a : b;
}

Status NetnsFabric::Reaches(std::string_view node, const std::string& address) const {
  if (!Node(node)) return Fail("no node ", std::string(node), " in the fabric");
  CommandResult r = RunCommand(ExecShell(node) + Python(kReachScript) + " " + address);
  const std::string said = Trim(r.out);
  if (said == "connected" || said == "refused") return Ok();
  return Fail(std::string(node), " does not reach ", address, ": ", said, Trim(r.err));
}

Result<double> NetnsFabric::TcpMbps(std::string_view from, std::string_view to,
                                    double seconds) const {
  const FabricNode* a = Node(from);
  const FabricNode* b = Node(to);
  if (!a || !b) return Fail("no node ", std::string(a ? to : from), " in the fabric");
  const std::string port = std::to_string(kThroughputPort);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", seconds);
  const std::string command = "(" + ExecShell(to) + Python(kReceiveScript) + " " + b->data_address +
                              " " + port + " & " + ExecShell(from) + Python(kSendScript) + " " +
                              b->data_address + " " + port + " " + secs + " >/dev/null; wait)";
  CommandResult r = RunCommand(command);
  double mbps = 0;
  if (r.exit_code != 0 || std::sscanf(r.out.c_str(), "%lf", &mbps) != 1) {
    return Fail("throughput ", std::string(from), " -> ", std::string(to), " failed (exit ",
                std::to_string(r.exit_code), "): ", Trim(r.out + r.err));
  }
  return mbps;
}

}  // namespace tianshu::testing
