// The same decisions in both drivers (issue 16): one recorded sequence of events (arrivals,
// completions, a node failure; the preemptions and resizes follow from priorities, 2D-LAS
// service and elastic scaling) is fed to the simulator and to the server, whose agents are faked
// in the test on virtual time, and both must decide the same starts (same job, same ranks on the
// same devices), stops and resizes at the same instants. The server is also restarted from its
// store in the middle of each sequence, and checks its ledger against its records every cycle.
//
// The simulator records the run (SimOptions::on_decision); the completions it computed are
// the sequence's completions, which the fake agents report to the server at those times. At
// every instant (the sequence's, and those at which the simulator decided something, as the
// server's ticker would tick then) the test applies the instant's events, then ticks the server
// and answers its orders (launch: accepted, every rank started; stop: accepted, stopped) until
// it sends no new order, so a preemption's stop and the preemptor's start land at the same
// instant, as in the simulator.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "testing/direct_node.h"
#include "tianshu/engine/engine.h"
#include "tianshu/policy/builtin.h"
#include "tianshu/server/control_plane.h"
#include "tianshu/server/placer.h"
#include "tianshu/sim/simulator.h"

namespace tianshu {
namespace {

struct Arrival {
  double t;
  std::string name;
  int gpus;
  double duration_s;
  int priority;
  std::string extra;  // more of its spec (an elastic job's shape), in place of `gpus`
  std::string model = "model: {profile: llama2-7b}\nparallelism: {tp: 1, pp: 1}\n";
};

// One decision as both drivers name it: a start with its ranks (node:device in rank order), or
// a stop (preemption, node failure).
struct Decision {
  int64_t t_ms = 0;
  std::string kind, job, places;
  auto operator<=>(const Decision&) const = default;
};

void PrintTo(const Decision& d, std::ostream* os) {
  *os << "t=" << static_cast<double>(d.t_ms) / 1000.0 << " " << d.kind << " " << d.job << " "
      << d.places;
}

std::string Show(const std::vector<Decision>& ds) {
  std::string s;
  for (const auto& d : ds) {
    s += "  t=" + std::to_string(static_cast<double>(d.t_ms) / 1000.0) + " " + d.kind + " " +
         d.job + " " + d.places + "\n";
  }
  return s;
}

// Within one instant the order of simultaneous decisions is the drivers' own; across instants
// it is the sequence's.
std::vector<Decision> Canonical(std::vector<Decision> ds) {
  std::sort(ds.begin(), ds.end());
  return ds;
}

std::string JobYaml(const Arrival& a) {
  return "kind: training\nname: " + a.name + "\n" + a.model +
         (a.extra.empty() ? "gpus: " + std::to_string(a.gpus) + "\n" : a.extra) +
         "duration: " + std::to_string(static_cast<int>(a.duration_s)) +
         "s\npriority: " + std::to_string(a.priority) + "\nmax_retries: 3\n";
}

std::string PlacesText(const std::vector<server::RankPlace>& places) {
  std::string s;
  for (const auto& p : places)
    s += (s.empty() ? "" : ",") + p.node + ":" + std::to_string(p.device);
  return s;
}

// Topology slots as the server names them (node, agent device index), in rank order.
std::vector<server::RankPlace> PlacesOn(const server::ClusterView& view,
                                        const std::vector<placement::RankSlot>& ranks) {
  std::vector<server::RankPlace> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto node = static_cast<size_t>(ranks[r].node);
    const int local = ranks[r].gpu - view.topology.nodes[node].first_gpu;
    out.push_back({static_cast<int>(r), view.node_names[node],
                   view.device_index[node][static_cast<size_t>(local)]});
  }
  return out;
}

constexpr int kNodes = 4;
const std::string kAgent = "agent-";

// Node n of two leaves of two nodes.
wire::RegisterRequest Registration(int n) {
  return testing::A100Node("n" + std::to_string(n), kAgent + std::to_string(n),
                           "leaf-" + std::to_string(n / 2));
}

// What both drivers run with: the defaults (2D-LAS with preemption, time backfill) where the
// server can follow the simulator, and a topology-aware placement that is fast to search.
model::EngineConfig Config() {
  model::EngineConfig c;
  c.preemption = true;
  c.algorithm = "topology";
  c.checkpoint_interval_s = 0;
  c.gang_timeout_s = 0;
  c.colocation = "none";
  return c;
}

// The server, driven on virtual time by the test, with fake agents that do at once what they
// are told.
class FakeCluster {
 public:
  FakeCluster(std::string dir, model::EngineConfig config)
      : dir_(std::move(dir)), config_(std::move(config)) {}

