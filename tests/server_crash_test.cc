// Durability: `tianshu serve` is killed with SIGKILL in the middle of a burst of submissions
// from several clients; started again on the same data directory, it still has every job it
// had acknowledged, each with the state it had been acknowledged in; and with Idempotency-Keys,
// the clients' resends across five SIGKILLs make no duplicate.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "server_fixture.h"
#include "testing/processes.h"

namespace tianshu::testing {
namespace {

// `store`: "" for the SQLite file in `dir`, else a store URL (etcd, TestStoreUrl()).
pid_t StartServe(const std::string& dir, const std::string& token_file, int port,
                 const std::string& store) {
  std::vector<std::string> args = {
      "tianshu", "serve", "--listen",     "127.0.0.1:" + std::to_string(port),
      "--data",  dir,     "--token-file", token_file};
  // On etcd, the restarted server leads once the killed one's lease ran out.
  if (!store.empty()) args.insert(args.end(), {"--store", store, "--leader-lease", "2s"});
  pid_t pid = fork();
  if (pid == 0) {
    int log = open((dir + "/serve.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(log, 1);
    dup2(log, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(TIANSHU_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

std::unique_ptr<server::Client> ClientFor(int port) {
  return std::make_unique<server::Client>(server::ClientOptions{
      .server = "http://127.0.0.1:" + std::to_string(port), .token = kToken, .timeout_ms = 5000});
}

// Up and serving: on etcd, leading (a replica that does not lead yet answers /healthz too).
bool WaitHealthy(int port) {
  auto c = ClientFor(port);
  return WaitFor(
      [&] {
        auto r = c->Get("/v1/leader");
        return r && r->status == 200 && r->body.value("role", "") != "follower";
      },
      15000);
}

TEST(ServerCrash, EveryAcknowledgedJobSurvivesSigkill) {
  std::string dir = MakeTempDir("tianshu-crash");
  const std::string store = TestStoreUrl();
  std::string token_file = dir + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ::chmod(token_file.c_str(), 0600);  // a token others can read is refused
  int port = tianshu::testing::FreeLoopbackPort();
  pid_t pid = StartServe(dir, token_file, port, store);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitHealthy(port)) << "server did not come up; see " << dir << "/serve.log";

  // Some jobs in a state other than pending, acknowledged before the burst.
  std::map<std::string, std::string> acked;  // id -> state when acknowledged
  std::mutex mu;
  {
    auto c = ClientFor(port);
    for (int i = 0; i < 10; ++i) {
      auto r = c->Post("/v1/jobs", JobYaml("pre-" + std::to_string(i), 1), "application/yaml");
      ASSERT_TRUE(r && r->status == 201);
      std::string id = r->body["id"];
      acked[id] = "pending";
      if (i % 2 == 0) {
        auto x = c->Post("/v1/jobs/" + id + "/cancel", "", "application/json");
        ASSERT_TRUE(x && x->status == 200);
        acked[id] = "cancelled";
      }
    }
  }

  std::atomic<bool> stop{false};
  std::atomic<int> count{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      auto c = ClientFor(port);
      for (int i = 0; !stop; ++i) {
        auto r =
            c->Post("/v1/jobs", JobYaml("burst-" + std::to_string(t) + "-" + std::to_string(i), 1),
                    "application/yaml");
        if (!r) break;  // the server is gone
        if (r->status == 201) {
          std::lock_guard l(mu);
          acked[r->body["id"].get<std::string>()] = "pending";
          count++;
        }
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return count >= 300; }, 30000));
  ASSERT_EQ(kill(pid, SIGKILL), 0);  // while the clients are still submitting
  int status = 0;
  waitpid(pid, &status, 0);
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_TRUE(WIFSIGNALED(status));

  int port2 = tianshu::testing::FreeLoopbackPort();
  pid_t pid2 = StartServe(dir, token_file, port2, store);
  ASSERT_TRUE(WaitHealthy(port2)) << "restart failed; see " << dir << "/serve.log";
  auto c = ClientFor(port2);
  int missing = 0, wrong = 0;
  for (const auto& [id, state] : acked) {
    auto r = c->Get("/v1/jobs/" + id);
    ASSERT_TRUE(r);
    if (r->status != 200) {
      ++missing;
      ADD_FAILURE() << id << " was acknowledged but is not in the restarted server";
    } else if (r->body["state"] != state) {
      ++wrong;
      ADD_FAILURE() << id << " is " << r->body["state"] << ", acknowledged as " << state;
    }
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(wrong, 0);
  RecordProperty("acknowledged", static_cast<int>(acked.size()));
  std::cerr << "acknowledged before SIGKILL: " << acked.size() << ", all present after restart\n";
  // New ids never reuse old ones.
  auto r = c->Post("/v1/jobs", JobYaml("after", 1), "application/yaml");
  ASSERT_TRUE(r && r->status == 201);
  EXPECT_FALSE(acked.contains(r->body["id"].get<std::string>()));
  kill(pid2, SIGTERM);
  waitpid(pid2, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Five SIGKILLs under 8 clients whose submissions carry Idempotency-Keys: a client whose answer
// is lost resends the same key (to the restarted server, as `tianshu submit` does). Every job a
// client sent is there exactly once: no acknowledged job lost, no resend made a duplicate.
TEST(ServerCrash, IdempotentResendsAcrossFiveSigkillsMakeNoDuplicate) {
  std::string dir = MakeTempDir("tianshu-crash-keys");
  const std::string store = TestStoreUrl();
  std::string token_file = dir + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ::chmod(token_file.c_str(), 0600);
  std::atomic<int> port{FreeLoopbackPort()};
  pid_t pid = StartServe(dir, token_file, port, store);
  ASSERT_TRUE(WaitHealthy(port));
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0}, resent{0};
  std::mutex mu;
  std::map<std::string, std::string> sent;  // key -> job name, once the server acknowledged it
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const std::string key = "c" + std::to_string(t) + "-" + std::to_string(i);
        bool done = false;
        for (int tries = 0; !done && tries < 200; ++tries) {  // until a server answers it
          if (tries > 0) {
            resent++;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          auto c = ClientFor(port);
          auto r =
              c->Post("/v1/jobs", JobYaml(key, 1), "application/yaml", {{"Idempotency-Key", key}});
          if (r && (r->status == 201 || r->status == 200)) {
            std::lock_guard l(mu);
            sent[key] = r->body["id"];
            acked++;
            done = true;
          }
        }
        if (!done) return;
      }
    });
  }
  for (int round = 0; round < 5; ++round) {
    const int before = acked;
    ASSERT_TRUE(WaitFor([&] { return acked >= before + 150; }, 30000)) << "round " << round;
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    waitpid(pid, nullptr, 0);
    port = FreeLoopbackPort();
    pid = StartServe(dir, token_file, port, store);
    ASSERT_TRUE(WaitHealthy(port)) << "restart " << round << " failed; see " << dir;
  }
  stop = true;
  for (auto& c : clients) c.join();
  auto c = ClientFor(port);
  auto list = c->Get("/v1/jobs?limit=100000");
  ASSERT_TRUE(list && list->status == 200);
  std::map<std::string, int> per_name;
  for (const auto& j : list->body["jobs"]) per_name[j["name"]]++;
  int duplicates = 0, missing = 0;
  for (const auto& [name, n] : per_name) duplicates += n - 1;
  for (const auto& [key, id] : sent) missing += per_name.contains(key) ? 0 : 1;
  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(missing, 0);
  EXPECT_GT(resent.load(), 0) << "no send was interrupted: the test proved nothing";
  std::cerr << "5 SIGKILLs: " << sent.size() << " jobs acknowledged, " << resent << " resends, "
            << duplicates << " duplicates, " << missing << " missing\n";
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace tianshu::testing
