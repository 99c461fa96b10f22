// `tianshu plan`: placeholder until estimate/ and comm/ land (issue 3).
#include "commands.h"

namespace tianshu::cli {
Runner RegisterPlan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Size one job on a cluster: memory, parallelism, time");
  cmd->allow_extras();
  return [] {
    std::cerr << "tianshu plan: not built yet (issue 3)\n";
    return kExitFailure;
  };
}
}  // namespace tianshu::cli
