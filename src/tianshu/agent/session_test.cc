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
class HeldWork final : public ControlPlane {
 public:
  std::mutex mu;
  std::condition_variable cv;
  std::vector<wire::WorkOrder> outstanding;
  uint64_t newest = 0;  // seq of the newest order
  bool aborted = false, refuse_cursor = false;
  std::atomic<int> requests{0};
  void Add(wire::WorkOrder o) {
    {
      std::lock_guard l(mu);
      outstanding.push_back(std::move(o));
      ++newest;
    }
    cv.notify_all();
  }
  Result<wire::RegisterResponse> Register(const wire::RegisterRequest&) override {
    return Fail("unused");
  }
  Result<wire::HeartbeatResponse> Heartbeat(const std::string&, const wire::Heartbeat&) override {
    return Fail("unused");
  }
  Result<wire::WorkBatch> FetchWork(const std::string&) override { return Fail("unused"); }
  Result<ReportsSent> SendReports(const std::string&, const wire::ReportBatch&) override {
    return Fail("unused");
  }
  Result<wire::WorkBatch> WaitWork(const std::string&, const std::string&, const std::string& after,
                                   int64_t wait_ms) override {
    ++requests;
    if (refuse_cursor && !after.empty()) {
      return Fail("work: HTTP 400: unknown query parameter 'after'");
    }
    uint64_t since = after.empty() ? 0 : std::stoull(after.substr(2));
    std::unique_lock l(mu);
    cv.wait_for(l, std::chrono::milliseconds(wait_ms), [&] { return aborted || newest > since; });
    if (aborted) return Fail("work: server unreachable (Canceled)");
    return wire::WorkBatch{.orders = outstanding, .cursor = "e." + std::to_string(newest)};
  }
  void Abort() override {
    {
      std::lock_guard l(mu);
      aborted = true;
    }
    cv.notify_all();
  }
};

wire::WorkOrder OrderNamed(const std::string& id) {
  return {.id = id, .kind = wire::OrderKind::kStop, .job_id = "j-1"};
}

TEST(WorkWatcher, BringsEachNewOrderAtOnceAndWakesTheMainLoop) {
  HeldWork server;
  std::mutex mu;
  std::condition_variable woken;
  int wakes = 0;
  WorkWatcher w({.node = "n0", .agent_id = "a", .wait_ms = 60000}, server, [&] {
    std::lock_guard l(mu);
    ++wakes;
    woken.notify_all();
  });
  auto wait_wakes = [&](int n) {
    std::unique_lock l(mu);
    return woken.wait_for(l, std::chrono::seconds(10), [&] { return wakes >= n; });
  };
  // Inactive (not registered): no request is made.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(server.requests.load(), 0);
  w.SetActive(true);
  server.Add(OrderNamed("o1"));
  ASSERT_TRUE(wait_wakes(1));  // long before the 60 s wait ran out
  auto got = w.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, "o1");
  // The next request carries the cursor: o1 (still outstanding) does not come back alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(w.Take().empty());
  server.Add(OrderNamed("o2"));
  ASSERT_TRUE(wait_wakes(2));
  got = w.Take();
  ASSERT_EQ(got.size(), 2u);  // every outstanding order, the repeat included
  EXPECT_EQ(got[1].id, "o2");
  EXPECT_FALSE(w.disabled());
}  // the destructor aborts the held request: this test ends at once, not after 60 s

