// The CLI habits of Slurm and kubectl (issue 19), through the real binary against a real
// `tianshu serve` and two real agents (declared devices, real rank processes): `jobs` filters,
// order, counts and -w, -o yaml, numeric ids, `logs` of the failing rank and --all-ranks, no
// retry on a deterministic exit code, time_limit, `node drain|cordon|uncordon|remove`,
// `job hold|release|requeue`, configured queues and quotas, and `history` totals.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/processes.h"
#include "testing/run_command.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tianshu::testing::RunCommand;
using tianshu::testing::Slurp;
using tianshu::testing::WaitForSeconds;

// A job whose ranks run `script` under /bin/sh (RANK is set by the agent).
std::string ShellJob(const std::string& name, int gpus, const std::string& script,
                     const std::string& extra = "", const std::string& queue = "research") {
  json command = json::array({"/bin/sh", "-c", script});
  return "kind: training\nname: " + name +
         "\nmodel: {profile: llama2-7b}\ngpus: " + std::to_string(gpus) + "\nqueue: " + queue +
         "\n" + extra + "run:\n  command: " + command.dump() + "\n";
}

class CliHabits : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tianshu-cli-habits-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    port_ = tianshu::testing::FreeLoopbackPort();
    std::ofstream(dir_ + "/engine.yaml")
        << "scheduler: {max_retries: 2, checkpoint_interval: 1h}\n"
           "queues:\n  - {name: research, quota: 2}\n  - {name: production, weight: 2}\n";
    StartServer();
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i);
      agents_.push_back(tianshu::testing::SpawnLogged(
          {TIANSHU_BINARY, "agent", "--server", "127.0.0.1:" + std::to_string(port_),
           "--token-file", dir_ + "/server/token", "--node", "n" + n, "--workdir",
           dir_ + "/agent" + n, "--devices", "2xA100-80GB", "--address", "127.0.0.1",
           "--cgroup-mode", "none", "--checkpoint-grace", "5s"},
          dir_ + "/agent" + n + ".log"));
    }
    ASSERT_TRUE(WaitForSeconds(
        [&] {
          auto r = Cli("nodes -o json");
          if (r.exit_code != 0) return false;
          int ready = 0;
          const json nodes = json::parse(r.out)["nodes"];  // not a temporary's member
          for (const auto& n : nodes) ready += n["state"] == "ready";
          return ready == 2;
        },
        60))
        << Cli("nodes").out;
  }
  // Flags of `tianshu serve` beyond the fixture's own.
  virtual std::vector<std::string> ServeFlags() const { return {}; }
  void StartServer() {
    std::vector<std::string> argv = {TIANSHU_BINARY,
                                     "serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port_),
                                     "--data",
                                     dir_ + "/server",
                                     "--config",
                                     dir_ + "/engine.yaml",
                                     "--heartbeat-interval",
                                     "300ms"};
    for (const auto& f : ServeFlags()) argv.push_back(f);
    server_ = tianshu::testing::SpawnLogged(argv, dir_ + "/server.log");
    ASSERT_TRUE(WaitForSeconds([&] { return Cli("jobs -o json").exit_code == 0; }, 90))
        << Slurp(dir_ + "/server.log");
  }
  void StopServer() { tianshu::testing::Terminate(server_); }
  void TearDown() override {
    for (pid_t& a : agents_) tianshu::testing::Terminate(a);
    tianshu::testing::Terminate(server_);
    if (!HasFailure()) {
      fs::remove_all(dir_);
    } else {
      std::cout << "kept " << dir_ << "\n";
    }
  }
  tianshu::testing::CommandResult Cli(const std::string& args) {
    return RunCommand("cd " + dir_ + " && TIANSHU_SERVER=127.0.0.1:" + std::to_string(port_) + " " +
                      TIANSHU_BINARY + " " + args + " --token-file " + dir_ + "/server/token");
  }
  std::string Submit(const std::string& text, const std::string& flags = "") {
    static int n = 0;
    const std::string file = dir_ + "/job" + std::to_string(n++) + ".yaml";
    std::ofstream(file) << text;
    auto r = Cli("submit " + file + " -o json " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.exit_code == 0 ? json::parse(r.out).value("id", "") : "";
  }
  json Job(const std::string& id) {
    auto r = Cli("job " + id + " -o json");
    return r.exit_code == 0 ? json::parse(r.out) : json::object();
  }
  bool WaitState(const std::string& id, const std::string& state, int seconds) {
    return WaitForSeconds([&] { return Job(id).value("state", "") == state; }, seconds);
  }

  std::string dir_;
  int port_ = 0;
  pid_t server_ = -1;
  std::vector<pid_t> agents_;
};

