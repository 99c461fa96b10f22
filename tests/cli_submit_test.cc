// `tianshu submit` with many files (a directory), held, then `tianshu release` and `hold`,
// through the real binary against a real `tianshu serve` (issue 16).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "testing/processes.h"
#include "testing/run_command.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tianshu::testing::RunCommand;

std::string Job(const std::string& name, int gpus) {
  return "kind: training\nname: " + name +
         "\nmodel: {profile: llama2-7b}\ngpus: " + std::to_string(gpus) + "\n";
}

class CliSubmit : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tianshu-cli-submit-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    port_ = tianshu::testing::FreeLoopbackPort();
    server_ = tianshu::testing::SpawnLogged(
        {TIANSHU_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(port_), "--data",
         dir_ + "/server"},
        dir_ + "/server.log");
    ASSERT_TRUE(
        tianshu::testing::WaitForSeconds([&] { return Cli("jobs -o json").exit_code == 0; }, 30))
        << tianshu::testing::Slurp(dir_ + "/server.log");
  }
  void TearDown() override {
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }
  tianshu::testing::CommandResult Cli(const std::string& args) {
    return RunCommand("cd " + dir_ + " && TIANSHU_SERVER=127.0.0.1:" + std::to_string(port_) + " " +
                      TIANSHU_BINARY + " " + args + " --token-file " + dir_ + "/server/token");
  }
  json Jobs() { return json::parse(Cli("jobs -o json").out); }

  std::string dir_;
  int port_ = 0;
  pid_t server_ = -1;
};

TEST_F(CliSubmit, ABadFileAmongManySubmitsNothing) {
  fs::create_directories(dir_ + "/jobs");
  for (int i = 0; i < 3; ++i)
    std::ofstream(dir_ + "/jobs/j" + std::to_string(i) + ".yaml") << Job("ok", 1);
  std::ofstream(dir_ + "/bad.yaml")
      << "kind: training\nname: bad\nmodel: {profile: llama2-7b}\ngpus: lots\n";
  auto r = Cli("submit jobs bad.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("bad.yaml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpus"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing submitted"), std::string::npos) << r.err;
  EXPECT_EQ(Jobs()["total"], 0);
  EXPECT_EQ(Cli("submit empty-dir-that-is-missing.yaml").exit_code, 1);
}

TEST_F(CliSubmit, ADirectorySubmittedHeldIsReleasedInOneCall) {
  fs::create_directories(dir_ + "/jobs");
  for (int i = 0; i < 5; ++i) {
    std::ofstream(dir_ + "/jobs/j" + std::to_string(i) + ".yaml")
        << Job("job-" + std::to_string(i), 1);
  }
  std::ofstream(dir_ + "/jobs/README.txt") << "not a job";
  auto r = Cli("submit --hold jobs -o json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json out = json::parse(r.out);
  ASSERT_EQ(out["submitted"].size(), 5u) << r.out;
  EXPECT_TRUE(out["failed"].empty());
  std::vector<std::string> ids;
  for (const auto& j : out["submitted"]) {
    EXPECT_EQ(j["held"], true);
    ids.push_back(j["id"]);
  }
  // In name order: j0 .. j4.
  EXPECT_EQ(out["submitted"][0]["name"], "job-0");
  EXPECT_EQ(out["submitted"][4]["name"], "job-4");
  auto table = Cli("jobs");
  EXPECT_NE(table.out.find("held"), std::string::npos) << table.out;

  std::string all;
  for (const auto& id : ids) all += " " + id;
  auto refused = Cli("release" + all + " j-999999");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("nothing changed"), std::string::npos) << refused.err;
  for (const auto& j : Jobs()["jobs"]) EXPECT_EQ(j["held"], true);

  auto released = Cli("release" + all);
  ASSERT_EQ(released.exit_code, 0) << released.err;
  EXPECT_NE(released.out.find("released 5 job(s)"), std::string::npos) << released.out;
  for (const auto& j : Jobs()["jobs"]) {
    EXPECT_EQ(j["held"], false);
    EXPECT_EQ(j["state"], "pending");  // no node: they wait, now for capacity
  }
  ASSERT_EQ(Cli("hold " + ids[0]).exit_code, 0);
  EXPECT_EQ(json::parse(Cli("job " + ids[0] + " -o json").out)["held"], true);
}

// sbatch --array: one file, one job per task index, held and released together; each task's
// index is in the job's view (its ranks get TIANSHU_ARRAY_TASK_ID); a bad spec or several files
// submit nothing.
TEST_F(CliSubmit, AnArrayIsOneJobPerTaskIndex) {
  std::ofstream(dir_ + "/task.yaml") << Job("sweep", 1);
  auto r = Cli("submit --hold --array 0-6:2,9 task.yaml -o json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["count"], 5);
  ASSERT_EQ(out["ids"].size(), 5u) << r.out;
  const std::string array_id = out["array_id"];
  EXPECT_EQ(out["ids"][0], array_id);
  std::vector<int> indexes;
  for (const auto& id : out["ids"]) {
    json j = json::parse(Cli("job " + id.get<std::string>() + " -o json").out);
    EXPECT_EQ(j["held"], true);
    EXPECT_EQ(j["array"]["id"], array_id);
    EXPECT_EQ(j["array"]["count"], 5);
    indexes.push_back(j["array"]["index"]);
  }
  EXPECT_EQ(indexes, (std::vector<int>{0, 2, 4, 6, 9}));
  auto table = Cli("jobs");
  EXPECT_NE(table.out.find("sweep[9]"), std::string::npos) << table.out;
  EXPECT_NE(Cli("job " + array_id).out.find("array:    " + array_id + ", task 0 (5 tasks)"),
            std::string::npos);
  auto text = Cli("submit --array 1-3 task.yaml");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("submitted array "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("3 tasks"), std::string::npos) << text.out;

  const int before = Jobs()["total"];
  auto bad = Cli("submit --array 5-1 task.yaml");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.err.find("array '5-1'"), std::string::npos) << bad.err;
  auto throttled = Cli("submit --array 0-9%2 task.yaml");
  EXPECT_EQ(throttled.exit_code, 1);
  EXPECT_NE(throttled.err.find("throttle"), std::string::npos) << throttled.err;
  auto two = Cli("submit --array 0-1 task.yaml task.yaml");
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_NE(two.err.find("exactly one job file"), std::string::npos) << two.err;
  EXPECT_EQ(Jobs()["total"], before);

  auto cancelled = Cli("cancel --array " + array_id);
  EXPECT_EQ(cancelled.exit_code, 0) << cancelled.err;
  EXPECT_NE(cancelled.out.find("cancelled 5 task(s), 0 already finished"), std::string::npos)
      << cancelled.out;
  for (const auto& id : out["ids"]) {
    EXPECT_EQ(json::parse(Cli("job " + id.get<std::string>() + " -o json").out)["state"],
              "cancelled");
  }
}

}  // namespace
