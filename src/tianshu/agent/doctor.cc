#include "tianshu/agent/doctor.h"

#include <time.h>

#include <algorithm>

#include "tianshu/agent/discovery.h"

namespace tianshu::agent {
namespace {

template <typename T>
void Append(std::vector<T>* out, std::vector<T> more) {
  for (auto& x : more) out->push_back(std::move(x));
}

bool Present(const std::vector<Finding>& findings, std::string_view check) {
  return std::any_of(findings.begin(), findings.end(), [&](const Finding& f) {
    return f.check == check && f.status != CheckStatus::kAbsent;
  });
}

std::string Pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size() + 1, ' ');
}

}  // namespace

std::string_view CheckStatusName(CheckStatus s) {
  switch (s) {
    case CheckStatus::kOk:
      return "ok";
    case CheckStatus::kAbsent:
      return "absent";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
  }
  return "?";
}

Result<std::vector<Finding>> RunDoctor(const HostInfo& host, const DoctorProbes& p,
                                       const DoctorOptions& o) {
  std::vector<Accelerator> declared;
  if (!o.declared_devices.empty()) {
    auto d = ParseDeclaredDevices(o.declared_devices);
    if (!d) return std::unexpected(d.error());
    declared = std::move(*d);
  }
  SystemFiles& fs = *p.fs;
  std::vector<Finding> out;
  Append(&out, CheckRdmaPorts(fs, o.expect_rdma));
  Append(&out, CheckNics(fs));
  std::vector<Finding> devices = CheckNvidia(host, p.gpus, declared);
  Append(&devices, CheckVendorTools(host, p.commands, declared, o.env, o.command_timeout_ms));
  const bool nvidia = Present(devices, "nvidia");
  const bool ascend = Present(devices, "ascend");
  Append(&out, std::move(devices));
  Append(&out, CheckAffinity(host));
  Append(&out, CheckJobCgroup(fs, o.cgroup_root, o.job_id));
  Append(&out, CheckCollectiveEnv(nvidia, ascend, o.env));
  if (p.disk) {
    Append(&out, CheckFreeSpace(fs, host, *p.disk, o.workdir, o.min_free_bytes));
  } else {
    out.push_back({"disk", o.workdir, CheckStatus::kAbsent, "free space not probed", ""});
  }
  Append(&out, CheckServer(p.server));
  return out;
}

int DoctorExitStatus(const std::vector<Finding>& findings) {
  bool failed = std::any_of(findings.begin(), findings.end(),
                            [](const Finding& f) { return f.status == CheckStatus::kFail; });
  return failed ? kDoctorExitFailed : 0;
}

std::string FindingsToText(const std::vector<Finding>& findings) {
  size_t check_w = 5, subject_w = 7;
  for (const auto& f : findings) {
    check_w = std::max(check_w, f.check.size());
    subject_w = std::max(subject_w, std::min<size_t>(f.subject.size(), 32));
  }
  const size_t indent = 7 + check_w + 1 + subject_w + 1;
  std::string out;
  std::map<CheckStatus, int> counts;
  for (const auto& f : findings) {
    ++counts[f.status];
    out += Pad(std::string(CheckStatusName(f.status)), 6) + Pad(f.check, check_w) +
           Pad(f.subject, subject_w) + f.detail + "\n";
    if (!f.fix.empty()) out += std::string(indent, ' ') + "fix: " + f.fix + "\n";
  }
  out += "summary: " + std::to_string(counts[CheckStatus::kOk]) + " ok, " +
         std::to_string(counts[CheckStatus::kWarn]) + " warn, " +
         std::to_string(counts[CheckStatus::kFail]) + " fail, " +
         std::to_string(counts[CheckStatus::kAbsent]) + " absent\n";
  return out;
}

nlohmann::json FindingsToJson(const std::vector<Finding>& findings) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : findings) {
    out.push_back({{"check", f.check},
                   {"subject", f.subject},
                   {"status", CheckStatusName(f.status)},
                   {"detail", f.detail},
                   {"fix", f.fix}});
  }
  return out;
}

std::optional<int64_t> ParseHttpDateMs(const std::string& text) {
  // IMF-fixdate (RFC 9110, 5.6.7), the only form servers send today.
  struct tm tm = {};
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return std::nullopt;
  time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<int64_t>(t) * 1000;
}

}  // namespace tianshu::agent
