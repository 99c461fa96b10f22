#include "tianshu/model/load.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace tianshu::model {
namespace {

namespace fs = std::filesystem;
const std::string kSource = TIANSHU_SOURCE_DIR;
const std::string kData = TIANSHU_DATA_DIR;

TEST(Validate, AcceptsEveryShippedExample) {
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(kSource + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    // Scenarios are read by sim/ (tianshu validate checks them; tests/cli_test.cc).
    if (entry.path().string().find("/scenarios/") != std::string::npos &&
        entry.path().filename() != "spread-unaware.yaml") {
      continue;
    }
    ValidationResult v = ValidateFile(entry.path().string());
    std::string all;
    for (const auto& d : v.diagnostics) all += d.ToString() + "\n";
    EXPECT_TRUE(v.diagnostics.empty()) << all;
    ++files;
  }
  EXPECT_GE(files, 6);
}

TEST(Validate, ADirectoryIsNotADocument) {
  ValidationResult v = ValidateFile(kSource + "/examples");
  ASSERT_EQ(v.diagnostics.size(), 1u);
  EXPECT_EQ(v.diagnostics[0].ToString(), kSource + "/examples: is a directory, not a document");
}

// Every bad file in tests/data/bad is rejected with exactly the message recorded for it.
TEST(Validate, RejectsTheBadCorpusWithExactMessages) {
  const std::string dir = kSource + "/tests/data/bad";
  std::ifstream in(dir + "/expected.txt");
  ASSERT_TRUE(in);
  std::map<std::string, std::string> expected;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    expected[line.substr(0, tab)] = line.substr(tab + 1);
  }
  EXPECT_GE(expected.size(), 30u);
  std::set<std::string> on_disk;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != "expected.txt") on_disk.insert(e.path().filename().string());
  }
  for (const auto& f : on_disk) EXPECT_TRUE(expected.count(f)) << f << " has no expectation";
  for (const auto& [file, message] : expected) {
    // Diagnostics name the file as it was given; validate by a path relative to the corpus.
    fs::path old = fs::current_path();
    fs::current_path(dir);
    ValidationResult v = ValidateFile(file);
    fs::current_path(old);
    ASSERT_FALSE(v.diagnostics.empty()) << file << " was accepted";
    EXPECT_FALSE(v.document.has_value()) << file << " was half-loaded";
    EXPECT_EQ(v.diagnostics.front().ToString(), message) << file;
  }
}

TEST(Validate, EveryProblemIsReportedNotOnlyTheFirst) {
  auto v = ValidateText("w.yaml",
                        "cluster:\n  resource_weight: {compute: 2, network: -1, memory: 0.1}\n"
                        "scheduler:\n  algoritm: genetic\n  max_retries: x\n");
  ASSERT_EQ(v.diagnostics.size(), 4u);
  EXPECT_EQ(v.diagnostics[0].line, 2);
  EXPECT_EQ(v.diagnostics[2].ToString(),
            "w.yaml:4:3: scheduler.algoritm: unknown key 'algoritm' (did you mean 'algorithm'?)");
}

TEST(Validate, RefusesHugeInputsWithoutCrashing) {
  std::string huge = "kind: training\nname: " + std::string(10 * 1000 * 1000, 'x') + "\n";
  auto v = ValidateText("huge.yaml", huge);
  ASSERT_EQ(v.diagnostics.size(), 1u);
  EXPECT_EQ(v.diagnostics[0].ToString(),
            "huge.yaml: the document is 9.5 MiB, larger than the 4.0 MiB allowed");
  // A long string under the file limit is refused by field.
  std::string long_name =
      "kind: training\nname: " + std::string(100000, 'y') + "\nmodel: llama2-7b\ngpus: 8\n";
  auto w = ValidateText("long.yaml", long_name);
  ASSERT_FALSE(w.diagnostics.empty());
  EXPECT_EQ(w.diagnostics[0].ToString(),
            "long.yaml:2:7: name: value of 100000 characters is longer than the 4096 allowed");
  // And a file too large on disk is refused before it is read.
  fs::path p = fs::temp_directory_path() / "tianshu_huge.yaml";
  { std::ofstream(p) << huge; }
  auto f = ValidateFile(p.string());
  fs::remove(p);
  ASSERT_EQ(f.diagnostics.size(), 1u);
  EXPECT_NE(f.diagnostics[0].message.find("larger than the 4.0 MiB allowed"), std::string::npos);
}