  void Open(int64_t now_ms) {
    cp_.reset();
    auto store = server::OpenSqliteStore(dir_ + "/tianshu.db");
    ASSERT_TRUE(store) << store.error().message;
    server::ControlPlaneOptions o;
    o.config = config_;
    o.lost_after_ms = int64_t{24} * 3600 * 1000;  // failures come as reports, not silence
    o.restart_grace_ms = 0;
    o.node_lease_ms = 0;
    o.admin_token = "admin-token";
    o.verify_ledger = true;
    auto cp = server::ControlPlane::Open(std::move(*store), o, now_ms);
    ASSERT_TRUE(cp) << cp.error().message;
    cp_ = std::move(*cp);
  }

  void RegisterAll(int64_t now_ms) {
    for (int n = 0; n < kNodes; ++n) {
      auto r = cp_->Register(Registration(n), admin_, now_ms);
      ASSERT_TRUE(r) << r.error().message;
    }
  }

  void Submit(const Arrival& a, int64_t now_ms) {
    auto req = server::ParseSubmitBody("application/yaml", JobYaml(a), a.name + ".yaml");
    ASSERT_TRUE(req) << req.error().message;
    req->owner = "admin";
    auto made = cp_->Submit(std::move(*req), now_ms);
    ASSERT_TRUE(made) << made.error().message;
    ids_[a.name] = made->job["id"].get<std::string>();
  }

  // Every rank of the job's current attempt exits 0.
  void Complete(const std::string& name, int64_t now_ms) {
    const std::string& id = ids_.at(name);
    auto launches = launches_.find(id);
    ASSERT_NE(launches, launches_.end()) << name << " never launched";
    for (const auto& [node, order] : launches->second) {
      wire::ReportBatch b{.agent_id = AgentOf(node)};
      for (const auto& rank : order.launch->ranks) {
        b.reports.push_back({.order_id = order.id,
                             .kind = wire::ReportKind::kExited,
                             .job_id = id,
                             .rank = rank.rank});
      }
      auto r = cp_->Reports(node, b, now_ms);
      ASSERT_TRUE(r) << r.error().message;
    }
  }

  void Fail(int node, int64_t now_ms) {
    const std::string name = "n" + std::to_string(node);
    failed_.insert(name);
    auto r = cp_->Heartbeat(
        name,
        {.agent_id = AgentOf(name), .health = wire::Health::kFailed, .message = "recorded failure"},
        now_ms);
    ASSERT_TRUE(r) << r.error().message;
  }

  // Ticks and answers orders until the server sends none that is new.
  void Settle(int64_t now_ms) {
    for (int round = 0; round < 20; ++round) {
      cp_->Tick(now_ms);
      bool any = false;
      for (int n = 0; n < kNodes; ++n) {
        const std::string node = "n" + std::to_string(n);
        if (failed_.contains(node)) continue;
        auto text = cp_->Work(node, AgentOf(node), 0);
        ASSERT_TRUE(text) << text.error().message;
        auto work = wire::ParseWorkBatch(*text);
        ASSERT_TRUE(work) << work.error().message;
        wire::ReportBatch b{.agent_id = AgentOf(node)};
        for (const auto& order : work->orders) {
          if (!answered_.insert(order.id).second) continue;
          any = true;
          for (auto& r : testing::AcceptedAndStarted(order)) b.reports.push_back(std::move(r));
          if (order.launch) {
            auto& mine = launches_[order.job_id];
            if (mine.empty() || mine.begin()->second.attempt != order.attempt) mine.clear();
            mine[node] = order;
          } else if (order.kind == wire::OrderKind::kStop) {
            b.reports.push_back(
                {.order_id = order.id, .kind = wire::ReportKind::kStopped, .job_id = order.job_id});
          }
        }
        if (!b.reports.empty()) {
          auto r = cp_->Reports(node, b, now_ms);
          ASSERT_TRUE(r) << r.error().message;
        }
      }
      if (!any) return;
    }
    FAIL() << "the server kept sending orders at t=" << now_ms;
  }

