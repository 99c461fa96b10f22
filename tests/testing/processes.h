// Helpers for tests that run tianshu processes and PyTorch workloads for real.
//   pid_t server = SpawnLogged({"/path/tianshu", "serve", ...}, dir + "/server.log");
//   std::vector<double> losses = RankZeroLosses(log_text);
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tianshu::testing {

// Starts `argv` (argv[0] is the program) in its own process group with stdout and stderr
// appended to `log`; returns its pid (the child exits 127 when exec fails).
pid_t SpawnLogged(std::vector<std::string> argv, const std::string& log);

// A TCP port free on 127.0.0.1 right now (0 when none could be had).
int FreeLoopbackPort();

// The losses rank 0 of examples/workloads/train_gpt.py logged ("[rank 0] step N loss X"), in
// order.
std::vector<double> RankZeroLosses(const std::string& log);

}  // namespace tianshu::testing
