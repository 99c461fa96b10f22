// The simulator end to end: conservation, determinism, the makespan lower bound, contention,
// trace loading on the shared data, and the report.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <random>

#include "tianshu/engine/engine.h"
#include "tianshu/estimate/perf.h"
#include "tianshu/estimate/serving.h"
#include "tianshu/model/load.h"
#include "tianshu/sim/internal/event_queue.h"
#include "tianshu/sim/report.h"
#include "tianshu/sim/simulator.h"
#include "tianshu/sim/trace.h"

namespace tianshu::sim {
namespace {

using estimate::ContentionSolver;
using estimate::ErlangC;
using estimate::JobPerf;
using estimate::Latency;
using estimate::MmcLatency;
using estimate::PerfModel;

model::Topology Tree(int nodes, int per_leaf, double oversub = 1) {
  model::FatTreeOptions o;
  o.nodes = nodes;
  o.nodes_per_leaf = per_leaf;
  o.oversubscription = oversub;
  return *model::GenerateFatTree(o);
}

// A mixed workload: many small jobs, some multi-node LLM jobs, arriving over a few hours.
Workload Mixed(int n, uint64_t seed = 7) {
  Workload w;
  w.name = "mixed";
  uint64_t s = seed;
  auto next = [&]() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) * 0x1.0p-53;
  };
  double t = 0;
  for (int i = 0; i < n; ++i) {
    TraceJob j;
    j.id = i;
    j.name = "j" + std::to_string(i);
    t += next() * 300;
    j.submit_s = t;
    double u = next();
    j.gpus = u < 0.6 ? 1 : u < 0.8 ? 4 : u < 0.9 ? 8 : u < 0.97 ? 16 : 32;
    j.duration_s = 600 + next() * 7200;
    w.jobs.push_back(j);
  }
  return w;
}

engine::EngineOptions Preset(const std::string& name) { return *engine::PresetOptions(name); }

TEST(SimConservation, EveryJobEndsOnceAndGpuTimeAddsUp) {
  model::Topology topo = Tree(8, 4, 2);
  Workload w = Mixed(300);
  for (const std::string& p : engine::PresetNames()) {
    auto r = Simulate(topo, w, Preset(p));
    ASSERT_TRUE(r) << p << ": " << r.error().message;
    EXPECT_EQ(r->metrics.jobs_completed, 300) << p;
    EXPECT_EQ(r->metrics.jobs_unfinished, 0) << p;
    ASSERT_EQ(r->jobs.size(), 300u);
    std::map<std::string, int> seen;
    double per_job = 0;
    for (const auto& j : r->jobs) {
      EXPECT_EQ(++seen[j.name], 1) << p << " " << j.name;
      EXPECT_EQ(j.state, "completed");
      EXPECT_GE(j.start_s, j.submit_s);
      EXPECT_GE(j.end_s, j.start_s + j.ideal_s * 0.999) << p << " " << j.name;  // rate <= 1
      per_job += j.allocated_gpu_s;
    }
    // GPU-time held by jobs = the integral of allocated GPUs over the run.
    EXPECT_NEAR(per_job, r->allocated_gpu_s, 1e-6 * r->allocated_gpu_s) << p;
    // No instant over capacity.
    EXPECT_LE(r->peak_allocated_milli, topo.NumGpus() * 1000.0) << p;
    for (const auto& s : r->samples) ASSERT_LE(s.allocated_gpus, topo.NumGpus() + 1e-3) << p;
    EXPECT_GE(r->metrics.makespan_s, r->metrics.makespan_lower_bound_s * 0.999999) << p;
    EXPECT_LE(r->metrics.utilization, 1.0 + 1e-9);
    EXPECT_GT(r->metrics.energy_kwh, 0);
  }
}

