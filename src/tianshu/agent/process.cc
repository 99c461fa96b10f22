#include "tianshu/agent/process.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

// Async-signal-safe helpers for the code between fork and exec.
void SafeWrite(int fd, const char* s) { (void)!::write(fd, s, std::strlen(s)); }

void SafeItoa(int v, char* buf) {
  char tmp[16];
  int n = 0;
  bool neg = v < 0;
  unsigned u = neg ? static_cast<unsigned>(-v) : static_cast<unsigned>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u && n < 15);
  int i = 0;
  if (neg) buf[i++] = '-';
  while (n) buf[i++] = tmp[--n];
  buf[i] = 0;
}

[[noreturn]] void ShimFail(const char* what) {
  SafeWrite(2, "tianshu-shim: ");
  SafeWrite(2, what);
  SafeWrite(2, ": ");
  SafeWrite(2, std::strerror(errno));  // strerror is not listed as safe but only reads a table
  SafeWrite(2, "\n");
  ::_exit(127);
}

// The shim's record of how the rank ended ("exited 3\n", "signaled 9 fenced\n"): written,
// synced, closed; async-signal-safe.
void WriteExitFile(const std::string& path, const char* line) {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  SafeWrite(fd, line);
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string LeaseRecord(int64_t deadline_ns, const std::string& boot_id) {
  char number[24];
  std::snprintf(number, sizeof number, "%019lld", static_cast<long long>(deadline_ns));
  return std::string(number) + " " + boot_id + " " + number + "\n";
}

LeaseRead ParseLeaseRecord(const char* text, size_t n, int64_t* deadline_ns) {
  if (n >= 4 && std::memcmp(text, "none", 4) == 0) return LeaseRead::kNone;
  int64_t first = 0;
  size_t i = 0;
  for (; i < n && i < 19 && text[i] >= '0' && text[i] <= '9'; ++i)
    first = first * 10 + (text[i] - '0');
  if (i == 0) return LeaseRead::kInvalid;
  // The fields after the number: a record of this agent repeats it last, one of an older
  // agent ("DEADLINE BOOT_ID") does not.
  size_t end = n;
  while (end > i && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  int spaces = 0;
  size_t last = i;
  for (size_t k = i; k < end; ++k) {
    if (text[k] == ' ') {
      ++spaces;
      last = k + 1;
    }
  }
  if (spaces >= 2) {
    int64_t second = 0;
    size_t digits = 0;
    for (size_t k = last; k < end; ++k, ++digits) {
      if (text[k] < '0' || text[k] > '9' || digits >= 19) return LeaseRead::kInvalid;
      second = second * 10 + (text[k] - '0');
    }
    if (digits == 0) return LeaseRead::kInvalid;
    if (second != first) return LeaseRead::kTorn;
  }
  *deadline_ns = first;
  return LeaseRead::kDeadline;
}

bool LeaseExpired(const char* path, int64_t* last_whole) {
  for (int look = 0; look < 5; ++look) {
    if (look > 0) {
      timespec pause{0, 2'000'000};
      (void)::nanosleep(&pause, nullptr);  // async-signal-safe
    }
    int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno != EINTR && errno != EMFILE && errno != ENFILE && errno != ENOMEM;
    char buf[128];
    ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    int64_t deadline = 0;
    switch (ParseLeaseRecord(buf, n > 0 ? static_cast<size_t>(n) : 0, &deadline)) {
      case LeaseRead::kNone:
        *last_whole = 0;  // a lease given later starts afresh
        return false;
      case LeaseRead::kDeadline:
        *last_whole = deadline;
        return BootTimeNs() > deadline;  // clock_gettime is async-signal-safe
      case LeaseRead::kTorn:
        continue;
      case LeaseRead::kInvalid:
        return true;
    }
  }
  // Still torn: the agent is rewriting it (a renewal, so it lives); what it said last stands.
  return *last_whole <= 0 || BootTimeNs() > *last_whole;
}

std::optional<ProcessExit> ParseExitFile(const std::string& text) {
  auto f = SplitString(std::string(Trim(text)), ' ');
  int64_t v = 0;
  if (f.size() < 2 || f.size() > 3 || !ParseInt64(f[1], &v)) return std::nullopt;
  if (f.size() == 3 && (f[0] != "signaled" || f[2] != "fenced")) return std::nullopt;
  if (f[0] == "exited") return ProcessExit{static_cast<int>(v), 0, false};
  if (f[0] == "signaled") return ProcessExit{0, static_cast<int>(v), false, f.size() == 3};
  return std::nullopt;
}

int64_t BootTimeNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

namespace {

struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string home, name;
};

// The account `user` as this node knows it (passwd and group databases, NSS included).
Result<Account> LookUp(const std::string& user) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return Fail("no Unix user '", user, "' on this node (the job's owner runs its ranks as it)");
  }
  Account a{pw.pw_uid, pw.pw_gid, {}, pw.pw_dir ? pw.pw_dir : "/", user};
  int n = 64;
  a.groups.resize(static_cast<size_t>(n));
  while (::getgrouplist(user.c_str(), a.gid, a.groups.data(), &n) < 0) {
    a.groups.resize(static_cast<size_t>(n) * 2);
    n = static_cast<int>(a.groups.size());
  }
  a.groups.resize(static_cast<size_t>(n));
  return a;
}

}  // namespace

