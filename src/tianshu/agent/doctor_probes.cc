// The doctor's real probes: NVML health (dlopen'ed), vendor tools (fork/exec), statvfs, and
// the control plane over HTTP.
#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tianshu/agent/doctor.h"
#include "tianshu/agent/internal/nvml.h"
#include "tianshu/base/strings.h"
#include "tianshu/net/http_client.h"

namespace tianshu::agent {
namespace {

constexpr int kNvmlUncorrected = 1;       // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kNvmlVolatileEcc = 0;       // NVML_VOLATILE_ECC: since the driver loaded
constexpr unsigned kNvlinkMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr size_t kMaxOutput = 64 * 1024;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::vector<GpuHealth>> NvmlHealthLibrary::Probe() {
  using namespace internal;  // NOLINT(google-build-using-namespace): nvml.h's names
  auto nvml = NvmlSession::Open();
  if (!nvml) return std::unexpected(nvml.error());
  const NvmlSession& n = **nvml;
  auto ecc_mode_fn =
      n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*, nvmlEnableState_t*)>(
          "nvmlDeviceGetEccMode");
  auto ecc_count_fn = n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, int, int, unsigned long long*)>(
      "nvmlDeviceGetTotalEccErrors");
  auto link_fn = n.Symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlEnableState_t*)>(
      "nvmlDeviceGetNvLinkState");
  std::vector<GpuHealth> out;
  for (unsigned i = 0; i < n.Count(); ++i) {
    GpuHealth g;
    g.index = static_cast<int>(i);
    auto handle = n.Device(i);
    if (!handle) {
      g.error = handle.error().message;
      out.push_back(std::move(g));
      continue;
    }
    nvmlDevice_t dev = *handle;
    g.name = n.Name(dev);
    g.pci_address = n.PciAddress(dev);
    nvmlEnableState_t current = 0, pending = 0;
    if (ecc_mode_fn && ecc_mode_fn(dev, &current, &pending) == kNvmlSuccess) {
      g.ecc_enabled = current == 1;
      g.ecc_pending = pending == 1;
      unsigned long long errors = 0;
      if (ecc_count_fn &&
          ecc_count_fn(dev, kNvmlUncorrected, kNvmlVolatileEcc, &errors) == kNvmlSuccess) {
        g.ecc_uncorrected = static_cast<int64_t>(errors);
      }
    }
    // A link that does not exist answers NOT_SUPPORTED or INVALID_ARGUMENT: skipped, as
    // `nvidia-smi nvlink -s` does.
    for (unsigned l = 0; link_fn && l < kNvlinkMaxLinks; ++l) {
      nvmlEnableState_t active = 0;
      if (link_fn(dev, l, &active) != kNvmlSuccess) continue;
      (active == 1 ? g.nvlinks_up : g.nvlinks_down).push_back(static_cast<int>(l));
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::string PosixCommandRunner::Which(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  for (const auto& dir : SplitString(path, ':')) {
    std::string full = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (::stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(full.c_str(), X_OK) == 0) {
      return full;
    }
  }
  return "";
}

Result<CommandOutput> PosixCommandRunner::Run(const std::vector<std::string>& argv,
                                              int timeout_ms) {
  if (argv.empty()) return Fail("run: empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Fail("pipe: ", std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Fail("fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    ::setpgid(0, 0);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  CommandOutput out;
  bool timed_out = false;
  const int64_t deadline = NowMs() + timeout_ms;
  char buf[4096];
  while (true) {
    int64_t left = deadline - NowMs();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // timeout: the loop head notices
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the tool (and whatever inherited its output) closed the pipe
    if (out.output.size() < kMaxOutput) out.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    out.exit_status = 124;
  } else if (WIFEXITED(status)) {
    out.exit_status = WEXITSTATUS(status);
    if (out.exit_status == 127 && out.output.empty()) return Fail("exec ", argv[0], " failed");
  } else if (WIFSIGNALED(status)) {
    out.exit_status = 128 + WTERMSIG(status);
  }
  return out;
}

Result<DiskSpace> StatvfsProbe::Stat(const std::string& path) {
  struct statvfs s;
  if (::statvfs(path.c_str(), &s) != 0) return Fail("statvfs ", path, ": ", std::strerror(errno));
  return DiskSpace{
      .free_bytes = static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize),
      .total_bytes = static_cast<int64_t>(s.f_blocks) * static_cast<int64_t>(s.f_frsize)};
}

Result<ServerAnswer> HttpServerProbe::Get(const std::string& path) {
  auto opened = net::OpenHttpClient(server_, ca_file_);
  if (!opened) return std::unexpected(opened.error());
  httplib::Client& http = **opened;
  http.set_connection_timeout(std::chrono::seconds(5));
  http.set_read_timeout(std::chrono::seconds(5));
  http.set_write_timeout(std::chrono::seconds(5));
  http.set_keep_alive(false);
  if (!token_.empty()) http.set_bearer_token_auth(token_);
  ServerAnswer a;
  a.sent_ms = NowMs();
  auto r = http.Get(path);
  a.received_ms = NowMs();
  if (!r) return Fail("cannot reach ", server_, " (", httplib::to_string(r.error()), ")");
  a.status = r->status;
  a.body = r->body;
  for (const auto& [k, v] : r->headers) a.headers[k] = v;
  return a;
}

}  // namespace tianshu::agent
