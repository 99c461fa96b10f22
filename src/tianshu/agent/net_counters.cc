#include "tianshu/agent/net_counters.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

constexpr const char* kNet = "/sys/class/net";
constexpr const char* kRdma = "/sys/class/infiniband";

// (now - before) / seconds, or 0 when either is unknown or the counter went backwards.
double Rate(int64_t before, int64_t now, double seconds) {
  if (before < 0 || now < 0 || now < before || seconds <= 0) return 0;
  return static_cast<double>(now - before) / seconds;
}

}  // namespace

bool IsInterfaceName(std::string_view s) {
  if (s.empty() || s.size() > 15 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

int64_t ParseRdmaRate(std::string_view text) {
  // "<number> Gb/sec (<width> <speed>)": the number may carry a fraction (SDR: 2.5).
  std::string_view t = Trim(text);
  size_t end = 0;
  while (end < t.size() && (std::isdigit(static_cast<unsigned char>(t[end])) || t[end] == '.')) {
    ++end;
  }
  double gbps = 0;
  if (end == 0 || !ParseDouble(t.substr(0, end), &gbps) || gbps < 0 || gbps > 1e6) return 0;
  if (t.substr(end).find("Gb/s") == std::string_view::npos) return 0;
  return static_cast<int64_t>(gbps * 1e9);
}

std::pair<int64_t, int64_t> ParseTcpSegments(std::string_view snmp) {
  // Two "Tcp:" lines: the field names, then their values in the same order.
  std::string_view header;
  for (size_t at = 0; at < snmp.size();) {
    const std::string_view line = NextLine(snmp, &at);
    if (!line.starts_with("Tcp:")) continue;
    if (header.empty()) {
      header = line.substr(4);
      continue;
    }
    int64_t retrans = -1, out = -1;
    const std::string_view values = line.substr(4);
    for (size_t h = 0, x = 0;;) {
      const std::string_view name = NextField(header, &h), field = NextField(values, &x);
      if (name.empty() || field.empty()) break;
      int64_t v = 0;
      if (!ParseInt64(field, &v) || v < 0) continue;
      if (name == "RetransSegs") retrans = v;
      if (name == "OutSegs") out = v;
    }
    return {retrans, out};
  }
  return {-1, -1};
}

std::map<std::string, ProcNetDevCounters, std::less<>> ParseProcNetDev(std::string_view text) {
  // Two header lines, then "  NAME: rx_bytes rx_packets rx_errs rx_drop rx_fifo rx_frame
  // rx_compressed rx_multicast tx_bytes tx_packets tx_errs tx_drop ...".
  std::map<std::string, ProcNetDevCounters, std::less<>> out;
  for (size_t at = 0; at < text.size();) {
    const std::string_view line = NextLine(text, &at);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = Trim(line.substr(0, colon));
    if (!IsInterfaceName(name)) continue;
    int64_t v[12];
    int n = 0;
    for (size_t pos = colon + 1; n < 12; ++n) {
      const std::string_view f = NextField(line, &pos);
      if (f.empty() || !ParseInt64(f, &v[n]) || v[n] < 0) break;
    }
    if (n < 12) continue;  // not a counters line
    out[std::string(name)] = {.rx = v[0], .tx = v[8], .drops = v[3] + v[11]};
  }
  return out;
}

int64_t NetCounters::Counter(const std::string& path) {
  auto text = fs_.Read(path);
  int64_t v = 0;
  if (!text || !ParseInt64(Trim(*text), &v) || v < 0) return -1;
  return v;
}

void NetCounters::Relist(int64_t now_ns, const DevCounters* shown) {
  listed_ = true;
  relist_ = false;
  listed_ns_ = now_ns;
  ports_.clear();
  // RDMA ports: data counters count 4-byte words (the InfiniBand spec's PortXmitData).
  if (auto devs = fs_.List(kRdma)) {
    for (const std::string& dev : *devs) {
      const std::string ports_dir = std::string(kRdma) + "/" + dev + "/ports";
      auto ports = fs_.List(ports_dir);
      if (!ports) continue;
      for (const std::string& port : *ports) {
        if (ports_.size() >= kMaxNetLinks) return;
        const std::string p = ports_dir + "/" + port;
        ports_.push_back({.name = dev + "/" + port,
                          .dir = p,
                          .rdma = true,
                          .speed_bps = ParseRdmaRate(fs_.Read(p + "/rate").value_or(""))});
      }
    }
  }
  auto names = fs_.List(kNet);
  if (!names) return;
  // Interfaces with a device behind them first: on a host with thousands of veths the cap
  // keeps the physical links.
  std::vector<std::string> physical, virt;
  for (const std::string& n : *names) {
    if (n == "lo" || !IsInterfaceName(n)) continue;
    if (shown != nullptr && !shown->contains(n)) continue;  // not an interface (bonding_masters)
    (fs_.Exists(std::string(kNet) + "/" + n + "/device") ? physical : virt).push_back(n);
  }
  physical.insert(physical.end(), virt.begin(), virt.end());
  for (const std::string& n : physical) {
    if (ports_.size() >= kMaxNetLinks) break;
    // Mb/s; -1 (or an error) when the link is down or the driver does not say.
    int64_t mbps = 0, speed_bps = 0;
    if (auto s = fs_.Read(std::string(kNet) + "/" + n + "/speed");
        s && ParseInt64(Trim(*s), &mbps) && mbps > 0 && mbps < 100'000'000) {
      speed_bps = mbps * 1'000'000;
    }
    ports_.push_back(
        {.name = n, .dir = std::string(kNet) + "/" + n, .rdma = false, .speed_bps = speed_bps});
  }
}

std::vector<NetCounters::Link> NetCounters::ReadLinks(int64_t now_ns) {
  // Every interface's counters in one read where /proc/net/dev can be read (it is this network
  // namespace's); the list of links, their order and speeds are read again every
  // kNetRelistNs, and at once when an interface came or went. Without /proc/net/dev, every
  // sample lists the links and reads each counter from sysfs.
  auto text = fs_.Read("/proc/net/dev");
  const DevCounters dev = text ? ParseProcNetDev(*text) : DevCounters{};
  // One that shows no interface but lo (a sandbox's, beside the host's /sys) is not used.
  if (text && dev.size() == dev.count("lo")) text = std::unexpected(Error{"no interfaces"});
  bool changed =
      !text || !listed_ || relist_ || now_ns < listed_ns_ || now_ns - listed_ns_ >= kNetRelistNs;
  if (!changed) {
    // The same interfaces: every listed one still there, and (below the cap) no other but lo.
    size_t interfaces = 0;
    for (const Port& p : ports_) {
      if (p.rdma) continue;
      ++interfaces;
      changed = changed || !dev.contains(p.name);
    }
    changed =
        changed || (ports_.size() < kMaxNetLinks && dev.size() - dev.count("lo") != interfaces);
  }
  if (changed) Relist(now_ns, text ? &dev : nullptr);
  std::vector<Link> links;
  links.reserve(ports_.size());
  for (const Port& p : ports_) {
    Link l;
    l.sample.name = p.name;
    l.sample.rdma = p.rdma;
    l.sample.speed_bps = p.speed_bps;
    if (p.rdma) {
      const int64_t xmit = Counter(p.dir + "/counters/port_xmit_data");
      const int64_t rcv = Counter(p.dir + "/counters/port_rcv_data");
      l.now.tx = xmit < 0 ? -1 : xmit * 4;
      l.now.rx = rcv < 0 ? -1 : rcv * 4;
      l.now.xmit_wait = Counter(p.dir + "/counters/port_xmit_wait");
    } else if (text) {
      auto it = dev.find(p.name);
      if (it == dev.end()) {  // gone: the list is read again at the next sample
        relist_ = true;
        continue;
      }
      l.now.rx = it->second.rx;
      l.now.tx = it->second.tx;
      l.now.drops = it->second.drops;
    } else {
      const std::string stats = p.dir + "/statistics/";
      l.now.rx = Counter(stats + "rx_bytes");
      if (l.now.rx < 0) {  // not an interface (bonding_masters) or gone meanwhile
        relist_ = true;
        continue;
      }
      l.now.tx = Counter(stats + "tx_bytes");
      const int64_t rx_drop = Counter(stats + "rx_dropped"),
                    tx_drop = Counter(stats + "tx_dropped");
      l.now.drops = rx_drop < 0 && tx_drop < 0
                        ? -1
                        : std::max<int64_t>(0, rx_drop) + std::max<int64_t>(0, tx_drop);
    }
    links.push_back(std::move(l));
  }
  return links;
}

wire::NetworkSample NetCounters::Sample(int64_t now_ns) {
  std::vector<Link> links = ReadLinks(now_ns);
  const auto [retrans, out_segs] = ParseTcpSegments(fs_.Read("/proc/net/snmp").value_or(""));
  const bool window = sampled_ && now_ns > last_ns_;
  const double secs = window ? static_cast<double>(now_ns - last_ns_) / 1e9 : 0;
  wire::NetworkSample s;
  s.window_ms = window ? (now_ns - last_ns_) / 1'000'000 : 0;
  std::map<std::string, Counters> next;
  for (Link& l : links) {
    if (auto it = last_.find(l.sample.name); window && it != last_.end()) {
      const Counters& b = it->second;
      l.sample.rx_bytes_per_s = Rate(b.rx, l.now.rx, secs);
      l.sample.tx_bytes_per_s = Rate(b.tx, l.now.tx, secs);
      l.sample.drops_per_s = Rate(b.drops, l.now.drops, secs);
      l.sample.xmit_wait_per_s = Rate(b.xmit_wait, l.now.xmit_wait, secs);
    }
    next[l.sample.name] = l.now;
    s.links.push_back(std::move(l.sample));
  }
  if (window) {
    s.tcp_retrans_per_s = Rate(last_retrans_, retrans, secs);
    s.tcp_out_segs_per_s = Rate(last_out_segs_, out_segs, secs);
  }
  last_ = std::move(next);  // links that went away are forgotten
  last_retrans_ = retrans;
  last_out_segs_ = out_segs;
  last_ns_ = now_ns;
  sampled_ = true;
  return s;
}

}  // namespace tianshu::agent