TEST_F(CliHabits, JobsListsActiveNewestFirstFiltersAndSaysWhatItLeftOut) {
  const std::string a = Submit(ShellJob("a", 1, "sleep 60"), "--hold");
  const std::string b = Submit(ShellJob("b", 1, "sleep 60"), "--hold");
  const std::string c = Submit(ShellJob("c", 1, "sleep 60"), "--hold");
  ASSERT_EQ(Cli("cancel " + a).exit_code, 0);
  auto r = Cli("jobs -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json listed = json::parse(r.out)["jobs"];
  ASSERT_EQ(listed.size(), 2u) << r.out;  // the cancelled one is not active
  EXPECT_EQ(listed[0]["id"], c);          // newest first
  EXPECT_EQ(listed[1]["id"], b);
  auto text = Cli("jobs");
  EXPECT_NE(text.err.find("1 ended job not shown (--all)"), std::string::npos) << text.err;
  EXPECT_EQ(json::parse(Cli("jobs --all -o json").out)["jobs"].size(), 3u);
  auto limited = Cli("jobs --all --limit 1");
  EXPECT_NE(limited.err.find("1 of 3 matching jobs shown"), std::string::npos) << limited.err;
  EXPECT_EQ(json::parse(Cli("jobs --state cancelled -o json").out)["jobs"][0]["id"], a);
  EXPECT_EQ(json::parse(Cli("jobs --state held -o json").out)["total"], 2);  // b, c
  auto ana = Cli("users add ana -o json");
  ASSERT_EQ(ana.exit_code, 0) << ana.err;
  std::ofstream(dir_ + "/ana.token") << json::parse(ana.out)["token"].get<std::string>();
  fs::permissions(dir_ + "/ana.token", fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(dir_ + "/ana.yaml") << ShellJob("anas", 1, "sleep 60");
  auto sub = RunCommand(std::string(TIANSHU_BINARY) + " submit " + dir_ +
                        "/ana.yaml --hold -o json --server 127.0.0.1:" + std::to_string(port_) +
                        " --token-file " + dir_ + "/ana.token");
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_EQ(json::parse(Cli("jobs --user admin -o json").out)["total"], 2);
  EXPECT_EQ(json::parse(Cli("jobs --user ana -o json").out)["total"], 1);
  // ana may not requeue or hold the admin's job.
  auto other = RunCommand(std::string(TIANSHU_BINARY) + " job requeue " + a +
                          " --server 127.0.0.1:" + std::to_string(port_) + " --token-file " + dir_ +
                          "/ana.token");
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_NE(other.err.find("belongs to admin"), std::string::npos) << other.err;
  EXPECT_EQ(json::parse(Cli("jobs --user nobody -o json").out)["total"], 0);
  EXPECT_EQ(json::parse(Cli("jobs --queue production -o json").out)["total"], 0);
  // Numeric ids, as users type them.
  const std::string number = std::to_string(std::stoi(c.substr(2)));
  EXPECT_EQ(Job(number).value("id", ""), c);
  // -o yaml says what -o json says.
  auto y = Cli("job " + c + " -o yaml");
  ASSERT_EQ(y.exit_code, 0) << y.err;
  YAML::Node doc = YAML::Load(y.out);
  json j = Job(c);
  EXPECT_EQ(doc["id"].as<std::string>(), c);
  EXPECT_EQ(doc["gpus"].as<int>(), j["gpus"].get<int>());
  EXPECT_EQ(doc["held"].as<bool>(), true);
  EXPECT_EQ(doc["name"].as<std::string>(), "c");
  EXPECT_EQ(doc["history"].size(), j["history"].size());
  // job hold / release: c is released and runs; b stays held.
  ASSERT_EQ(Cli("job release " + number).exit_code, 0);
  EXPECT_TRUE(WaitState(c, "running", 30)) << Job(c).dump();
  EXPECT_TRUE(Job(b).value("held", false));
  EXPECT_EQ(Cli("job release " + c).exit_code, 1);  // not held any more: refused
}

TEST_F(CliHabits, WatchPrintsChangesAndEndsWhenInterrupted) {
  const std::string out = dir_ + "/watch.out";
  pid_t watch = tianshu::testing::SpawnLogged(
      {TIANSHU_BINARY, "jobs", "-w", "--server", "127.0.0.1:" + std::to_string(port_),
       "--token-file", dir_ + "/server/token"},
      out);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::string id = Submit(ShellJob("watched", 1, "sleep 60"));
  EXPECT_TRUE(WaitForSeconds([&] { return Slurp(out).find(id) != std::string::npos; }, 20))
      << Slurp(out);
  EXPECT_TRUE(WaitForSeconds([&] { return Slurp(out).find("running") != std::string::npos; }, 30))
      << Slurp(out);
  const auto asked = std::chrono::steady_clock::now();
  ::kill(watch, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(watch, &status, 0), watch);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5));
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(CliHabits, ADeterministicExitIsNotRetriedAndLogsShowTheRankThatFailed) {
  const std::string id = Submit(ShellJob(
      "usage-error", 2,
      "if [ \"$RANK\" = 1 ]; then echo boom-from-rank-1; exit 2; fi; echo fine-rank-0; sleep 30"));
  ASSERT_TRUE(WaitState(id, "failed", 60)) << Job(id).dump(2);
  json j = Job(id);
  EXPECT_EQ(j["attempt"], 1) << j.dump(2);  // exit 2: no retry spent
  EXPECT_EQ(j["retries"], 0);
  EXPECT_NE(j.value("message", "").find("not retried"), std::string::npos) << j["message"];
  EXPECT_EQ(j["failed_rank"], 1);
  auto logs = Cli("logs " + id);
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_NE(logs.out.find("boom-from-rank-1"), std::string::npos) << logs.out << logs.err;
  EXPECT_NE(logs.err.find("rank 1"), std::string::npos) << logs.err;
  auto all = Cli("logs " + id + " --all-ranks");
  EXPECT_NE(all.out.find("[rank 1] boom-from-rank-1"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("[rank 0] fine-rank-0"), std::string::npos) << all.out;
  // Exit 3 is not in scheduler.no_retry_exit_codes: retried up to max_retries (2).
  const std::string flaky = Submit(ShellJob("flaky", 1, "exit 3"));
  ASSERT_TRUE(WaitState(flaky, "failed", 90)) << Job(flaky).dump(2);
  EXPECT_EQ(Job(flaky)["attempt"], 3);
  EXPECT_EQ(Job(flaky)["retries"], 2);
  // Requeue a failed job: it runs again with its retries reset.
  ASSERT_EQ(Cli("job requeue " + flaky).exit_code, 0);
  EXPECT_TRUE(WaitForSeconds([&] { return Job(flaky).value("attempt", 0) >= 4; }, 30));
}

TEST_F(CliHabits, ATimeLimitStopsTheJobWithoutARetry) {
  const std::string id = Submit(ShellJob("bounded", 1, "sleep 120", "time_limit: 3s\n"));
  ASSERT_TRUE(WaitState(id, "running", 30));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitState(id, "failed", 40)) << Job(id).dump(2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  json j = Job(id);
  EXPECT_NE(j.value("message", "").find("time limit of 3.00 s reached"), std::string::npos)
      << j["message"];
  EXPECT_EQ(j["attempt"], 1);
  EXPECT_GE(j.value("ran_s", 0.0), 3.0);
  // A requeue gives a fresh time budget: the job runs its 3 s again, not an instant.
  ASSERT_EQ(Cli("job requeue " + id).exit_code, 0);
  ASSERT_TRUE(WaitForSeconds([&] { return Job(id).value("attempt", 0) == 2; }, 30));
  ASSERT_TRUE(WaitState(id, "running", 30)) << Job(id).dump(2);
  const auto second = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitState(id, "failed", 40)) << Job(id).dump(2);
  EXPECT_GE(std::chrono::steady_clock::now() - second, std::chrono::milliseconds(2500));
  EXPECT_GE(Job(id).value("ran_s", 0.0), 6.0);
}

TEST_F(CliHabits, DrainMovesTheJobCordonKeepsNewWorkOffAndSurvivesARestart) {
  const std::string id = Submit(ShellJob("mover", 2, "sleep 120"));
  ASSERT_TRUE(WaitState(id, "running", 30));
  const std::string first = Job(id)["nodes"][0];
  const std::string other = first == "n0" ? "n1" : "n0";
  auto d = Cli("node drain " + first);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  // Checkpointed and requeued (no retry spent), then running on the other node.
  EXPECT_TRUE(WaitForSeconds(
      [&] {
        json j = Job(id);
        return j.value("state", "") == "running" && !j["nodes"].empty() && j["nodes"][0] == other;
      },
      60))
      << Job(id).dump(2);
  EXPECT_EQ(Job(id)["retries"], 0);
  EXPECT_NE(Cli("nodes").out.find("ready,drained"), std::string::npos) << Cli("nodes").out;
  // Cordoned: a new job waits although the drained node is free.
  const std::string waiting = Submit(ShellJob("waiter", 2, "sleep 120"));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(Job(waiting)["state"], "pending");
  ASSERT_EQ(Cli("node uncordon " + first).exit_code, 0);
  EXPECT_TRUE(WaitState(waiting, "running", 30)) << Job(waiting).dump(2);
  EXPECT_EQ(Job(waiting)["nodes"][0], first);
  // A cordon is kept by the store: still there after a server restart.
  ASSERT_EQ(Cli("node cordon " + other).exit_code, 0);
  StopServer();
  StartServer();
  bool still = false;
  const json after = json::parse(Cli("nodes -o json").out)["nodes"];
  for (const auto& n : after) still = still || (n["name"] == other && n["cordoned"] == true);
  EXPECT_TRUE(still) << after.dump(2);
  ASSERT_EQ(Cli("node uncordon " + other).exit_code, 0);
  // Remove: refused while the node's agent lives (it would register again at once).
  auto live = Cli("node remove " + first);
  EXPECT_EQ(live.exit_code, 1);
  EXPECT_NE(live.err.find("stop its agent"), std::string::npos) << live.err;
  // A user may not drain: an admin's verb.
  auto user = Cli("users add ana -o json");
  ASSERT_EQ(user.exit_code, 0) << user.err;
  std::ofstream(dir_ + "/ana.token") << json::parse(user.out)["token"].get<std::string>();
  fs::permissions(dir_ + "/ana.token", fs::perms::owner_read | fs::perms::owner_write);
  auto refused = RunCommand(std::string(TIANSHU_BINARY) + " node cordon " + other +
                            " --server 127.0.0.1:" + std::to_string(port_) + " --token-file " +
                            dir_ + "/ana.token");
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
}

// Nodes are lost within seconds here (no restart window to wait out).
class CliHabitsQuickLoss : public CliHabits {
 protected:
  std::vector<std::string> ServeFlags() const override {
    return {"--lost-after", "2s", "--restart-grace", "2s"};
  }
};

TEST_F(CliHabitsQuickLoss, OnlyALostNodeIsRemovedAndItStaysRemoved) {
  EXPECT_EQ(Cli("node remove n0").exit_code, 1);  // its agent is alive
  ::kill(agents_[0], SIGKILL);
  ::waitpid(agents_[0], nullptr, 0);
  agents_[0] = -1;
  auto state_of = [&](const std::string& name) {
    const json nodes = json::parse(Cli("nodes -o json").out)["nodes"];
    for (const auto& n : nodes) {
      if (n["name"] == name) return n.value("state", "");
    }
    return std::string("gone");
  };
  ASSERT_TRUE(WaitForSeconds([&] { return state_of("n0") == "lost"; }, 30)) << Cli("nodes").out;
  // Not an admin: refused.
  auto user = Cli("users add ana -o json");
  ASSERT_EQ(user.exit_code, 0) << user.err;
  std::ofstream(dir_ + "/ana.token") << json::parse(user.out)["token"].get<std::string>();
  fs::permissions(dir_ + "/ana.token", fs::perms::owner_read | fs::perms::owner_write);
  auto refused = RunCommand(std::string(TIANSHU_BINARY) + " node remove n0 --server 127.0.0.1:" +
                            std::to_string(port_) + " --token-file " + dir_ + "/ana.token");
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_EQ(state_of("n0"), "lost");
  auto removed = Cli("node remove n0");
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_EQ(state_of("n0"), "gone");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // nothing brings it back
  EXPECT_EQ(state_of("n0"), "gone");
  EXPECT_EQ(state_of("n1"), "ready");
}

TEST_F(CliHabits, QueuesShowQuotasAnUnknownQueueIsRefusedAndHistoryAddsUp) {
  auto q = Cli("queues");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("2 GPUs"), std::string::npos) << q.out;      // research's quota
  EXPECT_NE(q.out.find("production"), std::string::npos) << q.out;  // shown with no job
  std::ofstream(dir_ + "/typo.yaml") << ShellJob("typo", 1, "true", "", "reserch");
  auto refused = Cli("submit " + dir_ + "/typo.yaml");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("reserch"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("research, production"), std::string::npos) << refused.err;
  // Three jobs that run a while and end; history's total is the sum of their GPU-hours.
  std::vector<std::string> ids = {Submit(ShellJob("h1", 1, "sleep 2")),
                                  Submit(ShellJob("h2", 2, "sleep 3")),
                                  Submit(ShellJob("h3", 1, "sleep 1; exit 3"))};
  for (const auto& id : ids) {
    EXPECT_TRUE(WaitForSeconds(
        [&] {
          const std::string s = Job(id).value("state", "");
          return s == "succeeded" || s == "failed";
        },
        90))
        << Job(id).dump(2);
  }
  double sum = 0;
  for (const auto& id : ids) sum += Job(id).value("attained_gpu_s", 0.0) / 3600;
  auto h = Cli("history --since all -o json");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  json history = json::parse(h.out);
  EXPECT_GT(sum, 0);
  EXPECT_NEAR(history["total_gpu_hours"].get<double>(), sum, 1e-9) << history.dump(2);
  ASSERT_EQ(history["users"].size(), 1u);
  EXPECT_EQ(history["users"][0]["name"], "admin");
  EXPECT_EQ(history["users"][0]["jobs"], 3);
  EXPECT_EQ(history["queues"][0]["name"], "research");
  // A window before any job ran holds nothing.
  json none = json::parse(Cli("history --since 2020-01-01 --until 2020-01-02 -o json").out);
  EXPECT_EQ(none["total_gpu_hours"], 0.0);
}

}  // namespace