TEST(EngineConfig, DefaultsAndKeys) {
  auto c = LoadEngineConfigFile(kSource + "/examples/engine.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->node_discovery, NodeDiscovery::kDynamic);
  EXPECT_DOUBLE_EQ(c->resource_weight.compute, 0.6);
  EXPECT_EQ(c->algorithm, "genetic");
  EXPECT_EQ(c->allreduce_threshold_bytes, 8'000'000);
  EXPECT_EQ(c->max_nodes, 0);
  EXPECT_EQ(c->network_buffer_size_bytes, 4 * 1024 * 1024);
  auto empty = ValidateText("e.yaml", "kind: engine\n");
  ASSERT_TRUE(empty.document);
  const auto& d = std::get<EngineConfig>(empty.document->value);
  EXPECT_EQ(d.max_retries, 5);
  EXPECT_EQ(d.checkpoint_interval_s, 1800);
  EXPECT_EQ(d.scaling_interval_s, 300);
  EXPECT_TRUE(d.preemption);
  EXPECT_TRUE(d.topology_aware);
  EXPECT_FALSE(d.elastic_scaling);
  EXPECT_EQ(d.order, "las");
  EXPECT_EQ(d.backfill, "time");
  EXPECT_FALSE(d.migration);
  EXPECT_FALSE(d.preemption_cost_model);
  EXPECT_EQ(d.compact_wait_s, 12 * 3600);
  EXPECT_EQ(d.colocation, "none");
  EXPECT_EQ(d.gang_timeout_s, 600);
  EXPECT_TRUE(d.queues.empty());
  auto policies =
      ValidateText("p.yaml",
                   "scheduler: {order: SRTF, backfill: none, migration: true, "
                   "preemption_cost_model: true, compact_wait: 2h, colocation: priority, "
                   "gang_timeout: 90s}\n"
                   "queues:\n"
                   "  - {name: org, quota: 32}\n"
                   "  - {name: team, parent: org, weight: 2, quota: 16, borrow: false}\n");
  ASSERT_TRUE(policies.document) << policies.diagnostics[0].message;
  const auto& pc = std::get<EngineConfig>(policies.document->value);
  EXPECT_EQ(pc.order, "srtf");
  EXPECT_EQ(pc.backfill, "none");
  EXPECT_TRUE(pc.migration);
  EXPECT_TRUE(pc.preemption_cost_model);
  EXPECT_EQ(pc.compact_wait_s, 7200);
  EXPECT_EQ(pc.colocation, "priority");
  EXPECT_EQ(pc.gang_timeout_s, 90);
  ASSERT_EQ(pc.queues.size(), 2u);
  EXPECT_EQ(pc.queues[1].parent, "org");
  EXPECT_DOUBLE_EQ(pc.queues[1].weight, 2);
  EXPECT_EQ(pc.queues[1].quota_gpus, 16);
  EXPECT_FALSE(pc.queues[1].borrow);
  auto cycle = ValidateText("c.yaml",
                            "kind: engine\nqueues: [{name: a, parent: b}, {name: b, parent: a}]\n");
  ASSERT_FALSE(cycle.diagnostics.empty());
  EXPECT_NE(cycle.diagnostics[0].message.find("cycle"), std::string::npos);
  // Not a boolean: the file, line and field are named, and no document is taken.
  auto maybe = ValidateText("m.yaml", "scheduler:\n  preemption_cost_model: maybe\n");
  EXPECT_FALSE(maybe.document);
  ASSERT_FALSE(maybe.diagnostics.empty());
  EXPECT_EQ(maybe.diagnostics[0].file, "m.yaml");
  EXPECT_EQ(maybe.diagnostics[0].line, 2);
  EXPECT_EQ(maybe.diagnostics[0].path, "scheduler.preemption_cost_model");
  EXPECT_NE(maybe.diagnostics[0].message.find("maybe"), std::string::npos);
  auto sized = ValidateText("s.yaml",
                            "scheduler: {allreduce_threshold: 512KiB, "
                            "checkpoint_interval: 30m}\n");
  ASSERT_TRUE(sized.document);
  EXPECT_EQ(std::get<EngineConfig>(sized.document->value).allreduce_threshold_bytes, 524288);
  EXPECT_EQ(std::get<EngineConfig>(sized.document->value).checkpoint_interval_s, 1800);
}

// scheduler.las_thresholds and scheduler.restart_overhead: the defaults, the peer's values, and
// bad values named by file, line and field, with nothing taken from the file.
TEST(EngineConfig, LasThresholdsAndRestartOverhead) {
  auto empty = ValidateText("e.yaml", "kind: engine\n");
  ASSERT_TRUE(empty.document);
  const auto& d = std::get<EngineConfig>(empty.document->value);
  EXPECT_EQ(d.las_thresholds_gpu_s, (std::vector<int>{3600, 36000}));
  EXPECT_EQ(d.restart_overhead_s, 60);
  EXPECT_EQ(d.las_queue_order, "entered");
  EXPECT_EQ(d.preempt_for, "head");
  auto peer = ValidateText("p.yaml",
                           "scheduler: {las_thresholds: [3250, 7200, 18000], restart_overhead: 0, "
                           "las_queue_order: preempted-first, backfill: greedy, "
                           "preempt_for: every-job}\n");
  ASSERT_TRUE(peer.document) << peer.diagnostics[0].message;
  const auto& p = std::get<EngineConfig>(peer.document->value);
  EXPECT_EQ(p.las_thresholds_gpu_s, (std::vector<int>{3250, 7200, 18000}));
  EXPECT_EQ(p.restart_overhead_s, 0);
  EXPECT_EQ(p.las_queue_order, "preempted-first");
  EXPECT_EQ(p.preempt_for, "every-job");
  auto minutes = ValidateText("m.yaml", "scheduler: {restart_overhead: 2m, las_thresholds: []}\n");
  ASSERT_TRUE(minutes.document) << minutes.diagnostics[0].message;
  EXPECT_EQ(std::get<EngineConfig>(minutes.document->value).restart_overhead_s, 120);
  EXPECT_TRUE(std::get<EngineConfig>(minutes.document->value).las_thresholds_gpu_s.empty())
      << "no thresholds: one queue, FIFO by submission";
  struct Bad {
    const char* text;
    const char* field;
    const char* says;
  };
  for (const Bad& b :
       {Bad{"scheduler:\n  las_thresholds: [3600, 3600]\n", "scheduler.las_thresholds[1]",
            "more than the threshold before it"},
        Bad{"scheduler:\n  las_thresholds: [0]\n", "scheduler.las_thresholds[0]", "1.."},
        Bad{"scheduler:\n  las_thresholds: 3600\n", "scheduler.las_thresholds", "expected a list"},
        Bad{"scheduler:\n  restart_overhead: -5\n", "scheduler.restart_overhead", "negative"},
        Bad{"scheduler:\n  las_queue_order: lifo\n", "scheduler.las_queue_order", "entered"},
        Bad{"scheduler:\n  preempt_for: everyone\n", "scheduler.preempt_for", "every-job"},
        // A blocked head's reservation (time backfill) would be taken from behind.
        Bad{"scheduler:\n  preempt_for: every-job\n", "scheduler.preempt_for",
            "needs scheduler.backfill: greedy, not 'time'"},
        Bad{"scheduler:\n  preempt_for: every-job\n  backfill: none\n", "scheduler.preempt_for",
            "not 'none'"}}) {
    auto r = ValidateText("bad.yaml", b.text);
    EXPECT_FALSE(r.document) << b.text;
    ASSERT_FALSE(r.diagnostics.empty()) << b.text;
    const std::string m = r.diagnostics[0].ToString();
    EXPECT_NE(m.find("bad.yaml:2"), std::string::npos) << m;
    EXPECT_NE(m.find(b.field), std::string::npos) << m;
    EXPECT_NE(m.find(b.says), std::string::npos) << m;
  }
}

// cluster.rendezvous_ports: below the ephemeral range by default; a bad range names its field.
// The keys that let a configuration file say what the baseline presets fix.
TEST(EngineConfig, BindingAndStrategiesBySize) {
  auto empty = ValidateText("e.yaml", "kind: engine\n");
  const auto& d = std::get<EngineConfig>(empty.document->value);
  EXPECT_EQ(d.binding, "job");
  EXPECT_EQ(d.small_job_algorithm, "topology");
  EXPECT_EQ(d.long_queue_algorithm, "auto");
  EXPECT_EQ(d.long_queue_length, 64);
  auto set = ValidateText("k.yaml",
                          "scheduler:\n  binding: pod-gang\n  small_job_algorithm: same\n"
                          "  long_queue_algorithm: best-fit\n  long_queue_length: 0\n");
  ASSERT_TRUE(set.diagnostics.empty()) << set.diagnostics.front().ToString();
  const auto& c = std::get<EngineConfig>(set.document->value);
  EXPECT_EQ(c.binding, "pod-gang");
  EXPECT_EQ(c.small_job_algorithm, "same");
  EXPECT_EQ(c.long_queue_algorithm, "best-fit");
  EXPECT_EQ(c.long_queue_length, 0);
  EXPECT_EQ(c.plugin_at.at("scheduler.binding").line, 2);
  auto bad = ValidateText("bad.yaml", "scheduler:\n  order: fifo\n  binding: pods\n");
  ASSERT_EQ(bad.diagnostics.size(), 1u);
  EXPECT_EQ(bad.diagnostics[0].ToString().rfind(
                "bad.yaml:3:12: scheduler.binding: expected one of job, pod-each, pod-gang, got "
                "'pods'",
                0),
            0u)
      << bad.diagnostics[0].ToString();
  auto negative = ValidateText("n.yaml", "scheduler: {long_queue_length: -1}\n");
  ASSERT_EQ(negative.diagnostics.size(), 1u);
  EXPECT_EQ(negative.diagnostics[0].path, "scheduler.long_queue_length");
}

TEST(EngineConfig, RendezvousPorts) {
  auto d = ValidateText("e.yaml", "kind: engine\n");
  ASSERT_TRUE(d.document);
  EXPECT_EQ(std::get<EngineConfig>(d.document->value).rendezvous_port_low, 20000);
  EXPECT_EQ(std::get<EngineConfig>(d.document->value).rendezvous_port_high, 32767);
  auto ok = ValidateText("e.yaml", "cluster: {rendezvous_ports: 12000-12999}\n");
  ASSERT_TRUE(ok.document) << ok.diagnostics[0].message;
  EXPECT_EQ(std::get<EngineConfig>(ok.document->value).rendezvous_port_low, 12000);
  EXPECT_EQ(std::get<EngineConfig>(ok.document->value).rendezvous_port_high, 12999);
  for (const char* bad : {"99-2000", "3000-2000", "20000-70000", "20000", "20000-30000x"}) {
    auto r = ValidateText("e.yaml", std::string("cluster:\n  rendezvous_ports: ") + bad + "\n");
    ASSERT_FALSE(r.diagnostics.empty()) << bad;
    EXPECT_FALSE(r.document) << bad;
    EXPECT_NE(r.diagnostics[0].message.find("expected LOW-HIGH"), std::string::npos) << bad;
    EXPECT_EQ(r.diagnostics[0].line, 2) << bad;
    EXPECT_EQ(r.diagnostics[0].path, "cluster.rendezvous_ports") << bad;
  }
}

TEST(EngineConfig, EnvironmentOverridesAllOrNothing) {
  EngineConfig c;
  std::map<std::string, std::string> env = {
      {"NETWORK_BUFFER_SIZE", "8MiB"}, {"ALLREDUCE_ALGO", "tree"}, {"SCHEDULER_BACKEND", "ascend"}};
  auto getenv = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  ASSERT_TRUE(ApplyEnvironment(getenv, &c));
  EXPECT_EQ(c.network_buffer_size_bytes, 8 * 1048576);
  EXPECT_EQ(c.allreduce_algo, "tree");
  EXPECT_EQ(c.scheduler_backend, Backend::kAscend);
  env = {{"ALLREDUCE_ALGO", "ring"}, {"CHECKPOINT_MODE", "later"}};
  auto st = ApplyEnvironment(getenv, &c);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "environment CHECKPOINT_MODE: 'later' is not one of async, sync");
  EXPECT_EQ(c.allreduce_algo, "tree");  // unchanged: nothing half-applied
}