TEST(SimDeterminism, SameSeedSameResult) {
  model::Topology topo = Tree(8, 4, 2);
  Workload w = Mixed(200, 11);
  for (std::string p : {"tianshu", "tiresias"}) {
    auto a = Simulate(topo, w, Preset(p));
    auto b = Simulate(topo, w, Preset(p));
    ASSERT_TRUE(a && b);
    a->metrics.wall_seconds = b->metrics.wall_seconds = 0;
    EXPECT_EQ(FormatJson("w", "c", {*a}), FormatJson("w", "c", {*b})) << p;
    ASSERT_EQ(a->jobs.size(), b->jobs.size());
    for (size_t i = 0; i < a->jobs.size(); ++i) {
      EXPECT_EQ(a->jobs[i].end_s, b->jobs[i].end_s);
      EXPECT_EQ(a->jobs[i].nodes, b->jobs[i].nodes);
    }
  }
}

TEST(SimLowerBound, LoneJobMeetsItAndQueuesRespectIt) {
  model::Topology topo = Tree(4, 4);
  Workload w;
  TraceJob j;
  j.id = 0;
  j.name = "alone";
  j.gpus = 8;
  j.duration_s = 3600;
  w.jobs.push_back(j);
  auto r = Simulate(topo, w, Preset("mainstream"));
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->metrics.makespan_s, 3600, 1e-6);
  EXPECT_NEAR(r->metrics.makespan_lower_bound_s, 3600, 1e-6);
  // Four 32-GPU jobs at once on 32 GPUs: the bound is the total GPU-time / GPUs.
  Workload q;
  for (int i = 0; i < 4; ++i) {
    TraceJob k;
    k.id = i;
    k.name = "q" + std::to_string(i);
    k.gpus = 32;
    k.duration_s = 1000;
    q.jobs.push_back(k);
  }
  SimOptions fixed;
  fixed.fixed_durations = true;
  auto r2 = Simulate(topo, q, Preset("slurm"), fixed);
  ASSERT_TRUE(r2);
  EXPECT_NEAR(r2->metrics.makespan_lower_bound_s, 4000, 1e-6);
  EXPECT_NEAR(r2->metrics.makespan_s, 4000, 1e-6);
  EXPECT_NEAR(r2->metrics.utilization, 1.0, 1e-9);
}

std::vector<placement::RankSlot> OnNodes(const model::Topology& t, const std::vector<int>& nodes) {
  std::vector<placement::RankSlot> out;
  for (int n : nodes) {
    for (int g = 0; g < t.GpusOn(n); ++g) out.push_back({n, t.nodes[n].first_gpu + g});
  }
  return out;
}

TEST(SimContention, SharedOversubscribedUplinkSlowsItsUsersOnly) {
  // Two leaves of four nodes, uplinks oversubscribed 4:1.
  model::Topology topo = Tree(8, 4, 4);
  model::EngineConfig cfg;
  PerfModel pm(topo, cfg);
  model::JobSpec llm;
  llm.model = *model::FindModelProfile("llama2-13b");
  llm.gpus = 16;
  // A and B each straddle both leaves; C stays inside leaf 0... as far as nodes allow: give C
  // a separate pair of nodes inside leaf 1 by using a smaller A/B.
  JobPerf a = pm.Evaluate(llm, OnNodes(topo, {0, 4}));
  JobPerf b = pm.Evaluate(llm, OnNodes(topo, {1, 5}));
  JobPerf c = pm.Evaluate(llm, OnNodes(topo, {2, 3}));
  ASSERT_FALSE(a.uplink_bytes.empty());
  ASSERT_TRUE(c.uplink_bytes.empty());  // inside one leaf: no uplink traffic
  auto flows = [&](std::vector<const JobPerf*> ps) {
    std::vector<ContentionSolver::Flow> f;
    for (size_t i = 0; i < ps.size(); ++i) {
      ContentionSolver::Flow fl;
      fl.job = static_cast<int>(i);
      for (auto [sw, bytes] : ps[i]->uplink_bytes)
        fl.demand.emplace_back(sw, ps[i]->DemandBytesPerSec(bytes));
      f.push_back(fl);
    }
    return f;
  };
  auto alone = ContentionSolver::Solve(flows({&a}), pm.UplinkCapacity());
  auto both = ContentionSolver::Solve(flows({&a, &b, &c}), pm.UplinkCapacity());
  EXPECT_LT(both[0], alone[0]);
  EXPECT_NEAR(both[0], both[1], 1e-9);  // equal demands, equal shares
  EXPECT_DOUBLE_EQ(both[2], 1.0);       // C crosses no uplink
  EXPECT_GT(a.StepSeconds(both[0], 1), a.StepSeconds(alone[0], 1));
  EXPECT_DOUBLE_EQ(c.StepSeconds(both[2], 1), c.StepSeconds(1, 1));
}

