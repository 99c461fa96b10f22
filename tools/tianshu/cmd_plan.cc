// `tianshu plan JOB --cluster CLUSTER [--nodes LIST] [--bandwidth FILE] [--output json]`:
// size one job on a cluster — memory per rank, parallelism, FLOPs, predicted iteration time
// and its breakdown, MFU, throughput, network and storage demand, the communicator plan and
// its environment.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/comm/bandwidth_matrix.h"
#include "tianshu/estimate/flops.h"
#include "tianshu/estimate/plan.h"
#include "tianshu/model/load.h"

namespace tianshu::cli {
namespace {

using estimate::CollectiveEstimate;
using estimate::JobPlan;
using nlohmann::json;

std::string Pct(double x) { return fmt::format("{:.1f}%", 100.0 * x); }
std::string GBps(double bytes_per_sec) {
  double g = bytes_per_sec / 1e9;
  return g < 10 ? fmt::format("{:.2f} GB/s", g) : fmt::format("{:.0f} GB/s", g);
}

json MemoryJson(const estimate::MemoryBreakdown& m) {
  return {{"weights", m.weights},     {"gradients", m.gradients},
          {"optimizer", m.optimizer}, {"activations", m.activations},
          {"kv_cache", m.kv_cache},   {"overhead", m.overhead},
          {"total", m.Total()}};
}

json CollectiveJson(const CollectiveEstimate& c) {
  return {{"group", comm::GroupKindName(c.group)},
          {"op", comm::CollectiveName(c.op)},
          {"group_size", c.group_size},
          {"bytes", c.bytes},
          {"calls", c.calls},
          {"algorithm", comm::AlgorithmName(c.algorithm)},
          {"protocol", comm::ProtocolName(c.protocol)},
          {"bottleneck", comm::LinkClassName(c.bottleneck)},
          {"bus_gbytes_per_sec", c.bus_bytes_per_sec / 1e9},
          {"seconds", c.seconds},
          {"total_seconds", c.total_seconds},
          {"exposed_seconds", c.exposed_seconds}};
}

std::vector<std::string> NodeNames(const model::Topology& topo, const std::vector<int>& ids) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int n : ids) out.push_back(topo.nodes[n].name);
  return out;
}

std::string NodeSummary(const model::Topology& topo, const std::vector<int>& ids) {
  std::vector<int> leaves;
  for (int n : ids) {
    if (std::find(leaves.begin(), leaves.end(), topo.nodes[n].leaf) == leaves.end()) {
      leaves.push_back(topo.nodes[n].leaf);
    }
  }
  std::string s = std::to_string(ids.size()) + " nodes";
  if (!ids.empty()) {
    s += " (" + topo.nodes[ids.front()].name;
    if (ids.size() > 1) s += " .. " + topo.nodes[ids.back()].name;
    s += ")";
  }
  s += " under " + std::to_string(leaves.size()) + (leaves.size() == 1 ? " leaf" : " leaves");
  return s;
}

