#include "commands.h"

namespace tianshu::cli {
Runner RegisterTopology(CLI::App& app) {
  auto* cmd = app.add_subcommand("topology", "(being built)");
  cmd->allow_extras();
  return [] { return kExitFailure; };
}
}  // namespace tianshu::cli
