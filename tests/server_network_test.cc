// The network dimension through the server's API with fake agents (issue 18): probes run on
// idle nodes and fill the measured matrix; the slow pairs are exactly the ones the fabric makes
// slow; a gang is placed inside a measured leaf where the nominal topology would have split it;
// probes give way to waiting work; a running job whose step time grows while its node shows
// congestion is moved, with an event saying why. The real fabric (network namespaces, tc, real
// agents and PyTorch) is tests/network_fabric_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "server_fixture.h"

namespace tianshu::testing {
namespace {

// The fabric the fake agents pretend to sit on: n1 and n3 under one switch, n2 and n4 under
// another, a slow link between them. The nominal topology (no leaf labels) says nothing of it.
bool SameHalf(const std::string& a, const std::string& b) {
  return (a.back() - '0') % 2 == (b.back() - '0') % 2;
}

const char* kTwoNodeJob =
    "kind: training\nname: ddp\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, pp: 1}\n"
    "nodes: 2\ngpus_per_node: 1\ngpus: 2\nmax_retries: 2\n"
    "run:\n  command: [/usr/bin/python3, train.py]\n";

class Fabric {
 public:
  explicit Fabric(ServerFixture& f,
                  const std::vector<std::string>& names = {"n1", "n2", "n3", "n4"},
                  int devices = 1) {
    for (const std::string& n : names) {
      agents_.emplace(n, std::make_unique<FakeAgent>(f, n, devices));
      EXPECT_EQ(agents_.at(n)->Register().status, 200);
    }
  }
  FakeAgent& at(const std::string& n) { return *agents_.at(n); }

  // One round: every agent heartbeats and carries out its probe orders as a real agent would
  // (rank 0 reports the figure this fabric gives the pair); other launch orders are returned.
  std::vector<std::pair<std::string, wire::WorkOrder>> Round() {
    std::vector<std::pair<std::string, wire::WorkOrder>> launches;
    for (auto& [name, a] : agents_) {
      if (failed.contains(name)) {  // says it can run nothing, and does nothing
        a->Heartbeat(wire::Health::kFailed);
        continue;
      }
      a->Heartbeat();
      for (const auto& o : a->Work(0)) {
        if (o.kind == wire::OrderKind::kStop) {
          a->Report({{.order_id = o.id, .kind = wire::ReportKind::kAccepted, .job_id = o.job_id},
                     {.order_id = o.id, .kind = wire::ReportKind::kStopped, .job_id = o.job_id}});
          continue;
        }
        if (o.kind != wire::OrderKind::kLaunch || !o.launch) continue;
        if (!o.launch->probe) {
          launches.push_back({name, o});
          continue;
        }
        ++probe_orders;
        probe_hosts.insert(o.launch->master_addr);
        a->AcceptAndStart(o);
        const int rank = o.launch->ranks.at(0).rank;
        wire::Report exit{
            .order_id = o.id, .kind = wire::ReportKind::kExited, .job_id = o.job_id, .rank = rank};
        if (rank == 0) {
          peers_[o.job_id].first = name;
          pending_exit_[o.job_id] = {name, exit};  // the figure needs the other node's name
        } else {
          peers_[o.job_id].second = name;
          a->Report({exit});
        }
      }
    }
    for (auto it = pending_exit_.begin(); it != pending_exit_.end();) {
      const auto& [a, b] = peers_[it->first];
      if (b.empty()) {
        ++it;
        continue;
      }
      wire::Report exit = it->second.second;
      const double gbps = SameHalf(a, b) ? 1.2 : 0.03;
      exit.probe = wire::ProbeResult{.method = "gloo",
                                     .bytes = 16 << 20,
                                     .iterations = 10,
                                     .busbw_gbps = gbps,
                                     .algbw_gbps = gbps,
                                     .forward_gbps = gbps,
                                     .backward_gbps = gbps};
      agents_.at(it->second.first)->Report({exit});
      it = pending_exit_.erase(it);
    }
    return launches;
  }

  int probe_orders = 0;
  std::set<std::string> probe_hosts;
  std::set<std::string> failed;  // nodes whose agents report a failure