json PlanJson(const model::Topology& topo, const JobPlan& p) {
  json j;
  j["job"] = p.job.name;
  j["kind"] = model::JobKindName(p.job.kind);
  j["model"] = p.job.model.profile;
  j["gpus"] = p.gpus.size();
  j["nodes"] = NodeNames(topo, p.nodes);
  j["placement"] = p.placement;
  j["found"] = p.found;
  if (!p.reason.empty()) j["reason"] = p.reason;
  j["rank_order"] = comm::RankOrderName(p.comm.order);
  j["env"] = p.comm.env;
  if (!p.training) {
    const auto& r = p.inference;
    j["parallelism"] = {{"tp", r.tp}, {"pp", r.pp}, {"dp", r.replicas}, {"zero", 0}};
    j["memory_per_rank_bytes"] = r.memory.Total();
    j["memory_per_rank"] = MemoryJson(r.memory);
    j["device_memory_bytes"] = r.device_memory_bytes;
    j["fits"] = r.fits;
    j["decode_step_seconds"] = r.decode_step_seconds;
    j["prefill_seconds"] = r.prefill_seconds;
    j["request_latency_ms"] = r.request_latency_ms;
    j["tokens_per_sec"] = r.tokens_per_sec;
    j["requests_per_sec"] = r.requests_per_sec;
    j["meets_slo"] = r.meets_slo;
    // The training fields, for tools that read every plan the same way.
    j["iteration_seconds"] = r.decode_step_seconds;
    double comm_s = 0;
    json cols = json::array();
    for (const auto& c : r.collectives) {
      cols.push_back(CollectiveJson(c));
      comm_s += c.total_seconds;
    }
    j["collectives"] = cols;
    j["breakdown"] = {{"compute", r.decode_step_seconds - comm_s},
                      {"tp_comm", comm_s},
                      {"pp_comm", 0.0},
                      {"dp_comm", 0.0},
                      {"bubble", 0.0},
                      {"checkpoint", 0.0}};
    j["comm_share"] = r.decode_step_seconds > 0 ? comm_s / r.decode_step_seconds : 0.0;
    j["mfu"] = nullptr;
    j["notes"] = r.notes;
    return j;
  }
  const auto& e = p.estimate;
  const auto& c = e.config;
  j["parallelism"] = {{"tp", c.tp},
                      {"pp", c.pp},
                      {"dp", c.dp},
                      {"ep", c.ep},
                      {"zero", c.zero_stage},
                      {"sequence_parallel", c.sequence_parallel && c.tp > 1},
                      {"recompute", model::RecomputeName(c.recompute)},
                      {"micro_batch", c.micro_batch},
                      {"micro_batches", e.micro_batches},
                      {"virtual_stages", c.virtual_stages},
                      {"automatic", p.automatic},
                      {"configurations_evaluated", p.evaluated}};
  j["memory_per_rank_bytes"] = e.memory.Total();
  j["memory_per_rank"] = MemoryJson(e.memory);
  j["device_memory_bytes"] = e.device_memory_bytes;
  j["fits"] = e.fits;
  j["flops"] = {{"model_per_iteration", e.model_flops},
                {"hardware_per_iteration", e.hardware_flops},
                {"peak_per_gpu", e.peak_flops},
                {"matmul_efficiency", e.matmul_efficiency}};
  j["iteration_seconds"] = e.seconds;
  j["breakdown"] = {{"compute", e.time.compute},      {"tp_comm", e.time.tp_comm},
                    {"pp_comm", e.time.pp_comm},      {"dp_comm", e.time.dp_comm},
                    {"ep_comm", e.time.ep_comm},      {"bubble", e.time.bubble},
                    {"checkpoint", e.time.checkpoint}};
  j["bubble_fraction"] = e.bubble_fraction;
  j["mfu"] = e.mfu;
  j["hfu"] = e.hfu;
  j["comm_share"] = e.comm_share;
  j["throughput"] = {{"samples_per_sec", e.samples_per_sec}, {"tokens_per_sec", e.tokens_per_sec}};
  json cols = json::array();
  for (const auto& col : e.collectives) cols.push_back(CollectiveJson(col));
  j["collectives"] = cols;
  json net = json::array();
  for (const auto& n : e.network) {
    net.push_back({{"group", comm::GroupKindName(n.group)},
                   {"bytes_per_iteration_per_gpu", n.bytes_per_iteration},
                   {"bytes_per_sec_per_gpu_for_target", n.bytes_per_sec_for_target}});
  }
  j["network_demand"] = net;
  const auto& s = e.storage;
  j["storage_demand"] = {{"checkpoint_bytes", s.checkpoint_bytes},
                         {"bytes_per_node", s.bytes_per_node},
                         {"write_seconds", s.write_seconds},
                         {"required_bytes_per_sec_per_node", s.required_bytes_per_sec},
                         {"iops", s.iops},
                         {"interval_seconds", s.interval_s},
                         {"mode", s.async ? "async" : "sync"},
                         {"hidden", s.hidden},
                         {"stall_seconds", s.stall_seconds}};
  j["notes"] = e.notes;
  return j;
}

