// tianshu: one binary, one subcommand per capability. The only place that reads flags and the
// environment.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
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

// Whether /proc/self/exe is the file this code was loaded from (the inode of the mapping that
// holds this function), so that starting it again starts this program: not so where the
// dynamic loader was named as the program (`ld.so ./tianshu ...`).
bool ExeIsThisProgram() {
  struct stat exe {};
  if (stat("/proc/self/exe", &exe) != 0) return false;
  std::ifstream maps("/proc/self/maps");
  const auto here = reinterpret_cast<uintptr_t>(&ExeIsThisProgram);
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode path"
    uintptr_t from = 0, to = 0;
    unsigned long long inode = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %*s %*s %*s %llu", &from, &to, &inode) != 3) continue;
    if (here >= from && here < to) return inode == static_cast<unsigned long long>(exe.st_ino);
  }
  return false;
}

// `simulate` and `bench` hold hundreds of megabytes of records, most pages touched once. With
// transparent huge pages in madvise mode (Debian's default), glibc backs its heap with huge
// pages only when told at start (the glibc.malloc.hugetlb tunable): on Philly at load 0.9 that
// takes the page faults from 89,596 to 5,243 and a tenth off the wall time. So those commands
// start once more with it set, except where GLIBC_TUNABLES is set already (left alone), where a
// library is preloaded (a tool such as valgrind watches this process, not its next image), where
// TIANSHU_HUGE_PAGES is set (to anything), or where /proc/self/exe is not this program.
void PreferHugePages(char** argv) {
  if (argv[0] == nullptr || argv[1] == nullptr) return;
  const std::string_view command = argv[1];
  if (command != "simulate" && command != "bench") return;
  for (const char* unless : {"GLIBC_TUNABLES", "LD_PRELOAD", "TIANSHU_HUGE_PAGES"}) {
    if (std::getenv(unless) != nullptr) return;
  }
  if (!ExeIsThisProgram()) return;
  // (TIANSHU_HUGE_PAGES marks the second start, whatever becomes of GLIBC_TUNABLES.)
  if (setenv("TIANSHU_HUGE_PAGES", "1", 1) != 0 ||
      setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1) != 0) {
    return;
  }
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
