#include "commands.h"

namespace tianshu::cli {
Runner RegisterValidate(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "(being built)");
  cmd->allow_extras();
  return [] { return kExitFailure; };
}
}  // namespace tianshu::cli