TEST(SimContention, SharedUplinkSlowsItsUsersEndToEnd) {
  // Leaves of 4 nodes. First-fit puts A on nodes 0-5 and B on nodes 6-11: both cross leaf 1's
  // uplink (A has nodes 4-5 there, B nodes 6-7). C takes nodes 12-15, all of leaf 3.
  auto job = [](int id, int nodes) {
    TraceJob j;
    j.id = id;
    j.name = "j" + std::to_string(id);
    j.gpus = nodes * 8;
    j.duration_s = 7200;
    j.submit_s = id;
    model::JobSpec spec;  // bandwidth-bound gradients: 13B parameters
    spec.name = j.name;
    spec.model = *model::FindModelProfile("llama2-13b");
    spec.gpus = j.gpus;
    spec.nodes = nodes;
    spec.gpus_per_node = 8;
    j.spec = spec;
    return j;
  };
  Workload w;
  w.jobs = {job(0, 6), job(1, 6), job(2, 4)};
  auto flat = Simulate(Tree(16, 4, 1), w, Preset("mainstream"));
  auto thin = Simulate(Tree(16, 4, 8), w, Preset("mainstream"));
  ASSERT_TRUE(flat && thin);
  ASSERT_EQ(thin->jobs[0].leaves, 2);
  ASSERT_EQ(thin->jobs[1].leaves, 2);
  ASSERT_EQ(thin->jobs[2].leaves, 1);
  EXPECT_NEAR(flat->jobs[0].jct_s, 7200, 1);  // nothing shared on a non-blocking fabric
  EXPECT_GT(thin->jobs[0].jct_s, 7200 * 1.01);
  EXPECT_GT(thin->jobs[1].jct_s, 7200 * 1.01);
  EXPECT_NEAR(thin->jobs[2].jct_s, 7200, 1);  // inside one leaf: untouched
  EXPECT_LT(thin->metrics.effective_utilization, flat->metrics.effective_utilization);
  // Fixed durations ignore the network.
  SimOptions fixed;
  fixed.fixed_durations = true;
  auto f1 = Simulate(Tree(16, 4, 8), w, Preset("mainstream"), fixed);
  ASSERT_TRUE(f1);
  EXPECT_NEAR(f1->metrics.avg_jct_s, 7200, 1e-6);
}

// Four nodes, each half held by a long 4-GPU job once the short jobs beside them end: a job
// of two whole nodes cannot start until the long jobs end, unless migration (defrag) packs
// them. The simulator carries the MigrateJob decisions out (checkpoint, move, restart).
TEST(SimPolicies, DefragMigrationLetsAWholeNodeJobStart) {
  model::Topology topo = Tree(4, 4);
  Workload w;
  w.name = "fragmented";
  for (int i = 0; i < 8; ++i) {
    TraceJob j;
    j.id = i;
    j.name = "small" + std::to_string(i);
    j.gpus = 4;
    j.duration_s = i % 2 == 0 ? 100000 : 100;
    w.jobs.push_back(j);
  }
  TraceJob big;
  big.id = 8;
  big.name = "two-nodes";
  big.submit_s = 200;
  big.duration_s = 3600;
  model::JobSpec spec;
  spec.name = "two-nodes";
  spec.nodes = 2;
  spec.gpus_per_node = 8;
  spec.duration_s = 3600;
  big.spec = spec;
  w.jobs.push_back(big);
  double start_without = 0;
  for (bool defrag : {false, true}) {
    engine::EngineOptions o = Preset("slurm");
    if (defrag) o.policies.migration = "defrag";
    auto r = Simulate(topo, w, o);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->metrics.jobs_completed, 9);
    const JobResult& j = r->jobs.back();
    ASSERT_EQ(j.name, "two-nodes");
    if (!defrag) {
      EXPECT_EQ(r->metrics.migrations, 0);
      start_without = j.start_s;
      EXPECT_GE(start_without, 100000);
    } else {
      EXPECT_GE(r->metrics.migrations, 2);
      EXPECT_LT(j.start_s, 1000);
      EXPECT_LE(r->allocated_gpu_s, r->cluster_gpus * r->metrics.makespan_s + 1e-6);
    }
  }
}

