// Identities end to end, with real processes (issue 14): `tianshu serve`, one `tianshu agent`
// running as root, and two Unix users the test creates. An admin makes a user for each with
// `tianshu users add`; user A's job runs under A's uid and gid, cannot write where A may not,
// cannot name a workdir that climbs out with "..", and gets 403 cancelling B's job or reading
// its logs. An impostor cannot take over a registered node name (with the admin, a join or a
// user token), the agent's log server accepts no user's token, and the node's credential is
// kept private in its work directory. Needs root (useradd, an agent that switches users).
#include <gtest/gtest.h>
#include <httplib.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "testing/etcd_env.h"
#include "testing/processes.h"
#include "testing/run_command.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tianshu::testing::RunCommand;

using tianshu::testing::Slurp;
bool WaitFor(const std::function<bool()>& cond, int seconds) {
  return tianshu::testing::WaitForSeconds(cond, seconds);
}

class Identities : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: creates Unix users, agent switches uid";
    char tmpl[] = "/tmp/tianshu-ids-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::chmod(dir_.c_str(), 0711);  // the users' ranks pass through to their job directories
    const std::string suffix = std::to_string(::getpid() % 100000);
    for (const std::string& u : {"tsa" + suffix, "tsb" + suffix}) {
      auto r = RunCommand("useradd --no-create-home --shell /usr/sbin/nologin " + u);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      users_.push_back(u);
    }
    port_ = tianshu::testing::FreeLoopbackPort();
    server_ = tianshu::testing::SpawnLogged(
        tianshu::testing::ServeCommand(TIANSHU_BINARY, port_, dir_ + "/server",
                                       {"--heartbeat-interval", "300ms"}),
        dir_ + "/server.log");
    ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/server/token"); }, 30));
    admin_ = Trimmed(Slurp(dir_ + "/server/token"));
    ASSERT_TRUE(WaitFor([&] { return Cli(admin_, "nodes -o json").exit_code == 0; }, 30));
    agent_ = tianshu::testing::SpawnLogged(
        {TIANSHU_BINARY, "agent", "--server", "127.0.0.1:" + std::to_string(port_), "--token-file",
         dir_ + "/server/token", "--node", "n0", "--workdir", dir_ + "/agent", "--checkpoint-root",
         dir_ + "/ckpt", "--devices", "2xA100-80GB", "--address", "127.0.0.1", "--cgroup-mode",
         "none"},
        dir_ + "/agent.log");
    ASSERT_TRUE(WaitFor(
        [&] {
          auto r = Cli(admin_, "nodes -o json");
          auto j = json::parse(r.out, nullptr, false);
          return !j.is_discarded() && j["nodes"].size() == 1 && j["nodes"][0]["state"] == "ready";
        },
        30))
        << Slurp(dir_ + "/agent.log");
    for (const auto& u : users_) {
      auto r = Cli(admin_, "users add " + u + " -o json");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      tokens_.push_back(json::parse(r.out)["token"]);
    }
  }

  void TearDown() override {
    if (agent_ > 0) {
      ::kill(agent_, SIGTERM);
      ::waitpid(agent_, nullptr, 0);
    }
    for (const auto& u : users_) (void)RunCommand("pkill -KILL -u " + u + " 2>/dev/null");
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
    }
    for (const auto& u : users_) (void)RunCommand("userdel -f " + u + " 2>/dev/null");
    if (HasFailure()) {
      std::cout << "kept " << dir_ << " for inspection\n";
    } else if (!dir_.empty()) {
      fs::remove_all(dir_);
    }
  }

  // A raw call to the server (what a script with a stolen token would send).
  int Raw(const std::string& method, const std::string& path, const std::string& token,
          const std::string& body = "", std::string* answer = nullptr) {
    httplib::Client c("127.0.0.1", port_);
    httplib::Headers h = {{"Authorization", "Bearer " + token}};
    auto r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body, "application/json");
    if (!r) return -1;
    if (answer) *answer = r->body;
    return r->status;
  }

  static std::string Trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  tianshu::testing::CommandResult Cli(const std::string& token, const std::string& args) {
    return RunCommand("cd " + dir_ + " && TIANSHU_SERVER=127.0.0.1:" + std::to_string(port_) +
                      " TIANSHU_TOKEN=" + token + " " + TIANSHU_BINARY + " " + args);
  }
  // Submits `yaml` as the holder of `token`; returns the job id ("" on failure).
  std::string Submit(const std::string& token, const std::string& name, const std::string& yaml) {
    std::ofstream(dir_ + "/" + name + ".yaml") << yaml;
    auto r = Cli(token, "submit " + name + ".yaml -o json");
    if (r.exit_code != 0) {
      last_error_ = r.out + r.err;
      return "";
    }
    return json::parse(r.out)["id"];
  }
  std::string JobState(const std::string& id) {
    auto r = Cli(admin_, "job " + id + " -o json");
    auto j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? "" : j.value("state", "");
  }
  static uid_t Uid(const std::string& user) {
    passwd* pw = ::getpwnam(user.c_str());
    return pw ? pw->pw_uid : 0;
  }
  static std::string Job(const std::string& name, const std::string& script) {
    return "kind: training\nname: " + name +
           "\nmodel: {profile: llama2-7b}\ngpus: 1\nmax_retries: 0\nrun:\n  command: [/bin/sh, "
           "-c, '" +
           script + "']\n";
  }

  std::string dir_, admin_, last_error_;
  std::vector<std::string> users_, tokens_;
  int port_ = 0;
  pid_t server_ = -1, agent_ = -1;
};