  // What the server decided since the last call, from the jobs' histories: a start when a job
  // went to starting (with its placement), a stop when a starting or running job left that.
  void Collect(std::vector<Decision>* out) {
    for (const auto& [name, id] : ids_) {
      auto job = cp_->GetJob(id, admin_);
      ASSERT_TRUE(job) << job.error().message;
      const auto& history = (*job)["history"];
      size_t& seen = history_seen_[id];
      for (; seen < history.size(); ++seen) {
        const auto& h = history[seen];
        const std::string from = h["from"], to = h["to"];
        const int64_t t = h["time_ms"];
        const std::string reason = h["reason"];
        std::string& reshaping = reshaping_[id];
        if (to == "starting") {
          std::vector<server::RankPlace> places;
          for (const auto& p : (*job)["placement"]) {
            places.push_back(
                {p["rank"].get<int>(), p["node"].get<std::string>(), p["device"].get<int>()});
          }
          // A resize or a move stops the ranks and relaunches them on the new placement: the
          // simulator's one decision.
          out->push_back({t, reshaping.empty() ? "start" : reshaping, name, PlacesText(places)});
          reshaping.clear();
        } else if (to == "stopping" && reason.starts_with("elastic scaling")) {
          reshaping = "resize";
        } else if (to == "stopping" && reason.starts_with("migration")) {
          reshaping = "migrate";
        } else if ((from == "starting" || from == "running") && to != "running" &&
                   to != "succeeded") {
          out->push_back({t, "stop", name, ""});
        }
      }
    }
  }

  server::ControlPlane& cp() { return *cp_; }

 private:
  static std::string AgentOf(const std::string& node) { return kAgent + node.substr(1); }

  std::string dir_;
  model::EngineConfig config_;
  std::unique_ptr<server::ControlPlane> cp_;
  const server::Identity admin_{.name = "admin", .role = server::Role::kAdmin};
  std::map<std::string, std::string> ids_;                                  // job name -> id
  std::map<std::string, std::map<std::string, wire::WorkOrder>> launches_;  // id -> node -> order
  std::set<std::string> answered_;
  std::set<std::string> failed_;
  std::map<std::string, size_t> history_seen_;
  std::map<std::string, std::string> reshaping_;  // id -> "resize" | "migrate" while it stops
};

struct Sequence {
  model::EngineConfig config = Config();
  std::vector<Arrival> arrivals;
  std::vector<std::pair<double, int>> failures;  // (time, node)
  double restart_at = -1;                        // the server restarts from its store
};

struct Recorded {
  std::vector<Decision> simulated, served;
  server::ControlPlane::LedgerStats ledger;
};

// Runs the sequence through the simulator, then through the server at the same instants (and
// at every instant the simulator decided something, as the server's ticker would), with a
// restart from the store at `restart_at`.
void RunSequence(Sequence seq, Recorded* rec) {
  // The server has no restart pause to model: both drivers run with restarts that cost nothing
  // (so a job demoted by 2D-LAS yields to the jobs that entered its queue before it, in both).
  seq.config.restart_overhead_s = 0;
  const auto& arrivals = seq.arrivals;
  // The topology the server builds of its registered agents is the simulator's too.
  std::vector<wire::RegisterRequest> regs;
  std::vector<server::NodeHardware> hw;
  for (int n = 0; n < kNodes; ++n) regs.push_back(Registration(n));
  for (const auto& r : regs) hw.push_back({r.node, &r.hardware});
  auto view = server::BuildClusterView(hw);
  ASSERT_TRUE(view) << view.error().message;
  for (int n = 0; n < kNodes; ++n) ASSERT_EQ((*view)->node_names[n], "n" + std::to_string(n));

  // ---- the simulator ----
  sim::Workload w;
  w.name = "recorded";
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const Arrival& a = arrivals[i];
    auto req = server::ParseSubmitBody("application/yaml", JobYaml(a), a.name + ".yaml");
    ASSERT_TRUE(req) << req.error().message;
    w.jobs.push_back({.id = static_cast<int64_t>(i),
                      .name = a.name,
                      .submit_s = a.t,
                      .duration_s = a.duration_s,
                      .gpus = req->spec.TotalGpus(),
                      .spec = req->spec});
  }
  ASSERT_TRUE(policy::RegisterBuiltinPolicies());  // as simulate and serve do
  auto options = engine::OptionsFromConfig(seq.config);
  ASSERT_TRUE(options) << options.error().message;
  sim::SimOptions so;
  so.fixed_durations = true;
  so.repair_s = 1e9;  // a failed node stays out, as on the server
  so.node_failures = seq.failures;
  std::set<int64_t> instants;
  so.on_decision = [&](double t, const engine::Decision& d) {
    const std::string job = arrivals[static_cast<size_t>(engine::DecisionJob(d))].name;
    const auto t_ms = static_cast<int64_t>(t * 1000 + 0.5);
    instants.insert(t_ms);
    if (const auto* s = std::get_if<engine::StartJob>(&d)) {
      rec->simulated.push_back({t_ms, "start", job, PlacesText(PlacesOn(**view, s->ranks))});
    } else if (const auto* z = std::get_if<engine::ResizeJob>(&d)) {
      rec->simulated.push_back({t_ms, "resize", job, PlacesText(PlacesOn(**view, z->ranks))});
    } else if (const auto* m = std::get_if<engine::MigrateJob>(&d)) {
      rec->simulated.push_back({t_ms, "migrate", job, PlacesText(PlacesOn(**view, m->ranks))});
    } else if (std::holds_alternative<engine::StopJob>(d)) {
      rec->simulated.push_back({t_ms, "stop", job, ""});
    } else {
      rec->simulated.push_back({t_ms, "other", job, ""});
    }
  };
  auto result = sim::Simulate((*view)->topology, w, *options, so);
  ASSERT_TRUE(result) << result.error().message;