TEST(Job, ProfileAndOverrides) {
  auto j = LoadJobText("j.yaml",
                       "kind: training\nname: x\nmodel: {profile: gpt3-175b, global_batch: 512}\n"
                       "parallelism: {tp: 8, pp: 16, zero: 1, recompute: full}\n"
                       "nodes: 128\ngpus_per_node: 8\npriority: 5\nqueue: research\n"
                       "checkpoint: {interval: 1h, mode: sync}\nmax_retries: 2\n"
                       "node_selector: {zone: a}\naccelerators: [a100]\n");
  ASSERT_TRUE(j) << j.error().message;
  EXPECT_EQ(j->model.layers, 96);
  EXPECT_EQ(j->model.global_batch, 512);
  EXPECT_EQ(j->gpus, 1024);
  EXPECT_FALSE(j->parallelism.automatic);
  EXPECT_EQ(j->parallelism.pp, 16);
  EXPECT_EQ(j->parallelism.recompute, Recompute::kFull);
  EXPECT_EQ(j->checkpoint_interval_s, 3600);
  EXPECT_EQ(j->checkpoint_mode, CheckpointMode::kSync);
  EXPECT_EQ(j->node_selector.at("zone"), "a");
  EXPECT_EQ(j->accelerators, std::vector<std::string>{"A100-80GB"});
  auto params = LoadJobText("p.yaml",
                            "name: c\nmodel: {parameters: 1.3B, layers: 24, hidden: "
                            "2048, heads: 16}\ngpus: 8\n");
  ASSERT_TRUE(params) << params.error().message;
  EXPECT_EQ(params->model.parameters, 1'300'000'000);
  EXPECT_TRUE(params->parallelism.automatic);
  EXPECT_EQ(params->max_leaves, 0);  // no bound unless asked
  for (const auto& [text, want] :
       std::vector<std::pair<std::string, int>>{{"topology: {leaves: minimum}", kFewestLeaves},
                                                {"topology: {leaves: Minimum}", kFewestLeaves},
                                                {"topology: {leaves: 3}", 3}}) {
    auto b = LoadJobText("b.yaml", "name: b\nmodel: llama2-7b\ngpus: 64\n" + text + "\n");
    ASSERT_TRUE(b) << text << ": " << b.error().message;
    EXPECT_EQ(b->max_leaves, want) << text;
  }
  auto unknown = LoadJobText("u.yaml",
                             "name: u\nmodel: llama2-7b\ngpus: 64\n"
                             "topology: {leafs: 2}\n");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("topology.leafs"), std::string::npos)
      << unknown.error().message;
}