TEST(WorkWatcher, AServerThatRefusesTheCursorLeavesWorkToTheHeartbeats) {
  HeldWork server;
  server.refuse_cursor = true;
  server.Add(OrderNamed("o1"));
  std::atomic<int> wakes{0};
  WorkWatcher w({.node = "n0", .agent_id = "a", .wait_ms = 1000}, server, [&] { ++wakes; });
  w.SetActive(true);
  for (int i = 0; i < 500 && !w.disabled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(w.disabled());
  EXPECT_EQ(wakes.load(), 1);  // the first request (no cursor yet) still brought o1
  EXPECT_EQ(server.requests.load(), 2);
}

// Over real HTTP: the default transport opens a connection per request; one asked to keep it
// (the work watcher's) sends its requests over one connection.
TEST(HttpControlPlane, KeepAliveSendsTheWatchersRequestsOverOneConnection) {
  httplib::Server http;
  std::mutex mu;
  std::vector<int> ports;  // the client's port, per request
  http.Get("/v1/agents/n0/work", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard l(mu);
      ports.push_back(req.remote_port);
    }
    res.set_content(wire::ToJson(wire::WorkBatch{.cursor = "e.1"}).dump(), "application/json");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { http.listen_after_bind(); });
  for (int i = 0; i < 500 && !http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto requests_over = [&](bool keep_alive) {
    {
      std::lock_guard l(mu);
      ports.clear();
    }
    auto cp = HttpControlPlane::Open("127.0.0.1:" + std::to_string(port), "token", "");
    EXPECT_TRUE(cp);
    if (!cp) return std::set<int>{};
    if (keep_alive) (*cp)->KeepAlive();
    for (int i = 0; i < 3; ++i) {
      auto batch = (*cp)->WaitWork("n0", "a", "", 0);
      EXPECT_TRUE(batch) << (batch ? "" : batch.error().message);
    }
    std::lock_guard l(mu);
    EXPECT_EQ(ports.size(), 3u);
    return std::set<int>(ports.begin(), ports.end());
  };
  EXPECT_EQ(requests_over(false).size(), 3u);
  EXPECT_EQ(requests_over(true).size(), 1u);
  http.stop();
  serving.join();
}

// A server from before heartbeats in report batches refuses the field (400, having taken
// nothing): the transport sends the reports again alone, says the heartbeat was not answered, and
// sends reports alone from then on, until the next registration. A node the server does not know
// is told apart from a failure.
TEST(HttpControlPlane, AnOlderServerGetsTheReportsAloneWithoutTheHeartbeat) {
  httplib::Server http;
  std::mutex mu;
  int with_beat = 0, alone = 0;
  bool unknown_node = false;
  std::string mode = "older";  // "older", "bad-heartbeat", "odd-answer"
  http.Post("/v1/agents/n0/reports", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard l(mu);
    if (mode == "bad-heartbeat" && req.body.find("\"heartbeat\"") != std::string::npos) {
      ++with_beat;
      res.status = 400;
      res.set_content(R"({"error":{"code":400,"message":"bad reports: heartbeat.progress: more"}})",
                      "application/json");
      return;
    }
    if (mode == "odd-answer") {  // taken, with an answer this agent cannot read
      ++with_beat;
      res.set_content(R"({"version":1,"accepted":1,"heartbeat":{"later":true}})",
                      "application/json");
      return;
    }
    if (unknown_node) {
      res.status = 404;
      res.set_content(R"({"error":{"code":404,"message":"unknown node n0: register first"}})",
                      "application/json");
      return;
    }
    if (req.body.find("\"heartbeat\"") != std::string::npos) {
      ++with_beat;
      res.status = 400;
      res.set_content(R"({"error":{"code":400,"message":"bad reports: heartbeat: unknown field"}})",
                      "application/json");
      return;
    }
    ++alone;
    res.set_content(R"({"version":1,"accepted":1})", "application/json");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { http.listen_after_bind(); });
  for (int i = 0; i < 500 && !http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto cp = HttpControlPlane::Open("127.0.0.1:" + std::to_string(port), "token", "");
  ASSERT_TRUE(cp);
  const wire::ReportBatch batch{.agent_id = "a",
                                .reports = {wire::Report{.order_id = "o"}},
                                .heartbeat = wire::Heartbeat{.agent_id = "a"}};
  auto counts = [&] {
    std::lock_guard l(mu);
    return std::pair{with_beat, alone};
  };
  auto sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_FALSE(sent->refused);
  EXPECT_FALSE(sent->heartbeat);
  EXPECT_EQ(counts(), (std::pair{1, 1}));
  sent = (*cp)->SendReports("n0", batch);  // alone at once
  ASSERT_TRUE(sent);
  EXPECT_EQ(counts(), (std::pair{1, 2}));
  (void)(*cp)->Register({.node = "n0", .agent_id = "a"});  // no such route here: it fails
  sent = (*cp)->SendReports("n0", batch);                  // tried with it again
  ASSERT_TRUE(sent);
  EXPECT_EQ(counts(), (std::pair{2, 3}));
  // Any other 400 for a batch with a heartbeat: the reports go again alone, and the next batch
  // still tries with its heartbeat.
  {
    std::lock_guard l(mu);
    mode = "bad-heartbeat";
  }
  (void)(*cp)->Register({.node = "n0", .agent_id = "a"});
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_FALSE(sent->heartbeat);
  EXPECT_EQ(counts(), (std::pair{3, 4}));
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent);
  EXPECT_EQ(counts(), (std::pair{4, 5}));
  // A 200 whose heartbeat answer cannot be read: the reports were taken, the heartbeat was not.
  {
    std::lock_guard l(mu);
    mode = "odd-answer";
  }
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_FALSE(sent->refused);
  EXPECT_FALSE(sent->heartbeat);
  {
    std::lock_guard l(mu);
    mode = "older";
    unknown_node = true;
  }
  sent = (*cp)->SendReports("n0", batch);
  ASSERT_TRUE(sent);
  EXPECT_TRUE(sent->refused);
  http.stop();
  serving.join();
}

// A kept connection that the server has closed by the time of the next request (its idle
// timeout; over TLS the client cannot tell): that request is sent once more on a new connection,
// not failed (the watcher would back off and orders would wait). The server here answers the
// first request on a connection and drops the connection at the second.
TEST(HttpControlPlane, AKeptConnectionTheServerDroppedIsTriedOnceMoreOnANewOne) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(::listen(lfd, 8), 0);
  std::atomic<int> accepted{0};
  std::thread server([&] {
    const std::string body = wire::ToJson(wire::WorkBatch{.cursor = "e.1"}).dump();
    const std::string answer =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Connection: keep-alive\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    for (int c = 0; c < 2; ++c) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      ++accepted;
      for (int request = 0; request < 2; ++request) {
        std::string got;
        char buf[4096];
        while (got.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0) break;
          got.append(buf, static_cast<size_t>(n));
        }
        if (got.empty() || request == 1) break;  // the second request: dropped unanswered
        (void)!::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
      }
      ::close(fd);
    }
  });
  auto cp = HttpControlPlane::Open("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "t", "");
  ASSERT_TRUE(cp);
  (*cp)->KeepAlive();
  auto first = (*cp)->WaitWork("n0", "a", "", 0);
  ASSERT_TRUE(first) << first.error().message;
  auto second = (*cp)->WaitWork("n0", "a", "e.1", 0);
  EXPECT_TRUE(second) << second.error().message;
  EXPECT_EQ(accepted.load(), 2);
  cp->reset();  // closes the kept connection: the server's read of it ends
  ::shutdown(lfd, SHUT_RDWR);
  ::close(lfd);
  server.join();
}

}  // namespace
}  // namespace tianshu::agent
