#include "tianshu/agent/cgroup.h"

#include <algorithm>
#include <map>

#include "tianshu/agent/discovery.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

constexpr int64_t kCfsPeriodUs = 100000;

std::string Trimmed(SystemFiles& fs, const std::string& path) {
  auto r = fs.Read(path);
  return r ? std::string(Trim(*r)) : std::string();
}

int64_t KeyedValue(const std::string& text, std::string_view key) {
  for (const auto& line : SplitString(text, '\n')) {
    auto f = SplitString(Trim(line), ' ');
    int64_t v = 0;
    if (f.size() == 2 && f[0] == key && ParseInt64(f[1], &v)) return v;
  }
  return 0;
}

std::vector<int64_t> ReadPids(SystemFiles& fs, const std::string& file) {
  std::vector<int64_t> pids;
  if (auto r = fs.Read(file)) {
    for (const auto& line : SplitString(*r, '\n')) {
      int64_t p = 0;
      if (ParseInt64(Trim(line), &p)) pids.push_back(p);
    }
  }
  return pids;
}

// The disk's I/O scheduler, for the proportional-weight question ("bfq", "mq-deadline").
std::string ActiveScheduler(SystemFiles& fs, const std::string& dev) {
  std::string s = Trimmed(fs, "/sys/dev/block/" + dev + "/queue/scheduler");
  auto a = s.find('['), b = s.find(']');
  return a == std::string::npos || b == std::string::npos ? s : s.substr(a + 1, b - a - 1);
}

// Devices every process needs: null, zero, full, random, urandom, tty, ptmx, /dev/pts/*.
const std::vector<DeviceRule>& BasicDevices() {
  static const std::vector<DeviceRule> kBasic = {
      {1, 3, "/dev/null"},    {1, 5, "/dev/zero"}, {1, 7, "/dev/full"}, {1, 8, "/dev/random"},
      {1, 9, "/dev/urandom"}, {5, 0, "/dev/tty"},  {5, 2, "/dev/ptmx"}, {136, -1, "/dev/pts/*"}};
  return kBasic;
}

std::string RuleText(const DeviceRule& r) {
  return "c " + std::to_string(r.major) + ":" + (r.minor < 0 ? "*" : std::to_string(r.minor)) +
         " rwm";
}

// ---- v1 ---------------------------------------------------------------------------------

class CgroupV1 final : public CgroupDriver {
 public:
  // `roots`: controller -> directory under which job cgroups live (mount + own + parent).
  CgroupV1(SystemFiles& fs, std::map<std::string, std::string> roots)
      : fs_(fs), roots_(std::move(roots)) {}

  std::string_view Mode() const override { return "v1"; }

  std::string PathOf(const std::string& controller, const std::string& name) const override {
    auto it = roots_.find(controller);
    return it == roots_.end() ? "" : it->second + "/" + name;
  }

  std::vector<std::string> ProcsFiles(const std::string& name) const override {
    std::vector<std::string> out;
    for (const auto& [ctl, root] : roots_) out.push_back(root + "/" + name + "/cgroup.procs");
    return out;
  }

  Result<CgroupOutcome> Create(const CgroupSpec& spec) override {
    CgroupOutcome out;
    if (!roots_.count("memory")) return Fail("cgroup v1: the memory controller is not mounted");
    for (const auto& [ctl, root] : roots_) {
      if (Status s = fs_.MakeDirs(root); !s) {
        if (ctl == "memory" || ctl == "cpuset") return std::unexpected(s.error());
        out.unsupported.push_back(ctl + ": " + s.error().message);
        continue;
      }
      if (ctl == "cpuset") InheritCpuset(root, spec.name);
      std::string dir = root + "/" + spec.name;
      if (Status s = fs_.MakeDirs(dir); !s) {
        if (ctl == "memory" || ctl == "cpuset") return std::unexpected(s.error());
        out.unsupported.push_back(ctl + ": " + s.error().message);
        continue;
      }
      out.procs_files.push_back(dir + "/cgroup.procs");
    }
    ApplyCpuset(spec, &out);
    ApplyMemory(spec, &out);
    ApplyCpu(spec, &out);
    ApplyIo(spec, &out);
    ApplyDevices(spec, &out);
    return out;
  }

