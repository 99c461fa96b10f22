// `tianshu bench`: placement quality on real data.
//   tianshu bench fragmentation --nodes openb_node_list_gpu_node.csv
//       --pods openb_pod_list_default.csv --strategy fgd --seeds 42-51 --output json
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "data_sets.h"
#include "tianshu/base/strings.h"
#include "tianshu/placement/openb.h"

namespace tianshu::cli {
namespace {

struct FragFlags {
  std::string nodes;  // "": the shipped openb GPU node list
  std::string pods;   // "": the shipped default pod list
  std::string data;
  std::string strategy = "fgd";
  uint64_t seed = 42;
  std::string seeds;
  double inflate = 1.3;
  bool paper_fgd = false;
  bool paper_typical = false;
  bool paper_order = false;
  bool faithful = false;
  std::string score = "integer";
  std::string ties = "shuffled";
  std::string weight = "count";
  double popularity = 0.95;
  OutputFlag output;
};

// "42-51" or "42,43,50".
Result<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> out;
  for (const std::string& part : SplitString(text, ',')) {
    auto dash = part.find('-');
    int64_t a = 0, b = 0;
    if (dash == std::string::npos) {
      if (!ParseInt64(part, &a) || a < 0) return Fail("--seeds: '", part, "' is not a seed");
      b = a;
    } else if (!ParseInt64(part.substr(0, dash), &a) || !ParseInt64(part.substr(dash + 1), &b) ||
               a < 0 || b < a || b - a > 10000) {
      return Fail("--seeds: '", part, "' is not a range like 42-51");
    }
    for (int64_t s = a; s <= b; ++s) out.push_back(static_cast<uint64_t>(s));
  }
  if (out.empty()) return Fail("--seeds: no seed given");
  return out;
}

int RunFragmentationCommand(FragFlags f) {
  // --faithful is the paper's workload and order with the plugin's integer score.
  if (f.faithful) {
    if (f.score != "integer") {
      std::cerr << "tianshu bench fragmentation: --faithful scores as the paper's simulator "
                   "does; it cannot be combined with --score "
                << f.score << "\n";
      return kExitUsage;
    }
    f.paper_typical = f.paper_order = true;
  }
  if (f.score == "exact" && f.ties != "shuffled") {
    std::cerr << "tianshu bench fragmentation: --ties applies to --score integer; the exact "
                 "score breaks ties by the free GPU share, then the node id\n";
    return kExitUsage;
  }
  if (f.paper_fgd && f.weight != "count") {
    std::cerr << "tianshu bench fragmentation: --paper-fgd weighs the typical tasks by count; "
                 "it cannot be combined with --weight "
              << f.weight << "\n";
    return kExitUsage;
  }
  std::vector<uint64_t> seeds = {f.seed};
  if (!f.seeds.empty()) {
    auto parsed = ParseSeeds(f.seeds);
    if (!parsed) {
      std::cerr << "tianshu bench fragmentation: " << parsed.error().message << "\n";
      return kExitInvalid;
    }
    seeds = *parsed;
  }
  std::string nodes_file = f.nodes, pods_file = f.pods;
  if (nodes_file.empty() || pods_file.empty()) {
    auto dir = DataDir(f.data);
    if (!dir) {
      std::cerr << "tianshu bench fragmentation: no --nodes/--pods given and "
                << dir.error().message << "\n";
      return kExitInvalid;
    }
    if (nodes_file.empty()) nodes_file = *dir + "/" + kOpenbNodes;
    if (pods_file.empty()) pods_file = *dir + "/" + kOpenbPods;
  }
  auto nodes = placement::ReadOpenbNodes(nodes_file);
  if (!nodes) {
    std::cerr << "tianshu bench fragmentation: " << nodes.error().message << "\n";
    return kExitInvalid;
  }
  int total_gpus = 0;
  for (const auto& n : *nodes) total_gpus += n.gpus;
  if (total_gpus == 0) {  // every ratio below is per GPU: nothing to measure (was "nan %")
    std::cerr << "tianshu bench fragmentation: " << nodes_file << ": " << nodes->size()
              << " node(s) and not one GPU among them (column 'gpu'): nothing to fragment\n";
    return kExitInvalid;
  }
  auto pods = placement::ReadOpenbPods(pods_file);
  if (!pods) {
    std::cerr << "tianshu bench fragmentation: " << pods.error().message << "\n";
    return kExitInvalid;
  }
  nlohmann::json runs = nlohmann::json::array();
  double alloc = 0, alloc100 = 0, window = 0, arrived = 0, placed = 0, failed = 0;
  for (uint64_t seed : seeds) {
    auto r = placement::RunFragmentation(
        *nodes, *pods, f.strategy,
        {.inflate = f.inflate,
         .seed = seed,
         .workload = {.with_memory = !f.paper_fgd,
                      .weight_by_gpu_share = f.weight == "share",
                      .paper_typical = f.paper_typical,
                      .popularity = f.popularity},
         .score = f.score == "exact" ? placement::FgdScore::kExact : placement::FgdScore::kInteger,
         .ties = f.ties == "first"    ? placement::FgdTies::kFirst
                 : f.ties == "random" ? placement::FgdTies::kRandom
                                      : placement::FgdTies::kShuffled,
         .paper_order = f.paper_order});
    if (!r) {
      std::cerr << "tianshu bench fragmentation: " << r.error().message << "\n";
      return kExitInvalid;
    }
    runs.push_back({{"seed", seed},
                    {"allocation_ratio", r->allocation_ratio},
                    {"allocation_ratio_at_100", r->allocation_ratio_at_100},
                    {"allocation_ratio_window", r->allocation_ratio_window},
                    {"arrived_ratio", r->arrived_ratio},
                    {"pods_placed", r->pods_placed},
                    {"pods_failed", r->pods_failed}});
    alloc += r->allocation_ratio;
    alloc100 += r->allocation_ratio_at_100;
    window += r->allocation_ratio_window;
    arrived += r->arrived_ratio;
    placed += r->pods_placed;
    failed += r->pods_failed;
    if (!f.output.Json()) {
      std::cout << fmt::format(
          "{:<10} seed {:>4}  allocation {:6.2f}%  at 100%: {:6.2f}%  arrived "
          "{:6.2f}%  placed {:>6}  failed {:>5}\n",
          f.strategy, seed, 100 * r->allocation_ratio, 100 * r->allocation_ratio_at_100,
          100 * r->arrived_ratio, r->pods_placed, r->pods_failed);
    }
  }
  const double k = static_cast<double>(seeds.size());
  if (f.output.Json()) {
    nlohmann::json j = {{"strategy", f.strategy},
                        {"paper_fgd", f.paper_fgd},
                        {"inflate", f.inflate},
                        {"seeds", seeds},
                        {"allocation_ratio", alloc / k},
                        {"allocation_ratio_at_100", alloc100 / k},
                        {"allocation_ratio_window", window / k},
                        {"paper_typical", f.paper_typical},
                        {"paper_order", f.paper_order},
                        {"score", f.score},
                        {"ties", f.ties},
                        {"weight", f.weight},
                        {"arrived_ratio", arrived / k},
                        {"pods_placed", placed / k},
                        {"pods_failed", failed / k},
                        {"runs", runs}};
    std::cout << j.dump(2) << "\n";
  } else if (seeds.size() > 1) {
    std::cout << fmt::format("{:<10} mean of {} seeds: allocation {:6.2f}%  at 100%: {:6.2f}%\n",
                             f.strategy, seeds.size(), 100 * alloc / k, 100 * alloc100 / k);
  }
  return kExitOk;
}

}  // namespace