// One elastic LLaMA-2 7B job on an idle 4-node cluster: with task_scheduler.elastic_scaling it
// grows from 1 node into the idle ones at the first scaling interval (a checkpoint-restart the
// simulator carries out) and finishes much sooner than at its submitted size.
TEST(SimPolicies, ElasticJobGrowsIntoIdleNodes) {
  model::Topology topo = Tree(4, 4);
  Workload w;
  w.name = "elastic";
  TraceJob j;
  j.name = "llama-elastic";
  model::JobSpec spec;
  spec.name = "llama-elastic";
  spec.model = *model::FindModelProfile("llama2-7b");
  spec.nodes = 1;
  spec.gpus_per_node = 8;
  spec.elastic = {.enabled = true, .min_nodes = 1, .max_nodes = 4};
  j.spec = spec;
  j.duration_s = 20 * 3600;
  j.gpus = 8;
  w.jobs.push_back(j);
  double jct[2] = {0, 0};
  for (bool elastic : {false, true}) {
    engine::EngineOptions o = Preset("slurm");
    if (elastic) {
      o.config.elastic_scaling = true;
      o.policies.elastic = "elastic";
    }
    auto r = Simulate(topo, w, o);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->metrics.jobs_completed, 1);
    jct[elastic] = r->jobs[0].jct_s;
    if (elastic) {
      EXPECT_EQ(r->jobs[0].nodes, 4);
    }
  }
  EXPECT_NEAR(jct[0], 20 * 3600, 3600);  // alone on its node: about its ideal time
  EXPECT_LT(jct[1], 0.5 * jct[0]);       // four nodes after 300 s
}

TEST(SimFailures, NodeFailuresRetryFromCheckpoints) {
  model::Topology topo = Tree(8, 4);
  Workload w = Mixed(100, 3);
  SimOptions so;
  so.node_mtbf_s = 20 * 3600;
  so.repair_s = 1800;
  auto r = Simulate(topo, w, Preset("slurm"), so);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GT(r->metrics.retries, 0);
  EXPECT_EQ(r->metrics.jobs_completed + r->metrics.jobs_failed, 100);
}