  Result<CgroupUsage> Usage(const std::string& name) override {
    CgroupUsage u;
    std::string dir = PathOf("memory", name);
    if (!fs_.Exists(dir)) return Fail("no cgroup ", dir);
    int64_t v = 0;
    if (ParseInt64(Trimmed(fs_, dir + "/memory.usage_in_bytes"), &v)) u.memory_bytes = v;
    if (auto oc = fs_.Read(dir + "/memory.oom_control")) u.oom_kills = KeyedValue(*oc, "oom_kill");
    u.pids = ReadPids(fs_, dir + "/cgroup.procs");
    return u;
  }

  Status Remove(const std::string& name) override {
    std::string errors;
    for (const auto& [ctl, root] : roots_) {
      if (Status s = fs_.RemoveDir(root + "/" + name); !s) errors += s.error().message + "; ";
    }
    if (!errors.empty()) return Fail("cgroup v1: ", errors);
    return Ok();
  }

 private:
  // A new v1 cpuset directory starts with no CPUs and no memory nodes: every level created
  // below the first existing one copies its parent's, top down.
  void InheritCpuset(const std::string& dir, const std::string&) {
    std::vector<std::string> chain;
    for (std::string d = dir; d.size() > 1; d = Dirname(d)) {
      chain.push_back(d);
      if (!Trimmed(fs_, Dirname(d) + "/cpuset.cpus").empty()) break;
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      for (const char* f : {"cpuset.cpus", "cpuset.mems"}) {
        if (!Trimmed(fs_, *it + "/" + f).empty()) continue;
        std::string up = Trimmed(fs_, Dirname(*it) + "/" + f);
        if (!up.empty()) (void)fs_.Write(*it + "/" + f, up);
      }
    }
  }

  void Set(const std::string& file, const std::string& value, const std::string& what,
           CgroupOutcome* out) {
    if (Status s = fs_.Write(file, value); s) {
      out->applied.push_back(what);
    } else {
      out->unsupported.push_back(what + ": " + s.error().message);
    }
  }

  void ApplyCpuset(const CgroupSpec& spec, CgroupOutcome* out) {
    if (!roots_.count("cpuset")) {
      out->unsupported.push_back("cpuset: controller not mounted");
      return;
    }
    std::string root = roots_["cpuset"];
    std::string dir = root + "/" + spec.name;
    std::string cpus =
        spec.cpus.empty() ? Trimmed(fs_, root + "/cpuset.cpus") : FormatCpuList(spec.cpus);
    std::string mems =
        spec.mems.empty() ? Trimmed(fs_, root + "/cpuset.mems") : FormatCpuList(spec.mems);
    // mems before cpus is not required by the kernel, but both must be set before procs join.
    Set(dir + "/cpuset.mems", mems, "cpuset.mems " + mems, out);
    Set(dir + "/cpuset.cpus", cpus, "cpuset.cpus " + cpus, out);
  }

  void ApplyMemory(const CgroupSpec& spec, CgroupOutcome* out) {
    if (spec.memory_bytes <= 0) return;
    std::string dir = roots_["memory"] + "/" + spec.name;
    std::string v = std::to_string(spec.memory_bytes);
    Set(dir + "/memory.limit_in_bytes", v, "memory.limit_in_bytes " + v, out);
    // Swap counts against the same limit where swap accounting exists; silently absent else.
    if (fs_.Exists(dir + "/memory.memsw.limit_in_bytes")) {
      (void)fs_.Write(dir + "/memory.memsw.limit_in_bytes", v);
    }
  }

