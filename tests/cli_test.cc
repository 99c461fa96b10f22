// The tianshu binary, driven as a user would drive it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace tianshu {
namespace {

using testing::RunCommand;
const std::string kBin = TIANSHU_BINARY;
const std::string kSource = TIANSHU_SOURCE_DIR;
const std::string kData = TIANSHU_DATA_DIR;

TEST(Cli, ValidateAcceptsExamples) {
  // Every configuration shipped: clusters, engine configs, jobs, scenarios, workloads.
  auto r =
      RunCommand("cd " + kSource + " && " + kBin + " validate examples/*.yaml examples/*/*.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cluster 'a100-2048': 256 nodes, 2048 GPUs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scenario 'three-giants': 3 jobs on 4096 GPUs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("training job 'ddp-gpt': 4 GPUs"), std::string::npos) << r.out;
}

// A scenario names its cluster and config files relative to itself, as its job files: the
// shipped ones run from any directory (here /), and a name with no file beside the scenario (a
// preset, a fat-tree spec) is read as before.
TEST(Cli, AScenarioFindsItsClusterAndConfigFilesBesideIt) {
  auto r = RunCommand("cd / && " + kBin + " simulate --trace " + kSource +
                      "/examples/scenarios/serve-and-train-64.yaml -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::vector<std::string> columns;
  for (const auto& c : j["configs"]) columns.push_back(c["config"].get<std::string>());
  EXPECT_EQ(columns, (std::vector<std::string>{"slurm", "engine", "time-slice", "tianshu"}));
  r = RunCommand("cd / && " + kBin + " validate " + kSource +
                 "/examples/scenarios/three-giants.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("scenario 'three-giants': 3 jobs on 4096 GPUs"), std::string::npos) << r.out;
  // Beside the scenario first: a file of the same name in the working directory is not read.
  auto dir = std::filesystem::temp_directory_path() / "tianshu-cli-beside";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "s");
  std::ofstream(dir / "s" / "c.yaml")
      << "kind: cluster\nname: beside\nnode_groups:\n  - name: a\n    count: 2\n"
         "    accelerator: {model: A100-80GB, count: 8}\n"
         "fabric:\n  nodes_per_leaf: 2\n  tiers: [{name: leaf}]\n";
  std::ofstream(dir / "c.yaml") << "not: a cluster\n";
  std::ofstream(dir / "s" / "w.yaml")
      << "name: w\ncluster: c.yaml\nconfigs: [mainstream]\njobs:\n"
         "  - spec: {kind: training, model: llama2-7b, gpus: 8}\n    duration: 60\n";
  r = RunCommand("cd " + dir.string() + " && " + kBin + " simulate --trace s/w.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("w (1 jobs) on s/c.yaml, 16 GPUs"), std::string::npos) << r.out;
  // A file beside the scenario named like a preset does not shadow it: only .yaml/.yml names
  // are looked for there.
  std::ofstream(dir / "s" / "tianshu") << "not: an engine config\n";
  std::ofstream(dir / "s" / "w.yaml")
      << "name: w\ncluster: c.yaml\nconfigs: [tianshu]\njobs:\n"
         "  - spec: {kind: training, model: llama2-7b, gpus: 8}\n    duration: 60\n";
  r = RunCommand("cd / && " + kBin + " simulate --trace " + (dir / "s" / "w.yaml").string() +
                 " -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["configs"][0]["config"], "tianshu") << r.out;
  std::filesystem::remove_all(dir);
}

// `validate` reads a scenario's configurations as `tianshu simulate` would: a preset in any
// case passes, a name that is neither a preset nor a file fails at its line, and so does an
// engine config file beside the scenario with a bad key (its own file, line and field).
TEST(Cli, ValidateChecksAScenariosConfigurations) {
  auto dir = std::filesystem::temp_directory_path() / "tianshu-cli-configs";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string jobs =
      "jobs:\n  - spec: {kind: training, model: llama2-7b, gpus: 8}\n    duration: 60\n";
  std::ofstream(dir / "bad-engine.yaml") << "kind: engine\nscheduler:\n  algoritm: genetic\n";
  std::ofstream(dir / "s.yaml") << "name: s\nconfigs: [Tianshu, nope.yaml, bad-engine.yaml]\n"
                                << jobs;
  auto r = RunCommand("cd / && " + kBin + " validate " + (dir / "s.yaml").string());
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("s.yaml:2:20: configs[1]: unknown configuration 'nope.yaml'"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("bad-engine.yaml:3:3: scheduler.algoritm: unknown key"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("configs[0]"), std::string::npos) << r.err;
  std::ofstream(dir / "s.yaml") << "name: s\nconfigs: [Tianshu, mainstream]\n" << jobs;
  r = RunCommand("cd / && " + kBin + " validate " + (dir / "s.yaml").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(Cli, ValidateRejectsABadScenarioWithLineAndField) {
  auto dir = std::filesystem::temp_directory_path() / "tianshu-cli-scenario";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "s.yaml") << "name: s\njobs:\n  - job: nope.yaml\n    sumbit: 3\n";
  auto r = RunCommand(kBin + " validate " + (dir / "s.yaml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("s.yaml:4:5: jobs[0].sumbit: unknown key 'sumbit'"), std::string::npos)
      << r.err;
  std::ofstream(dir / "s.yaml") << "name: s\njobs:\n  - job: nope.yaml\n";
  r = RunCommand(kBin + " validate " + (dir / "s.yaml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("jobs[0]: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nope.yaml: cannot open"), std::string::npos) << r.err;
  // An inline spec's problem is placed at the scenario's own line and column (the field's, else
  // the spec's), under jobs[N].spec, by validate and simulate alike.
  const std::string bad_gpus =
      "  - spec:\n      kind: training\n      model: llama2-7b\n      gpus: -3\n";
  std::ofstream(dir / "s.yaml") << "name: s\njobs:\n  - spec: {kind: training, gpus: 8}\n"
                                << bad_gpus;
  r = RunCommand(kBin + " validate " + (dir / "s.yaml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("s.yaml:3:11: jobs[0].spec.model: is required"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("s.yaml: "), std::string::npos) << r.err;  // no unplaced line
  std::ofstream(dir / "s.yaml") << "name: s\njobs:\n" << bad_gpus;
  r = RunCommand(kBin + " simulate --trace " + (dir / "s.yaml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("s.yaml:6:13: jobs[0].spec.gpus: must be"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(Cli, ValidateRejectsWithFileLineColumnAndExit1) {
  auto r = RunCommand("cd " + kSource + "/tests/data/bad && " + kBin +
                      " validate engine-unknown-key.yaml job-tp-not-divide.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("engine-unknown-key.yaml:2:3: scheduler.algoritm: unknown key 'algoritm' "
                       "(did you mean 'algorithm'?)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("job-tp-not-divide.yaml:4:19: parallelism.tp: tensor-parallel degree 3 "
                       "does not divide the 16 GPUs"),
            std::string::npos)
      << r.err;
}

// Plugin names are checked against the registries (the policy library's included), not by
// the config reader: each file of tests/data/bad-plugins is refused with exactly its message.
TEST(Cli, ValidateRefusesUnknownPluginNamesWithTheNearestRegisteredOne) {
  const std::string dir = kSource + "/tests/data/bad-plugins";
  std::ifstream in(dir + "/expected.txt");
  ASSERT_TRUE(in);
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    auto r = RunCommand("cd " + dir + " && " + kBin + " validate " + line.substr(0, tab));
    EXPECT_EQ(r.exit_code, 1) << line;
    EXPECT_EQ(r.err, line.substr(tab + 1) + "\n");
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  // A strategy the policy library registers is a valid name.
  const std::string ok = ::testing::TempDir() + "/by-speed.yaml";
  std::ofstream(ok) << "scheduler:\n  algorithm: by-speed\n";
  auto r = RunCommand(kBin + " validate " + ok);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("algorithm by-speed"), std::string::npos) << r.out;
}

// `simulate --config FILE` reads a file that names the policy library's plugins, turns on its
// switches and gives its plugins options (the library is loaded before the file is checked);
// a bad option is refused naming its place, before anything runs.
TEST(Cli, SimulateReadsPolicyLibraryNamesAndPluginOptionsFromAConfig) {
  const std::string ok = ::testing::TempDir() + "/plugins-ok.yaml";
  std::ofstream(ok) << "scheduler: {order: fair-share, migration: true}\n"
                       "task_scheduler: {elastic_scaling: true}\n"
                       "plugins:\n  elastic: {restart_s: 30}\n  defrag: {max_moves: 4}\n";
  auto r = RunCommand(kBin + " simulate -t " + kSource +
                      "/examples/scenarios/mix-128.yaml --max-jobs 20 --no-progress -o json "
                      "--config " +
                      ok);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["configs"].size(), 1u);
  const std::string bad = ::testing::TempDir() + "/plugins-bad.yaml";
  std::ofstream(bad) << "plugins:\n  defrag: {max_moves: 0}\n";
  r = RunCommand(kBin + " simulate -t " + kSource +
                 "/examples/scenarios/mix-128.yaml --max-jobs 20 --no-progress --config " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err,
            "tianshu simulate: " + bad +
                ":2:12: plugins.defrag.max_moves: must be between 1 and 100000, got \"0\"\n");
}

// `simulate --leaves` gives every job a leaf bound (topology.leaves): on Philly's first 3,000
// jobs under the mainstream preset (which spreads gangs) communication takes a smaller share;
// a bad bound is refused, naming the flag, before anything runs.
TEST(Cli, SimulateLeavesBoundsEveryJobAndRefusesABadBound) {
  const std::string args =
      " simulate -t philly --max-jobs 3000 --config mainstream --no-progress -o json";
  auto comm_share = [&](const std::string& more) {
    auto r = RunCommand(kBin + args + more);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || j["configs"].empty()) return -1.0;
    return j["configs"][0]["comm_share"].get<double>();
  };
  const double spread = comm_share("");
  const double bound = comm_share(" --leaves minimum");
  EXPECT_GT(bound, 0);
  EXPECT_LT(bound, spread);
  auto r = RunCommand(kBin + args + " --leaves fewest");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err,
            "tianshu simulate: --leaves: must be `minimum` or a whole number of leaf switches "
            "(at least 1), got 'fewest'\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// `simulate` starts itself once more with huge pages for glibc's heap (main.cc): the results
// are the same with (TIANSHU_HUGE_PAGES unset) and without (set), and it still runs where the
// dynamic loader is named as the program: there /proc/self/exe is the loader, which started
// again would take "simulate" for the program to load.
TEST(Cli, SimulateGivesTheSameResultsWithAndWithoutHugePages) {
  const std::string args = " simulate -t " + kSource +
                           "/examples/scenarios/mix-128.yaml --max-jobs 20 --no-progress -o json";
  auto results = [](const testing::CommandResult& r) {
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.contains("configs")) return std::string("not JSON: ") + r.out;
    for (auto& c : j["configs"]) c.erase("wall_seconds");
    return j.dump();
  };
  auto huge = RunCommand(kBin + args);
  auto plain = RunCommand("TIANSHU_HUGE_PAGES=0 " + kBin + args);
  ASSERT_EQ(huge.exit_code, 0) << huge.err;
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(results(huge), results(plain));
  const std::string loader = "/lib64/ld-linux-x86-64.so.2";
  if (std::filesystem::exists(loader)) {
    auto through = RunCommand(loader + " " + kBin + args);
    ASSERT_EQ(through.exit_code, 0) << through.err;
    EXPECT_EQ(results(through), results(plain));
  }
}

TEST(Cli, ValidateJson) {
  auto r = RunCommand("cd " + kSource + "/tests/data/bad && " + kBin +
                      " validate --output json engine-weights-sum.yaml");
  EXPECT_EQ(r.exit_code, 1);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_FALSE(j[0]["valid"].get<bool>());
  EXPECT_EQ(j[0]["diagnostics"][0]["line"], 4);
  EXPECT_EQ(j[0]["diagnostics"][0]["path"], "cluster.resource_weight");
}

nlohmann::json Show(const std::string& cluster) {
  auto r = RunCommand(kBin + " topology show --output json " + cluster);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// `tianshu plan` on every shipped job against the 2048-GPU cluster: it fits, and the JSON
// carries the fields issue 3 lists, consistent with each other.
TEST(Cli, PlanEveryExampleJobOn2048) {
  int jobs = 0;
  for (const auto& e : std::filesystem::directory_iterator(kSource + "/examples/jobs")) {
    if (e.path().extension() != ".yaml") continue;
    ++jobs;
    auto r = RunCommand(kBin + " plan " + e.path().string() + " --cluster " + kSource +
                        "/examples/cluster-2048.yaml --output json");
    ASSERT_EQ(r.exit_code, 0) << e.path() << "\n" << r.err;
    auto j = nlohmann::json::parse(r.out);
    SCOPED_TRACE(e.path().string());
    EXPECT_TRUE(j.at("fits").get<bool>());
    EXPECT_LE(j.at("memory_per_rank_bytes").get<double>(),
              j.at("device_memory_bytes").get<double>());
    for (const char* k : {"tp", "pp", "dp", "zero"}) EXPECT_TRUE(j.at("parallelism").contains(k));
    const auto& p = j.at("parallelism");
    EXPECT_EQ(p.at("tp").get<int>() * p.at("pp").get<int>() * p.at("dp").get<int>(),
              j.at("gpus").get<int>());
    double iteration = j.at("iteration_seconds").get<double>();
    EXPECT_GT(iteration, 0);
    double parts = 0;
    for (const char* k : {"compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "checkpoint"}) {
      parts += j.at("breakdown").at(k).get<double>();
    }
    EXPECT_NEAR(parts, iteration, 1e-6 * iteration + 1e-9);
    if (j.at("kind") == "training") {  // an inference plan has latency, not MFU
      EXPECT_GT(j.at("mfu").get<double>(), 0);
      EXPECT_LT(j.at("mfu").get<double>(), 1);
    }
    double comm = j.at("breakdown").at("tp_comm").get<double>() +
                  j.at("breakdown").at("pp_comm").get<double>() +
                  j.at("breakdown").at("dp_comm").get<double>() +
                  j.at("breakdown").value("ep_comm", 0.0);
    EXPECT_NEAR(j.at("comm_share").get<double>(), comm / iteration, 1e-6);
    ASSERT_FALSE(j.at("collectives").empty());
    for (const auto& c : j.at("collectives")) {
      for (const char* k : {"group", "op", "bytes", "algorithm", "seconds"}) {
        EXPECT_TRUE(c.contains(k)) << c.dump();
      }
    }
    EXPECT_EQ(j.at("env").value("TORCH_NCCL_ASYNC_ERROR_HANDLING", ""), "1");
  }
  EXPECT_GE(jobs, 6);
}

TEST(Cli, TopologyShow2048) {
  auto j = Show(kSource + "/examples/cluster-2048.yaml");
  EXPECT_EQ(j["nodes"], 256);
  EXPECT_EQ(j["gpus"], 2048);
  EXPECT_EQ(j["gpus_by_model"]["A100-80GB"], 2048);
  ASSERT_EQ(j["tiers"].size(), 2u);
  EXPECT_EQ(j["tiers"][0]["name"], "leaf");
  EXPECT_EQ(j["tiers"][0]["switches"], 16);
  EXPECT_DOUBLE_EQ(j["tiers"][0]["uplink_gbps_per_switch"].get<double>(), 16 * 8 * 200.0);
  EXPECT_EQ(j["tiers"][0]["links_down"], 2048);  // one per NIC
  EXPECT_DOUBLE_EQ(j["tiers"][0]["oversubscription"].get<double>(), 1.0);
  // Non-blocking: half of the 256 x 1.6 Tb/s injection crosses the bisection.
  EXPECT_DOUBLE_EQ(j["bisection_gbps"].get<double>(), 256 * 1600.0 / 2);
}

TEST(Cli, TopologyShowOversubscribed4096) {
  auto j = Show(kSource + "/examples/cluster-4096.yaml");
  EXPECT_EQ(j["gpus"], 4096);
  ASSERT_EQ(j["tiers"].size(), 3u);
  EXPECT_EQ(j["tiers"][1]["switches"], 4);
  // 2:1 at the spine uplinks halves the bisection.
  EXPECT_DOUBLE_EQ(j["bisection_gbps"].get<double>(), 512 * 1600.0 / 2 / 2);
}

TEST(Cli, TopologyShowLingjun) {
  auto j = Show(kData + "/lingjun/topo.csv");
  EXPECT_EQ(j["nodes"], 847);
  ASSERT_EQ(j["tiers"].size(), 3u);
  EXPECT_EQ(j["tiers"][0]["switches"], 119);
  EXPECT_EQ(j["tiers"][1]["switches"], 3);
  EXPECT_EQ(j["tiers"][2]["switches"], 1);
}

TEST(Cli, TopologyShowOpenb) {
  auto j = Show(kData + "/openb/openb_node_list_gpu_node.csv");
  EXPECT_EQ(j["nodes"], 1213);
  EXPECT_EQ(j["gpus"], 6212);
  EXPECT_EQ(j["gpus_by_model"]["T4-16GB"], 842);
}

TEST(Cli, TopologyShowRefusesBadInput) {
  auto r = RunCommand(kBin + " topology show fat-tree:nodes=-3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "fat-tree: nodes must be a whole number, got '-3'\n");
  auto usage = RunCommand(kBin + " topology show");
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace tianshu