Result<int64_t> PosixProcessRunner::Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return Fail("spawn: empty command");
  std::optional<Account> account;
  if (!spec.run_as.empty()) {
    auto a = LookUp(spec.run_as);
    if (!a) return std::unexpected(a.error());
    if (::geteuid() != 0 && a->uid != ::geteuid()) {
      return Fail("the agent runs as uid ", std::to_string(::geteuid()),
                  " and cannot start ranks as ", spec.run_as,
                  " (run the agent as root to run each job as its owner)");
    }
    if (a->uid < 1000) {  // root and system accounts: never a job owner's ranks
      return Fail("refusing to run a user's ranks as ", spec.run_as, " (uid ",
                  std::to_string(a->uid),
                  "): a system account; map the user to a login "
                  "account (tianshu users add NAME --unix-user ACCOUNT)");
    }
    for (const auto& d : spec.owned_dirs) {
      // Not through a symlink someone planted where the directory should be.
      int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 || ::fchown(fd, a->uid, a->gid) != 0) {
        std::string e = std::strerror(errno);
        if (fd >= 0) ::close(fd);
        return Fail("chown ", d, " to ", spec.run_as, ": ", e);
      }
      ::close(fd);
    }
    account = std::move(*a);
  }
  const bool as_root = ::geteuid() == 0;  // else run_as is the agent's own account
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::map<std::string, std::string> env = spec.env;
  if (account) {
    env["HOME"] = account->home;
    env["USER"] = account->name;
    env["LOGNAME"] = account->name;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string path_env = "/usr/local/bin:/usr/bin:/bin";
  if (auto it = spec.env.find("PATH"); it != spec.env.end()) path_env = it->second;
  std::vector<std::string> candidates;
  if (args[0].find('/') != std::string::npos) {
    candidates.push_back(args[0]);
  } else {
    for (const auto& dir : SplitString(path_env, ':')) {
      if (!dir.empty()) candidates.push_back(dir + "/" + args[0]);
    }
  }
  // The exit file is truncated now, so a stale one from an earlier attempt never counts.
  if (!spec.exit_path.empty()) ::unlink(spec.exit_path.c_str());

  const char* lease = spec.lease_path.empty() ? nullptr : spec.lease_path.c_str();
  // cgroup v2's cgroup.kill of the job's cgroup, where there is one: a fence reaches processes
  // that left the rank's session too (torchrun's workers, a setsid).
  std::string cgroup_kill;
  for (const auto& f : spec.cgroup_procs_files) {
    const std::string k = f.substr(0, f.rfind('/') + 1) + "cgroup.kill";
    if (::access(k.c_str(), W_OK) == 0) {
      cgroup_kill = k;
      break;
    }
  }
  pid_t pid = ::fork();
  if (pid < 0) return Fail("fork: ", std::strerror(errno));
  if (pid == 0) {
    // Shim: own session (so the group can be signalled), cgroup, log, then fork the rank.
    ::setsid();
    for (const auto& f : spec.cgroup_procs_files) {
      int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) ShimFail(f.c_str());
      ::close(fd);
    }
    if (!spec.log_path.empty()) {
      int fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd < 0) ShimFail(spec.log_path.c_str());
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) ::dup2(devnull, 0);
    // The working directory is entered by the rank, as its user (below): the kernel's
    // permission checks then confine it.
    // The shim holds SIGCHLD only (its wait below takes it, so the rank's end is seen at
    // once), not what the agent may have blocked; it ignores the stop signals so that it
    // outlives the rank and records how it ended.
    sigset_t none, chld;
    sigemptyset(&none);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_SETMASK, &chld, nullptr);
    const int kIgnored[] = {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (int s : kIgnored) ::signal(s, SIG_IGN);
    ::signal(SIGCHLD, SIG_DFL);
    pid_t rank = ::fork();
    if (rank < 0) ShimFail("fork");
    if (rank == 0) {
      // Both survive exec: the rank starts with no signal blocked and none ignored (the shim's
      // stop signals, and SIGPIPE, which every tianshu command ignores: a rank's `cmd | head`
      // would see EPIPE instead of ending quietly).
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s = 1; s < NSIG; ++s) {
        if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);  // refused for libc's own
      }
      if (account && as_root) {  // groups, then gid, then uid: each later step drops the right
        if (::setgroups(account->groups.size(), account->groups.data()) != 0) ShimFail("setgroups");
        if (::setgid(account->gid) != 0) ShimFail("setgid");
        if (::setuid(account->uid) != 0) ShimFail("setuid");
      }
      if (spec.low_priority && ::setpriority(PRIO_PROCESS, 0, 19) != 0) ShimFail("setpriority");
      if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) ShimFail(spec.cwd.c_str());
      ::close_range(3, ~0U, 0);  // nothing of the agent's (sockets, the journal) reaches the rank
      for (const auto& c : candidates) ::execve(c.c_str(), argv.data(), envp.data());
      ShimFail(args[0].c_str());
    }
    int status = 0;
    if (lease == nullptr) {
      while (::waitpid(rank, &status, 0) < 0 && errno == EINTR) {
      }
    } else {
      // The last deadline this shim read whole; first, the agent's when it spawned the rank.
      int64_t last_whole = spec.lease_deadline_ns;
      for (;;) {
        pid_t w = ::waitpid(rank, &status, WNOHANG);
        if (w == rank || (w < 0 && errno != EINTR)) break;
        if (LeaseExpired(lease, &last_whole)) {
          // Fenced: the server may start this job elsewhere once the lease has run out. The
          // exit file first (the kill below takes the shim too), then the whole group.
          WriteExitFile(spec.exit_path, "signaled 9 fenced\n");
          SafeWrite(2, "tianshu-shim: the agent's lease ran out: killing the rank (fenced)\n");
          if (!cgroup_kill.empty()) {
            int kfd = ::open(cgroup_kill.c_str(), O_WRONLY | O_CLOEXEC);
            if (kfd >= 0) {
              (void)!::write(kfd, "1", 1);
              ::close(kfd);
            }
          }
          ::kill(0, SIGKILL);
          ::_exit(128 + SIGKILL);
        }
        // Until the rank ends (its SIGCHLD, held above, ends the wait at once; one that came
        // since the waitpid is pending and ends it too) or the lease is due for another look.
        timespec pause{0, 200'000'000};
        (void)::sigtimedwait(&chld, nullptr, &pause);
      }
    }
    char line[48] = {0};
    char num[16];
    int code = 0;
    if (WIFSIGNALED(status)) {
      std::strcpy(line, "signaled ");
      SafeItoa(WTERMSIG(status), num);
      code = 128 + WTERMSIG(status);
    } else {
      std::strcpy(line, "exited ");
      SafeItoa(WEXITSTATUS(status), num);
      code = WEXITSTATUS(status);
    }
    std::strcat(line, num);
    std::strcat(line, "\n");
    WriteExitFile(spec.exit_path, line);
    ::_exit(code);
  }
  tracked_[pid] = {spec.exit_path, true, 0};
  return static_cast<int64_t>(pid);
}