void PrintMemory(const estimate::MemoryBreakdown& m, int64_t device, bool fits) {
  std::cout << "memory per rank (device " << FormatBytes(static_cast<double>(device)) << "):\n";
  auto row = [](const char* name, int64_t v) {
    if (v > 0)
      std::cout << fmt::format("  {:<12} {:>12}\n", name, FormatBytes(static_cast<double>(v)));
  };
  row("weights", m.weights);
  row("gradients", m.gradients);
  row("optimizer", m.optimizer);
  row("activations", m.activations);
  row("kv cache", m.kv_cache);
  row("overhead", m.overhead);
  std::cout << fmt::format("  {:<12} {:>12}  {}\n", "total",
                           FormatBytes(static_cast<double>(m.Total())),
                           fits ? "fits" : "DOES NOT FIT");
}

void PrintCollectives(const std::vector<CollectiveEstimate>& cols) {
  if (cols.empty()) return;
  std::cout << "collectives (per rank, per iteration):\n";
  std::cout << fmt::format(
      "  {:<4} {:<14} {:>5} {:>11} {:>7} {:<20} {:<11} {:>9} {:>10} {:>10} {:>10}\n", "grp", "op",
      "ranks", "bytes", "calls", "algorithm", "bottleneck", "bus", "each", "total", "exposed");
  for (const auto& c : cols) {
    std::cout << fmt::format(
        "  {:<4} {:<14} {:>5} {:>11} {:>7} {:<20} {:<11} {:>9} {:>10} {:>10} {:>10}\n",
        comm::GroupKindName(c.group), comm::CollectiveName(c.op), c.group_size,
        FormatBytes(static_cast<double>(c.bytes)), c.calls,
        std::string(comm::AlgorithmName(c.algorithm)) + "/" +
            std::string(comm::ProtocolName(c.protocol)),
        comm::LinkClassName(c.bottleneck), GBps(c.bus_bytes_per_sec), FormatSeconds(c.seconds),
        FormatSeconds(c.total_seconds), FormatSeconds(c.exposed_seconds));
  }
}

void PrintEnv(const JobPlan& p) {
  std::cout << "communicator plan: rank order " << comm::RankOrderName(p.comm.order) << "; "
            << p.comm.NumGroups(comm::GroupKind::kTensor) << " tp, "
            << p.comm.NumGroups(comm::GroupKind::kPipeline) << " pp, "
            << p.comm.NumGroups(comm::GroupKind::kData) << " dp groups\n";
  auto show = [&](comm::GroupKind k) {
    if (p.comm.NumGroups(k) == 0) return;
    auto g = p.comm.GroupGpus(k, 0);
    if (g.size() < 2) return;
    std::string s;
    for (size_t i = 0; i < g.size() && i < 8; ++i) {
      if (i) s += ", ";
      s += std::to_string(g[i]);
    }
    if (g.size() > 8) s += ", ... (" + std::to_string(g.size()) + ")";
    std::cout << "  " << comm::GroupKindName(k) << " group 0: GPUs [" << s << "]\n";
  };
  show(comm::GroupKind::kTensor);
  show(comm::GroupKind::kPipeline);
  show(comm::GroupKind::kData);
  std::cout << "environment:\n";
  for (const auto& [k, v] : p.comm.env) std::cout << "  " << k << "=" << v << "\n";
}