  void ApplyCpu(const CgroupSpec& spec, CgroupOutcome* out) {
    if (spec.cpu_milli <= 0) return;
    if (!roots_.count("cpu")) {
      out->unsupported.push_back("cpu quota: cpu controller not mounted");
      return;
    }
    std::string dir = roots_["cpu"] + "/" + spec.name;
    int64_t quota = spec.cpu_milli * kCfsPeriodUs / 1000;
    (void)fs_.Write(dir + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs));
    Set(dir + "/cpu.cfs_quota_us", std::to_string(quota),
        "cpu.cfs_quota_us " + std::to_string(quota), out);
  }

  void ApplyIo(const CgroupSpec& spec, CgroupOutcome* out) {
    bool want = spec.io_weight > 0 || spec.io_write_bps > 0 || spec.io_read_bps > 0;
    if (!want) return;
    if (!roots_.count("blkio")) {
      out->unsupported.push_back("io: blkio controller not mounted");
      return;
    }
    std::string dir = roots_["blkio"] + "/" + spec.name;
    if (spec.io_weight > 0) {
      std::string sched = spec.io_device.empty() ? "" : ActiveScheduler(fs_, spec.io_device);
      // v1 bfq weights run 1..1000; the spec uses v2's 1..10000 (default 100 on both).
      int w = std::clamp(spec.io_weight, 1, 1000);
      if (sched == "bfq" && fs_.Exists(dir + "/blkio.bfq.weight")) {
        Set(dir + "/blkio.bfq.weight", std::to_string(w), "blkio.bfq.weight " + std::to_string(w),
            out);
      } else {
        out->unsupported.push_back("io weight " + std::to_string(spec.io_weight) + ": disk " +
                                   spec.io_device + " uses the " +
                                   (sched.empty() ? "unknown" : sched) +
                                   " scheduler; proportional weight needs bfq");
      }
    }
    if (spec.io_device.empty()) {
      if (spec.io_write_bps > 0 || spec.io_read_bps > 0) {
        out->unsupported.push_back("io limits: no disk found for the checkpoint directory");
      }
      return;
    }
    if (spec.io_write_bps > 0) {
      std::string v = spec.io_device + " " + std::to_string(spec.io_write_bps);
      Set(dir + "/blkio.throttle.write_bps_device", v, "blkio.throttle.write_bps_device " + v, out);
    }
    if (spec.io_read_bps > 0) {
      std::string v = spec.io_device + " " + std::to_string(spec.io_read_bps);
      Set(dir + "/blkio.throttle.read_bps_device", v, "blkio.throttle.read_bps_device " + v, out);
    }
  }

  void ApplyDevices(const CgroupSpec& spec, CgroupOutcome* out) {
    if (!spec.restrict_devices) return;
    if (!roots_.count("devices")) {
      out->unsupported.push_back("device access: devices controller not mounted");
      return;
    }
    std::string dir = roots_["devices"] + "/" + spec.name;
    if (Status s = fs_.Write(dir + "/devices.deny", "a"); !s) {
      out->unsupported.push_back("device access: " + s.error().message);
      return;
    }
    std::vector<std::string> allowed;
    for (const auto* list : {&BasicDevices(), &spec.devices}) {
      for (const DeviceRule& r : *list) {
        if (Status s = fs_.Write(dir + "/devices.allow", RuleText(r)); s) {
          allowed.push_back(r.what);
        } else {
          out->unsupported.push_back("device " + r.what + ": " + s.error().message);
        }
      }
    }
    out->applied.push_back("devices: only " + Join(allowed, ","));
  }

  SystemFiles& fs_;
  std::map<std::string, std::string> roots_;
};

// ---- v2 ---------------------------------------------------------------------------------

class CgroupV2 final : public CgroupDriver {
 public:
  // `own`: the agent's cgroup directory; `root`: where job cgroups live (own + parent).
  CgroupV2(SystemFiles& fs, std::string own, std::string root, std::vector<std::string> ctls)
      : fs_(fs), own_(std::move(own)), root_(std::move(root)), controllers_(std::move(ctls)) {}

  std::string_view Mode() const override { return "v2"; }
  std::string PathOf(const std::string&, const std::string& name) const override {
    return root_ + "/" + name;
  }
  std::vector<std::string> ProcsFiles(const std::string& name) const override {
    return {root_ + "/" + name + "/cgroup.procs"};
  }

