// The agent's session with the server against a fake control plane: registration, heartbeats,
// the lease, reports and their backoff.
#include "tianshu/agent/session.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tianshu/agent/discovery.h"
#include "tianshu/agent/work_watcher.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

namespace tianshu::agent {
namespace {

constexpr int64_t kMs = 1'000'000;

// A scripted server: `down` makes every call fail as unreachable; `forget` makes the next
// heartbeat answer "register again" (a restarted server).
class FakeServer final : public ControlPlane {
 public:
  bool down = false;
  bool forget = false;
  int64_t lease_ms = 0, lost_after_ms = 10000;
  int registers = 0, heartbeats = 0, fetches = 0;
  std::vector<wire::WorkOrder> work;
  std::vector<wire::Report> reports;
  wire::RegisterRequest last_register;
  wire::Heartbeat last_heartbeat;

  Result<wire::RegisterResponse> Register(const wire::RegisterRequest& r) override {
    if (down) return Fail("register: server unreachable");
    ++registers;
    last_register = r;
    forget = false;
    return wire::RegisterResponse{.node = r.node,
                                  .heartbeat_interval_ms = 1000,
                                  .lost_after_ms = lost_after_ms,
                                  .lease_ms = lease_ms};
  }
  Result<wire::HeartbeatResponse> Heartbeat(const std::string&,
                                            const wire::Heartbeat& hb) override {
    if (down) return Fail("heartbeat: server unreachable");
    ++heartbeats;
    last_heartbeat = hb;
    if (forget) return wire::HeartbeatResponse{.reregister = true};
    return wire::HeartbeatResponse{.pending_orders = static_cast<int64_t>(work.size())};
  }
  Result<wire::WorkBatch> FetchWork(const std::string&) override {
    if (down) return Fail("work: server unreachable");
    ++fetches;
    wire::WorkBatch b{.orders = work};
    work.clear();
    return b;
  }
  Result<wire::WorkBatch> WaitWork(const std::string&, const std::string&, const std::string&,
                                   int64_t) override {
    return Fail("work: not used by the session");
  }
  // takes_heartbeats: answers a heartbeat sent with reports (a server from before that sends
  // the reports alone: the transport's fallback); refuse_reports: does not know the node.
  // fail_reports: refuses every batch (400) while it takes heartbeats.
  bool takes_heartbeats = true, refuse_reports = false, fail_reports = false;
  int heartbeats_in_reports = 0, heartbeats_offered = 0, report_calls = 0;
  Result<ReportsSent> SendReports(const std::string& node, const wire::ReportBatch& b) override {
    ++report_calls;
    if (down) return Fail("reports: server unreachable");
    if (refuse_reports) return ReportsSent{.refused = true};
    if (fail_reports) return Fail("reports: HTTP 400: bad reports");
    reports.insert(reports.end(), b.reports.begin(), b.reports.end());
    ReportsSent sent;
    heartbeats_offered += b.heartbeat.has_value();
    if (b.heartbeat && takes_heartbeats) {
      ++heartbeats_in_reports;
      sent.heartbeat = *Heartbeat(node, *b.heartbeat);
    }
    sent.heartbeat_unknown = b.heartbeat && !takes_heartbeats;
    return sent;
  }
};

struct Fixture {
  FakeSystemFiles fs;
  FakeProcessRunner runner;
  std::unique_ptr<CgroupDriver> cgroups;
  HostInfo host;
  std::unique_ptr<Agent> agent;
  FakeServer server;
  Fixture() {
    fs.AddFile("/proc/mounts", "proc /proc proc rw 0 0\n");
    cgroups = std::move(*DetectCgroupDriver(fs, {}));
    host.hostname = "n0";
    host.accelerators = *ParseDeclaredDevices("8xA100-80GB");
    host.declared_accelerators = true;
    agent = std::make_unique<Agent>(AgentOptions{.node = "n0", .workdir = "/w"}, host, fs, *cgroups,
                                    runner);
  }
};

// A one-rank launch order of job "j" for node n0, running /bin/true.
wire::WorkOrder TrueLaunch() {
  wire::WorkOrder o{.id = "j.a1.launch.n0", .kind = wire::OrderKind::kLaunch, .job_id = "j"};
  o.launch = wire::LaunchOrder{.world_size = 1};
  o.launch->ranks.push_back({.rank = 0, .command = {"/bin/true"}});
  return o;
}

TEST(Backoff, GrowsWithJitterUpToTheCap) {
  Backoff b(500 * kMs, 8000 * kMs, 7);
  int64_t prev_ceiling = 500 * kMs;
  for (int i = 0; i < 10; ++i) {
    int64_t d = b.Next();
    EXPECT_GE(d, 250 * kMs);
    EXPECT_LE(d, std::min<int64_t>(prev_ceiling, 8000 * kMs));
    prev_ceiling *= 2;
  }
  b.Reset();
  EXPECT_LE(b.Next(), 500 * kMs);
}

// With a WorkWatcher bringing the orders, a heartbeat that finds orders pending leaves them to
// it (it has just brought them; `accepted` is on its way); pending at the next heartbeat too,
// the heartbeat fetches them itself (a watcher that stopped delivering). Without a watcher, or
// with one the server disabled, the first heartbeat fetches.
TEST(Session, AWatchedAgentFetchesOnlyOrdersPendingForAWholePeriod) {
  for (const int watcher : {0, 1, 2}) {  // none, delivering, disabled
    Fixture f;
    SessionOptions o{.node = "n0", .agent_id = "a1"};
    if (watcher > 0) o.watched = [watcher] { return watcher == 1; };
    Session s(o, f.server, *f.agent);
    int64_t now = s.Step(0);
    f.server.work.push_back(TrueLaunch());
    now = s.Step(now);
    EXPECT_EQ(f.server.fetches, watcher == 1 ? 0 : 1) << watcher;
    now = s.Step(now);
    EXPECT_EQ(f.server.fetches, 1) << watcher;
    EXPECT_EQ(f.agent->Running().size(), 1u) << watcher;
  }
}

TEST(Session, BacksOffWhileTheServerIsDownThenRegisters) {
  Fixture f;
  f.server.down = true;
  Session s({.node = "n0", .agent_id = "a1", .address = "127.0.0.1", .seed = 3}, f.server,
            *f.agent);
  int64_t now = 0;
  std::vector<int64_t> waits;
  for (int i = 0; i < 5; ++i) {
    int64_t next = s.Step(now);
    waits.push_back(next - now);
    now = next;
  }
  EXPECT_FALSE(s.registered());
  EXPECT_GT(waits[4], waits[0]);  // exponential growth dominates the jitter
  f.server.down = false;
  int64_t next = s.Step(now);
  EXPECT_TRUE(s.registered());
  EXPECT_EQ(next - now, 1000 * kMs);  // the server's heartbeat interval
  EXPECT_EQ(f.server.last_register.hardware.devices.size(), 8u);
  EXPECT_TRUE(f.server.last_register.hardware.devices[0].declared);
}

TEST(Session, SendsTheDataNetworkAndEveryHeartbeatCarriesLinkRates) {
  Fixture f;
  f.fs.AddFile("/sys/class/net/eth0/statistics/rx_bytes", "1000\n");
  f.fs.AddFile("/sys/class/net/eth0/statistics/tx_bytes", "0\n");
  Session s({.node = "n0", .agent_id = "a1", .data_address = "10.1.0.7", .data_interface = "eth0"},
            f.server, *f.agent);
  int64_t now = s.Step(1000 * kMs);
  EXPECT_EQ(f.server.last_register.data_address, "10.1.0.7");
  EXPECT_EQ(f.server.last_register.data_interface, "eth0");
  ASSERT_TRUE(f.server.last_heartbeat.network);
  EXPECT_EQ(f.server.last_heartbeat.network->window_ms, 0);  // the first sample
  ASSERT_EQ(f.server.last_heartbeat.network->links.size(), 1u);
  EXPECT_TRUE(f.server.last_heartbeat.progress.empty());  // no job runs
  f.fs.AddFile("/sys/class/net/eth0/statistics/rx_bytes", "3000\n");
  s.Step(now);  // one heartbeat interval (1 s) later
  ASSERT_TRUE(f.server.last_heartbeat.network);
  EXPECT_EQ(f.server.last_heartbeat.network->window_ms, 1000);
  EXPECT_DOUBLE_EQ(f.server.last_heartbeat.network->links[0].rx_bytes_per_s, 2000);
}

TEST(Session, CountsItsCallsAndSendsTheMeasuredDeviceUsage) {
  Fixture f;
  int samples = 0;
  Session s({.node = "n0",
             .agent_id = "a1",
             .device_usage =
                 [&samples] {
                   ++samples;
                   return std::vector<wire::DeviceUsage>{
                       {.index = 3, .utilization = 0.5, .memory_used_bytes = 7}};
                 }},
            f.server, *f.agent);
  int64_t now = s.Step(0);
  EXPECT_EQ(samples, 1);
  ASSERT_EQ(f.server.last_heartbeat.devices.size(), 1u);
  EXPECT_EQ(f.server.last_heartbeat.devices[0].index, 3);
  EXPECT_EQ(f.server.last_heartbeat.devices[0].utilization, 0.5);
  EXPECT_EQ(s.stats().heartbeats, 1);
  f.server.down = true;
  now = s.Step(now);
  EXPECT_EQ(s.stats().heartbeat_failures, 1);
  EXPECT_EQ(s.stats().heartbeats, 1);
  EXPECT_EQ(s.stats().register_failures, 0);
}

TEST(Session, FetchesWorkWhenPendingAndReportsBack) {
  Fixture f;
  Session s({.node = "n0", .agent_id = "a1"}, f.server, *f.agent);
  int64_t now = s.Step(0);
  f.server.work.push_back(TrueLaunch());
  now = s.Step(now);
  EXPECT_EQ(f.server.fetches, 1);
  ASSERT_EQ(f.server.reports.size(), 2u);
  EXPECT_EQ(f.server.reports[0].kind, wire::ReportKind::kAccepted);
  EXPECT_EQ(f.server.reports[1].kind, wire::ReportKind::kStarted);
  EXPECT_TRUE(f.agent->PendingReports().empty());
  // The next heartbeat carries the running rank.
  s.Step(now);
  EXPECT_EQ(f.agent->Running().size(), 1u);
}

// The node lease: set from the registration, renewed only by answered heartbeats (from the time
// each was sent), and near its end the backoff shortens so that one answer can still keep it.
TEST(Session, AnsweredHeartbeatsRenewTheLeaseAndRetriesQuickenNearItsEnd) {
  Fixture f;
  f.server.lease_ms = 60'000;
  Session s({.node = "n0", .agent_id = "a1", .seed = 5}, f.server, *f.agent);
  const int64_t before = BootTimeNs();
  int64_t now = s.Step(0);
  const int64_t first = f.agent->LeaseDeadline();
  EXPECT_GE(first, before + 60'000 * kMs);
  EXPECT_LE(first, BootTimeNs() + 60'000 * kMs);
  const std::string lease = *f.fs.Read("/w/lease");
  int64_t read = 0;
  EXPECT_EQ(ParseLeaseRecord(lease.data(), lease.size(), &read), LeaseRead::kDeadline);
  EXPECT_EQ(read, first);  // the shims' number
  // Unanswered heartbeats renew nothing; the retries never wait past a third of what is left.
  f.server.down = true;
  for (int i = 0; i < 12; ++i) {
    const int64_t next = s.Step(now);
    EXPECT_LE(next - now, std::max<int64_t>(500 * kMs, (first - BootTimeNs()) / 3 + kMs));
    now = next;
  }
  EXPECT_EQ(f.agent->LeaseDeadline(), first);
  // A "register again" answer renews nothing either; the next answered heartbeat does.
  f.server.down = false;
  f.server.forget = true;
  now = s.Step(now);
  EXPECT_EQ(f.agent->LeaseDeadline(), first);
  now = s.Step(now);
  EXPECT_GT(f.agent->LeaseDeadline(), first);
  // A server without leases: the lease file says "none" (no fencing; a missing file fences).
  f.server.lease_ms = 0;
  f.server.forget = true;
  now = s.Step(now);
  now = s.Step(now);
  EXPECT_EQ(f.agent->LeaseDeadline(), 0);
  EXPECT_EQ(f.fs.Read("/w/lease")->rfind("none", 0), 0u);
}

// A launch order of job `job` for node n0, one rank running /bin/true.
wire::WorkOrder TrueLaunchOf(const std::string& job) {
  wire::WorkOrder o = TrueLaunch();
  o.id = job + ".a1.launch.n0";
  o.job_id = job;
  return o;
}

// Reports sent in the second half of a heartbeat period take the heartbeat with them: one
// request for both, answered as a heartbeat (the lease renewed, the next one a period later).
// Earlier in the period they go alone. While ranks run, a due heartbeat waits up to half a
// period for reports to ride with.
TEST(Session, ReportsSentNearTheNextHeartbeatCarryIt) {
  Fixture f;
  f.server.lease_ms = 60'000;
  Session s({.node = "n0", .agent_id = "a1"}, f.server, *f.agent);
  ASSERT_EQ(s.Step(0), 1000 * kMs);
  ASSERT_EQ(f.server.heartbeats, 1);
  s.Deliver({TrueLaunchOf("early")}, 400 * kMs);
  EXPECT_EQ(f.server.reports.size(), 2u);
  EXPECT_EQ(f.server.heartbeats, 1);
  EXPECT_EQ(f.server.heartbeats_in_reports, 0);
  const int64_t lease = f.agent->LeaseDeadline();
  s.Deliver({TrueLaunchOf("late")}, 600 * kMs);
  EXPECT_EQ(f.server.reports.size(), 4u);
  EXPECT_EQ(f.server.heartbeats, 2);
  EXPECT_EQ(f.server.heartbeats_in_reports, 1);
  EXPECT_EQ(s.stats().heartbeats_with_reports, 1);
  EXPECT_GT(f.agent->LeaseDeadline(), lease);
  // It carried what a heartbeat carries: the ranks running then.
  EXPECT_EQ(f.server.last_heartbeat.running.size(), f.agent->Running().size());
  EXPECT_FALSE(f.server.last_heartbeat.running.empty());
  // The next one is a period after it, not at the old time.
  EXPECT_EQ(s.Step(1000 * kMs), 1600 * kMs);
  EXPECT_EQ(f.server.heartbeats, 2);
  // Due with reports pending (a rank exited since the last send): one request for both.
  ASSERT_EQ(f.server.reports.back().kind, wire::ReportKind::kStarted);
  f.runner.Exit(f.server.reports.back().pid, {.exit_code = 0});
  f.agent->Tick(1100 * kMs);
  ASSERT_FALSE(f.agent->PendingReports().empty());
  EXPECT_EQ(s.Step(1600 * kMs), 2600 * kMs);
  EXPECT_TRUE(f.agent->PendingReports().empty());
  EXPECT_EQ(f.server.heartbeats, 3);
  EXPECT_EQ(f.server.heartbeats_in_reports, 2);
  // Due while ranks run and reports flow (a batch went out within the period), none pending:
  // the heartbeat waits for the next report (up to half a period), and rides with it.
  s.Deliver({TrueLaunchOf("flowing")}, 2000 * kMs);  // early in the period: alone
  EXPECT_EQ(f.server.heartbeats, 3);
  EXPECT_EQ(s.Step(2600 * kMs), 3100 * kMs);
  EXPECT_EQ(f.server.heartbeats, 3);
  s.Deliver({TrueLaunchOf("after")}, 2800 * kMs);
  EXPECT_EQ(f.server.heartbeats, 4);
  EXPECT_EQ(f.server.heartbeats_in_reports, 3);
  EXPECT_EQ(s.Step(2800 * kMs), 3800 * kMs);
  // No report within the last period: on time, though ranks run.
  EXPECT_EQ(s.Step(3800 * kMs), 4800 * kMs);
  EXPECT_EQ(f.server.heartbeats, 5);
}

// A heartbeat is never put off after a failure (the retry time is the backoff's, shortened near
// the lease's end), nor past a quarter of lost_after.
TEST(Session, AHeartbeatIsNotPutOffAfterAFailureOrPastAQuarterOfLostAfter) {
  Fixture f;
  Session s({.node = "n0", .agent_id = "a1", .seed = 3}, f.server, *f.agent);
  s.Step(0);
  s.Deliver({TrueLaunchOf("a")}, 100 * kMs);
  f.server.down = true;
  // Ranks run and reports flowed: the wait is taken; the heartbeat at its end fails.
  const int64_t retry = s.Step(1000 * kMs);
  EXPECT_EQ(retry, 1500 * kMs);
  const int64_t after_failure = s.Step(retry);
  EXPECT_GT(after_failure, retry);
  f.server.down = false;
  s.Deliver({TrueLaunchOf("b")}, after_failure - 100 * kMs);  // no heartbeat rides on a retry
  EXPECT_EQ(f.server.heartbeats_in_reports, 0);
  const int heartbeats = f.server.heartbeats;
  s.Step(after_failure);  // due at the retry time: sent, not put off
  EXPECT_EQ(f.server.heartbeats, heartbeats + 1);
}

TEST(Session, NoWaitWhenHalfAPeriodWouldPassAQuarterOfLostAfter) {
  Fixture f;
  f.server.lost_after_ms = 4000;  // a quarter: 1 s, the period itself
  Session s({.node = "n0", .agent_id = "a1"}, f.server, *f.agent);
  s.Step(0);
  s.Deliver({TrueLaunchOf("a")}, 100 * kMs);
  EXPECT_EQ(s.Step(1000 * kMs), 2000 * kMs);  // sent on time
  EXPECT_EQ(f.server.heartbeats, 2);
}

// A server that takes no heartbeat with reports (one from before them; the transport sends the
// reports alone) gets each heartbeat alone, on time, and no more are made for reports until the
// session registers again.
TEST(Session, AServerThatTakesNoHeartbeatWithReportsGetsItAlone) {
  Fixture f;
  f.server.takes_heartbeats = false;
  Session s({.node = "n0", .agent_id = "a1"}, f.server, *f.agent);
  int64_t now = s.Step(0);
  s.Deliver({TrueLaunchOf("a")}, 600 * kMs);  // offered with the reports, not taken
  EXPECT_EQ(f.server.reports.size(), 2u);
  EXPECT_EQ(f.server.heartbeats_offered, 1);
  EXPECT_EQ(f.server.heartbeats, 1);  // not yet due: none alone either
  // Due while a rank runs: alone and on time (no wait for reports to ride with).
  EXPECT_EQ(s.Step(now), 2000 * kMs);
  EXPECT_EQ(f.server.heartbeats, 2);
  // Due with reports pending: the reports alone, then the heartbeat alone, in the same step.
  f.server.down = true;
  s.Deliver({TrueLaunchOf("b")}, 1700 * kMs);
  f.server.down = false;
  EXPECT_EQ(s.Step(2000 * kMs), 3000 * kMs);
  EXPECT_EQ(f.server.reports.size(), 4u);
  EXPECT_EQ(f.server.heartbeats, 3);
  EXPECT_EQ(f.server.heartbeats_offered, 1);  // not offered again
  EXPECT_EQ(s.stats().heartbeats_with_reports, 0);
  // After the next registration (the server may have been upgraded) it is offered again.
  f.server.forget = true;
  now = s.Step(3000 * kMs);
  for (int i = 0; i < 3 && !s.registered(); ++i) now = s.Step(now);
  ASSERT_TRUE(s.registered());
  s.Deliver({TrueLaunchOf("c")}, now - 400 * kMs);
  EXPECT_EQ(f.server.heartbeats_offered, 2);
}

// A registered session (a 60 s lease) whose server refuses every report batch (400), with a
// launch's reports pending since 100 ms.
struct RefusedReports {
  Fixture f;
  Session s{SessionOptions{.node = "n0", .agent_id = "a1"}, f.server, *f.agent};
  RefusedReports() {
    f.server.lease_ms = 60'000;
    s.Step(0);
    f.server.fail_reports = true;
    s.Deliver({TrueLaunchOf("a")}, 100 * kMs);
  }
};

// Reports the server keeps refusing (400) never keep the heartbeat from it: the agent's loop
// retries them without moving the heartbeat's time, which goes alone and keeps the lease.
TEST(Session, ReportsTheServerRefusesDoNotStarveTheHeartbeat) {
  RefusedReports r;
  auto& [f, s] = r;
  ASSERT_FALSE(f.agent->PendingReports().empty());
  for (int64_t t = 150; t < 1000; t += 50) EXPECT_EQ(s.Step(t * kMs), 1000 * kMs) << t;
  const int64_t lease = f.agent->LeaseDeadline();
  EXPECT_EQ(s.Step(1000 * kMs), 2000 * kMs);
  EXPECT_EQ(f.server.heartbeats, 2);
  EXPECT_GT(f.agent->LeaseDeadline(), lease);
  EXPECT_FALSE(f.agent->PendingReports().empty());  // still waiting for a server that takes them
}

// Failed report sends back off (100 ms doubling to 5 s, jittered) instead of being tried at every
// turn of the agent's loop (50 ms), and the first batch taken resets the backoff. Before, every
// agent with pending reports sent 20 requests a second at a server that was down or refused them.
TEST(Session, FailedReportSendsBackOff) {
  RefusedReports r;
  auto& [f, s] = r;
  const int first = f.server.report_calls;
  EXPECT_GT(s.reports_retry_ns(), 100 * kMs);
  for (int64_t t = 150; t <= 10'000; t += 50) s.Step(t * kMs);  // the loop's turns: 198
  const int tried = f.server.report_calls - first;
  EXPECT_GE(tried, 4);
  EXPECT_LE(tried, 25);
  EXPECT_GE(f.server.heartbeats, 10) << "heartbeats go alone meanwhile";
  f.server.fail_reports = false;
  int64_t t = 10'000;
  while (!f.agent->PendingReports().empty() && t < 20'000) s.Step((t += 50) * kMs);
  EXPECT_TRUE(f.agent->PendingReports().empty());
  EXPECT_LE(t, 10'000 + 5'050) << "within the backoff's cap";
  EXPECT_EQ(s.reports_retry_ns(), 0);
  // Reset: the next failure waits a first step again (at most the base), not the cap.
  f.server.fail_reports = true;
  s.Deliver({TrueLaunchOf("b")}, (t + 10) * kMs);
  EXPECT_LE(s.reports_retry_ns(), (t + 10 + 100) * kMs);
}

// Reports the server refuses because it does not know the node (a new store): nothing is lost,
// the session registers again and then sends them.
TEST(Session, RefusedReportsWaitForARegistration) {
  Fixture f;
  Session s({.node = "n0", .agent_id = "a1"}, f.server, *f.agent);
  int64_t now = s.Step(0);
  f.server.refuse_reports = true;
  s.Deliver({TrueLaunchOf("a")}, 100 * kMs);
  EXPECT_FALSE(s.registered());
  EXPECT_EQ(f.agent->PendingReports().size(), 2u);
  f.server.refuse_reports = false;
  for (int i = 0; i < 5 && !f.agent->PendingReports().empty(); ++i) now = s.Step(now);
  EXPECT_TRUE(s.registered());
  EXPECT_EQ(s.registrations(), 2);
  EXPECT_EQ(f.server.reports.size(), 2u);
}

TEST(Session, RegistersAgainAfterAServerRestart) {
  Fixture f;
  Session s({.node = "n0", .agent_id = "a1"}, f.server, *f.agent);
  int64_t now = s.Step(0);
  EXPECT_EQ(s.registrations(), 1);
  f.server.forget = true;  // the server restarted without this node
  now = s.Step(now);
  EXPECT_FALSE(s.registered());
  for (int i = 0; i < 3 && !s.registered(); ++i) now = s.Step(now);
  EXPECT_TRUE(s.registered());
  EXPECT_EQ(s.registrations(), 2);
  // Reports that could not be sent while the server was down are sent afterwards.
  f.server.down = true;
  wire::WorkOrder stop{
      .id = "s", .kind = wire::OrderKind::kStop, .job_id = "x", .stop = wire::StopOrder{}};
  f.agent->Apply(stop, now);
  now = s.Step(now);
  EXPECT_FALSE(f.agent->PendingReports().empty());
  f.server.down = false;
  for (int i = 0; i < 3; ++i) now = s.Step(now);
  EXPECT_TRUE(f.agent->PendingReports().empty());
  EXPECT_EQ(f.server.reports.back().kind, wire::ReportKind::kStopped);
}

// A transport whose work requests block like the server's: until an order newer than the
// cursor exists (or the wait runs out, or Abort).

}  // namespace
}  // namespace tianshu::agent