// Every baseline preset is also a configuration file: the same keys give the same run, job for
// job (the keys' defaults are the tianshu preset's, so each file says what differs).
TEST(SimPresets, EachBaselineIsAConfigurationFile) {
  const std::string unaware = "  topology_aware: false\n  preemption: false\n  compact_wait: 0\n";
  const std::string whole = "  small_job_algorithm: same\n  long_queue_algorithm: same\n";
  const std::map<std::string, std::string> files = {
      {"mainstream",
       "scheduler:\n  algorithm: first-fit\n  order: fifo\n  backfill: none\n" + unaware + whole},
      {"fifo",
       "scheduler:\n  algorithm: yarn\n  order: fifo\n  backfill: none\n" + unaware + whole},
      {"kube-default", "scheduler:\n  algorithm: spread\n  order: priority\n  backfill: greedy\n" +
                           unaware + whole + "  binding: pod-each\n"},
      {"volcano", "scheduler:\n  algorithm: best-fit\n  order: priority\n  backfill: greedy\n" +
                      unaware + whole + "  binding: pod-gang\n"},
      {"slurm",
       "scheduler:\n  algorithm: topology\n  order: priority\n  backfill: time\n"
       "  preemption: false\n  compact_wait: 0\n" +
           whole},
      {"tiresias",
       "scheduler:\n  algorithm: best-fit\n  order: las\n  backfill: greedy\n"
       "  compact_wait: 0\n  las_thresholds: [3250, 7200]\n  restart_overhead: 0\n"
       "  las_queue_order: preempted-first\n  preempt_for: every-job\n" +
           whole},
  };
  auto topo = Tree(8, 4);
  Workload w = Mixed(300);
  for (const auto& [preset, text] : files) {
    SCOPED_TRACE(preset);
    auto v = model::ValidateText(preset + ".yaml", text);
    ASSERT_TRUE(v.diagnostics.empty()) << v.diagnostics.front().ToString();
    auto from_file = engine::OptionsFromConfig(std::get<model::EngineConfig>(v.document->value));
    ASSERT_TRUE(from_file) << from_file.error().message;
    auto a = Simulate(topo, w, Preset(preset));
    auto b = Simulate(topo, w, *from_file);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->jobs.size(), b->jobs.size());
    for (size_t i = 0; i < a->jobs.size(); ++i) {
      ASSERT_EQ(a->jobs[i].end_s, b->jobs[i].end_s) << "job " << i;
    }
    EXPECT_EQ(a->metrics.preemptions, b->metrics.preemptions);
  }
  // The pod bindings are what separate kube-default and volcano from the same keys without them.
  auto v = model::ValidateText("k.yaml", files.at("kube-default"));
  auto config = std::get<model::EngineConfig>(v.document->value);
  config.binding = "job";
  auto a = Simulate(topo, w, Preset("kube-default"));
  auto b = Simulate(topo, w, *engine::OptionsFromConfig(config));
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->metrics.avg_jct_s, b->metrics.avg_jct_s);
}

TEST(SimTraces, LoadsTheShippedData) {
  std::string data = TIANSHU_DATA_DIR;
  auto philly = LoadWorkload("philly:" + data + "/philly/philly.csv", {.max_jobs = 500});
  ASSERT_TRUE(philly) << philly.error().message;
  EXPECT_EQ(philly->jobs.size(), 500u);
  EXPECT_EQ(philly->jobs.front().submit_s, 0);
  auto vc = LoadWorkload("philly:" + data + "/philly/philly.csv", {.vcs = {"6214e9"}});
  ASSERT_TRUE(vc);
  for (const auto& j : vc->jobs) ASSERT_EQ(j.vc, "6214e9");
  auto itp = LoadWorkload(data + "/itp/cluster01.csv", {});
  ASSERT_TRUE(itp) << itp.error().message;
  EXPECT_EQ(itp->jobs.size(), 1595u);
  auto openb = LoadWorkload("openb:" + data + "/openb/openb_pod_list_default.csv", {});
  ASSERT_TRUE(openb) << openb.error().message;
  EXPECT_GT(openb->jobs.size(), 1000u);
  auto llm = LoadWorkload("llm:jobs=50,rate=4,seed=3,mix=small:0.5,medium:0.5", {});
  ASSERT_TRUE(llm) << llm.error().message;
  EXPECT_EQ(llm->jobs.size(), 50u);
  auto bad = LoadWorkload("llm:jobs=5,speed=3", {});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("unknown key 'speed'"), std::string::npos);
  // The same id and size always get the same model.
  TraceJob j;
  j.id = 42;
  j.name = "x";
  j.gpus = 128;
  EXPECT_EQ(SpecFor(j).model.profile, SpecFor(j).model.profile);
  j.gpus = 4;
  std::string small = SpecFor(j).model.profile;
  EXPECT_TRUE(small == "resnet50" || small == "bert-large");
}