  Result<CgroupOutcome> Create(const CgroupSpec& spec) override {
    CgroupOutcome out;
    if (Status s = fs_.MakeDirs(root_); !s) return std::unexpected(s.error());
    std::string enable;
    for (const auto& c : controllers_) enable += (enable.empty() ? "+" : " +") + c;
    // Delegation: controllers must be enabled on every level above the job's cgroup. The
    // agent's own cgroup may hold processes (the agent), which v2 forbids for a cgroup with
    // enabled controllers unless it is the root: that error is reported, not hidden.
    for (const std::string& dir : {own_, root_}) {
      if (Status s = fs_.Write(dir + "/cgroup.subtree_control", enable); !s) {
        return Fail("cgroup v2: cannot enable ", enable, " in ", dir, ": ", s.error().message,
                    " (run the agent in a cgroup of its own, e.g. systemd Delegate=yes)");
      }
    }
    std::string dir = root_ + "/" + spec.name;
    if (Status s = fs_.MakeDirs(dir); !s) return std::unexpected(s.error());
    out.procs_files.push_back(dir + "/cgroup.procs");
    auto set = [&](const std::string& file, const std::string& v, const std::string& what) {
      if (Status s = fs_.Write(dir + "/" + file, v); s) {
        out.applied.push_back(what);
      } else {
        out.unsupported.push_back(what + ": " + s.error().message);
      }
    };
    if (!spec.cpus.empty())
      set("cpuset.cpus", FormatCpuList(spec.cpus), "cpuset.cpus " + FormatCpuList(spec.cpus));
    if (!spec.mems.empty())
      set("cpuset.mems", FormatCpuList(spec.mems), "cpuset.mems " + FormatCpuList(spec.mems));
    if (spec.memory_bytes > 0) {
      set("memory.max", std::to_string(spec.memory_bytes),
          "memory.max " + std::to_string(spec.memory_bytes));
      (void)fs_.Write(dir + "/memory.swap.max", "0");
      // A gang dies together: an OOM kill takes every process of the job, not one rank.
      set("memory.oom.group", "1", "memory.oom.group 1");
    }
    if (spec.cpu_milli > 0) {
      std::string v =
          std::to_string(spec.cpu_milli * kCfsPeriodUs / 1000) + " " + std::to_string(kCfsPeriodUs);
      set("cpu.max", v, "cpu.max " + v);
    }
    if (spec.io_weight > 0) {
      set("io.weight", "default " + std::to_string(spec.io_weight),
          "io.weight " + std::to_string(spec.io_weight));
    }
    if (!spec.io_device.empty() && (spec.io_write_bps > 0 || spec.io_read_bps > 0)) {
      std::string v = spec.io_device;
      if (spec.io_write_bps > 0) v += " wbps=" + std::to_string(spec.io_write_bps);
      if (spec.io_read_bps > 0) v += " rbps=" + std::to_string(spec.io_read_bps);
      set("io.max", v, "io.max " + v);
    }
    if (spec.restrict_devices) {
      out.unsupported.push_back(
          "device access: cgroup v2 needs a BPF_CGROUP_DEVICE program, which this agent does "
          "not load; devices are limited by the visible-devices environment only");
    }
    return out;
  }

  Result<CgroupUsage> Usage(const std::string& name) override {
    std::string dir = root_ + "/" + name;
    if (!fs_.Exists(dir)) return Fail("no cgroup ", dir);
    CgroupUsage u;
    int64_t v = 0;
    if (ParseInt64(Trimmed(fs_, dir + "/memory.current"), &v)) u.memory_bytes = v;
    if (auto ev = fs_.Read(dir + "/memory.events")) u.oom_kills = KeyedValue(*ev, "oom_kill");
    u.pids = ReadPids(fs_, dir + "/cgroup.procs");
    return u;
  }

  Status Remove(const std::string& name) override { return fs_.RemoveDir(root_ + "/" + name); }

 private:
  SystemFiles& fs_;
  std::string own_, root_;
  std::vector<std::string> controllers_;
};

// ---- none -------------------------------------------------------------------------------

class CgroupNone final : public CgroupDriver {
 public:
  explicit CgroupNone(std::string why) : why_(std::move(why)) {}
  std::string_view Mode() const override { return "none"; }
  std::string PathOf(const std::string&, const std::string&) const override { return ""; }
  std::vector<std::string> ProcsFiles(const std::string&) const override { return {}; }
  Result<CgroupOutcome> Create(const CgroupSpec&) override {
    CgroupOutcome out;
    out.unsupported.push_back("all isolation: " + why_);
    return out;
  }
  Result<CgroupUsage> Usage(const std::string&) override { return CgroupUsage{}; }
  Status Remove(const std::string&) override { return Ok(); }