Status PosixProcessRunner::Signal(int64_t pid, int sig) {
  if (pid <= 0) return Fail("signal: bad pid ", std::to_string(pid));
  // The group first; a pid that leads no group (a straggler that left it) on its own.
  if (::kill(static_cast<pid_t>(-pid), sig) == 0) return Ok();
  if (errno == ESRCH && (::kill(static_cast<pid_t>(pid), sig) == 0 || errno == ESRCH)) {
    return Ok();
  }
  return Fail("kill -", std::to_string(sig), " ", std::to_string(pid), ": ", std::strerror(errno));
}

std::optional<ProcessExit> PosixProcessRunner::ReadExitFile(const std::string& path) {
  if (path.empty()) return std::nullopt;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return ParseExitFile(std::string(buf, static_cast<size_t>(n)));
}

std::optional<ProcessExit> PosixProcessRunner::Poll(int64_t pid) {
  auto it = tracked_.find(pid);
  if (it == tracked_.end()) return ProcessExit{0, 0, true};
  if (it->second.child) {
    int status = 0;
    pid_t r = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
    if (r == 0) return std::nullopt;
    std::optional<ProcessExit> e = ReadExitFile(it->second.exit_path);
    if (!e) {
      // The shim itself died (SIGKILL to the group): what ended it is what ended the rank.
      if (r > 0 && WIFSIGNALED(status)) {
        e = ProcessExit{0, WTERMSIG(status), false};
      } else if (r > 0) {
        e = ProcessExit{WEXITSTATUS(status), 0, false};
      } else {
        e = ProcessExit{0, 0, true};
      }
    }
    tracked_.erase(it);
    return e;
  }
  // Adopted: not our child. Alive while its start time still matches and it is no zombie.
  if (StartTime(pid) == it->second.start_time) {
    std::string stat_path = "/proc/" + std::to_string(pid) + "/stat";
    int fd = ::open(stat_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[512];
      ssize_t n = ::read(fd, buf, sizeof buf - 1);
      ::close(fd);
      std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
      auto close_paren = s.rfind(')');
      bool zombie = close_paren != std::string::npos && close_paren + 2 < s.size() &&
                    s[close_paren + 2] == 'Z';
      if (!zombie) return std::nullopt;
    }
  }
  std::optional<ProcessExit> e = ReadExitFile(it->second.exit_path);
  tracked_.erase(it);
  return e ? e : ProcessExit{0, 0, true};
}

