// The doctor's checks of this node's own state: a job's cgroup (5), free space for checkpoints
// (7), and the control plane's reachability, token and clock (8).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "tianshu/agent/cgroup.h"
#include "tianshu/agent/doctor.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"

namespace tianshu::agent {
namespace {

// The agent puts job cgroups at most this deep below a hierarchy's mount (own cgroup, parent,
// node name); the walk stops there so a large systemd tree stays cheap.
constexpr int kMaxCgroupDepth = 8;
// v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 on 4 KiB pages).
constexpr int64_t kV1Unlimited = int64_t{1} << 62;
// Clock offset thresholds: rank timeouts and checkpoint deadlines are compared across nodes.
constexpr int64_t kWarnOffsetMs = 1000;
constexpr int64_t kFailOffsetMs = 5000;

std::string Text(SystemFiles& fs, const std::string& path) {
  auto r = fs.Read(path);
  return r ? std::string(Trim(*r)) : std::string();
}

// Decimal units, as disks are sold and as --min-free is written ("2TB").
std::string DecimalBytes(int64_t b) {
  char buf[32];
  double v = static_cast<double>(b);
  if (b >= 1'000'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.2f TB", v / 1e12);
  } else if (b >= 1'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f GB", v / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB", v / 1e6);
  }
  return buf;
}

struct JobCgroup {
  std::string path;
  int64_t attempt = 0;
};

void FindJobCgroups(SystemFiles& fs, const std::string& dir, const std::string& prefix, int depth,
                    std::vector<JobCgroup>* out) {
  auto names = fs.List(dir);
  if (!names) return;
  for (const auto& n : *names) {
    std::string child = dir + "/" + n;
    int64_t attempt = 0;
    if (StartsWith(n, prefix) && ParseInt64(n.substr(prefix.size()), &attempt)) {
      if (fs.Exists(child + "/cgroup.procs")) out->push_back({child, attempt});
    } else if (depth < kMaxCgroupDepth) {
      FindJobCgroups(fs, child, prefix, depth + 1, out);  // a file answers List with an error
    }
  }
}

// What one attempt's cgroup directories (one in v2, one per controller in v1) limit.
struct Limits {
  std::vector<std::string> shown;  // "cpuset.cpus: 0-3", as cgget prints them
  bool cpuset = false;
  bool memory = false;
};

void ReadLimits(SystemFiles& fs, const std::string& dir, Limits* l) {
  const bool v2 = fs.Exists(dir + "/cgroup.controllers");
  if (fs.Exists(dir + "/cpuset.cpus")) {
    std::string cpus = Text(fs, dir + "/cpuset.cpus");
    std::string mems = Text(fs, dir + "/cpuset.mems");
    l->shown.push_back("cpuset.cpus: " + cpus);
    l->shown.push_back("cpuset.mems: " + mems);
    if (v2) {
      // Empty in v2 means "the parent's"; the effective set is what applies.
      if (cpus.empty()) {
        l->shown[l->shown.size() - 2] =
            "cpuset.cpus: (none; effective " + Text(fs, dir + "/cpuset.cpus.effective") + ")";
      }
      l->cpuset = l->cpuset || !cpus.empty();
    } else {
      // A v1 cpuset always has CPUs; it limits only when narrower than its parent's.
      l->cpuset = l->cpuset || (!cpus.empty() && cpus != Text(fs, Dirname(dir) + "/cpuset.cpus"));
    }
  }
  int64_t bytes = 0;
  if (fs.Exists(dir + "/memory.max")) {
    std::string v = Text(fs, dir + "/memory.max");
    bool limited = ParseInt64(v, &bytes);
    l->shown.push_back("memory.max: " + v +
                       (limited ? " (" + FormatBytes(static_cast<double>(bytes)) + ")" : ""));
    l->memory = l->memory || limited;
  } else if (fs.Exists(dir + "/memory.limit_in_bytes")) {
    std::string v = Text(fs, dir + "/memory.limit_in_bytes");
    bool limited = ParseInt64(v, &bytes) && bytes < kV1Unlimited;
    l->shown.push_back(
        "memory.limit_in_bytes: " + v +
        (limited ? " (" + FormatBytes(static_cast<double>(bytes)) + ")" : " (no limit)"));
    l->memory = l->memory || limited;
  }
}

std::string Header(const std::map<std::string, std::string>& headers, const std::string& name) {
  for (const auto& [k, v] : headers) {
    if (ToLower(k) == ToLower(name)) return v;
  }
  return "";
}

}  // namespace

std::vector<Finding> CheckJobCgroup(SystemFiles& fs, const std::string& cgroup_root,
                                    const std::string& job_id) {
  if (job_id.empty()) {
    return {{"cgroup", "job", CheckStatus::kAbsent, "no --job given", ""}};
  }
  std::string prefix = CgroupNameFor(job_id, 0);
  prefix.pop_back();  // "job-<id>-a"
  std::vector<JobCgroup> found;
  FindJobCgroups(fs, cgroup_root, prefix, 0, &found);
  const std::string subject = "job " + job_id;
  if (found.empty()) {
    return {{"cgroup", subject, CheckStatus::kFail,
             "no cgroup named " + prefix + "<attempt> under " + cgroup_root,
             "the job has no ranks on this node (see `tianshu job " + job_id +
                 "`), or the agent runs with --cgroup-mode none or under another cgroup root "
                 "(--cgroup-root)"}};
  }
  int64_t latest = 0;
  for (const auto& c : found) latest = std::max(latest, c.attempt);
  Limits limits;
  std::vector<std::string> paths;
  std::vector<Finding> out;
  for (const auto& c : found) {
    if (c.attempt != latest) continue;
    paths.push_back(c.path);
    ReadLimits(fs, c.path, &limits);
  }
  Finding f{"cgroup", subject + " attempt " + std::to_string(latest), CheckStatus::kOk,
            Join(limits.shown, "; ") + " (" + Join(paths, ", ") + ")", ""};
  if (!limits.cpuset && !limits.memory) {
    f.status = CheckStatus::kFail;
    f.fix =
        "the job runs without CPU or memory limits: check the agent log for 'not applied' "
        "and that the job asks for memory; the agent needs the cpuset and memory "
        "controllers delegated";
  } else if (!limits.memory || !limits.cpuset) {
    f.status = CheckStatus::kWarn;
    f.fix = std::string("no ") + (limits.memory ? "cpuset" : "memory") +
            " limit: one job can take the node's " + (limits.memory ? "CPUs" : "memory") +
            "; check the agent log for 'not applied'";
  }
  out.push_back(std::move(f));
  for (const auto& c : found) {
    if (c.attempt == latest) continue;
    out.push_back({"cgroup", subject + " attempt " + std::to_string(c.attempt), CheckStatus::kWarn,
                   "left over from an earlier attempt: " + c.path,
                   "if `cat " + c.path + "/cgroup.procs` is empty, `rmdir " + c.path + "`"});
  }
  return out;
}

std::vector<Finding> CheckFreeSpace(SystemFiles& fs, const HostInfo& host, DiskSpaceProbe& disk,
                                    const std::string& workdir, int64_t min_free_bytes) {
  // The agent creates the work directory on start: measure the directory that will hold it.
  std::string at = workdir;
  while (at.size() > 1 && !fs.Exists(at)) at = Dirname(at);
  auto space = disk.Stat(at);
  if (!space) {
    return {{"disk", workdir, CheckStatus::kFail, space.error().message,
             "make --workdir point at a mounted, readable directory"}};
  }
  std::string where = at == workdir ? workdir : workdir + " (not created yet; measured " + at + ")";
  std::string device = "unknown device";
  bool nvme = false;
  if (auto dev = fs.DeviceOf(at)) {
    std::string name;
    for (const auto& line : SplitString(Text(fs, "/sys/dev/block/" + *dev + "/uevent"), '\n')) {
      if (StartsWith(line, "DEVNAME=")) name = line.substr(8);
    }
    for (const auto& b : host.block_devices) {
      if (b.dev == *dev) name = b.name;
    }
    if (name.empty()) {
      device = *dev + " (not a block device: overlay, tmpfs or network file system)";
    } else {
      device = name + " (" + *dev + ")";
      nvme = StartsWith(name, "nvme");
    }
  }
  std::string detail = where + ": " + DecimalBytes(space->free_bytes) + " free of " +
                       DecimalBytes(space->total_bytes) + " on " + device;
  if (!nvme) detail += ", not NVMe";
  if (space->free_bytes >= min_free_bytes) {
    return {{"disk", workdir, CheckStatus::kOk, detail, ""}};
  }
  return {{"disk", workdir, CheckStatus::kWarn, detail + "; below " + DecimalBytes(min_free_bytes),
           "free space for checkpoints: delete old ones under " + workdir +
               "/checkpoints, or point the agent's --workdir/--checkpoint-root at a larger NVMe "
               "file system (--min-free sets this threshold)"}};
}

std::vector<Finding> CheckServer(ServerProbe* server) {
  if (!server) {
    return {{"server", "control plane", CheckStatus::kAbsent,
             "no --server and no TIANSHU_SERVER: reachability, token and clock not checked", ""},
            {"clock", "control plane", CheckStatus::kAbsent, "no server to compare with", ""}};
  }
  // Needs the token, reads in memory only: the cheapest authenticated request.
  const std::string path = "/v1/queues";
  const std::string subject = server->Address();
  auto ans = server->Get(path);
  if (!ans) {
    return {{"server", subject, CheckStatus::kFail, "unreachable: " + ans.error().message,
             "start the server or fix --server / TIANSHU_SERVER; `curl " + subject +
                 "/healthz` must answer from this node"},
            {"clock", subject, CheckStatus::kAbsent, "server unreachable", ""}};
  }
  std::vector<Finding> out;
  const int64_t rtt = std::max<int64_t>(0, ans->received_ms - ans->sent_ms);
  const std::string took =
      "GET " + path + " " + std::to_string(ans->status) + " in " + std::to_string(rtt) + " ms";
  if (ans->status == 401) {
    out.push_back({"server", subject, CheckStatus::kFail, "token refused: " + took,
                   "pass the server's token with --token-file or TIANSHU_TOKEN (`tianshu serve` "
                   "prints where it keeps it)"});
  } else if (ans->status == 403) {  // a join token or a node credential: known, not a user
    out.push_back({"server", subject, CheckStatus::kOk,
                   "reachable, token accepted (a node's join token or credential, which may not "
                   "list queues): " +
                       took,
                   ""});
  } else if (ans->status < 200 || ans->status >= 300) {
    out.push_back({"server", subject, CheckStatus::kFail, "answered " + took,
                   "look at the server's log; `curl " + subject + "/healthz`"});
  } else {
    out.push_back({"server", subject, CheckStatus::kOk, "reachable, token accepted: " + took, ""});
  }

  // The server's time: a JSON field in ms when it sends one, else the HTTP Date header (whole
  // seconds, truncated, so its midpoint is +500 ms and it is worth ±500 ms).
  std::optional<int64_t> server_ms;
  int64_t resolution_ms = 0;
  std::string source;
  auto body = nlohmann::json::parse(ans->body, nullptr, false);
  if (body.is_object() && body.contains("server_time_ms") &&
      body["server_time_ms"].is_number_integer()) {
    server_ms = body["server_time_ms"].get<int64_t>();
    source = "server_time_ms";
  } else if (auto date = ParseHttpDateMs(Header(ans->headers, "Date"))) {
    server_ms = *date + 500;
    resolution_ms = 500;
    source = "Date header";
  }
  if (!server_ms) {
    out.push_back({"clock", subject, CheckStatus::kAbsent,
                   "the server's answer carries no time (no Date header, no server_time_ms); "
                   "offset not measured (compare `chronyc tracking` on both hosts)",
                   ""});
    return out;
  }
  // Cristian (1989): the server read its clock somewhere in [sent, received]; take the midpoint.
  const int64_t midpoint = ans->sent_ms + rtt / 2;
  const int64_t offset = *server_ms - midpoint;
  const int64_t error = rtt / 2 + resolution_ms;
  const int64_t at_least = std::max<int64_t>(0, std::abs(offset) - error);
  std::string detail = "offset " + std::to_string(offset) + " ms ±" + std::to_string(error) +
                       " ms (server minus this node, from the " + source + ")";
  Finding f{"clock", subject, CheckStatus::kOk, detail, ""};
  if (at_least > kWarnOffsetMs) {
    f.status = at_least > kFailOffsetMs ? CheckStatus::kFail : CheckStatus::kWarn;
    f.fix =
        "synchronise the clocks (chrony/NTP on this node and the server: `chronyc tracking`, "
        "`timedatectl`)";
  }
  out.push_back(std::move(f));
  return out;
}

}  // namespace tianshu::agent
