// `tianshu bench`: placeholder until placement/ lands (issue 4).
#include "commands.h"

namespace tianshu::cli {
Runner RegisterBench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure placement quality on real data");
  cmd->allow_extras();
  return [] {
    std::cerr << "tianshu bench: not built yet (issue 4)\n";
    return kExitFailure;
  };
}
}  // namespace tianshu::cli