  // The instants of the sequence: arrivals, the simulator's completions, the failures, the
  // restart (and the decisions' instants, above).
  std::map<int64_t, std::vector<std::string>> completions;
  if (seq.restart_at >= 0) instants.insert(static_cast<int64_t>(seq.restart_at * 1000));
  for (const auto& [t, node] : seq.failures) instants.insert(static_cast<int64_t>(t * 1000));
  for (const auto& j : result->jobs) {
    ASSERT_EQ(j.state, "completed") << j.name;
    const auto t_ms = static_cast<int64_t>(j.end_s * 1000 + 0.5);
    completions[t_ms].push_back(j.name);
    instants.insert(t_ms);
  }
  for (const auto& a : arrivals) instants.insert(static_cast<int64_t>(a.t * 1000));

  // ---- the server ----
  const std::string dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "tianshu-seq-XXXXXX").string();
    return std::string(mkdtemp(pattern.data()));
  }();
  // Wall-clock time of the sequence's zero (the store keeps times as they are given).
  const int64_t t0 = 1'800'000'000'000;
  FakeCluster cluster(dir, seq.config);
  cluster.Open(t0);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cluster.RegisterAll(t0);
  for (int64_t t : instants) {
    const int64_t now = t0 + t;
    if (t == static_cast<int64_t>(seq.restart_at * 1000)) {
      cluster.Collect(&rec->served);
      cluster.Open(now);  // the store is loaded again; the ledger is rebuilt from it
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    for (const auto& [ft, node] : seq.failures) {
      if (static_cast<int64_t>(ft * 1000) == t) cluster.Fail(node, now);
    }
    for (const auto& name : completions[t]) cluster.Complete(name, now);
    for (const auto& a : arrivals) {
      if (static_cast<int64_t>(a.t * 1000) == t) cluster.Submit(a, now);
    }
    cluster.Settle(now);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Collect(&rec->served);  // each start with the placement it has now
  }
  for (auto& d : rec->served) d.t_ms -= t0;
  rec->simulated = Canonical(rec->simulated);
  rec->served = Canonical(rec->served);
  rec->ledger = cluster.cp().Ledger();
  std::filesystem::remove_all(dir);
}

// Both drivers decided the same, and the server's ledger never differed from its records.
void ExpectSameDecisions(const Recorded& rec) {
  EXPECT_EQ(rec.served, rec.simulated) << "server:\n"
                                       << Show(rec.served) << "simulator:\n"
                                       << Show(rec.simulated);
  EXPECT_EQ(rec.ledger.mismatches, 0) << rec.ledger.last_mismatch;
}

int Count(const std::vector<Decision>& ds, const std::string& kind) {
  return static_cast<int>(
      std::count_if(ds.begin(), ds.end(), [&](const Decision& d) { return d.kind == kind; }));
}

