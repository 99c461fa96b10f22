#include "tianshu/agent/net_counters.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <tuple>
#include <vector>

#include "tianshu/agent/host_report.h"

namespace tianshu::agent {
namespace {

constexpr int64_t kSec = 1'000'000'000;

// An interface's counters in a fake /sys/class/net.
void Nic(FakeSystemFiles& fs, const std::string& name, int64_t rx, int64_t tx, int64_t drops,
         const std::string& speed) {
  const std::string base = "/sys/class/net/" + name;
  fs.AddFile(base + "/statistics/rx_bytes", std::to_string(rx) + "\n");
  fs.AddFile(base + "/statistics/tx_bytes", std::to_string(tx) + "\n");
  fs.AddFile(base + "/statistics/rx_dropped", std::to_string(drops) + "\n");
  fs.AddFile(base + "/statistics/tx_dropped", "0\n");
  if (!speed.empty()) fs.AddFile(base + "/speed", speed + "\n");
}

void RdmaPort(FakeSystemFiles& fs, int64_t xmit_words, int64_t rcv_words, int64_t wait) {
  const std::string p = "/sys/class/infiniband/mlx5_0/ports/1";
  fs.AddFile(p + "/rate", "200 Gb/sec (4X HDR)\n");
  fs.AddFile(p + "/counters/port_xmit_data", std::to_string(xmit_words) + "\n");
  fs.AddFile(p + "/counters/port_rcv_data", std::to_string(rcv_words) + "\n");
  fs.AddFile(p + "/counters/port_xmit_wait", std::to_string(wait) + "\n");
}

std::string Snmp(int64_t out_segs, int64_t retrans) {
  return "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
         "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails "
         "EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
         "Tcp: 1 200 120000 -1 10 5 0 0 3 1000 " +
         std::to_string(out_segs) + " " + std::to_string(retrans) + " 0 0 0\n";
}

const wire::LinkSample* Find(const wire::NetworkSample& s, const std::string& name) {
  for (const auto& l : s.links) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

TEST(NetCounters, RatesOverTheWindowSinceThePreviousSample) {
  FakeSystemFiles fs;
  Nic(fs, "lo", 0, 0, 0, "");
  Nic(fs, "eth0", 1000, 2000, 1, "25000");
  fs.AddLink("/sys/class/net/eth0/device", "../../../0000:3b:00.0");
  Nic(fs, "veth1", 0, 0, 0, "-1");                   // virtual: no device, speed -1
  fs.AddFile("/sys/class/net/bonding_masters", "");  // a file, not an interface
  RdmaPort(fs, 100, 50, 7);
  fs.AddFile("/proc/net/snmp", Snmp(5000, 10));
  NetCounters net(fs);

  wire::NetworkSample first = net.Sample(10 * kSec);
  EXPECT_EQ(first.window_ms, 0);
  ASSERT_EQ(first.links.size(), 3u);
  // RDMA ports first, then interfaces with a device, then virtual ones; never lo.
  EXPECT_EQ(first.links[0].name, "mlx5_0/1");
  EXPECT_TRUE(first.links[0].rdma);
  EXPECT_EQ(first.links[0].speed_bps, 200'000'000'000);
  EXPECT_EQ(first.links[1].name, "eth0");
  EXPECT_EQ(first.links[1].speed_bps, 25'000'000'000);
  EXPECT_EQ(first.links[2].name, "veth1");
  EXPECT_EQ(first.links[2].speed_bps, 0);
  for (const auto& l : first.links) EXPECT_EQ(l.rx_bytes_per_s + l.tx_bytes_per_s, 0) << l.name;
  EXPECT_EQ(first.tcp_out_segs_per_s, 0);

  Nic(fs, "eth0", 1000 + 4000, 2000 + 8000, 1 + 6, "25000");
  Nic(fs, "veth1", 10, 0, 0, "-1");
  RdmaPort(fs, 100 + 1000, 50 + 500, 7 + 20);  // 4-byte words
  fs.AddFile("/proc/net/snmp", Snmp(5000 + 800, 10 + 4));
  wire::NetworkSample s = net.Sample(12 * kSec);  // a 2 s window
  EXPECT_EQ(s.window_ms, 2000);
  const wire::LinkSample* eth0 = Find(s, "eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_DOUBLE_EQ(eth0->rx_bytes_per_s, 2000);
  EXPECT_DOUBLE_EQ(eth0->tx_bytes_per_s, 4000);
  EXPECT_DOUBLE_EQ(eth0->drops_per_s, 3);
  EXPECT_DOUBLE_EQ(eth0->xmit_wait_per_s, 0);
  const wire::LinkSample* ib = Find(s, "mlx5_0/1");
  ASSERT_NE(ib, nullptr);
  EXPECT_DOUBLE_EQ(ib->tx_bytes_per_s, 1000 * 4 / 2.0);
  EXPECT_DOUBLE_EQ(ib->rx_bytes_per_s, 500 * 4 / 2.0);
  EXPECT_DOUBLE_EQ(ib->xmit_wait_per_s, 10);
  EXPECT_DOUBLE_EQ(Find(s, "veth1")->rx_bytes_per_s, 5);
  EXPECT_DOUBLE_EQ(s.tcp_out_segs_per_s, 400);
  EXPECT_DOUBLE_EQ(s.tcp_retrans_per_s, 2);
  EXPECT_EQ(Find(s, "lo"), nullptr);
}

TEST(NetCounters, ACounterThatWentBackwardsIsAResetNotANegativeRate) {
  FakeSystemFiles fs;
  Nic(fs, "eth0", 1'000'000, 1'000'000, 0, "1000");
  NetCounters net(fs);
  (void)net.Sample(1 * kSec);
  Nic(fs, "eth0", 500, 2'000'000, 0, "1000");  // rx reset by the driver
  wire::NetworkSample s = net.Sample(2 * kSec);
  ASSERT_EQ(s.links.size(), 1u);
  EXPECT_EQ(s.links[0].rx_bytes_per_s, 0);
  EXPECT_DOUBLE_EQ(s.links[0].tx_bytes_per_s, 1'000'000);
  // A clock that went back gives no window (and no rates) rather than negative ones.
  Nic(fs, "eth0", 900, 3'000'000, 0, "1000");
  wire::NetworkSample back = net.Sample(1 * kSec);
  EXPECT_EQ(back.window_ms, 0);
  EXPECT_EQ(back.links[0].tx_bytes_per_s, 0);
  // A new interface has no rate in its first window.
  Nic(fs, "eth1", 77, 77, 0, "");
  Nic(fs, "eth0", 1000, 4'000'000, 0, "1000");
  wire::NetworkSample added = net.Sample(3 * kSec);
  EXPECT_EQ(Find(added, "eth1")->rx_bytes_per_s, 0);
  EXPECT_GT(Find(added, "eth0")->tx_bytes_per_s, 0);
}

TEST(NetCounters, ANodeWithoutSysfsReportsNoLinks) {
  FakeSystemFiles fs;
  NetCounters net(fs);
  wire::NetworkSample s = net.Sample(kSec);
  EXPECT_TRUE(s.links.empty());
  s = net.Sample(2 * kSec);
  EXPECT_EQ(s.window_ms, 1000);
  EXPECT_TRUE(s.links.empty());
  EXPECT_EQ(s.tcp_retrans_per_s, 0);
}

TEST(NetCounters, AtMost256Links) {
  FakeSystemFiles fs;
  for (int i = 0; i < 300; ++i) Nic(fs, "veth" + std::to_string(i), 0, 0, 0, "");
  Nic(fs, "zz-phys", 0, 0, 0, "");
  fs.AddLink("/sys/class/net/zz-phys/device", "../../x");
  NetCounters net(fs);
  wire::NetworkSample s = net.Sample(kSec);
  ASSERT_EQ(s.links.size(), kMaxNetLinks);
  EXPECT_EQ(s.links[0].name, "zz-phys");  // the physical link is kept
}

TEST(NetCounters, ParsesRatesAndTcpLines) {
  EXPECT_EQ(ParseRdmaRate("100 Gb/sec (4X EDR)\n"), 100'000'000'000);
  EXPECT_EQ(ParseRdmaRate("2.5 Gb/sec (1X SDR)"), 2'500'000'000);
  EXPECT_EQ(ParseRdmaRate("fast"), 0);
  EXPECT_EQ(ParseRdmaRate(""), 0);
  EXPECT_EQ(ParseTcpSegments(Snmp(42, 3)), (std::pair<int64_t, int64_t>{3, 42}));
  EXPECT_EQ(ParseTcpSegments("Tcp: OutSegs\n"), (std::pair<int64_t, int64_t>{-1, -1}));
  EXPECT_EQ(ParseTcpSegments("garbage"), (std::pair<int64_t, int64_t>{-1, -1}));
  EXPECT_TRUE(IsInterfaceName("eth0"));
  EXPECT_TRUE(IsInterfaceName("bond0.100"));
  EXPECT_TRUE(IsInterfaceName("enp59s0f1np1"));
  EXPECT_FALSE(IsInterfaceName(""));
  EXPECT_FALSE(IsInterfaceName("a/b"));
  EXPECT_FALSE(IsInterfaceName("eth 0"));
  EXPECT_FALSE(IsInterfaceName("a-name-too-long-x"));
  EXPECT_FALSE(IsInterfaceName(".."));
}

// /proc/net/dev's text for these interfaces: NAME, rx bytes, rx drops, tx bytes, tx drops.
std::string ProcNetDev(
    const std::vector<std::tuple<std::string, int64_t, int64_t, int64_t, int64_t>>& nics) {
  std::string text =
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
      "drop fifo colls carrier compressed\n";
  for (const auto& [name, rx, rx_drop, tx, tx_drop] : nics) {
    text += "  " + name + ": " + std::to_string(rx) + " 7 0 " + std::to_string(rx_drop) +
            " 0 0 0 0 " + std::to_string(tx) + " 9 0 " + std::to_string(tx_drop) + " 0 0 0 0\n";
  }
  return text;
}

TEST(NetCounters, ParsesProcNetDev) {
  auto dev = ParseProcNetDev(ProcNetDev({{"lo", 5, 0, 5, 0}, {"eth0", 1000, 2, 3000, 4}}) +
                             "bogus line\n  eth1: 1 2 3\n  bad/name: 1 2 3 4 5 6 7 8 9 10 11 12\n");
  ASSERT_EQ(dev.size(), 2u);
  EXPECT_EQ(dev["eth0"].rx, 1000);
  EXPECT_EQ(dev["eth0"].tx, 3000);
  EXPECT_EQ(dev["eth0"].drops, 6);
  EXPECT_EQ(dev["lo"].rx, 5);
  // A name glued to its first number (a wide counter) still parses: the colon separates them.
  auto wide = ParseProcNetDev("eth0:123456789012 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n");
  EXPECT_EQ(wide["eth0"].rx, 123456789012);
  EXPECT_TRUE(ParseProcNetDev("").empty());
}

// With /proc/net/dev, every interface's counters come from it (one read a sample, whatever the
// number of interfaces); the list, its order and the speeds come from sysfs only every
// kNetRelistNs, or at once when an interface comes or goes.
TEST(NetCounters, CountersFromProcNetDevAndTheListEveryRelistPeriod) {
  FakeSystemFiles fs;
  Nic(fs, "lo", 0, 0, 0, "");
  Nic(fs, "eth0", 0, 0, 0, "25000");  // sysfs counters stay 0: /proc/net/dev's are read
  fs.AddLink("/sys/class/net/eth0/device", "../../../0000:3b:00.0");
  Nic(fs, "veth1", 0, 0, 0, "-1");
  fs.AddFile("/sys/class/net/bonding_masters", "");  // a file, not an interface
  fs.AddFile("/proc/net/dev",
             ProcNetDev({{"lo", 1, 0, 1, 0}, {"veth1", 0, 0, 0, 0}, {"eth0", 1000, 1, 2000, 0}}));
  NetCounters net(fs);
  wire::NetworkSample first = net.Sample(10 * kSec);
  ASSERT_EQ(first.links.size(), 2u);
  EXPECT_EQ(first.links[0].name, "eth0");  // the device-backed one first, never lo
  EXPECT_EQ(first.links[1].name, "veth1");
  EXPECT_EQ(first.links[0].speed_bps, 25'000'000'000);

  fs.AddFile("/proc/net/dev",
             ProcNetDev({{"lo", 1, 0, 1, 0}, {"veth1", 10, 0, 0, 0}, {"eth0", 5000, 4, 10000, 3}}));
  Nic(fs, "eth0", 0, 0, 0, "100000");  // renegotiated: seen at the next listing
  const int reads_before = fs.reads();
  wire::NetworkSample s = net.Sample(12 * kSec);
  // /proc/net/dev and /proc/net/snmp, nothing per interface.
  EXPECT_EQ(fs.reads() - reads_before, 2);
  const wire::LinkSample* eth0 = Find(s, "eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_DOUBLE_EQ(eth0->rx_bytes_per_s, 2000);
  EXPECT_DOUBLE_EQ(eth0->tx_bytes_per_s, 4000);
  EXPECT_DOUBLE_EQ(eth0->drops_per_s, 3);  // rx and tx drops together
  EXPECT_EQ(eth0->speed_bps, 25'000'000'000);
  EXPECT_DOUBLE_EQ(Find(s, "veth1")->rx_bytes_per_s, 5);

  // A new interface is listed at the next sample, one that went away is gone from it.
  fs.AddFile("/proc/net/dev",
             ProcNetDev({{"lo", 1, 0, 1, 0}, {"eth0", 6000, 4, 11000, 3}, {"eth1", 0, 0, 0, 0}}));
  Nic(fs, "eth1", 0, 0, 0, "1000");
  wire::NetworkSample added = net.Sample(13 * kSec);
  ASSERT_NE(Find(added, "eth1"), nullptr);
  EXPECT_EQ(Find(added, "veth1"), nullptr);
  EXPECT_EQ(Find(added, "eth1")->rx_bytes_per_s, 0);  // no rate in its first window
  EXPECT_DOUBLE_EQ(Find(added, "eth0")->rx_bytes_per_s, 1000);
  // The listing read the new speed too; after the period it is read again anyway.
  EXPECT_EQ(Find(added, "eth0")->speed_bps, 100'000'000'000);
  Nic(fs, "eth0", 0, 0, 0, "40000");
  EXPECT_EQ(Find(net.Sample(14 * kSec), "eth0")->speed_bps, 100'000'000'000);
  EXPECT_EQ(Find(net.Sample(13 * kSec + kNetRelistNs), "eth0")->speed_bps, 40'000'000'000);
}

// A /proc/net/dev that shows no interface but lo (a sandbox's network namespace beside the
// host's /sys) is not used: the interfaces' sysfs counters are.
TEST(NetCounters, AProcNetDevWithOnlyLoIsNotUsed) {
  FakeSystemFiles fs;
  Nic(fs, "eth0", 1000, 2000, 0, "25000");
  fs.AddFile("/proc/net/dev", ProcNetDev({{"lo", 1, 0, 1, 0}}));
  NetCounters net(fs);
  (void)net.Sample(kSec);
  Nic(fs, "eth0", 3000, 2000, 0, "25000");
  wire::NetworkSample s = net.Sample(2 * kSec);
  ASSERT_EQ(s.links.size(), 1u);
  EXPECT_DOUBLE_EQ(s.links[0].rx_bytes_per_s, 2000);
}

TEST(HostUsageMeter, BusyFractionSinceThePreviousSampleAndMemoryInUse) {
  FakeSystemFiles fs;
  // user nice system idle iowait irq softirq steal guest guest_nice
  fs.AddFile("/proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\nintr 5 6 7\n");
  fs.AddFile("/proc/meminfo",
             "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n"
             "MemAvailable:    4000000 kB\nBuffers:          1 kB\n");
  HostUsageMeter meter;
  auto [cpu0, mem] = meter.Sample(fs);
  EXPECT_DOUBLE_EQ(cpu0, 0.2);  // since boot: 200 of 1000
  EXPECT_EQ(mem, int64_t{12000000} * 1024);
  fs.AddFile("/proc/stat", "cpu  400 0 100 750 150 0 0 0 0 0\n");  // +300 busy of +400
  EXPECT_DOUBLE_EQ(meter.Sample(fs).first, 0.75);
  // Without MemAvailable (kernels before 3.14) all of MemTotal counts; unreadable files are 0.
  fs.AddFile("/proc/meminfo", "MemTotal: 2048 kB\n");
  EXPECT_EQ(meter.Sample(fs).second, 2048 * 1024);
  FakeSystemFiles empty;
  EXPECT_EQ(HostUsageMeter().Sample(empty), (std::pair<double, int64_t>{0.0, 0}));
}

// This machine's own counters (its network namespace), for real.
TEST(NetCounters, ReadsThisMachinesCounters) {
  RealSystemFiles fs;
  if (!fs.Exists("/sys/class/net")) GTEST_SKIP() << "no /sys/class/net here";
  NetCounters net(fs);
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  (void)net.Sample(now());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  wire::NetworkSample s = net.Sample(now());
  EXPECT_GE(s.window_ms, 90);
  for (const auto& l : s.links) {
    EXPECT_NE(l.name, "lo");
    for (double r : {l.rx_bytes_per_s, l.tx_bytes_per_s, l.drops_per_s, l.xmit_wait_per_s}) {
      EXPECT_TRUE(std::isfinite(r) && r >= 0) << l.name;
    }
  }
  EXPECT_TRUE(std::isfinite(s.tcp_out_segs_per_s) && s.tcp_out_segs_per_s >= 0);
  std::cout << s.links.size() << " link(s) in this namespace\n";
}

}  // namespace
}  // namespace tianshu::agent