TEST(Job, CatalogueCoversTheReferenceModels) {
  for (const char* name : {"gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "dense-1.2t",
                           "mixtral-8x7b", "bert-large", "resnet50"}) {
    const ModelSpec* m = FindModelProfile(name);
    ASSERT_NE(m, nullptr) << name;
    if (m->IsTransformer()) {
      // 12·l·h² is the transformer body's parameter count (Narayanan et al. 2021, eq. 2);
      // the catalogue shape must agree with the advertised size within 20% (MoE aside).
      double body = 12.0 * m->layers * static_cast<double>(m->hidden) * m->hidden;
      if (m->experts == 1) {
        EXPECT_NEAR(body / static_cast<double>(m->parameters), 1.0, 0.2) << name;
      }
      EXPECT_EQ(m->hidden % m->heads, 0) << name;
    }
  }
}

TEST(Importers, LingjunIsAThreeTierClos) {
  auto t = LoadCluster(kData + "/lingjun/topo.csv");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->NumNodes(), 847);
  EXPECT_EQ(t->NumGpus(), 847 * 8);
  std::map<int, int> per_tier;
  for (const auto& s : t->switches) per_tier[s.tier]++;
  EXPECT_EQ(per_tier[0], 119);  // ASWs, scoped by their PSW
  EXPECT_EQ(per_tier[1], 3);    // PSWs
  EXPECT_EQ(per_tier[2], 1);    // DSW
  int leaf_nodes = 0;
  for (const auto& s : t->switches) leaf_nodes += static_cast<int>(s.nodes.size());
  EXPECT_EQ(leaf_nodes, 847);
}