Runner RegisterBench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure placement quality on real data");
  cmd->require_subcommand(1);
  auto flags = std::make_shared<FragFlags>();
  auto* frag = cmd->add_subcommand(
      "fragmentation",
      "The FGD experiment (Weng et al., ATC'23): openb pods grown to --inflate x GPU capacity, "
      "shuffled, placed once in order; GPU allocation ratio at 100% and at the end");
  frag->add_option("--nodes", flags->nodes,
                   "openb node list (sn,cpu_milli,memory_mib,gpu,model); default: the shipped "
                   "openb GPU nodes");
  frag->add_option("--pods", flags->pods, "openb pod list; default: the shipped default pods");
  frag->add_option("--data", flags->data,
                   "Folder of the shipped data sets (default: $TIANSHU_DATA, else "
                   "share/tianshu/data beside the binary, else the source tree's data/)");
  frag->add_option("--strategy", flags->strategy, "placement strategy")->capture_default_str();
  auto* seed = frag->add_option("--seed", flags->seed, "one seed")->capture_default_str();
  frag->add_option("--seeds", flags->seeds, "seeds, e.g. 42-51 (mean reported)")->excludes(seed);
  frag->add_option("--inflate", flags->inflate, "workload / GPU capacity")->capture_default_str();
  frag->add_flag("--paper-fgd", flags->paper_fgd,
                 "FGD's target workload as in the paper (task counts, no memory check)");
  frag->add_flag("--paper-typical", flags->paper_typical,
                 "FGD's target workload as the paper's simulator builds it (most popular kinds "
                 "covering --popularity of the tasks, CPU-only ones included, by count)");
  frag->add_option("--popularity", flags->popularity, "with --paper-typical")
      ->capture_default_str();
  frag->add_flag("--paper-order", flags->paper_order,
                 "original pods shuffled, copies appended after them (the paper's simulator)");
  frag->add_option("--score", flags->score,
                   "how fgd compares nodes: integer (the published plugin's "
                   "int(100*sigmoid(dF/1000)), near-equal nodes tie) or exact (the smallest dF)")
      ->check(CLI::IsMember({"integer", "exact"}))
      ->capture_default_str();
  frag->add_option("--ties", flags->ties,
                   "with --score integer, which tied node: shuffled (the first in a node order "
                   "shuffled per seed), random, first (lowest id)")
      ->check(CLI::IsMember({"random", "first", "shuffled"}))
      ->capture_default_str();
  frag->add_option("--weight", flags->weight,
                   "fgd's typical tasks weighted by count or by the GPU share they ask for")
      ->check(CLI::IsMember({"count", "share"}))
      ->capture_default_str();
  frag->add_flag("--faithful", flags->faithful,
                 "the paper's simulator: --paper-typical --paper-order, integer score, ties "
                 "shuffled");
  AddOutputFlag(frag, &flags->output);
  return [flags, frag] {
    if (frag->parsed()) return RunFragmentationCommand(*flags);
    return kExitUsage;
  };
}

}  // namespace tianshu::cli
