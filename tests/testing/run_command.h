// Runs a command line in a shell and captures its exit status, stdout and stderr, for tests
// that drive the tianshu binary the way a user does.
//   CommandResult r = RunCommand(std::string(TIANSHU_BINARY) + " validate x.yaml");
//   EXPECT_EQ(r.exit_code, 1);
#pragma once

#include <string>

namespace tianshu::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// `command` is passed to /bin/sh; stdout and stderr are captured separately.
CommandResult RunCommand(const std::string& command);

}  // namespace tianshu::testing