TEST(Importers, OpenbGpuNodes) {
  auto t = ImportOpenb(kData + "/openb/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->NumNodes(), 1213);
  EXPECT_EQ(t->NumGpus(), 6212);
  std::map<std::string, int> by_model;
  for (const auto& n : t->nodes) by_model[t->TypeOf(n.id).accelerator.model] += t->GpusOn(n.id);
  EXPECT_EQ(by_model["G2"], 549 * 8);
  EXPECT_EQ(by_model.size(), 7u);
  auto all = ImportOpenb(kData + "/openb/openb_node_list_all_node.csv", true);
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(all->NumNodes(), 1523);
  EXPECT_EQ(all->NumGpus(), 6212);
}

TEST(Importers, ClusterSpecForms) {
  auto gen = LoadCluster("fat-tree:nodes=32,leaf_radix=8,gpu=H100-80GB");
  ASSERT_TRUE(gen) << gen.error().message;
  EXPECT_EQ(gen->NumGpus(), 256);
  EXPECT_EQ(gen->types[0].accelerator.model, "H100-80GB");
  auto missing = LoadCluster("/nonexistent/cluster.yaml");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message,
            "/nonexistent/cluster.yaml: cannot open: No such file or directory");
  auto wrong_kind = LoadCluster(kSource + "/examples/engine.yaml");
  ASSERT_FALSE(wrong_kind);
  EXPECT_NE(wrong_kind.error().message.find("is of kind 'engine config', expected 'cluster'"),
            std::string::npos);
}

TEST(Cluster, ExplicitSwitches) {
  auto v = ValidateText("c.yaml",
                        "kind: cluster\nname: x\nnode_groups:\n"
                        "  - {name: a, count: 2, accelerator: {model: H100-80GB, count: 8}, "
                        "leaf: l0}\n"
                        "  - {name: b, count: 3, accelerator: {model: Ascend-910B, count: 8}, "
                        "leaf: l1}\n"
                        "fabric:\n  tiers: [{name: leaf}, {name: spine, oversubscription: 2}]\n"
                        "  switches:\n    - {name: s0, tier: spine}\n"
                        "    - {name: l0, tier: leaf, parent: s0}\n"
                        "    - {name: l1, tier: leaf, parent: s0}\n");
  ASSERT_TRUE(v.diagnostics.empty()) << v.diagnostics[0].ToString();
  const auto& t = std::get<Topology>(v.document->value);
  EXPECT_EQ(t.NumNodes(), 5);
  EXPECT_EQ(t.CommonTier(0, 1), 0);
  EXPECT_EQ(t.CommonTier(0, 2), 1);
  EXPECT_EQ(t.TypeOf(2).backend, Backend::kAscend);
}

}  // namespace
}  // namespace tianshu::model
