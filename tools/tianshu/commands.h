// The subcommands of the `tianshu` binary. Each lives in its own cmd_*.cc and registers itself
// on the root CLI11 app, returning the function that runs it once its flags are parsed.
//   Runner r = RegisterValidate(app);   // `tianshu validate FILE...`
//   if (sub->parsed()) return r();
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tianshu/base/status.h"

namespace tianshu::cli {

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;  // bad input: the messages say what
inline constexpr int kExitUsage = 2;    // bad flags (CLI11's own)
inline constexpr int kExitFailure = 3;  // something broke (I/O, server unreachable)

using Runner = std::function<int()>;

// `--output text|json`, shared by every command that prints figures; the commands that talk
// to a server also take wide (more columns) and yaml (kubectl's -o).
struct OutputFlag {
  std::string format = "text";
  bool Json() const { return format == "json"; }
  bool Yaml() const { return format == "yaml"; }
  bool Wide() const { return format == "wide"; }
  bool Structured() const { return Json() || Yaml(); }
};
void AddOutputFlag(CLI::App* cmd, OutputFlag* flag);
void AddClientOutputFlag(CLI::App* cmd, OutputFlag* flag);

// `--log-format text|json` and `--log-level`, of the long-running commands (serve, up, agent);
// ApplyLogFlags sets the process's log (base/log.h) from them.
struct LogFlags {
  std::string format = "text";
  std::string level = "info";
};
void AddLogFlags(CLI::App* cmd, LogFlags* flags);
void ApplyLogFlags(const LogFlags& flags);

// The command line this process was started with (main.cc), for a replica that starts itself
// again (tianshu serve).
const std::vector<std::string>& ProcessArgs();

Runner RegisterValidate(CLI::App& app);
Runner RegisterTopology(CLI::App& app);
Runner RegisterPlan(CLI::App& app);
Runner RegisterBench(CLI::App& app);
Runner RegisterSimulate(CLI::App& app);  // cmd_simulate.cc
// What is wrong with a `--config` name as `tianshu simulate` reads it (a preset, any case, or an
// engine config file), or "" when nothing is (cmd_simulate.cc).
std::string SimulationConfigProblem(const std::string& name);
Runner RegisterAgent(CLI::App& app);
Runner RegisterServe(CLI::App& app);  // cmd_serve.cc
Runner RegisterUp(CLI::App& app);
Runner RegisterSubmit(CLI::App& app);  // cmd_submit.cc
Runner RegisterHold(CLI::App& app);
Runner RegisterRelease(CLI::App& app);
Runner RegisterJobs(CLI::App& app);  // cmd_jobs.cc
Runner RegisterJob(CLI::App& app);
Runner RegisterLogs(CLI::App& app);
Runner RegisterHistory(CLI::App& app);
Runner RegisterCancel(CLI::App& app);  // cmd_client.cc
Runner RegisterNodes(CLI::App& app);
Runner RegisterNode(CLI::App& app);
Runner RegisterUsers(CLI::App& app);
Runner RegisterQueues(CLI::App& app);
Runner RegisterEvents(CLI::App& app);
Runner RegisterStatus(CLI::App& app);
Runner RegisterDoctor(CLI::App& app);  // cmd_doctor.cc
Runner RegisterStore(CLI::App& app);   // cmd_store.cc

}  // namespace tianshu::cli
