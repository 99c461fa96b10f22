#include "tianshu/model/engine_config.h"

#include "tianshu/base/strings.h"

namespace tianshu::model {

const std::vector<std::string>& AllreduceAlgoNames() {
  static const std::vector<std::string> kNames = {"auto", "ring", "tree", "hierarchical", "nvls"};
  return kNames;
}

namespace {
bool Contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}
}  // namespace

Status ApplyEnvironment(const std::function<std::optional<std::string>(const char*)>& getenv,
                        EngineConfig* config) {
  EngineConfig c = *config;  // all or nothing
  if (auto v = getenv("NETWORK_BUFFER_SIZE")) {
    auto size = ParseSize(*v);
    if (!size) return Fail("environment NETWORK_BUFFER_SIZE: ", size.error().message);
    if (*size < 4'000'000 || *size > 16 * 1024 * 1024) {
      return Fail("environment NETWORK_BUFFER_SIZE: ", *v, " is outside 4MB..16MiB");
    }
    c.network_buffer_size_bytes = *size;
  }
  if (auto v = getenv("ALLREDUCE_ALGO")) {
    std::string a = ToLower(*v);
    if (!Contains(AllreduceAlgoNames(), a)) {
      return Fail("environment ALLREDUCE_ALGO: '", *v, "' is not one of ",
                  Join(AllreduceAlgoNames(), ", "));
    }
    c.allreduce_algo = a;
  }
  if (auto v = getenv("CHECKPOINT_MODE")) {
    std::string m = ToLower(*v);
    if (m != "async" && m != "sync") {
      return Fail("environment CHECKPOINT_MODE: '", *v, "' is not one of async, sync");
    }
    c.checkpoint_mode = m == "async" ? CheckpointMode::kAsync : CheckpointMode::kSync;
  }
  if (auto v = getenv("SCHEDULER_BACKEND")) {
    auto b = ParseBackend(*v);
    if (!b) {
      return Fail("environment SCHEDULER_BACKEND: '", *v, "' is not one of ",
                  Join(BackendNames(), ", "));
    }
    c.scheduler_backend = *b;
  }
  *config = c;
  return Ok();
}

}  // namespace tianshu::model