 private:
  std::map<std::string, std::unique_ptr<FakeAgent>> agents_;
  std::map<std::string, std::pair<std::string, std::string>> peers_;  // probe -> rank 0, rank 1
  std::map<std::string, std::pair<std::string, wire::Report>> pending_exit_;
};

std::set<std::string> NodesOf(const std::vector<std::pair<std::string, wire::WorkOrder>>& ls,
                              const std::string& job) {
  std::set<std::string> out;
  for (const auto& [node, o] : ls) {
    if (o.job_id == job) out.insert(node);
  }
  return out;
}

// Runs rounds until a job's launch orders reached every node they went to.
std::set<std::string> PlacedNodes(Fabric& fab, const std::string& job,
                                  std::vector<std::pair<std::string, wire::WorkOrder>>* launches) {
  EXPECT_TRUE(WaitFor(
      [&] {
        for (auto& l : fab.Round()) launches->push_back(l);
        return NodesOf(*launches, job).size() == 2;
      },
      10000));
  return NodesOf(*launches, job);
}

// Whether /v1/topology/measured shows `pairs` pairs, no probe running, and every slow pair
// measured twice (a slow figure is checked again NetworkMap::kRecheckMs later).
bool Settled(const nlohmann::json& m, size_t pairs) {
  if (m["pairs"].size() != pairs || m["probes"]["running"] != 0) return false;
  return std::all_of(m["pairs"].begin(), m["pairs"].end(), [](const nlohmann::json& p) {
    return !p["slow"].get<bool>() || p["slow_confirmed"].get<bool>();
  });
}

// Runs rounds until the probes measured all `pairs` pairs (the slow ones twice) and none is
// running.
bool MeasureEveryPair(ServerFixture& f, Fabric& fab, size_t pairs = 6) {
  return WaitFor(
      [&] {
        fab.Round();
        return Settled(f.Get("/v1/topology/measured").body, pairs);
      },
      40000);
}

TEST(ServerNetwork, NominalPlacementSplitsTheGangAcrossTheSlowLink) {
  // The control: no probes, the flat nominal topology; the topology strategy takes the first
  // two nodes, one under each switch.
  ServerFixture f;
  f.Start();
  Fabric fab(f);
  auto r = f.Post("/v1/jobs", kTwoNodeJob);
  ASSERT_EQ(r.status, 201) << r.text;
  std::vector<std::pair<std::string, wire::WorkOrder>> launches;
  auto nodes = PlacedNodes(fab, r.body["id"], &launches);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_FALSE(SameHalf(*nodes.begin(), *nodes.rbegin()))
      << *nodes.begin() << "," << *nodes.rbegin();
  EXPECT_EQ(fab.probe_orders, 0);
}

TEST(ServerNetwork, ProbesFindTheSlowPairsAndTheGangStaysInsideAMeasuredLeaf) {
  ServerFixture f;
  f.config.network.probes = true;
  f.Start();
  Fabric fab(f);
  nlohmann::json measured;
  ASSERT_TRUE(WaitFor(
      [&] {
        fab.Round();
        measured = f.Get("/v1/topology/measured").body;
        return Settled(measured, 6);
      },
      40000))
      << measured.dump();
  EXPECT_EQ(fab.probe_orders, 20)
      << "one probe per pair and a second for each of the four slow ones, two ranks each";
  EXPECT_EQ(fab.probe_hosts, std::set<std::string>{"127.0.0.1"});
  int slow = 0;
  for (const auto& p : measured["pairs"]) {
    const std::string a = p["a"], b = p["b"];
    EXPECT_EQ(p["slow"].get<bool>(), !SameHalf(a, b)) << p.dump();
    EXPECT_GT(p["nominal_gbps"].get<double>(), 1.2) << "nominal: every pair alike";
    slow += p["slow"].get<bool>();
  }
  EXPECT_EQ(slow, 4);
  EXPECT_EQ(measured["groups"], nlohmann::json::parse(R"([["n1","n3"],["n2","n4"]])"))
      << measured.dump();
  // The same on /metrics, for Prometheus.
  const std::string metrics = f.Get("/metrics").text;
  for (const auto& p : measured["pairs"]) {
    const std::string series = "tianshu_network_pair_slow{a=\"" + p["a"].get<std::string>() +
                               "\",b=\"" + p["b"].get<std::string>() + "\"} " +
                               (p["slow"].get<bool>() ? "1" : "0") + "\n";
    EXPECT_NE(metrics.find(series), std::string::npos) << series << metrics;
  }
  EXPECT_NE(metrics.find("tianshu_network_probes_total{result=\"done\"} 10\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tianshu_network_pair_bandwidth_gbps{a=\"n1\",b=\"n3\"} 1.2\n"),
            std::string::npos)
      << metrics;
  // Every pair measured: no probe is due for an hour.
  const int probes = fab.probe_orders;
  for (int i = 0; i < 20; ++i) fab.Round();
  EXPECT_EQ(fab.probe_orders, probes);

  auto r = f.Post("/v1/jobs", kTwoNodeJob);
  ASSERT_EQ(r.status, 201) << r.text;
  std::vector<std::pair<std::string, wire::WorkOrder>> launches;
  auto nodes = PlacedNodes(fab, r.body["id"], &launches);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_TRUE(SameHalf(*nodes.begin(), *nodes.rbegin()))
      << *nodes.begin() << "," << *nodes.rbegin();

  // The figures are stored: a restarted server shows them without probing again.
  f.Stop();
  f.Start();
  auto again = f.Get("/v1/topology/measured").body;
  EXPECT_EQ(again["pairs"].size(), 6u) << again.dump();
}

// A node that fails and comes back keeps its measured leaf: the cluster view keeps every
// registered node, so its failure and its return are marks in the ledger, never a rebuild (not
// even at the measured leaves' recheck, 10 s on).
TEST(ServerNetwork, ANodeThatFailsAndComesBackIsMarkedInTheLedgerAndKeepsItsMeasuredLeaf) {
  ServerFixture f;
  f.config.network.probes = true;
  f.Start();
  Fabric fab(f);
  ASSERT_TRUE(MeasureEveryPair(f, fab));
  // A job builds the ledger over the measured leaves; it is cancelled before it starts.
  auto first = f.Post("/v1/jobs", kTwoNodeJob);
  ASSERT_EQ(first.status, 201) << first.text;
  std::vector<std::pair<std::string, wire::WorkOrder>> launches;
  auto nodes = PlacedNodes(fab, first.body["id"], &launches);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_TRUE(SameHalf(*nodes.begin(), *nodes.rbegin()));
  ASSERT_EQ(f.Post("/v1/jobs/" + first.body["id"].get<std::string>() + "/cancel", "").status, 200);
  const server::ControlPlane::LedgerStats before = f.server().control_plane().Ledger();
  ASSERT_GE(before.rebuilds, 1);

  // n4 fails; a job that needs all four nodes waits for it (its cycles mark n4 in the ledger).
  fab.failed.insert("n4");
  std::string wide_yaml = kTwoNodeJob;
  wide_yaml.replace(wide_yaml.find("nodes: 2"), 8, "nodes: 4");
  wide_yaml.replace(wide_yaml.find("gpus: 2"), 7, "gpus: 4");
  auto wide = f.Post("/v1/jobs", wide_yaml);
  ASSERT_EQ(wide.status, 201) << wide.text;
  launches.clear();
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(11'000);
  while (std::chrono::steady_clock::now() < end) {  // past the measured leaves' recheck
    for (auto& l : fab.Round()) launches.push_back(l);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(f.Get("/v1/nodes/n4").body["state"], "failed");
  EXPECT_TRUE(NodesOf(launches, wide.body["id"]).empty());
  EXPECT_EQ(f.server().control_plane().Ledger().rebuilds, before.rebuilds);
  // n4 is back: the job starts on all four, and the ledger was only marked.
  fab.failed.erase("n4");
  ASSERT_TRUE(WaitFor(
      [&] {
        for (auto& l : fab.Round()) launches.push_back(l);
        return NodesOf(launches, wide.body["id"]).size() == 4;
      },
      10000))
      << f.Get("/v1/jobs/" + wide.body["id"].get<std::string>()).text;
  const server::ControlPlane::LedgerStats after = f.server().control_plane().Ledger();
  EXPECT_EQ(after.rebuilds, before.rebuilds);
  EXPECT_GE(after.node_marks, before.node_marks + 2);  // failed, then back
}

TEST(ServerNetwork, ALinkWhoseLineRateChangesHasItsPairsProbedAgain) {
  ServerFixture f;
  f.config.network.probes = true;
  f.Start();
  Fabric fab(f);
  ASSERT_TRUE(MeasureEveryPair(f, fab));
  const int probes = fab.probe_orders;
  auto beat = [&](int64_t eth0_bps, int64_t veth_bps = -1) {
    wire::Heartbeat h;
    h.network = wire::NetworkSample{
        .window_ms = 1000,
        .links = {{.name = "eth0", .speed_bps = eth0_bps}, {.name = "lo", .speed_bps = 0}}};
    if (veth_bps >= 0) h.network->links.push_back({.name = "veth1", .speed_bps = veth_bps});
    fab.at("n1").Heartbeat(h);
  };
  // The same rate twice; a container's veth that appears, comes up from no rate and goes away:
  // no change.
  beat(100'000'000'000);
  beat(100'000'000'000);
  beat(100'000'000'000, 0);
  beat(100'000'000'000, 10'000'000'000);
  beat(100'000'000'000);
  for (int i = 0; i < 5; ++i) fab.Round();
  EXPECT_EQ(fab.probe_orders, probes);
  // eth0 renegotiates from 100 to 25 Gbit/s: an event says so, and n1's three pairs are probed
  // again (two ranks each); the other three are not.
  beat(100'000'000'000);
  beat(25'000'000'000);
  auto events = f.Get("/v1/events?limit=1000").body;
  std::string said;
  for (const auto& e : events.value("events", nlohmann::json::array())) {
    if (e.value("reason", "").find("eth0 100 Gbit/s -> 25 Gbit/s") != std::string::npos) {
      said = e["reason"];
    }
  }
  EXPECT_NE(said.find("n1"), std::string::npos) << events.dump();
  // A port that flaps back within the minute: no second event.
  beat(100'000'000'000);
  int link_events = 0;
  const nlohmann::json all = f.Get("/v1/events?limit=1000").body["events"];  // not a temporary's
  for (const auto& e : all) {
    link_events += e.value("reason", "").find(": eth0 ") != std::string::npos;
  }
  EXPECT_EQ(link_events, 1);
  ASSERT_TRUE(WaitFor(
      [&] {
        fab.Round();
        return fab.probe_orders >= probes + 6 &&
               f.Get("/v1/topology/measured").body["probes"]["running"] == 0;
      },
      20000))
      << fab.probe_orders - probes << " probe orders after the change";
  for (int i = 0; i < 10; ++i) fab.Round();
  EXPECT_EQ(fab.probe_orders, probes + 6);
}

TEST(ServerNetwork, AProbeGivesWayToAJobThatWaits) {
  ServerFixture f;
  f.config.network.probes = true;
  f.Start();
  FakeAgent a(f, "n1", 1), b(f, "n2", 1);
  ASSERT_EQ(a.Register().status, 200);
  ASSERT_EQ(b.Register().status, 200);
  // The probe starts on the idle pair; nobody answers it.
  std::string probe;
  ASSERT_TRUE(WaitFor([&] {
    a.Heartbeat();
    for (const auto& o : a.Work(0)) {
      if (o.launch && o.launch->probe) probe = o.job_id;
    }
    return !probe.empty();
  }));
  EXPECT_EQ(f.Get("/v1/nodes/n1").body["probing"], probe);
  // A job arrives: the probe is stopped and the job takes the nodes once both stopped.
  auto r = f.Post("/v1/jobs", kTwoNodeJob);
  ASSERT_EQ(r.status, 201) << r.text;
  const std::string job = r.body["id"];
  std::set<std::string> launched;
  ASSERT_TRUE(WaitFor([&] {
    for (FakeAgent* x : {&a, &b}) {
      x->Heartbeat();
      for (const auto& o : x->Work(0)) {
        if (o.kind == wire::OrderKind::kStop && o.job_id == probe) {
          x->Report({{.order_id = o.id, .kind = wire::ReportKind::kStopped, .job_id = probe}});
        }
        if (o.kind == wire::OrderKind::kLaunch && o.job_id == job) launched.insert(x->node());
      }
    }
    return launched.size() == 2;
  })) << f.Get("/v1/jobs/" + job).body.dump();
  auto m = f.Get("/v1/topology/measured").body;
  // Giving way is not the pair's failure (which would hold it back for probe_interval).
  EXPECT_EQ(m["probes"]["gave_way"], 1) << m.dump();
  EXPECT_EQ(m["probes"]["failed"], 0) << m.dump();
  EXPECT_EQ(m["probes"]["running"], 0);
}

// The stop orders of a probe, in node `node`'s outstanding orders (the control plane, driven
// directly: nothing ticks unless the test calls Tick).
int ProbeStops(server::ControlPlane& cp, const std::string& node, const std::string& probe) {
  auto text = cp.Work(node, "agent-" + node, 0);
  if (!text) return -1;
  auto work = wire::ParseWorkBatch(*text);
  if (!work) return -1;
  return static_cast<int>(std::count_if(work->orders.begin(), work->orders.end(), [&](auto& o) {
    return o.kind == wire::OrderKind::kStop && o.job_id == probe;
  }));
}

// Work that cannot fit outside a running probe stops it in its own change: the stop orders are
// durable when the submission (or the release) is answered, before the cycle that places what
// fits, which for a release of thousands of jobs comes hundreds of milliseconds later. Work that
// fits elsewhere leaves the probe running, and a held job stops nothing. The probe gave way:
// not a failure, so its pair stays due.
TEST(ServerNetwork, WorkThatCannotFitStopsTheProbeInItsOwnChange) {
  std::string pattern = (std::filesystem::temp_directory_path() / "tianshu-probe-XXXXXX").string();
  const std::string dir = mkdtemp(pattern.data());
  auto store = server::OpenSqliteStore(dir + "/tianshu.db");
  ASSERT_TRUE(store) << store.error().message;
  server::ControlPlaneOptions o;
  o.config.network.probes = true;
  o.placement = "topology";
  o.node_lease_ms = 0;
  int64_t now = 1'800'000'000'000;
  auto opened = server::ControlPlane::Open(std::move(*store), o, now);
  ASSERT_TRUE(opened) << opened.error().message;
  server::ControlPlane& cp = **opened;
  const server::Identity admin{.name = "admin", .role = server::Role::kAdmin};
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  for (const auto& n : nodes)
    ASSERT_TRUE(cp.Register(A100Node(n, "agent-" + n, "leaf-0"), admin, now));
  cp.Tick(now += 2000);
  std::string probe;
  std::set<std::string> probing;
  for (const auto& n : nodes) {
    auto text = cp.Work(n, "agent-" + n, 0);
    ASSERT_TRUE(text);
    const auto work = wire::ParseWorkBatch(*text);
    ASSERT_TRUE(work) << work.error().message;
    for (const auto& order : work->orders) {
      if (order.launch && order.launch->probe) probe = order.job_id, probing.insert(n);
    }
  }
  ASSERT_EQ(probing.size(), 2u) << probe;
  auto submit = [&](int gpus, bool hold) {
    auto r = server::ParseSubmitBody("application/yaml",
                                     "kind: training\nname: j\nmodel: {profile: llama2-7b}\n"
                                     "parallelism: {tp: 1, pp: 1}\ngpus: " +
                                         std::to_string(gpus) + "\nduration: 1h\n",
                                     "j.yaml");
    EXPECT_TRUE(r) << r.error().message;
    r->owner = "admin";
    r->hold = hold;
    auto made = cp.Submit(std::move(*r), now);
    EXPECT_TRUE(made) << made.error().message;
    return made ? made->job["id"].get<std::string>() : "";
  };
  auto stops = [&] {
    int n = 0;
    for (const auto& node : probing) n += ProbeStops(cp, node, probe);
    return n;
  };
  // 4 GPUs fit on the third node: the probe runs on; the cycle places the job there.
  (void)submit(4, false);
  EXPECT_EQ(stops(), 0);
  cp.Tick(now += 1000);
  EXPECT_EQ(stops(), 0);
  // 16 GPUs, held: nothing; released, they cannot fit in the 4 left outside the probe.
  const std::string big = submit(16, true);
  EXPECT_EQ(stops(), 0);
  ASSERT_TRUE(cp.SetHeld({big}, false, admin, now));
  EXPECT_EQ(stops(), 2);
  // Both ranks stopped: the probe is over, as one that gave way.
  for (const auto& node : probing) {
    auto text = cp.Work(node, "agent-" + node, 0);
    ASSERT_TRUE(text);
    const auto work = wire::ParseWorkBatch(*text);
    ASSERT_TRUE(work);
    wire::ReportBatch b{.agent_id = "agent-" + node};
    for (const auto& order : work->orders) {
      if (order.kind == wire::OrderKind::kStop && order.job_id == probe) {
        b.reports.push_back(
            {.order_id = order.id, .kind = wire::ReportKind::kStopped, .job_id = probe});
      }
    }
    ASSERT_TRUE(cp.Reports(node, b, now));
  }
  const nlohmann::json m = cp.MeasuredNetwork(now);
  EXPECT_EQ(m["probes"]["gave_way"], 1) << m.dump();
  EXPECT_EQ(m["probes"]["failed"], 0) << m.dump();
  opened->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Beats (a congested phase) until an event of the network watch about `job`; that event, or
// null after 8 s.
nlohmann::json AwaitNetworkDecision(ServerFixture& f, const std::string& job,
                                    const std::function<void()>& beat) {
  nlohmann::json decision;
  (void)WaitFor(
      [&] {
        beat();
        const nlohmann::json events = f.Get("/v1/events?since=0&limit=1000").body;
        for (const auto& e : events["events"]) {
          if (e.value("type", "") == "network" && e.value("id", "") == job) decision = e;
        }
        return !decision.is_null();
      },
      8000);
  return decision;
}

TEST(ServerNetwork, AJobSlowedByACongestedLinkIsMovedWithAnEventSayingWhy) {
  ServerFixture f;
  f.config.network.probes = true;
  f.config.restart_overhead_s = 5;
  f.Start();
  Fabric fab(f);
  ASSERT_TRUE(MeasureEveryPair(f, fab));
  auto r = f.Post("/v1/jobs", kTwoNodeJob);
  ASSERT_EQ(r.status, 201) << r.text;
  const std::string job = r.body["id"];
  std::vector<std::pair<std::string, wire::WorkOrder>> launches;
  const std::set<std::string> first = PlacedNodes(fab, job, &launches);
  ASSERT_EQ(first.size(), 2u);
  for (const auto& [node, o] : launches) {
    if (o.job_id == job) fab.at(node).AcceptAndStart(o);
  }
  ASSERT_EQ(f.JobState(job), "running");
  const std::string congested = *first.rbegin();
  // Heartbeats: the job's progress (its rank 0's node reports it), and the congested node's
  // TCP retransmitting once the step time has grown.
  auto beat = [&](double step_s, bool congestion, int64_t samples) {
    for (const auto& node : first) {
      wire::Heartbeat h;
      h.progress.push_back({.job_id = job,
                            .attempt = 1,
                            .rank = node == *first.begin() ? 0 : 1,
                            .step = samples,
                            .step_time_s = step_s,
                            .samples = samples,
                            .updated_ms = WallMs()});
      wire::NetworkSample s{.window_ms = 100, .tcp_retrans_per_s = 0, .tcp_out_segs_per_s = 5000};
      if (congestion && node == congested) s.tcp_retrans_per_s = 400;
      h.network = s;
      fab.at(node).Heartbeat(h);
    }
  };
  // The watch looks once a second: each phase lasts a few of its looks.
  for (int i = 1; i <= 12; ++i) {
    beat(0.5, false, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  // Slower, but no congestion anywhere: compute, not the network; nothing is decided.
  for (int i = 0; i < 10; ++i) {
    beat(1.5, false, 13 + i);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(f.JobState(job), "running");
  const nlohmann::json decision = AwaitNetworkDecision(f, job, [&] { beat(1.5, true, 30); });
  ASSERT_FALSE(decision.is_null()) << f.Get("/v1/events?since=0&limit=1000").body.dump();
  const std::string why = decision["reason"];
  EXPECT_TRUE(why.starts_with("network: step time 0.5 s -> 1.5 s")) << why;
  EXPECT_NE(why.find(congested + ": 8% of TCP segments retransmitted"), std::string::npos) << why;
  EXPECT_NE(why.find("migrating"), std::string::npos) << why;
  EXPECT_NE(why.find("re-plan in place"), std::string::npos) << why;
  // The move: checkpoint, stop, relaunch on the other measured leaf.
  std::vector<std::pair<std::string, wire::WorkOrder>> again;
  std::set<std::string> second;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (auto& l : fab.Round()) {
          if (l.second.job_id == job && l.second.attempt == 2) second.insert(l.first);
        }
        return second.size() == 2;
      },
      10000))
      << f.Get("/v1/jobs/" + job).body.dump();
  EXPECT_FALSE(second.contains(congested));
  EXPECT_TRUE(SameHalf(*second.begin(), *second.rbegin()));
  EXPECT_NE(second, first);
}

// Two nodes of two GPUs, nowhere to move to, and the operator's ALLREDUCE_ALGO: tree. A job
// slowed by a congested link is re-planned in place: on the degraded links the cost model prices
// the tree it runs above a ring by more than a tenth, the gain pays for a restart, so the job
// checkpoints and relaunches on the same GPUs with the all-reduce pinned to the ring.
TEST(ServerNetwork, AJobThatCannotMoveIsReplannedInPlaceAndRelaunchedWithTheNewAlgorithm) {
  ServerFixture f;
  f.config.network.probes = true;
  f.config.restart_overhead_s = 5;
  f.config.allreduce_algo = "tree";
  f.Start();
  Fabric fab(f, {"n1", "n3"}, 2);
  ASSERT_TRUE(MeasureEveryPair(f, fab, 1));
  auto r = f.Post("/v1/jobs",
                  "kind: training\nname: ddp\nmodel: {profile: llama2-7b}\n"
                  "parallelism: {tp: 1, pp: 1}\nnodes: 2\ngpus_per_node: 2\ngpus: 4\n"
                  "max_retries: 2\nrun:\n  command: [/usr/bin/python3, train.py]\n");
  ASSERT_EQ(r.status, 201) << r.text;
  const std::string job = r.body["id"];
  std::vector<std::pair<std::string, wire::WorkOrder>> launches;
  const std::set<std::string> first = PlacedNodes(fab, job, &launches);
  ASSERT_EQ(first, (std::set<std::string>{"n1", "n3"}));
  auto algo_of = [](const wire::WorkOrder& o) {
    const auto& env = o.launch->ranks.at(0).env;
    auto it = env.find("NCCL_ALGO");
    return it == env.end() ? std::string("(none)") : it->second;
  };
  for (const auto& [node, o] : launches) {
    if (o.job_id != job) continue;
    EXPECT_EQ(algo_of(o), "allreduce:tree") << "the configured ALLREDUCE_ALGO";
    fab.at(node).AcceptAndStart(o);
  }
  auto beat = [&](double step_s, bool congestion, int64_t samples) {
    for (const std::string node : {"n1", "n3"}) {
      wire::Heartbeat h;
      h.progress.push_back({.job_id = job,
                            .attempt = 1,
                            .rank = node == "n1" ? 0 : 2,
                            .step = samples,
                            .step_time_s = step_s,
                            .samples = samples,
                            .updated_ms = WallMs()});
      wire::NetworkSample s{.window_ms = 100, .tcp_retrans_per_s = 0, .tcp_out_segs_per_s = 5000};
      if (congestion && node == "n3") s.tcp_retrans_per_s = 400;
      h.network = s;
      fab.at(node).Heartbeat(h);
    }
  };
  for (int i = 1; i <= 12; ++i) {
    beat(0.5, false, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  const nlohmann::json decision = AwaitNetworkDecision(f, job, [&] { beat(1.5, true, 30); });
  ASSERT_FALSE(decision.is_null()) << f.Get("/v1/events?since=0&limit=1000").body.dump();
  const std::string why = decision["reason"];
  std::cout << "decision: " << why << "\n";
  EXPECT_NE(why.find("re-planning in place (ring)"), std::string::npos) << why;
  EXPECT_NE(why.find("by tree now"), std::string::npos) << why;
  EXPECT_NE(why.find("move: no placement free off the congested nodes"), std::string::npos) << why;
  // The restart: checkpoint, stop, relaunch on the same GPUs with the all-reduce pinned.
  std::map<std::string, wire::WorkOrder> second;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (auto& [node, o] : fab.Round()) {
          if (o.job_id == job && o.attempt == 2) second[node] = o;
        }
        return second.size() == 2;
      },
      10000))
      << f.Get("/v1/jobs/" + job).body.dump();
  for (const auto& [node, o] : second) {
    EXPECT_EQ(algo_of(o), "allreduce:ring") << node;
  }
  const auto view = f.Get("/v1/jobs/" + job).body;
  EXPECT_EQ(view["attempt"], 2) << view.dump();
  EXPECT_EQ(view["replan"]["algorithm"], "ring") << view.dump();
  EXPECT_EQ(view.value("migrations", -1), 0) << "a re-plan is not a move";
  EXPECT_NE(f.Get("/metrics").text.find("tianshu_network_decisions_total{action=\"replan\"} 1\n"),
            std::string::npos);
}

}  // namespace
}  // namespace tianshu::testing