TEST(SimTraces, LoadScalesArrivals) {
  Workload w = Mixed(100);
  double before = OfferedLoad(w.jobs, 64);
  std::string path = std::filesystem::temp_directory_path() / "sim_test_itp.csv";
  {
    std::ofstream out(path);
    out << "job_id,submission_time,duration,num_gpu\n";
    for (const auto& j : w.jobs)
      out << j.name << "," << j.submit_s << "," << j.duration_s << "," << j.gpus << "\n";
  }
  auto scaled = LoadWorkload("itp:" + path, {.load = before * 2, .cluster_gpus = 64});
  ASSERT_TRUE(scaled) << scaled.error().message;
  EXPECT_NEAR(OfferedLoad(scaled->jobs, 64), before * 2, before * 0.01);
}

TEST(SimReport, WritesCsvAndSelfContainedHtml) {
  model::Topology topo = Tree(8, 4, 2);
  Workload w = Mixed(50);
  std::vector<SimResult> rs;
  for (const char* p : {"mainstream", "tianshu"}) rs.push_back(*Simulate(topo, w, Preset(p)));
  std::string dir = std::filesystem::temp_directory_path();
  ASSERT_TRUE(WriteJobsCsv(dir + "/sim_test_jobs.csv", rs));
  std::ifstream in(dir + "/sim_test_jobs.csv");
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header,
            "config,job_id,queue,num_gpu,submit_time,start_time,end_time,jct,queue_time,slowdown,"
            "preemptions,nodes,leaves_spanned,slo_attainment,p99_latency_ms,colocated");
  std::string html = RenderHtml("test", topo, rs);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));  // only the SVG namespace
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

// The queueing model of a replica (serving.h) against closed forms: M/M/1 waits with
// probability rho; Erlang C for 2 servers at load 1 is 1/3.
// The overlay forecast the engine's check (simulator and server) uses: the mode's stretches on
// one request, the queue, and training's loss as the busy share times the mode's loss.
TEST(SimServing, OverlayForecastFollowsTheModesInterference) {
  estimate::ServiceCost c{
      .pre_s = 0.5, .dec_s = 1.5, .servers = 8, .replicas = 1, .lambda = 0.3, .slo_s = 8};
  const estimate::OverlayForecast p = estimate::ForecastOverlay(c, estimate::Colocation::kPriority);
  const estimate::OverlayForecast t =
      estimate::ForecastOverlay(c, estimate::Colocation::kTimeSlice);
  // priority: 0.5 x 2 + 1.5 x 1.05 = 2.575 s; time slice: (0.5 + 1.5) x 2 = 4 s per request.
  EXPECT_NEAR(p.latency.utilization, 0.3 * 2.575 / 8, 1e-9);
  EXPECT_NEAR(t.latency.utilization, 0.3 * 4.0 / 8, 1e-9);
  const double busy_p = 0.3 * 2.575 / 8;
  EXPECT_NEAR(p.training_loss, busy_p * (1.0 / 2.575 * 0.1 + 1.575 / 2.575 * 0.3), 1e-9);
  EXPECT_NEAR(t.training_loss, 0.3 * 4.0 / 8 * 0.5, 1e-9);
  EXPECT_GE(p.latency.attainment, estimate::kSloTarget);
  c.slo_s = 0.05;  // shorter than one request: never kept
  EXPECT_LT(estimate::ForecastOverlay(c, estimate::Colocation::kPriority).latency.attainment, 0.01);
}

TEST(SimServing, QueueingMatchesClosedForms) {
  EXPECT_NEAR(ErlangC(1, 0.5), 0.5, 1e-12);
  EXPECT_NEAR(ErlangC(2, 1.0), 1.0 / 3.0, 1e-12);
  // M/M/1, service 1 s, 0.5 requests/s, objective 3 s: 1 - 0.5 e^{-(1 - 0.5)(3 - 1)}.
  Latency l = MmcLatency(0.5, 1.0, 1, 3.0);
  EXPECT_TRUE(l.stable);
  EXPECT_NEAR(l.attainment, 1 - 0.5 * std::exp(-1.0), 1e-12);
  EXPECT_NEAR(l.utilization, 0.5, 1e-12);
  EXPECT_LT(MmcLatency(0.5, 1.0, 1, 0.9).attainment, 1e-12);  // slower than the objective
  EXPECT_FALSE(MmcLatency(2.0, 1.0, 1, 10).stable);           // arrivals above capacity
}