// Priority order: two urgent arrivals preempt (one preemptor and a job behind it start on what
// the victim frees, at the instant it stops), n3 fails under a job, and the server restarts
// between the two preemptions.
TEST(RecordedSequence, PreemptionsANodeFailureAndARestart) {
  Sequence seq;
  seq.config.order = "priority";
  seq.config.backfill = "none";
  seq.arrivals = {
      {0, "a", 16, 100, 0},  {0, "b", 8, 50, 0},    {10, "c", 8, 200, 0},
      {20, "d", 16, 100, 0}, {60, "e", 16, 40, 10}, {90, "f", 8, 120, 5},
  };
  seq.failures = {{150, 3}};
  seq.restart_at = 95;
  Recorded rec;
  RunSequence(seq, &rec);
  ASSERT_FALSE(HasFatalFailure());
  // The sequence exercises what it is meant to: preemptions, a failure's stop, restarts.
  ASSERT_GE(Count(rec.simulated, "stop"), 3) << Show(rec.simulated);
  ASSERT_GE(Count(rec.simulated, "start"), static_cast<int>(seq.arrivals.size()) + 3)
      << Show(rec.simulated);
  ExpectSameDecisions(rec);
  // The restarted server built its ledger once, at its load; the failure after it (t = 150 s)
  // is a mark, not a rebuild.
  EXPECT_EQ(rec.ledger.rebuilds, 1);
  EXPECT_GE(rec.ledger.node_marks, 1);
}

// The defaults' 2D-LAS order with elastic scaling: an elastic job grows into what a finished
// job left (a resize), a job that crossed a LAS threshold is preempted for a newcomer at the
// instant it crosses it (the ledger's wake-up, as the simulator's), the server restarts with the
// resized job running, and when that job crosses into the queue the preempted one waits in, it
// yields to it (restarts are free here) and resumes at the size it asked for.
TEST(RecordedSequence, LasThresholdsAnElasticResizeAndARestart) {
  Sequence seq;
  seq.config.elastic_scaling = true;
  seq.config.scaling_interval_s = 30;
  seq.arrivals = {
      {0, "h", 16, 1000, 0},
      {0, "g", 8, 600, 0, "nodes: 1\ngpus_per_node: 8\nelastic: {min_nodes: 1, max_nodes: 2}\n"},
      {0, "k", 8, 120, 0},
      {130, "m", 16, 100, 0},
  };
  seq.restart_at = 170;
  Recorded rec;
  RunSequence(seq, &rec);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GE(Count(rec.simulated, "resize"), 1) << Show(rec.simulated);
  ASSERT_GE(Count(rec.simulated, "stop"), 2) << Show(rec.simulated);
  ExpectSameDecisions(rec);
}

// The consolidation wait, judged by the speed model in both drivers: n1 fails under u, and
// when w ends, u (the head of the queue again) can only be placed across both leaves (n0 and
// n3). The model predicts how much slower that runs than a compact placement, and both drivers
// start it there at once. Without the model (as the server was) any placement over more leaves
// than needed counted as too slow and u waited: this test then fails.
TEST(RecordedSequence, ASpreadPlacementIsJudgedByTheSpeedModel) {
  Sequence seq;
  seq.config.order = "priority";
  seq.arrivals = {
      {0, "u", 16, 100, 0},
      {0, "v", 8, 500, 0},
      {0, "w", 8, 50, 0},
      {10, "q", 16, 1000, 0},
  };
  seq.failures = {{20, 1}};
  Recorded rec;
  RunSequence(seq, &rec);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GE(rec.simulated.size(), 5u) << Show(rec.simulated);
  ExpectSameDecisions(rec);
}

// A topology upgrade in both drivers: u (one node's worth, tensor parallel over 8 GPUs) finds
// no whole node free, waits for one as long as the consolidation wait allows (both drivers wake
// when it ends, with no other event), then starts split over two half-free nodes; the server
// restarts; when a whole node frees, the run u is predicted to save outweighs the restart, and
// both drivers move it there at the same instant, though nothing is pending then.
TEST(RecordedSequence, ASplitJobMovesToAWholeNodeWhenOneFrees) {
  Sequence seq;
  seq.config.order = "priority";
  seq.arrivals = {
      {0, "a", 4, 30000, 0},
      {0, "b", 4, 100, 0},
      {0, "c", 4, 30000, 0},
      {0, "d", 4, 100, 0},
      {0, "e", 8, 15000, 0},
      {0, "f", 8, 30000, 0},
      {100, "u", 8, 20000, 0, "", "model: {profile: llama2-13b}\nparallelism: {tp: 8, pp: 1}\n"},
  };
  seq.restart_at = 12000;  // with u running split
  Recorded rec;
  RunSequence(seq, &rec);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GE(Count(rec.simulated, "migrate"), 1) << Show(rec.simulated);
  ExpectSameDecisions(rec);
}

}  // namespace
}  // namespace tianshu
