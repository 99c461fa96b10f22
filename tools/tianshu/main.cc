// tianshu: one binary, one subcommand per capability. The only place that reads flags and the
// environment.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.h"
#include "tianshu/base/log.h"

namespace tianshu::cli {

void AddOutputFlag(CLI::App* cmd, OutputFlag* flag) {
  cmd->add_option("--output,-o", flag->format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

void AddClientOutputFlag(CLI::App* cmd, OutputFlag* flag) {
  cmd->add_option("--output,-o", flag->format,
                  "Output format: text, wide (more columns), json, yaml")
      ->check(CLI::IsMember({"text", "wide", "json", "yaml"}))
      ->capture_default_str();
}

void AddLogFlags(CLI::App* cmd, LogFlags* flags) {
  cmd->add_option("--log-format", flags->format,
                  "The log on stderr: text (TIME LEVEL COMPONENT: MESSAGE) or json (one object a "
                  "line: time, level, component, message)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--log-level", flags->level,
                  "The least severe lines logged: debug, info, warning, error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str();
}

void ApplyLogFlags(const LogFlags& flags) {
  SetLogFormat(ParseLogFormat(flags.format).value_or(LogFormat::kText));
  SetLogLevel(ParseLogLevel(flags.level).value_or(LogLevel::kInfo));
}

namespace {
std::vector<std::string> process_args;

// `simulate` and `bench` hold hundreds of megabytes of records, most pages touched once. With
// transparent huge pages in madvise mode (Debian's default), glibc backs its heap with huge
// pages only when told at start (the glibc.malloc.hugetlb tunable): on Philly at load 0.9 that
// takes the page faults from 89,596 to 5,243 and a tenth off the wall time. So those commands
// start once more with it set, unless GLIBC_TUNABLES is set already (then it is left alone).
void PreferHugePages(char** argv) {
  if (argv[0] == nullptr || argv[1] == nullptr) return;
  const std::string_view command = argv[1];
  if ((command != "simulate" && command != "bench") || std::getenv("GLIBC_TUNABLES") != nullptr) {
    return;
  }
  if (setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");  // not started again: go on as started
}
}  // namespace

const std::vector<std::string>& ProcessArgs() { return process_args; }

}  // namespace tianshu::cli

int main(int argc, char** argv) {
  using namespace tianshu::cli;
  PreferHugePages(argv);
  process_args.assign(argv, argv + argc);
  // A peer that closes a TLS connection mid-write (an etcd refusing a client certificate, a
  // client going away) must be an error of that call, not the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"Tianshu: topology-aware scheduling of large-model training and inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tianshu 0.1.0");
  std::vector<std::pair<CLI::App*, Runner>> commands;
  auto add = [&](Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    Runner r = reg(app);
    auto subs = app.get_subcommands({});
    if (subs.size() > before) commands.emplace_back(subs.back(), std::move(r));
  };
  add(RegisterValidate);
  add(RegisterTopology);
  add(RegisterPlan);
  add(RegisterBench);
  add(RegisterSimulate);
  add(RegisterAgent);
  add(RegisterServe);
  add(RegisterUp);
  add(RegisterSubmit);
  add(RegisterHold);
  add(RegisterRelease);
  add(RegisterJobs);
  add(RegisterJob);
  add(RegisterCancel);
  add(RegisterLogs);
  add(RegisterHistory);
  add(RegisterNodes);
  add(RegisterNode);
  add(RegisterUsers);
  add(RegisterQueues);
  add(RegisterEvents);
  add(RegisterStatus);
  add(RegisterDoctor);
  add(RegisterStore);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  for (auto& [cmd, run] : commands) {
    if (cmd->parsed()) return run();
  }
  return kExitUsage;
}
