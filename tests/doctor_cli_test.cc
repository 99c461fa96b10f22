// `tianshu doctor` driven as an operator runs it, on whatever machine the tests run on: the
// findings' shape and the exit status, which must agree with them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace tianshu {
namespace {

using testing::RunCommand;
const std::string kBin = std::string("env -u TIANSHU_SERVER ") + TIANSHU_BINARY;

nlohmann::json Parse(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << text;
  return j;
}

bool AnyFailed(const nlohmann::json& findings) {
  for (const auto& f : findings) {
    if (f["status"] == "fail") return true;
  }
  return false;
}

TEST(DoctorCli, VendorToolOutputThatIsNotUtf8StaysValidJson) {
  // A vendor tool on PATH that prints bytes that are not UTF-8, and a long line of multi-byte
  // characters that the detail cuts: the JSON stays valid (no abort).
  auto dir = std::filesystem::temp_directory_path() /
             ("tianshu-doctor-path-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string line;
  for (int i = 0; i < 100; ++i) line += "\xe5\xa4\xa9";  // 天, three bytes each
  std::ofstream(dir / "npu-smi") << "#!/bin/sh\nprintf 'bad \\377\\376 bytes\\n'\nexit 1\n";
  std::ofstream(dir / "rocm-smi") << "#!/bin/sh\nprintf '" << line << "\\n'\nexit 1\n";
  std::filesystem::permissions(dir / "npu-smi", std::filesystem::perms::owner_all);
  std::filesystem::permissions(dir / "rocm-smi", std::filesystem::perms::owner_all);
  auto r = RunCommand("PATH=" + dir.string() + ":$PATH " + kBin +
                      " doctor -o json --workdir /tmp --min-free 1B");
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.exit_code << r.err;
  auto j = Parse(r.out);
  ASSERT_TRUE(j.is_array()) << r.out;
  int vendor = 0;
  for (const auto& f : j) {
    if (f["check"] == "ascend" || f["check"] == "rocm") {
      ++vendor;
      EXPECT_NE(f["status"], "absent") << f.dump();
    }
  }
  EXPECT_EQ(vendor, 2) << r.out;
}

TEST(DoctorCli, JsonFindingsAndExitStatusAgree) {
  auto r = RunCommand(kBin + " doctor -o json --workdir /tmp --min-free 1B");
  auto j = Parse(r.out);
  ASSERT_TRUE(j.is_array()) << r.out;
  ASSERT_FALSE(j.empty());
  const std::set<std::string> statuses = {"ok", "warn", "fail", "absent"};
  std::set<std::string> checks;
  for (const auto& f : j) {
    for (const char* key : {"check", "subject", "status", "detail", "fix"}) {
      EXPECT_TRUE(f.contains(key) && f[key].is_string()) << f.dump();
    }
    EXPECT_TRUE(statuses.count(f["status"].get<std::string>())) << f.dump();
    if (f["status"] == "warn" || f["status"] == "fail") {
      EXPECT_NE(f["fix"], "") << f.dump();
    }
    checks.insert(f["check"].get<std::string>());
  }
  for (const char* c : {"rdma", "nic", "nvidia", "ascend", "rocm", "musa", "affinity", "cgroup",
                        "env", "disk", "server", "clock"}) {
    EXPECT_TRUE(checks.count(c)) << c;
  }
  EXPECT_EQ(r.exit_code, AnyFailed(j) ? 3 : 0) << r.out << r.err;
}

TEST(DoctorCli, DeclaredDevicesThatAreMissingFail) {
  // No machine has 64 GPUs: NVML (or its absence) cannot match the declaration.
  auto r = RunCommand(kBin + " doctor -o json --devices 64xH100-80GB --min-free 1B");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  auto j = Parse(r.out);
  bool nvidia_failed = false;
  for (const auto& f : j) {
    if (f["check"] == "nvidia" && f["subject"] == "GPUs") nvidia_failed = f["status"] == "fail";
  }
  EXPECT_TRUE(nvidia_failed) << r.out;
}

TEST(DoctorCli, MissingJobCgroupFailsInText) {
  auto r = RunCommand(kBin + " doctor --job no-such-job --cgroup-root /nonexistent");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.out.find("no cgroup named job-no-such-job-a<attempt> under /nonexistent"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("summary: "), std::string::npos);
}

TEST(DoctorCli, BadFlagsAreInvalidInput) {
  auto r = RunCommand(kBin + " doctor --min-free lots");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--min-free"), std::string::npos) << r.err;
  r = RunCommand(kBin + " doctor --devices 8xH999");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown accelerator"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tianshu