// Two nodes fully held by a 16-GPU training job (10 h); an LLaMA-2 7B service (one GPU, 8
// sequences at a time, 0.3 requests/s, 8 s objective) arrives an hour later for 4 hours.
// scheduler.colocation decides what happens:
//   priority:   the service overlays training's GPUs at once and keeps its objective (about
//               6.6 s a request with prefill on half the compute); training runs a little slower
//               and is never stopped;
//   time-slice: alternate slices would double the request to about 12 s, past the objective,
//               so the engine does not overlay it; like `none`, 2D-LAS then preempts the
//               training (which has the most attained service), which waits 4 hours.
TEST(SimPolicies, InferenceKeepsItsObjectiveNextToTraining) {
  model::Topology topo = Tree(2, 2);
  Workload w;
  w.name = "colocation";
  TraceJob train;
  train.id = 0;
  train.name = "train";
  model::JobSpec ts;
  ts.name = "train";
  ts.model = *model::FindModelProfile("llama2-7b");
  ts.gpus = 16;
  train.spec = ts;
  train.gpus = 16;
  train.duration_s = 10 * 3600;
  w.jobs.push_back(train);
  TraceJob serve;
  serve.id = 1;
  serve.name = "serve";
  serve.submit_s = 3600;
  model::JobSpec ss;
  ss.name = "serve";
  ss.kind = model::JobKind::kInference;
  ss.model = *model::FindModelProfile("llama2-7b");
  ss.gpus = 1;
  ss.inference = {.request_rate = 0.3, .latency_slo_ms = 8000, .batch = 8, .max_seq_len = 1024};
  serve.spec = ss;
  serve.gpus = 1;
  serve.duration_s = 4 * 3600;
  w.jobs.push_back(serve);

  std::map<std::string, SimResult> out;
  for (std::string mode : {"none", "time-slice", "priority"}) {
    engine::EngineOptions o = Preset("tianshu");
    o.config.colocation = mode;
    auto r = Simulate(topo, w, o);
    ASSERT_TRUE(r) << mode << ": " << r.error().message;
    ASSERT_EQ(r->metrics.jobs_completed, 2) << mode;
    ASSERT_EQ(r->jobs.size(), 2u);
    EXPECT_EQ(r->metrics.inference_services, 1) << mode;
    // An overlaid service holds no GPU share: never over capacity, GPU-time adds up.
    for (const auto& smp : r->samples) ASSERT_LE(smp.allocated_gpus, 16 + 1e-3) << mode;
    EXPECT_NEAR(r->jobs[0].allocated_gpu_s + r->jobs[1].allocated_gpu_s, r->allocated_gpu_s,
                1e-6 * r->allocated_gpu_s)
        << mode;
    out[mode] = std::move(*r);
  }
  const SimResult& p = out["priority"];
  EXPECT_TRUE(p.jobs[1].colocated);
  EXPECT_DOUBLE_EQ(p.jobs[1].start_s, 3600);  // no wait
  EXPECT_GE(p.jobs[1].slo_attainment, 0.99);
  EXPECT_GE(p.metrics.slo_attainment, 0.99);
  EXPECT_LT(p.metrics.inference_p99_ms, 8000);
  EXPECT_EQ(p.metrics.preemptions, 0);
  EXPECT_EQ(p.metrics.inference_colocated, 1);
  // Training lost part of its GPUs for 4 hours: slower than alone, never stopped, and done
  // sooner than when it made way for the service.
  EXPECT_GT(p.metrics.colocation_training_loss, 0);
  EXPECT_LT(p.metrics.colocation_training_loss, 0.25);
  EXPECT_NEAR(p.metrics.colocated_training_gpu_h, 16 * 4, 0.5);
  EXPECT_GT(p.jobs[0].jct_s, 10 * 3600 + 60);
  EXPECT_LT(p.jobs[0].jct_s, 10 * 3600 * 1.25);
  for (std::string mode : {"none", "time-slice"}) {
    const SimResult& r = out[mode];
    EXPECT_FALSE(r.jobs[1].colocated) << mode;
    EXPECT_EQ(r.metrics.inference_colocated, 0) << mode;
    EXPECT_EQ(r.jobs[0].preemptions, 1) << mode;        // made way for the service
    EXPECT_GE(r.jobs[1].slo_attainment, 0.99) << mode;  // alone on its GPU
    EXPECT_LT(p.jobs[0].jct_s, r.jobs[0].jct_s) << mode;
    EXPECT_DOUBLE_EQ(r.metrics.colocated_training_gpu_h, 0) << mode;
  }
}

