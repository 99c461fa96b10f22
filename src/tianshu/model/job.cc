#include "tianshu/model/job.h"

#include "tianshu/base/strings.h"

namespace tianshu::model {

std::string LeafBoundName(int max_leaves) {
  if (max_leaves == kFewestLeaves) return "minimum";
  return max_leaves > 0 ? std::to_string(max_leaves) : "";
}

std::string_view GroupScopeName(GroupScope s) {
  switch (s) {
    case GroupScope::kNvlink:
      return "nvlink";
    case GroupScope::kNode:
      return "node";
    case GroupScope::kLeaf:
      return "leaf";
  }
  return "node";
}

std::string_view JobKindName(JobKind k) {
  return k == JobKind::kTraining ? "training" : "inference";
}
bool IsValidJobName(std::string_view name) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || name.size() > 128 || !alnum(name.front()) || !alnum(name.back())) {
    return false;
  }
  for (char c : name) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::string_view RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "none";
}
std::string_view CheckpointModeName(CheckpointMode m) {
  return m == CheckpointMode::kAsync ? "async" : "sync";
}

namespace {

ModelSpec Transformer(std::string profile, std::string family, int64_t params, int layers,
                      int hidden, int heads, int seq, int vocab, int64_t global_batch) {
  ModelSpec m;
  m.profile = std::move(profile);
  m.family = std::move(family);
  m.parameters = params;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.seq_len = seq;
  m.vocab = vocab;
  m.global_batch = global_batch;
  return m;
}

// Shapes from the papers that introduced them: GPT-3 (Brown et al. 2020, Table 2.1), LLaMA-2
// (Touvron et al. 2023), Megatron's 1T/530B configurations (Narayanan et al. 2021, Table 1),
// BERT-large (Devlin et al. 2019), Mixtral-8x7B (Jiang et al. 2024), ResNet-50 (He et al. 2016).
const std::vector<ModelSpec>& Catalogue() {
  static const std::vector<ModelSpec> kProfiles = [] {
    std::vector<ModelSpec> v;
    v.push_back(Transformer("gpt3-175b", "gpt", 175'000'000'000, 96, 12288, 96, 2048, 51200, 1536));
    v.push_back(Transformer("gpt3-13b", "gpt", 13'000'000'000, 40, 5140, 40, 2048, 51200, 1024));
    v.push_back(Transformer("llama2-7b", "llama", 6'740'000'000, 32, 4096, 32, 4096, 32000, 1024));
    v.push_back(
        Transformer("llama2-13b", "llama", 13'000'000'000, 40, 5120, 40, 4096, 32000, 1024));
    ModelSpec llama70 =
        Transformer("llama2-70b", "llama", 68'980'000'000, 80, 8192, 64, 4096, 32000, 1024);
    llama70.kv_heads = 8;  // grouped-query attention (Touvron et al. 2023, §2.2)
    v.push_back(llama70);
    v.push_back(
        Transformer("gpt-530b", "gpt", 530'000'000'000, 105, 20480, 128, 2048, 51200, 2520));
    v.push_back(
        Transformer("gpt-1t", "gpt", 1'008'000'000'000, 128, 25600, 160, 2048, 51200, 3072));
    v.push_back(
        Transformer("dense-1.2t", "gpt", 1'200'000'000'000, 128, 28000, 160, 2048, 51200, 3072));
    v.push_back(
        Transformer("dense-780b", "gpt", 780'000'000'000, 120, 23040, 144, 2048, 51200, 2048));
    v.push_back(
        Transformer("dense-3t", "gpt", 3'000'000'000'000, 160, 39424, 256, 2048, 51200, 4096));
    ModelSpec moe =
        Transformer("mixtral-8x7b", "moe", 46'700'000'000, 32, 4096, 32, 4096, 32000, 1024);
    moe.experts = 8;
    moe.top_k = 2;
    moe.kv_heads = 8;
    moe.ffn_hidden = 14336;
    v.push_back(moe);
    v.push_back(Transformer("bert-large", "bert", 340'000'000, 24, 1024, 16, 512, 30522, 256));
    ModelSpec resnet;
    resnet.profile = "resnet50";
    resnet.family = "resnet";
    resnet.parameters = 25'600'000;
    resnet.seq_len = 1;
    resnet.vocab = 0;
    resnet.global_batch = 256;
    resnet.micro_batch = 32;
    resnet.flops_per_sample = 4.1e9;  // forward, 224x224 (He et al. 2016, Table 1)
    v.push_back(resnet);
    return v;
  }();
  return kProfiles;
}

}  // namespace

const ModelSpec* FindModelProfile(std::string_view name) {
  std::string want = ToLower(name);
  for (const auto& m : Catalogue()) {
    if (m.profile == want) return &m;
  }
  return nullptr;
}

std::vector<std::string> ModelProfiles() {
  std::vector<std::string> out;
  for (const auto& m : Catalogue()) out.push_back(m.profile);
  return out;
}

}  // namespace tianshu::model