void PrintText(const model::Topology& topo, const JobPlan& p) {
  const auto& job = p.job;
  const double params = estimate::ModelParameters(job.model);
  std::cout << fmt::format(
      "job {} ({}, model {}, {} parameters) on {} GPUs of {}\n", job.name,
      model::JobKindName(job.kind), job.model.profile.empty() ? "custom" : job.model.profile,
      params >= 1e12 ? fmt::format("{:.2f}T", params / 1e12) : fmt::format("{:.2f}B", params / 1e9),
      p.gpus.size(), topo.name);
  std::cout << "placement: " << NodeSummary(topo, p.nodes) << "; " << p.placement << "\n";
  if (!p.training) {
    const auto& r = p.inference;
    std::cout << fmt::format("parallelism: tp={} pp={} replicas={}\n", r.tp, r.pp, r.replicas);
    PrintMemory(r.memory, r.device_memory_bytes, r.fits);
    std::cout << fmt::format(
        "decode step {} (batch {}), prefill {}, request latency {:.0f} ms; {:.0f} tokens/s, "
        "{:.1f} requests/s capacity{}\n",
        FormatSeconds(r.decode_step_seconds), std::max(1, job.inference.batch),
        FormatSeconds(r.prefill_seconds), r.request_latency_ms, r.tokens_per_sec,
        r.requests_per_sec, r.meets_slo ? "; meets its objective" : "");
    PrintCollectives(r.collectives);
    for (const auto& n : r.notes) std::cout << "why: " << n << "\n";
    PrintEnv(p);
    return;
  }
  const auto& e = p.estimate;
  std::cout << "parallelism: " << e.config.ToString() << " (" << e.micro_batches
            << " micro-batches)"
            << (p.automatic ? fmt::format("; auto: best of {} configurations", p.evaluated)
                            : std::string("; as the job asks"))
            << "\n";
  if (!p.found && p.automatic && !p.reason.empty()) {
    std::cout << "NOTHING FITS: " << p.reason << "; showing the most frugal layout\n";
  }
  PrintMemory(e.memory, e.device_memory_bytes, e.fits);
  std::cout << fmt::format(
      "flops per iteration: {:.3g} model (72-form), {:.3g} executed with {} recomputation; "
      "matmul efficiency {}\n",
      e.model_flops, e.hardware_flops, model::RecomputeName(e.config.recompute),
      Pct(e.matmul_efficiency));
  std::cout << "iteration: " << FormatSeconds(e.seconds) << "\n";
  auto part = [&](const char* name, double s) {
    std::cout << fmt::format("  {:<22} {:>10} {:>7}\n", name, FormatSeconds(s),
                             Pct(e.seconds > 0 ? s / e.seconds : 0));
  };
  part("compute", e.time.compute);
  part("tp comm (exposed)", e.time.tp_comm);
  part("pp comm (exposed)", e.time.pp_comm);
  part("dp comm (exposed)", e.time.dp_comm);
  if (e.time.ep_comm > 0) part("ep comm (exposed)", e.time.ep_comm);
  part("pipeline bubble", e.time.bubble);
  part("checkpoint stall", e.time.checkpoint);
  std::cout << fmt::format(
      "MFU {}  HFU {}  throughput {:.1f} samples/s, {:.0f} tokens/s  comm share {}\n", Pct(e.mfu),
      Pct(e.hfu), e.samples_per_sec, e.tokens_per_sec, Pct(e.comm_share));
  PrintCollectives(e.collectives);
  if (!e.network.empty()) {
    std::cout << "network demand per GPU:\n";
    for (const auto& n : e.network) {
      std::cout << fmt::format("  {:<4} {:>11}/iteration; {} keeps it under 10% of compute\n",
                               comm::GroupKindName(n.group), FormatBytes(n.bytes_per_iteration),
                               GBps(n.bytes_per_sec_for_target));
    }
  }
  const auto& s = e.storage;
  std::cout << fmt::format(
      "storage: checkpoint {} ({} per node), {:.0f} s to write at the node's NVMe rate "
      "({:.0f} IOPS of 1 MiB); needs {}/s per node at a {} interval; {} checkpoint {}\n",
      FormatBytes(static_cast<double>(s.checkpoint_bytes)),
      FormatBytes(static_cast<double>(s.bytes_per_node)), s.write_seconds, s.iops,
      FormatBytes(s.required_bytes_per_sec), FormatSeconds(static_cast<double>(s.interval_s)),
      s.async ? "async" : "sync",
      s.hidden ? "is hidden behind training"
               : fmt::format("stalls training {} each time", FormatSeconds(s.stall_seconds)));
  for (const auto& n : e.notes) std::cout << "why: " << n << "\n";
  PrintEnv(p);
}

}  // namespace

