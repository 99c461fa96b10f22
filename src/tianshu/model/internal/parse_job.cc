#include <algorithm>
#include <cctype>

#include "tianshu/base/strings.h"
#include "tianshu/model/internal/parsers.h"

namespace tianshu::model::internal {
namespace {

void ParseModel(YamlReader& r, const YAML::Node& m, ModelSpec* out) {
  const std::string p = "model";
  if (m.IsScalar()) {  // `model: llama2-70b` names a profile
    const ModelSpec* prof = FindModelProfile(m.Scalar());
    if (!prof) {
      std::string near = NearestWord(m.Scalar(), ModelProfiles());
      r.Error(m, p,
              "unknown model profile '" + m.Scalar() + "'" +
                  (near.empty() ? " (known: " + Join(ModelProfiles(), ", ") + ")"
                                : " (did you mean '" + near + "'?)"));
      return;
    }
    *out = *prof;
    return;
  }
  if (!r.ExpectMap(m, p)) return;
  r.CheckKeys(
      m, p,
      {"profile", "family", "parameters", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
       "seq_len", "vocab", "experts", "top_k", "global_batch", "micro_batch", "flops_per_sample"});
  std::string profile;
  if (r.String(m, p, "profile", &profile)) {
    const ModelSpec* prof = FindModelProfile(profile);
    if (!prof) {
      std::string near = NearestWord(profile, ModelProfiles());
      r.Error(r.Get(m, "profile"), "model.profile",
              "unknown model profile '" + profile + "'" +
                  (near.empty() ? " (known: " + Join(ModelProfiles(), ", ") + ")"
                                : " (did you mean '" + near + "'?)"));
    } else {
      *out = *prof;
    }
  }
  r.Choice(m, p, "family", {"gpt", "llama", "bert", "moe", "resnet"}, &out->family);
  r.Count(m, p, "parameters", &out->parameters, 1);
  r.Int(m, p, "layers", &out->layers, 1, 10'000);
  r.Int(m, p, "hidden", &out->hidden, 1, 1'000'000);
  r.Int(m, p, "heads", &out->heads, 1, 100'000);
  r.Int(m, p, "kv_heads", &out->kv_heads, 1, 100'000);
  r.Int(m, p, "ffn_hidden", &out->ffn_hidden, 1, 10'000'000);
  r.Int(m, p, "seq_len", &out->seq_len, 1, 100'000'000);
  r.Int(m, p, "vocab", &out->vocab, 0, 100'000'000);
  r.Int(m, p, "experts", &out->experts, 1, 100'000);
  r.Int(m, p, "top_k", &out->top_k, 1, 100'000);
  r.Int(m, p, "global_batch", &out->global_batch, 1, int64_t{1} << 40);
  r.Int(m, p, "micro_batch", &out->micro_batch, 1, 1'000'000);
  r.Double(m, p, "flops_per_sample", &out->flops_per_sample, 0, 1e21);
  if (out->parameters == 0) r.Error(m, "model.parameters", "is required (or name a profile)");
  if (out->IsTransformer() && out->parameters > 0) {
    if (out->layers == 0) r.Error(m, "model.layers", "is required for a transformer");
    if (out->hidden == 0) r.Error(m, "model.hidden", "is required for a transformer");
    if (out->heads == 0) r.Error(m, "model.heads", "is required for a transformer");
    if (out->hidden > 0 && out->heads > 0 && out->hidden % out->heads != 0) {
      r.Error(r.Get(m, "heads").IsDefined() ? r.Get(m, "heads") : m, "model.heads",
              "hidden (" + std::to_string(out->hidden) + ") is not divisible by heads (" +
                  std::to_string(out->heads) + ")");
    }
  }
  if (out->kv_heads > 0 && out->heads > 0 && out->heads % out->kv_heads != 0) {
    r.Error(r.Get(m, "kv_heads").IsDefined() ? r.Get(m, "kv_heads") : m, "model.kv_heads",
            "heads (" + std::to_string(out->heads) + ") is not a multiple of kv_heads (" +
                std::to_string(out->kv_heads) + ")");
  }
  if (out->top_k > out->experts) {
    r.Error(m, "model.top_k",
            "top_k (" + std::to_string(out->top_k) + ") exceeds experts (" +
                std::to_string(out->experts) + ")");
  }
  if (out->global_batch > 0 && out->global_batch < out->micro_batch) {
    r.Error(m, "model.global_batch", "is smaller than micro_batch");
  }
}

void ParseParallelism(YamlReader& r, const YAML::Node& n, Parallelism* out) {
  const std::string p = "parallelism";
  if (n.IsScalar()) {
    if (ToLower(n.Scalar()) == "auto") {
      out->automatic = true;
      return;
    }
    r.Error(n, p, "expected 'auto' or a mapping with tp, pp, dp, ep, zero");
    return;
  }
  if (!r.ExpectMap(n, p)) return;
  r.CheckKeys(n, p,
              {"tp", "pp", "dp", "ep", "zero", "distributed_optimizer", "sequence_parallel",
               "recompute", "virtual_stages"});
  out->automatic = false;
  r.Int(n, p, "tp", &out->tp, 1, 1024);
  r.Int(n, p, "pp", &out->pp, 1, 4096);
  YAML::Node dp = r.Get(n, "dp");
  if (dp.IsDefined() && dp.IsScalar() && ToLower(dp.Scalar()) == "auto") {
    out->dp = 0;
  } else {
    r.Int(n, p, "dp", &out->dp, 1, 1'000'000);
  }
  r.Int(n, p, "ep", &out->ep, 1, 4096);
  r.Int(n, p, "zero", &out->zero_stage, 0, 3);
  r.Bool(n, p, "distributed_optimizer", &out->distributed_optimizer);
  r.Bool(n, p, "sequence_parallel", &out->sequence_parallel);
  std::string rc;
  if (r.Choice(n, p, "recompute", {"none", "selective", "full"}, &rc)) {
    out->recompute = rc == "none"   ? Recompute::kNone
                     : rc == "full" ? Recompute::kFull
                                    : Recompute::kSelective;
  }
  r.Int(n, p, "virtual_stages", &out->virtual_stages, 1, 128);
}

bool SetByScheduler(const std::string& name) {
  return name.starts_with("TIANSHU_") || name == "RANK" || name == "WORLD_SIZE" ||
         name == "LOCAL_RANK" || name == "NODE_RANK" || name == "MASTER_ADDR" ||
         name == "MASTER_PORT";
}

void ParseRun(YamlReader& r, const YAML::Node& n, RunSpec* out) {
  if (!r.ExpectMap(n, "run")) return;
  r.CheckKeys(n, "run", {"command", "env", "workdir"});
  YAML::Node cmd = r.Get(n, "command");
  if (cmd.IsDefined()) {
    if (cmd.IsScalar()) {
      out->command = {"/bin/sh", "-c", cmd.Scalar()};
    } else if (cmd.IsSequence()) {
      for (size_t i = 0; i < cmd.size(); ++i) {
        if (!cmd[i].IsScalar()) {
          r.Error(cmd[i], YamlReader::Index("run.command", i), "expected a string");
          return;
        }
        out->command.push_back(cmd[i].Scalar());
      }
      if (out->command.empty()) r.Error(cmd, "run.command", "is empty: give the program to run");
    } else {
      r.Error(cmd, "run.command", "expected a list of strings (argv) or a shell command string");
    }
  }
  if (r.StringMap(n, "run", "env", &out->env)) {
    YAML::Node env = r.Get(n, "env");
    for (auto it = env.begin(); it != env.end(); ++it) {
      const std::string name = it->first.Scalar();
      bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
      for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (!ok) {
        r.Error(it->first, "run.env." + name, "not a valid environment variable name");
      } else if (SetByScheduler(name)) {
        r.Error(it->first, "run.env." + name, "is set by the scheduler and cannot be given");
      }
    }
  }
  r.String(n, "run", "workdir", &out->workdir);
}

}  // namespace

JobSpec ParseJob(YamlReader& r, const YAML::Node& root) {
  JobSpec j;
  r.CheckKeys(
      root, "",
      {"kind",          "name",         "model",      "parallelism", "gpus",       "nodes",
       "gpus_per_node", "gpu_milli",    "elastic",    "priority",    "queue",      "backend",
       "node_selector", "accelerators", "checkpoint", "max_retries", "iterations", "duration",
       "inference",     "run",          "groups",     "time_limit",  "topology"});
  std::string kind = "training";
  YAML::Node k = r.Get(root, "kind");
  if (k.IsDefined() && k.IsScalar() && ToLower(k.Scalar()) != "job") {
    r.Choice(root, "", "kind", {"training", "inference", "job"}, &kind);
  }
  j.kind = kind == "inference" ? JobKind::kInference : JobKind::kTraining;
  if (r.Require(root, "", "name")) r.String(root, "", "name", &j.name);

  YAML::Node m = r.Get(root, "model");
  if (m.IsDefined()) {
    ParseModel(r, m, &j.model);
  } else {
    r.Error(root, "model", "is required (a profile name or a mapping)");
  }
  YAML::Node par = r.Get(root, "parallelism");
  if (par.IsDefined()) ParseParallelism(r, par, &j.parallelism);

  bool has_gpus = r.Int(root, "", "gpus", &j.gpus, 1, 1 << 24);
  bool has_nodes = r.Int(root, "", "nodes", &j.nodes, 1, 1 << 20);
  r.Int(root, "", "gpus_per_node", &j.gpus_per_node, 1, 1024);
  r.Int(root, "", "gpu_milli", &j.gpu_milli, 1, 1000);
  if (has_nodes) {
    int per = j.gpus_per_node > 0 ? j.gpus_per_node : 8;
    if (has_gpus && j.gpus != j.nodes * per) {
      r.Error(r.Get(root, "gpus"), "gpus",
              "gpus (" + std::to_string(j.gpus) + ") does not equal nodes x gpus_per_node (" +
                  std::to_string(j.nodes) + " x " + std::to_string(per) + ")");
    }
    if (!has_gpus) j.gpus = j.nodes * per;
    if (j.gpus_per_node == 0) j.gpus_per_node = per;
  }
  if (!has_gpus && !has_nodes && !r.Get(root, "gpus").IsDefined() &&
      !r.Get(root, "nodes").IsDefined()) {
    r.Error(root, "gpus", "is required (or nodes)");
  }
  if (j.gpu_milli < 1000 && j.gpus > 1) {
    r.Error(r.Get(root, "gpu_milli"), "gpu_milli",
            "a fractional GPU share (" + std::to_string(j.gpu_milli) +
                ") is for single-rank jobs; this job asks for " + std::to_string(j.gpus) + " GPUs");
  }

  // Parallel degrees must tile the GPUs exactly.
  const Parallelism& pl = j.parallelism;
  if (!pl.automatic && j.gpus > 0) {
    YAML::Node at = par;
    auto at_key = [&](const char* key) {
      YAML::Node n = r.Get(par, key);
      return n.IsDefined() ? n : at;
    };
    if (j.gpus % pl.tp != 0) {
      r.Error(at_key("tp"), "parallelism.tp",
              "tensor-parallel degree " + std::to_string(pl.tp) + " does not divide the " +
                  std::to_string(j.gpus) + " GPUs");
    } else if (j.gpus % (pl.tp * pl.pp) != 0) {
      r.Error(at_key("pp"), "parallelism.pp",
              "tp x pp = " + std::to_string(pl.tp * pl.pp) + " does not divide the " +
                  std::to_string(j.gpus) + " GPUs");
    } else if (pl.dp > 0 && pl.tp * pl.pp * pl.dp != j.gpus) {
      r.Error(at_key("dp"), "parallelism.dp",
              "tp x pp x dp = " + std::to_string(pl.tp * pl.pp * pl.dp) + " but the job has " +
                  std::to_string(j.gpus) + " GPUs");
    }
    if (j.model.heads > 0 && j.model.heads % pl.tp != 0) {
      r.Error(at_key("tp"), "parallelism.tp",
              "tensor-parallel degree " + std::to_string(pl.tp) + " does not divide the " +
                  std::to_string(j.model.heads) + " attention heads");
    }
    if (j.model.layers > 0 && pl.pp > j.model.layers) {
      r.Error(at_key("pp"), "parallelism.pp",
              "more pipeline stages (" + std::to_string(pl.pp) + ") than layers (" +
                  std::to_string(j.model.layers) + ")");
    }
    if (pl.ep > 1 && j.model.experts % pl.ep != 0) {
      r.Error(at_key("ep"), "parallelism.ep",
              "expert-parallel degree " + std::to_string(pl.ep) + " does not divide the " +
                  std::to_string(j.model.experts) + " experts");
    }
  }

  YAML::Node run = r.Get(root, "run");
  if (run.IsDefined()) ParseRun(r, run, &j.run);

  YAML::Node el = r.Get(root, "elastic");
  if (el.IsDefined() && r.ExpectMap(el, "elastic")) {
    r.CheckKeys(el, "elastic", {"min_nodes", "max_nodes"});
    j.elastic.enabled = true;
    r.Int(el, "elastic", "min_nodes", &j.elastic.min_nodes, 1, 1 << 20);
    r.Int(el, "elastic", "max_nodes", &j.elastic.max_nodes, 1, 1 << 20);
    if (j.elastic.max_nodes > 0 && j.elastic.min_nodes > j.elastic.max_nodes) {
      r.Error(el, "elastic.min_nodes",
              "min_nodes (" + std::to_string(j.elastic.min_nodes) + ") is more than max_nodes (" +
                  std::to_string(j.elastic.max_nodes) + ")");
    }
  }
  r.Int(root, "", "priority", &j.priority, -1'000'000, 1'000'000);
  if (r.String(root, "", "queue", &j.queue)) {
    // A queue name is a label of metrics and accounting: short and plain.
    const bool plain =
        !j.queue.empty() && j.queue.size() <= 64 &&
        std::all_of(j.queue.begin(), j.queue.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        });
    if (!plain) {
      r.Error(r.Get(root, "queue"), "queue", "expected 1-64 of A-Z a-z 0-9 . _ -");
      j.queue = "default";
    }
  }
  std::string backend;
  if (r.Choice(root, "", "backend", BackendNames(), &backend)) j.backend = ParseBackend(backend);
  r.StringMap(root, "", "node_selector", &j.node_selector);
  if (r.StringList(root, "", "accelerators", &j.accelerators)) {
    YAML::Node list = r.Get(root, "accelerators");
    for (size_t i = 0; i < j.accelerators.size(); ++i) {
      const AcceleratorSpec* spec = FindAccelerator(j.accelerators[i]);
      if (!spec) {
        std::string near = NearestWord(j.accelerators[i], AcceleratorModels());
        r.Error(list.IsSequence() ? list[i] : list, YamlReader::Index("accelerators", i),
                "unknown accelerator model '" + j.accelerators[i] + "'" +
                    (near.empty() ? "" : " (did you mean '" + near + "'?)"));
      } else {
        j.accelerators[i] = spec->model;
      }
    }
  }
  YAML::Node ck = r.Get(root, "checkpoint");
  if (ck.IsDefined() && r.ExpectMap(ck, "checkpoint")) {
    r.CheckKeys(ck, "checkpoint", {"interval", "mode"});
    if (r.Seconds(ck, "checkpoint", "interval", &j.checkpoint_interval_s) &&
        j.checkpoint_interval_s <= 0) {
      r.Error(r.Get(ck, "interval"), "checkpoint.interval", "must be at least 1 second");
    }
    std::string mode;
    if (r.Choice(ck, "checkpoint", "mode", {"async", "sync"}, &mode)) {
      j.checkpoint_mode = mode == "sync" ? CheckpointMode::kSync : CheckpointMode::kAsync;
    }
  }
  r.Int(root, "", "max_retries", &j.max_retries, 0, 1000);
  if (r.Seconds(root, "", "time_limit", &j.time_limit_s) && j.time_limit_s <= 0) {
    r.Error(r.Get(root, "time_limit"), "time_limit", "must be at least 1 second");
  }
  r.Int(root, "", "iterations", &j.iterations, 1, int64_t{1} << 50);
  int64_t duration_ns = 0;
  if (r.DurationNs(root, "", "duration", &duration_ns)) {
    j.duration_s = static_cast<double>(duration_ns) / 1e9;
  }

  YAML::Node inf = r.Get(root, "inference");
  if (inf.IsDefined() && r.ExpectMap(inf, "inference")) {
    r.CheckKeys(inf, "inference", {"request_rate", "latency_slo", "batch", "max_seq_len"});
    r.Double(inf, "inference", "request_rate", &j.inference.request_rate, 0, 1e9);
    int64_t slo_ns = 0;
    if (r.DurationNs(inf, "inference", "latency_slo", &slo_ns)) {
      j.inference.latency_slo_ms = static_cast<double>(slo_ns) / 1e6;
    }
    r.Int(inf, "inference", "batch", &j.inference.batch, 1, 1'000'000);
    r.Int(inf, "inference", "max_seq_len", &j.inference.max_seq_len, 1, 100'000'000);
  }
  if (j.kind == JobKind::kInference) {
    if (!inf.IsDefined()) {
      r.Error(root, "inference", "is required for an inference job (request_rate, latency_slo)");
    } else if (inf.IsMap()) {
      if (j.inference.request_rate <= 0) {
        r.Error(inf, "inference.request_rate", "must be more than 0 for an inference job");
      }
      if (j.inference.latency_slo_ms <= 0) {
        r.Error(inf, "inference.latency_slo", "is required for an inference job");
      }
    }
  } else if (inf.IsDefined()) {
    r.Error(inf, "inference", "is only for jobs of kind: inference");
  }

  // topology: {leaves: minimum | N}: a required bound on the leaf switches spanned.
  YAML::Node topo = r.Get(root, "topology");
  if (topo.IsDefined() && r.ExpectMap(topo, "topology")) {
    r.CheckKeys(topo, "topology", {"leaves"});
    const YAML::Node leaves = r.Get(topo, "leaves");
    if (leaves.IsDefined()) {
      const std::string text = leaves.IsScalar() ? leaves.Scalar() : "";
      if (ToLower(text) == "minimum") {
        j.max_leaves = kFewestLeaves;
      } else if (!text.empty() && std::all_of(text.begin(), text.end(),
                                              [](char c) { return c >= '0' && c <= '9'; })) {
        r.Int(topo, "topology", "leaves", &j.max_leaves, 1, 1'000'000);
      } else {
        r.Error(leaves, "topology.leaves",
                "must be `minimum` or a whole number of leaf switches (at least 1)");
      }
    }
  }

  // groups: [{size, within}], innermost first; each size divides the next and the job's ranks,
  // and an outer group's scope is at least as wide as an inner one's.
  YAML::Node groups = r.Get(root, "groups");
  if (groups.IsDefined() && r.ExpectSeq(groups, "groups")) {
    const int total = j.TotalGpus();
    for (size_t i = 0; i < groups.size(); ++i) {
      const YAML::Node g = groups[i];
      const std::string p = YamlReader::Index("groups", i);
      if (!r.ExpectMap(g, p)) continue;
      r.CheckKeys(g, p, {"size", "within"});
      RankGroup rg;
      std::string within = "node";
      if (!r.Require(g, p, "size") || !r.Int(g, p, "size", &rg.size, 1, 1 << 24)) continue;
      if (!r.Require(g, p, "within") ||
          !r.Choice(g, p, "within", {"nvlink", "node", "leaf"}, &within)) {
        continue;
      }
      rg.within = within == "nvlink" ? GroupScope::kNvlink
                  : within == "leaf" ? GroupScope::kLeaf
                                     : GroupScope::kNode;
      if (total > 0 && total % rg.size != 0) {
        r.Error(r.Get(g, "size"), YamlReader::Child(p, "size"),
                std::to_string(rg.size) + " does not divide the job's " + std::to_string(total) +
                    " ranks");
        continue;
      }
      if (!j.groups.empty()) {
        const RankGroup& inner = j.groups.back();
        if (rg.size % inner.size != 0) {
          r.Error(r.Get(g, "size"), YamlReader::Child(p, "size"),
                  std::to_string(rg.size) + " is not a multiple of the previous group's " +
                      std::to_string(inner.size) + " (list groups innermost first)");
          continue;
        }
        if (rg.within < inner.within) {
          r.Error(r.Get(g, "within"), YamlReader::Child(p, "within"),
                  std::string(GroupScopeName(rg.within)) + " is narrower than the previous " +
                      "group's " + std::string(GroupScopeName(inner.within)));
          continue;
        }
      }
      j.groups.push_back(rg);
    }
  }
  return j;
}

}  // namespace tianshu::model::internal