TEST_F(Identities, JobsRunAsTheirOwnerWhoAloneMayCancelThem) {
  const std::string journal = dir_ + "/agent/journal.jsonl";
  // A's job reports who it is, then tries to write where A may not: the agent's journal, the
  // server's store, root's home.
  std::string a_job = Submit(
      tokens_[0], "mine",
      Job("mine", "id -u; id -g; echo x >> " + journal + " || echo journal-denied; touch " + dir_ +
                      "/server/tianshu.db || echo store-denied; ln -sf /etc/shadow " +
                      "\"$(dirname \"$TIANSHU_READY_FILE\")/../rank-0.exit\" 2>/dev/null || " +
                      "echo exit-denied; touch /root/.x || echo root-denied; sleep 120"));
  ASSERT_FALSE(a_job.empty()) << last_error_;
  std::string b_job = Submit(tokens_[1], "theirs", Job("theirs", "sleep 120"));
  ASSERT_FALSE(b_job.empty()) << last_error_;
  ASSERT_TRUE(WaitFor([&] { return JobState(a_job) == "running"; }, 30)) << JobState(a_job);
  std::string log;
  ASSERT_TRUE(WaitFor(
      [&] {
        log = Cli(tokens_[0], "logs " + a_job).out;
        return log.find("root-denied") != std::string::npos;
      },
      30))
      << log;
  std::istringstream lines(log);
  std::string uid, gid;
  lines >> uid >> gid;
  EXPECT_EQ(uid, std::to_string(Uid(users_[0])));
  EXPECT_EQ(gid, std::to_string(::getpwnam(users_[0].c_str())->pw_gid));
  EXPECT_NE(log.find("journal-denied"), std::string::npos) << log;
  EXPECT_NE(log.find("store-denied"), std::string::npos) << log;
  EXPECT_NE(log.find("exit-denied"), std::string::npos) << log;  // the root-owned job dir
  // The journal still reads back whole (the agent restarts cleanly from it).
  EXPECT_EQ(Slurp(journal).find("x\n"), std::string::npos);

  // A may neither cancel B's job nor read its logs or its spec; B's job runs on.
  auto cancel = Cli(tokens_[0], "cancel " + b_job);
  EXPECT_EQ(cancel.exit_code, 1);
  EXPECT_NE((cancel.out + cancel.err).find("belongs to " + users_[1]), std::string::npos);
  EXPECT_EQ(Cli(tokens_[0], "logs " + b_job).exit_code, 1);
  auto view = json::parse(Cli(tokens_[0], "job " + b_job + " -o json").out);
  EXPECT_FALSE(view.contains("run"));
  EXPECT_FALSE(view.contains("spec"));
  EXPECT_EQ(view["owner"], users_[1]);
  EXPECT_NE(JobState(b_job), "cancelled");
  // The listing names each job's owner.
  auto list = Cli(tokens_[1], "jobs");
  EXPECT_NE(list.out.find(users_[0]), std::string::npos) << list.out;
  // B cancels its own job; an admin may cancel anyone's.
  EXPECT_EQ(Cli(tokens_[1], "cancel " + b_job).exit_code, 0);
  EXPECT_EQ(Cli(admin_, "cancel " + a_job).exit_code, 0);

  // A workdir that climbs out of where it is resolved is refused, with nothing changed.
  std::string escape =
      Submit(tokens_[0], "escape", Job("escape", "true") + "  workdir: ../../../../tmp\n");
  EXPECT_TRUE(escape.empty());
  EXPECT_NE(last_error_.find("run.workdir: must not contain '..'"), std::string::npos)
      << last_error_;
}