int64_t PosixProcessRunner::StartTime(int64_t pid) {
  std::string stat_path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(stat_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  std::string s(buf, static_cast<size_t>(n));
  auto p = s.rfind(')');
  if (p == std::string::npos) return 0;
  // Fields after the command: state is field 3; starttime is field 22.
  auto fields = SplitString(s.substr(p + 2), ' ');
  int64_t v = 0;
  return fields.size() > 19 && ParseInt64(fields[19], &v) ? v : 0;
}

bool PosixProcessRunner::Adopt(int64_t pid, int64_t start_time, const std::string& exit_path) {
  // Gone or a different process: Poll() then reads the exit file.
  tracked_[pid] = {exit_path, false, start_time};
  int64_t now = StartTime(pid);
  return now != 0 && now == start_time;
}

// ---- fake ----

Result<int64_t> FakeProcessRunner::Spawn(const SpawnSpec& spec) {
  if (before_action) before_action();
  if (fail_spawn) return Fail("spawn: fake failure");
  int64_t pid = next_pid_++;
  procs_[pid] = Proc{spec, {}, std::nullopt};
  return pid;
}

Status FakeProcessRunner::Signal(int64_t pid, int sig) {
  if (before_action) before_action();
  auto it = procs_.find(pid);
  if (it == procs_.end()) return Ok();
  it->second.signals.push_back(sig);
  if (!it->second.exit && (sig == SIGKILL || (die_on_term && sig == SIGTERM))) {
    it->second.exit = ProcessExit{0, sig, false};
  }
  return Ok();
}

std::optional<ProcessExit> FakeProcessRunner::Poll(int64_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return ProcessExit{0, 0, true};
  return it->second.exit;
}

bool FakeProcessRunner::Adopt(int64_t pid, int64_t start_time, const std::string&) {
  auto it = procs_.find(pid);
  return it != procs_.end() && !it->second.exit && StartTime(pid) == start_time;
}

}  // namespace tianshu::agent