// The event queue with superseded events moved aside (Compact) gives the run the same instants
// and the same live events in the same order as one heap of them all, where a job's completion
// is pushed again at each change of speed and the old one is ignored when met.
TEST(EventQueue, CompactionKeepsEveryInstantAndTheOrderOfLiveEvents) {
  using internal::Ev;
  using internal::EvKind;
  for (int seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> all;  // the reference
    int64_t seq = 0;
    internal::EventQueue q(/*first_compaction=*/8);
    std::vector<int64_t> version(50, 0);
    auto push = [&](double t, EvKind k, int job, int64_t v) {
      all.push(Ev{t, k, seq++, job, v});
      q.Push(t, k, job, v);
    };
    double now = 0;
    std::vector<std::pair<double, int>> want;  // (instant, job or -1 superseded), as met
    std::vector<std::pair<double, int>> got;
    for (int step = 0; step < 3000; ++step) {
      // Reprice a job (its old completion superseded), fail a node, or wake up; few distinct
      // times, so that ties of time and kind are common.
      const int job = static_cast<int>(rng() % version.size());
      const double t = now + static_cast<double>(rng() % 20);
      switch (rng() % 4) {
        case 0:
        case 1:
          push(t, EvKind::kCompletion, job, ++version[job]);
          break;
        case 2:
          push(t, rng() % 2 ? EvKind::kResume : EvKind::kNodeFail, job, version[job]);
          break;
        default:
          push(t, EvKind::kWakeup, -1, 0);
      }
      if (rng() % 24 != 0) continue;
      // A loop iteration: up to the next instant.
      auto stale = [&](const Ev& e) {
        return e.kind <= EvKind::kResume && e.version != version[e.job];
      };
      q.Compact(stale);
      ASSERT_FALSE(q.Empty());
      ASSERT_EQ(q.NextTime(), all.top().t) << "seed " << seed;
      ASSERT_EQ(q.NextIsFailureOrLater(), all.top().kind >= EvKind::kNodeFail) << "seed " << seed;
      now = q.NextTime();
      while (!all.empty() && all.top().t <= now) {
        const Ev e = all.top();
        all.pop();
        want.emplace_back(e.t, stale(e) ? -1 : static_cast<int>(e.seq));
      }
      std::vector<std::pair<double, int>> superseded;
      while (!q.Empty() && q.NextTime() <= now) {
        if (q.PopSupersededUpTo(now)) {
          got.emplace_back(now, -1);
          continue;
        }
        const Ev e = q.Pop();
        got.emplace_back(e.t, stale(e) ? -1 : static_cast<int>(e.seq));
      }
    }
    // The live events in the same order; superseded ones counted at the same instants (their
    // place among the live ones of an instant does not matter: nothing handles them).
    auto live = [](const std::vector<std::pair<double, int>>& v) {
      std::vector<std::pair<double, int>> out;
      for (const auto& e : v) {
        if (e.second >= 0) out.push_back(e);
      }
      return out;
    };
    EXPECT_EQ(live(got), live(want)) << "seed " << seed;
    std::map<double, int> want_at, got_at;
    for (const auto& e : want) want_at[e.first] += e.second < 0;
    for (const auto& e : got) got_at[e.first] += e.second < 0;
    EXPECT_EQ(got_at, want_at) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tianshu::sim