// A user mapped to root (or any system account) never gets its ranks run as it.
TEST_F(Identities, AUserMappedToRootRunsNothingAsRoot) {
  auto made = Cli(admin_, "users add mallory --unix-user root -o json");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string token = json::parse(made.out)["token"];
  std::string id = Submit(token, "pwn", Job("pwn", "id -u > /tmp/tianshu-pwned-by-root"));
  ASSERT_FALSE(id.empty()) << last_error_;
  ASSERT_TRUE(WaitFor([&] { return JobState(id) == "failed"; }, 30)) << JobState(id);
  auto job = json::parse(Cli(admin_, "job " + id + " -o json").out);
  std::string history = job["history"].dump();
  EXPECT_NE(history.find("system account"), std::string::npos) << history;
  EXPECT_FALSE(fs::exists("/tmp/tianshu-pwned-by-root"));
}

TEST_F(Identities, NoTokenButTheNodesOwnCredentialActsForIt) {
  // The credential the agent was given is private, in its work directory.
  const std::string credential = dir_ + "/agent/credential";
  ASSERT_TRUE(fs::exists(credential));
  struct stat st {};
  ASSERT_EQ(::stat(credential.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777u, 0600u);
  auto node = json::parse(Cli(admin_, "nodes -o json").out)["nodes"][0];
  const std::string address = node["address"];

  // An impostor registers n0 with a forged address: refused with the admin, a join and a user
  // token alike, and the node keeps its address.
  const std::string join =
      json::parse(Cli(admin_, "users add joiner --role join -o json").out)["token"];
  const std::string body =
      R"({"node": "n0", "agent_id": "evil", "address": "127.0.0.1:9", "hardware": {}})";
  for (const std::string& token : {admin_, join, tokens_[0]}) {
    EXPECT_EQ(Raw("POST", "/v1/agents/register", token, body), 403) << token;
  }
  // A join token registers a new node, but cannot heartbeat for n0.
  std::string fresh;
  ASSERT_EQ(
      Raw("POST", "/v1/agents/register", join,
          R"({"node": "n9", "agent_id": "a9", "address": "127.0.0.1", "hardware": {}})", &fresh),
      200);
  auto minted = json::parse(fresh, nullptr, false);
  ASSERT_FALSE(minted.is_discarded()) << fresh;
  EXPECT_EQ(minted.value("credential", "").size(), 64u) << fresh;
  EXPECT_EQ(Raw("POST", "/v1/agents/n0/heartbeat", minted.value("credential", ""),
                R"({"agent_id": "x"})"),
            403);
  auto after = json::parse(Cli(admin_, "nodes -o json").out)["nodes"];
  for (const auto& n : after) {
    if (n["name"] == "n0") {
      EXPECT_EQ(n["address"], address);
      EXPECT_EQ(n["state"], "ready");
    }
  }
  // The agent's log server takes the key the server was given for it, never a user's or the
  // admin's token.
  for (const std::string& token : {admin_, tokens_[0]}) {
    httplib::Client logs(address.substr(0, address.find(':')),
                         std::stoi(address.substr(address.find(':') + 1)));
    auto r = logs.Get("/v1/logs/j-000001/0", {{"Authorization", "Bearer " + token}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << token;
  }
  // The agent restarts and registers again with its credential (not the join token).
  ::kill(agent_, SIGTERM);
  ::waitpid(agent_, nullptr, 0);
  agent_ = tianshu::testing::SpawnLogged(
      {TIANSHU_BINARY, "agent", "--server", "127.0.0.1:" + std::to_string(port_), "--node", "n0",
       "--workdir", dir_ + "/agent", "--checkpoint-root", dir_ + "/ckpt", "--devices",
       "2xA100-80GB", "--address", "127.0.0.1", "--cgroup-mode", "none"},
      dir_ + "/agent.log");
  auto registrations = [&] {
    const std::string log = Slurp(dir_ + "/agent.log");
    int n = 0;
    for (size_t at = log.find("agent: registered"); at != std::string::npos;
         at = log.find("agent: registered", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(WaitFor([&] { return registrations() == 2; }, 30)) << Slurp(dir_ + "/agent.log");
  EXPECT_EQ(json::parse(Cli(admin_, "nodes -o json").out)["nodes"][0]["state"], "ready");
}

}  // namespace
