// Processes of ranks: spawn into a cgroup with an environment and a log file, signal the whole
// process group, and learn how each ended — also after an agent restart, when the rank is no
// longer the agent's child. The real runner forks a small shim per rank (a copy of the agent
// that ignores the stop signals, joins the job's cgroup, starts the rank in its own session,
// kills it when the agent's lease runs out, and writes "exited N", "signaled N" or
// "signaled 9 fenced" to an exit file when it ends); the fake one is a table that tests drive.
//   PosixProcessRunner runner;
//   auto pid = runner.Spawn({.argv = {"/bin/sleep", "1"}, .log_path = "/tmp/r0.log",
//                            .exit_path = "/tmp/r0.exit"});
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tianshu/base/status.h"

namespace tianshu::agent {

struct SpawnSpec {
  std::vector<std::string> argv;                // argv[0] is looked up in PATH when it has no '/'
  std::map<std::string, std::string> env;       // the complete environment
  std::string cwd;                              // "" = inherit
  std::string log_path;                         // stdout and stderr, appended
  std::string exit_path;                        // where the shim writes how the rank ended
  std::vector<std::string> cgroup_procs_files;  // joined (write "0") before exec
  // The Unix account the rank runs as ("" = the agent's own): its uid, primary gid and
  // supplementary groups (initgroups), HOME/USER/LOGNAME set, the working directory entered
  // as that user. Needs an agent running as root; an account this node lacks fails the spawn.
  std::string run_as;
  std::vector<std::string> owned_dirs;  // given to run_as (chown) before the rank starts
  // Fencing: the shim reads this file (the agent's lease: a CLOCK_BOOTTIME deadline in ns,
  // renewed by every heartbeat the server answered) every 200 ms (between looks it waits on
  // the rank's SIGCHLD, so an ending rank is seen at once) and, once it has passed,
  // kills the rank's whole process group, writing "signaled 9 fenced". "none": no lease; a
  // missing file or one that holds neither counts as run out (LeaseRecord: its format).
  std::string lease_path;
  // The lease's deadline as the agent knows it at the spawn (0: none): what the shim goes by
  // until it has read the file whole (a read torn by a renewal at its first look).
  int64_t lease_deadline_ns = 0;
  // The rank runs at the lowest priority (nice 19): a bandwidth probe's, which runs on idle
  // nodes and should not slow the work that arrives while it finishes. Not SCHED_IDLE: a task
  // that gets no CPU at all while it holds a kernel lock stalls the work that needs the lock.
  bool low_priority = false;
};

struct ProcessExit {
  int exit_code = 0;     // valid when signal == 0
  int signal = 0;        // the signal that ended it, 0 when it exited
  bool unknown = false;  // neither the kernel nor the exit file could tell
  bool fenced = false;   // the shim killed it: the agent's lease ran out
};

// The signal a rank's end is reported with: an end nobody saw (no exit file, its shim killed
// with it) counts as SIGKILL, never as an exit 0 that the server would take for success.
inline int ReportedSignal(const ProcessExit& e) { return e.unknown ? SIGKILL : e.signal; }

// CLOCK_BOOTTIME in ns: the clock of leases (it keeps counting through a suspend).
int64_t BootTimeNs();

// The node lease file's record, "DEADLINE BOOT_ID DEADLINE\n" with the deadline in 19
// zero-padded digits: the agent rewrites it in place at every renewal (no new inode a second;
// on a file system without a journal each deleted one slowed every later create), so a shim
// may read while it is written; a read whose two numbers differ is torn and read again.
// Shims of an older agent read the first number alone, as before.
std::string LeaseRecord(int64_t deadline_ns, const std::string& boot_id);
// What a lease record says: "none" (no lease in force), a deadline, or nothing to go by
// (torn, or not a record). Async-signal-safe: the shim calls it between fork and exec.
enum class LeaseRead { kNone, kDeadline, kTorn, kInvalid };
LeaseRead ParseLeaseRecord(const char* text, size_t n, int64_t* deadline_ns);
// The shim's look at the lease file: whether the lease has run out. Async-signal-safe. Fails
// closed: a missing file, a link, or one that holds neither a deadline nor "none" counts as run
// out, so removing it never keeps a rank alive past a partition; only a short-lived failure to
// open it (no descriptor or memory free, a signal) waits for the next look. A torn read is read
// again 2 ms later, five times at most; still torn (the agent, alive, is rewriting it), the
// last deadline read whole (`last_whole`, which a whole read updates; 0: none yet) decides.
bool LeaseExpired(const char* path, int64_t* last_whole);

// Single-threaded use. Signal and Poll on an unknown pid are errors/nullopt, never crashes.
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  // Starts the process and returns the pid of its process group leader (the shim).
  [[nodiscard]] virtual Result<int64_t> Spawn(const SpawnSpec& spec) = 0;
  // Sends `sig` to every process of the group. ESRCH (already gone) is success.
  [[nodiscard]] virtual Status Signal(int64_t pid, int sig) = 0;
  // Non-blocking: how it ended, or nullopt while it runs.
  virtual std::optional<ProcessExit> Poll(int64_t pid) = 0;
  // Takes over a process started by an earlier agent (from the journal): `start_time` must
  // match, so a reused pid is never mistaken for the rank. False when it is gone or not it.
  virtual bool Adopt(int64_t pid, int64_t start_time, const std::string& exit_path) = 0;
  // The kernel's start time of a process (clock ticks since boot), 0 when unknown.
  virtual int64_t StartTime(int64_t pid) = 0;
};

class PosixProcessRunner final : public ProcessRunner {
 public:
  Result<int64_t> Spawn(const SpawnSpec& spec) override;
  Status Signal(int64_t pid, int sig) override;
  std::optional<ProcessExit> Poll(int64_t pid) override;
  bool Adopt(int64_t pid, int64_t start_time, const std::string& exit_path) override;
  int64_t StartTime(int64_t pid) override;

 private:
  struct Tracked {
    std::string exit_path;
    bool child = true;
    int64_t start_time = 0;  // adopted processes: must still match, else the pid was reused
  };
  std::optional<ProcessExit> ReadExitFile(const std::string& path);
  std::map<int64_t, Tracked> tracked_;
};

// Parses the shim's exit file ("exited 0", "signaled 9").
std::optional<ProcessExit> ParseExitFile(const std::string& text);

class FakeProcessRunner final : public ProcessRunner {
 public:
  struct Proc {
    SpawnSpec spec;
    std::vector<int> signals;
    std::optional<ProcessExit> exit;
  };
  Result<int64_t> Spawn(const SpawnSpec& spec) override;
  Status Signal(int64_t pid, int sig) override;
  std::optional<ProcessExit> Poll(int64_t pid) override;
  bool Adopt(int64_t pid, int64_t start_time, const std::string& exit_path) override;
  int64_t StartTime(int64_t pid) override { return procs_.count(pid) ? 1000 + pid : 0; }

  // Test controls.
  void Exit(int64_t pid, ProcessExit e) { procs_[pid].exit = e; }
  // SIGTERM/SIGKILL end the process with that signal when true (the default).
  bool die_on_term = true;
  bool fail_spawn = false;
  std::function<void()> before_action;  // called first in every Spawn and Signal
  std::map<int64_t, Proc> procs_;
  int64_t next_pid_ = 100;
};

}  // namespace tianshu::agent