 private:
  std::string why_;
};

}  // namespace

std::string CgroupNameFor(std::string_view job_id, int attempt) {
  std::string out = "job-";
  for (char c : job_id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  return out + "-a" + std::to_string(attempt);
}

Result<std::unique_ptr<CgroupDriver>> DetectCgroupDriver(SystemFiles& fs,
                                                         const CgroupOptions& opt) {
  auto mounts = fs.Read("/proc/mounts");
  if (!mounts) return Fail("cgroups: ", mounts.error().message);
  std::string self = fs.Read("/proc/self/cgroup").value_or("");
  // hierarchy paths of this process: controller list -> path ("" key: v2).
  std::map<std::string, std::string> own;
  for (const auto& line : SplitString(self, '\n')) {
    auto f = SplitString(line, ':');
    if (f.size() < 3) continue;
    std::string path = line.substr(f[0].size() + f[1].size() + 2);
    if (f[1].empty()) {
      own[""] = path;
      continue;
    }
    for (const auto& c : SplitString(f[1], ',')) own[c] = path;
  }
  auto own_of = [&](const std::string& key) {
    auto it = own.find(key);
    std::string p = it == own.end() ? "/" : it->second;
    return p == "/" ? std::string() : p;
  };

  std::string v2_mount;
  std::map<std::string, std::string> v1_mounts;  // controller -> mount point
  for (const auto& line : SplitString(*mounts, '\n')) {
    auto f = SplitString(line, ' ');
    if (f.size() < 4) continue;
    if (f[2] == "cgroup2") v2_mount = f[1];
    if (f[2] != "cgroup") continue;
    for (const auto& o : SplitString(f[3], ',')) {
      for (const char* c :
           {"cpuset", "memory", "cpu", "cpuacct", "blkio", "devices", "pids", "freezer"}) {
        if (o == c) v1_mounts[c] = f[1];
      }
    }
  }
  std::string mode = opt.force_mode;
  std::vector<std::string> v2_ctls;
  if (!v2_mount.empty()) {
    std::string avail = fs.Read(v2_mount + "/cgroup.controllers").value_or("");
    for (const auto& c : SplitString(std::string(Trim(avail)), ' ')) {
      if (c == "cpuset" || c == "memory" || c == "cpu" || c == "io" || c == "pids") {
        v2_ctls.push_back(c);
      }
    }
  }
  bool v2_ok = std::find(v2_ctls.begin(), v2_ctls.end(), "memory") != v2_ctls.end() &&
               std::find(v2_ctls.begin(), v2_ctls.end(), "cpuset") != v2_ctls.end();
  if (mode.empty()) mode = v2_ok ? "v2" : v1_mounts.count("memory") ? "v1" : "none";
  if (mode == "v2") {
    if (v2_mount.empty()) return Fail("cgroups: v2 requested but no cgroup2 mount");
    std::string own_dir = v2_mount + own_of("");
    return std::unique_ptr<CgroupDriver>(
        new CgroupV2(fs, own_dir, own_dir + "/" + opt.parent, v2_ctls));
  }
  if (mode == "v1") {
    if (!v1_mounts.count("memory")) return Fail("cgroups: v1 requested but memory not mounted");
    std::map<std::string, std::string> roots;
    // cpuacct shares a directory with cpu when they are co-mounted; join each mount once.
    std::map<std::string, bool> seen_mount;
    for (const auto& [ctl, mnt] : v1_mounts) {
      if (seen_mount[mnt]) continue;  // "cpu" sorts before "cpuacct"
      seen_mount[mnt] = true;
      roots[ctl] = mnt + own_of(ctl) + "/" + opt.parent;
    }
    return std::unique_ptr<CgroupDriver>(new CgroupV1(fs, std::move(roots)));
  }
  return std::unique_ptr<CgroupDriver>(new CgroupNone(
      v2_mount.empty() && v1_mounts.empty()
          ? "no cgroup file system is mounted"
          : "no usable cgroup hierarchy (v2 lacks cpuset/memory and v1 lacks memory)"));
}

}  // namespace tianshu::agent
