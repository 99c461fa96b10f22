// Link utilisation as the agent's network namespace sees it: the byte and drop counters of every
// interface (/proc/net/dev; /sys/class/net/IF/statistics where that cannot be read), the data and
// wait counters of every RDMA port
// (/sys/class/infiniband/DEV/ports/P/counters) and TCP's segment counters (/proc/net/snmp),
// turned into rates over the window since the previous sample, for the heartbeat. An agent in a
// network namespace sees that namespace's interfaces, which are the ones its ranks use.
//   NetCounters net(fs);
//   wire::NetworkSample s = net.Sample(now_ns);  // first call: window_ms 0, every rate 0
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/agent/system_files.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

// At most this many links per sample: RDMA ports first, then interfaces with a device behind
// them, then virtual ones (veth, bridges), each group by name.
inline constexpr size_t kMaxNetLinks = 256;

// How often the links' list, order and speeds are read again from sysfs while /proc/net/dev
// shows the same interfaces (an interface that comes or goes is seen at the next sample).
inline constexpr int64_t kNetRelistNs = 10'000'000'000;

// One interface's line of /proc/net/dev: bytes received and sent, and drops both ways.
struct ProcNetDevCounters {
  int64_t rx = -1, tx = -1, drops = -1;
};
// Every interface of a /proc/net/dev text, by name; lines that are not counters are skipped.
std::map<std::string, ProcNetDevCounters, std::less<>> ParseProcNetDev(std::string_view text);

class NetCounters {
 public:
  explicit NetCounters(SystemFiles& fs) : fs_(fs) {}

  // Reads every counter and returns the rates since the previous call. `now_ns` is the caller's
  // clock; a window that is not positive (the first call, a clock stepped back) reports links
  // with rate 0 and window_ms 0. A counter that went backwards (a driver reset, an interface
  // recreated under the same name) or cannot be read gives rate 0 for that window. Unreadable
  // speeds (-1 on virtual interfaces, a link down) are 0. Never fails; not thread-safe.
  wire::NetworkSample Sample(int64_t now_ns);

 private:
  struct Counters {  // -1: not readable
    int64_t rx = -1, tx = -1, drops = -1, xmit_wait = -1;
  };
  struct Link {
    wire::LinkSample sample;
    Counters now;
  };
  // A link as listed (sysfs): what is read again only every kNetRelistNs.
  struct Port {
    std::string name;
    std::string dir;  // its sysfs directory
    bool rdma = false;
    int64_t speed_bps = 0;
  };
  using DevCounters = std::map<std::string, ProcNetDevCounters, std::less<>>;
  int64_t Counter(const std::string& path);
  // Lists the links; with /proc/net/dev's counters, only the interfaces it shows.
  void Relist(int64_t now_ns, const DevCounters* shown);
  std::vector<Link> ReadLinks(int64_t now_ns);

  SystemFiles& fs_;
  std::vector<Port> ports_;
  bool listed_ = false, relist_ = false;
  int64_t listed_ns_ = 0;
  int64_t last_ns_ = 0;
  bool sampled_ = false;
  std::map<std::string, Counters> last_;  // by link name, the links of the previous sample
  int64_t last_retrans_ = -1, last_out_segs_ = -1;
};

// The line rate of an RDMA port's `rate` file ("100 Gb/sec (4X EDR)", "2.5 Gb/sec") in bits/s;
// 0 when unreadable.
int64_t ParseRdmaRate(std::string_view text);

// RetransSegs and OutSegs of /proc/net/snmp's Tcp lines (found by their header's names), -1
// each when absent.
std::pair<int64_t, int64_t> ParseTcpSegments(std::string_view snmp);

// A plausible Linux interface name: 1..15 characters, letters, digits, '-', '_' and '.'.
bool IsInterfaceName(std::string_view name);

}  // namespace tianshu::agent
