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
  std::vector<std::string> header;
  for (const std::string& line : SplitString(snmp, '\n')) {
    if (!StartsWith(line, "Tcp:")) continue;
    std::vector<std::string> fields;
    for (const std::string& f : SplitString(line.substr(4), ' ')) {
      if (!f.empty()) fields.push_back(f);
    }
    if (header.empty()) {
      header = std::move(fields);
      continue;
    }
    int64_t retrans = -1, out = -1;
    for (size_t i = 0; i < header.size() && i < fields.size(); ++i) {
      int64_t v = 0;
      if (!ParseInt64(fields[i], &v) || v < 0) continue;
      if (header[i] == "RetransSegs") retrans = v;
      if (header[i] == "OutSegs") out = v;
    }
    return {retrans, out};
  }
  return {-1, -1};
}

int64_t NetCounters::Counter(const std::string& path) {
  auto text = fs_.Read(path);
  int64_t v = 0;
  if (!text || !ParseInt64(Trim(*text), &v) || v < 0) return -1;
  return v;
}

std::vector<NetCounters::Link> NetCounters::ReadLinks() {
  std::vector<Link> links;
  // RDMA ports: data counters count 4-byte words (the InfiniBand spec's PortXmitData).
  if (auto devs = fs_.List(kRdma)) {
    for (const std::string& dev : *devs) {
      const std::string ports_dir = std::string(kRdma) + "/" + dev + "/ports";
      auto ports = fs_.List(ports_dir);
      if (!ports) continue;
      for (const std::string& port : *ports) {
        if (links.size() >= kMaxNetLinks) return links;
        const std::string p = ports_dir + "/" + port;
        Link l;
        l.sample.name = dev + "/" + port;
        l.sample.rdma = true;
        l.sample.speed_bps = ParseRdmaRate(fs_.Read(p + "/rate").value_or(""));
        const int64_t xmit = Counter(p + "/counters/port_xmit_data");
        const int64_t rcv = Counter(p + "/counters/port_rcv_data");
        l.now.tx = xmit < 0 ? -1 : xmit * 4;
        l.now.rx = rcv < 0 ? -1 : rcv * 4;
        l.now.xmit_wait = Counter(p + "/counters/port_xmit_wait");
        links.push_back(std::move(l));
      }
    }
  }
  auto names = fs_.List(kNet);
  if (!names) return links;
  // Interfaces with a device behind them first: on a host with thousands of veths the cap
  // keeps the physical links.
  std::vector<std::string> physical, virt;
  for (const std::string& n : *names) {
    if (n == "lo" || !IsInterfaceName(n)) continue;
    (fs_.Exists(std::string(kNet) + "/" + n + "/device") ? physical : virt).push_back(n);
  }
  physical.insert(physical.end(), virt.begin(), virt.end());
  for (const std::string& n : physical) {
    if (links.size() >= kMaxNetLinks) break;
    const std::string stats = std::string(kNet) + "/" + n + "/statistics/";
    Link l;
    l.now.rx = Counter(stats + "rx_bytes");
    if (l.now.rx < 0) continue;  // not an interface (bonding_masters) or gone meanwhile
    l.now.tx = Counter(stats + "tx_bytes");
    const int64_t rx_drop = Counter(stats + "rx_dropped"), tx_drop = Counter(stats + "tx_dropped");
    l.now.drops = rx_drop < 0 && tx_drop < 0
                      ? -1
                      : std::max<int64_t>(0, rx_drop) + std::max<int64_t>(0, tx_drop);
    l.sample.name = n;
    // Mb/s; -1 (or an error) when the link is down or the driver does not say.
    int64_t mbps = 0;
    if (auto s = fs_.Read(std::string(kNet) + "/" + n + "/speed");
        s && ParseInt64(Trim(*s), &mbps) && mbps > 0 && mbps < 100'000'000) {
      l.sample.speed_bps = mbps * 1'000'000;
    }
    links.push_back(std::move(l));
  }
  return links;
}

wire::NetworkSample NetCounters::Sample(int64_t now_ns) {
  std::vector<Link> links = ReadLinks();
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