Runner RegisterPlan(CLI::App& app) {
  struct Args {
    std::string job;
    std::string cluster;
    std::string config;
    std::string nodes;
    std::string bandwidth;
    bool spread_tp = false;
    bool dedicated = false;
    bool tp_across_nodes = false;
    OutputFlag out;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "plan", "Size one job on a cluster: memory, parallelism, time, communicator plan");
  cmd->add_option("job", args->job, "Job file (YAML)")->required();
  cmd->add_option("--cluster,-c", args->cluster,
                  "Cluster: YAML file, lingjun:/openb: CSV, or fat-tree:nodes=N,...")
      ->required();
  cmd->add_option("--config", args->config, "Engine configuration (YAML); env vars override");
  cmd->add_option("--nodes", args->nodes,
                  "Comma-separated node names to place the job on (default: the smallest "
                  "subtree that holds it)");
  cmd->add_option("--bandwidth", args->bandwidth,
                  "Measured bandwidth matrix (CSV: a,b,GB/s per node pair or NODE:GPU pair)");
  cmd->add_flag("--spread-tp", args->spread_tp,
                "What-if: put tensor-parallel peers on different nodes, alternating leaves");
  cmd->add_flag("--tp-across-nodes", args->tp_across_nodes,
                "Let the auto search use tensor parallelism beyond one NVLink domain");
  cmd->add_flag("--dedicated", args->dedicated,
                "Assume the job has the fabric to itself (default: every node is busy)");
  AddOutputFlag(cmd, &args->out);
  return [args] {
    auto topo = model::LoadCluster(args->cluster);
    if (!topo) {
      std::cerr << "tianshu plan: " << topo.error().message << "\n";
      return kExitInvalid;
    }
    auto job = model::LoadJobFile(args->job);
    if (!job) {
      std::cerr << "tianshu plan: " << job.error().message << "\n";
      return kExitInvalid;
    }
    estimate::PlanOptions options;
    if (!args->config.empty()) {
      auto c = model::LoadEngineConfigFile(args->config);
      if (!c) {
        std::cerr << "tianshu plan: " << c.error().message << "\n";
        return kExitInvalid;
      }
      options.config = *c;
    }
    auto env = model::ApplyEnvironment(
        [](const char* name) -> std::optional<std::string> {
          const char* v = std::getenv(name);
          if (!v) return std::nullopt;
          return std::string(v);
        },
        &options.config);
    if (!env) {
      std::cerr << "tianshu plan: " << env.error().message << "\n";
      return kExitInvalid;
    }
    std::optional<comm::BandwidthMatrix> matrix;
    if (!args->bandwidth.empty()) {
      auto m = comm::LoadBandwidthMatrix(args->bandwidth, *topo);
      if (!m) {
        std::cerr << "tianshu plan: " << m.error().message << "\n";
        return kExitInvalid;
      }
      matrix = std::move(*m);
      options.measured = &*matrix;
    }
    if (!args->nodes.empty()) {
      for (const auto& n : SplitString(args->nodes, ',')) {
        std::string name(Trim(n));
        if (!name.empty()) options.nodes.push_back(name);
      }
    }
    options.spread_tp = args->spread_tp;
    options.tp_within_nvlink = !args->tp_across_nodes;
    options.contended = !args->dedicated;
    auto plan = estimate::PlanJob(*topo, *job, options);
    if (!plan) {
      std::cerr << "tianshu plan: " << plan.error().message << "\n";
      return kExitInvalid;
    }
    if (args->out.Json()) {
      std::cout << PlanJson(*topo, *plan).dump(2) << "\n";
    } else {
      PrintText(*topo, *plan);
    }
    // "Does not fit" is an outcome the plan reports (fits: false), not a failure.
    return kExitOk;
  };
}

}  // namespace tianshu::cli
