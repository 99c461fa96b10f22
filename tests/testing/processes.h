// Helpers for tests that run tianshu processes and PyTorch workloads for real.
//   pid_t server = SpawnLogged({"/path/tianshu", "serve", ...}, dir + "/server.log");
//   std::vector<double> losses = RankZeroLosses(log_text);
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace tianshu::testing {

// Starts `argv` (argv[0] is the program) in its own process group with stdout and stderr
// appended to `log`; returns its pid (the child exits 127 when exec fails).
pid_t SpawnLogged(std::vector<std::string> argv, const std::string& log);

// SIGTERMs a process started by SpawnLogged and waits for it; sets `pid` to -1 (nothing when it
// is not positive).
void Terminate(pid_t& pid);

// The whole content of a file ("" when it cannot be read).
std::string Slurp(const std::string& path);

// Polls `cond` every 100 ms until it holds or `seconds` pass; its last answer.
bool WaitForSeconds(const std::function<bool()>& cond, int seconds);

// A TCP port free on 127.0.0.1 right now (0 when none could be had).
int FreeLoopbackPort();

// The losses rank 0 of examples/workloads/train_gpt.py logged ("[rank 0] step N loss X"), in
// order.
std::vector<double> RankZeroLosses(const std::string& log);

}  // namespace tianshu::testing
