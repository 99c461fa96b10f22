// A control plane that survives the loss of its machine (issue 17), for real: a three-member
// etcd cluster on loopback ports (tests/testing/etcd.sh), three `tianshu serve` replicas on it,
// and real `tianshu agent`s given all three. The leader is SIGKILLed during an 8-client
// submission burst, paused past its lease, and etcd loses one member, then two.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "server_fixture.h"
#include "testing/processes.h"
#include "testing/run_command.h"
#include "tianshu/server/etcd_client.h"
#include "tianshu/server/store.h"

namespace tianshu::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kReplicas = 3;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class ControlPlaneHa : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tianshu-ha");
    auto started = RunCommand(std::string(TIANSHU_SOURCE_DIR) + "/tests/testing/etcd.sh start " +
                              dir_ + "/etcd 3");
    ASSERT_EQ(started.exit_code, 0) << started.out << started.err;
    std::getline(std::ifstream(dir_ + "/etcd/endpoints"), endpoints_);
    ASSERT_FALSE(endpoints_.empty());
    std::ofstream(dir_ + "/token") << kToken << "\n";
    fs::permissions(dir_ + "/token", fs::perms::owner_read | fs::perms::owner_write);
    for (int i = 0; i < kReplicas; ++i) {
      ports_.push_back(FreeLoopbackPort());
      servers_ += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(ports_[i]);
    }
    replicas_.assign(kReplicas, -1);
    for (int i = 0; i < kReplicas; ++i) StartReplica(i);
    ASSERT_GE(WaitLeader(-1, 20), 0) << "no replica was elected; logs in " << dir_;
  }

  void TearDown() override {
    for (pid_t& p : agents_) Kill(p, SIGKILL);
    for (pid_t& p : replicas_) Kill(p, SIGKILL);
    RunCommand(std::string(TIANSHU_SOURCE_DIR) + "/tests/testing/etcd.sh stop " + dir_ + "/etcd");
    if (HasFailure()) {
      std::cout << "kept " << dir_ << " for inspection\n";
    } else {
      fs::remove_all(dir_);
    }
  }

  static void Kill(pid_t& pid, int sig) {
    if (pid <= 0) return;
    ::kill(pid, SIGCONT);
    ::kill(pid, sig);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }

  void StartReplica(int i) {
    const std::string n = std::to_string(i);
    replicas_[i] =
        SpawnLogged({TIANSHU_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(ports_[i]),
                     "--data", dir_ + "/r" + n, "--token-file", dir_ + "/token", "--store",
                     "etcd://" + endpoints_ + "/ha", "--replica-id", "r" + n, "--leader-lease",
                     "2s", "--lost-after", "10s"},
                    dir_ + "/r" + n + ".log");
  }

  void StartAgent(int i) {
    const std::string n = std::to_string(i);
    agents_.push_back(
        SpawnLogged({TIANSHU_BINARY, "agent", "--server", servers_, "--token-file", dir_ + "/token",
                     "--node", "n" + n, "--workdir", dir_ + "/agent" + n, "--devices",
                     "2xA100-80GB", "--address", "127.0.0.1", "--cgroup-mode", "none"},
                    dir_ + "/agent" + n + ".log"));
  }

  // Who a replica says it is: "leader", "follower" ("" when it does not answer).
  std::string Role(int i) {
    server::Client c({.server = "127.0.0.1:" + std::to_string(ports_[i]), .timeout_ms = 1000});
    auto r = c.Get("/v1/leader");
    return r && r->status == 200 ? r->body.value("role", "") : "";
  }
  // The replica that leads, other than `not_this`, within `seconds` (-1: none).
  int WaitLeader(int not_this, int seconds) {
    int found = -1;
    WaitForSeconds(
        [&] {
          for (int i = 0; i < kReplicas; ++i) {
            if (i != not_this && replicas_[i] > 0 && Role(i) == "leader") {
              found = i;
              return true;
            }
          }
          return false;
        },
        seconds);
    return found;
  }

  std::unique_ptr<server::Client> ClientOfAll(int timeout_ms = 5000) {
    return std::make_unique<server::Client>(
        server::ClientOptions{.server = servers_, .token = kToken, .timeout_ms = timeout_ms});
  }
  // Every job, through whichever replica leads.
  json Jobs() {
    auto r = ClientOfAll()->Get("/v1/jobs?limit=10000");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->text : r.error().message);
    return r && r->status == 200 ? r->body["jobs"] : json::array();
  }
  // Nodes the leader counts ready (0 when no replica answers).
  int ReadyNodes() {
    auto r = ClientOfAll()->Get("/v1/nodes");
    int ready = 0;
    if (r && r->status == 200) {
      for (const auto& n : r->body["nodes"]) ready += n.value("state", "") == "ready";
    }
    return ready;
  }
  json Job(const std::string& id) {
    auto r = ClientOfAll()->Get("/v1/jobs/" + id);
    return r && r->status == 200 ? r->body : json::object();
  }
  // Submits with an Idempotency-Key through the replica list, retrying across a failover.
  std::string SubmitSafely(const std::string& name, const std::string& key,
                           const std::string& extra = "") {
    auto r = ClientOfAll()->PostIdempotent("/v1/jobs", JobYaml(name, 1, extra), "application/yaml",
                                           key, {}, 40);
    // 201: made now; 200: a resend of one made before (its answer was lost to the failover).
    if (r && (r->status == 201 || r->status == 200)) return r->body.value("id", "");
    ADD_FAILURE() << name << " not acknowledged: "
                  << (r ? std::to_string(r->status) + " " + r->text : r.error().message);
    return "";
  }
  // Every job record in etcd whose document names `name` (what any replica ever wrote).
  int RecordsNamed(const std::string& name) {
    auto c = server::EtcdClient::Open(
        {.endpoints = {"http://" + endpoints_.substr(0, endpoints_.find(','))}});
    EXPECT_TRUE(c);
    const std::string from = "/ha/jobs/";
    auto r = (*c)->Call(
        "/v3/kv/range",
        {{"key", server::EtcdClient::Encode(from)},
         {"range_end", server::EtcdClient::Encode(server::EtcdClient::PrefixEnd(from))}});
    EXPECT_TRUE(r);
    int n = 0;
    if (!r) return -1;
    for (const auto& kv : r->value("kvs", json::array())) {
      auto v = server::EtcdClient::Decode(kv.value("value", ""));
      if (v && v->find("name: " + name + "\\n") != std::string::npos) ++n;
    }
    return n;
  }

  std::string dir_, endpoints_, servers_;
  std::vector<int> ports_;
  std::vector<pid_t> replicas_, agents_;
};

// SIGKILL of the leader while 8 clients submit: another replica leads within the lease and a
// little more, every acknowledged job is there once, and the job running on a real agent keeps
// running in its first attempt with no retry spent.
TEST_F(ControlPlaneHa, LeaderKilledDuringABurstLosesNothingAndStopsNoJob) {
  for (int i = 0; i < 2; ++i) StartAgent(i);
  ASSERT_TRUE(WaitForSeconds([&] { return ReadyNodes() == 2; }, 30))
      << "the agents did not register";
  const std::string runner =
      SubmitSafely("long-runner", "long-runner", "run:\n  command: [sleep, \"600\"]\n");
  ASSERT_FALSE(runner.empty());
  ASSERT_TRUE(WaitForSeconds([&] { return Job(runner).value("state", "") == "running"; }, 30))
      << Job(runner).dump(2);

  constexpr int kClients = 8, kEach = 25;
  std::mutex mu;
  std::map<std::string, std::string> acked;  // key -> id
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < kEach; ++k) {
        const std::string key = "burst-" + std::to_string(c) + "-" + std::to_string(k);
        const std::string id = SubmitSafely(key, key);
        std::lock_guard l(mu);
        if (id.empty()) {
          ++failed;
        } else {
          acked[key] = id;
        }
      }
    });
  }
  ASSERT_TRUE(WaitForSeconds(
      [&] {
        std::lock_guard l(mu);
        return acked.size() >= 40;
      },
      60));
  const int old = WaitLeader(-1, 5);
  ASSERT_GE(old, 0);
  const auto killed = Clock::now();
  Kill(replicas_[old], SIGKILL);
  const int now_leads = WaitLeader(old, 30);
  const double failover_s = Since(killed);
  // The first write acknowledged by the new leader, from a client that knows every replica.
  const std::string probe = SubmitSafely("probe", "probe");
  const double first_write_s = Since(killed);
  for (auto& t : clients) t.join();
  ASSERT_GE(now_leads, 0) << "no replica took over";
  EXPECT_FALSE(probe.empty());
  std::cout << "failover: replica r" << now_leads << " leads " << failover_s << " s after r" << old
            << " was killed; first acknowledged write after " << first_write_s << " s\n";
  EXPECT_LE(failover_s, 10.0) << "the lease is 2 s";

  EXPECT_EQ(failed.load(), 0) << "submissions never acknowledged across the failover";
  EXPECT_EQ(acked.size(), size_t{kClients * kEach});
  std::map<std::string, int> per_name;
  std::map<std::string, std::string> id_of;
  for (const auto& j : Jobs()) {
    per_name[j["name"]]++;
    id_of[j["name"]] = j["id"];
  }
  for (const auto& [key, id] : acked) {
    EXPECT_EQ(per_name[key], 1) << key << " (acknowledged as " << id << ")";
    EXPECT_EQ(id_of[key], id) << key;
  }

  // The running job and its agents moved to the new leader: still attempt 1, no retry.
  ASSERT_TRUE(WaitForSeconds([&] { return ReadyNodes() == 2; }, 30));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const json j = Job(runner);
  EXPECT_EQ(j.value("state", ""), "running") << j.dump(2);
  EXPECT_EQ(j.value("attempt", 0), 1) << j.dump(2);
  EXPECT_EQ(j.value("retries", -1), 0) << j.dump(2);
}

// SIGSTOP of the leader for longer than its lease: another replica leads; a submission the
// paused one took in before it stopped is never written once it runs again (its writes need a
// leadership it lost); and it comes back as a follower.
TEST_F(ControlPlaneHa, APausedLeaderDoesNotWriteAfterItsLeaseAndRejoinsAsAFollower) {
  const int old = WaitLeader(-1, 5);
  ASSERT_GE(old, 0);
  ASSERT_FALSE(SubmitSafely("before-pause", "before-pause").empty());
  ::kill(replicas_[old], SIGSTOP);
  // A request already on its way to the paused leader (in its socket's queue).
  std::atomic<int> status{-1};
  std::thread late([&] {
    server::Client c({.server = "127.0.0.1:" + std::to_string(ports_[old]),
                      .token = kToken,
                      .timeout_ms = 30000});
    auto r = c.Post("/v1/jobs", JobYaml("from-paused", 1), "application/yaml");
    status = r ? r->status : 0;
  });
  const int now_leads = WaitLeader(old, 30);
  ASSERT_GE(now_leads, 0) << "no replica took over from the paused leader";
  std::this_thread::sleep_for(std::chrono::seconds(3));  // well past its lease
  ::kill(replicas_[old], SIGCONT);
  late.join();
  EXPECT_NE(status.load(), 201) << "the paused leader acknowledged a job after its lease ran out";
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(RecordsNamed("from-paused"), 0) << "the deposed leader wrote to the store";
  EXPECT_EQ(RecordsNamed("before-pause"), 1);
  ASSERT_TRUE(WaitForSeconds([&] { return Role(old) == "follower"; }, 20))
      << "r" << old
      << " did not rejoin as a follower: " << Slurp(dir_ + "/r" + std::to_string(old) + ".log");
  EXPECT_EQ(Role(now_leads), "leader");
}

// Followers answer reads from the store, as fresh as the leader's (a job acknowledged a moment
// ago is there), refuse writes with the leader's address and write nothing, and keep answering
// while the leader is dead and not yet replaced; a client given every replica reads from a
// follower and sends its next call to the leader.
TEST_F(ControlPlaneHa, FollowersAnswerReadsFromTheStoreAndRedirectWrites) {
  const int leader = WaitLeader(-1, 5);
  ASSERT_GE(leader, 0);
  const std::string leader_url = "http://127.0.0.1:" + std::to_string(ports_[leader]);
  auto only = [&](int i) {
    return std::make_unique<server::Client>(server::ClientOptions{
        .server = "127.0.0.1:" + std::to_string(ports_[i]), .token = kToken, .timeout_ms = 5000});
  };
  std::vector<int> followers;
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader) followers.push_back(i);
  }
  for (int f : followers) {  // each has seen the election's outcome
    ASSERT_TRUE(WaitForSeconds(
        [&] {
          auto r = only(f)->Get("/v1/leader");
          return r && r->status == 200 && r->body["leader"].is_object() &&
                 r->body["leader"].value("url", "") == leader_url;
        },
        10));
  }
  auto header = [](const server::ApiResponse& r, const std::string& name) {
    auto it = r.headers.find(name);
    return it == r.headers.end() ? std::string() : it->second;
  };
  for (int k = 0; k < 5; ++k) {
    auto made =
        only(leader)->Post("/v1/jobs", JobYaml("read-" + std::to_string(k), 1), "application/yaml");
    ASSERT_TRUE(made && made->status == 201) << (made ? made->text : made.error().message);
    const std::string id = made->body.value("id", "");
    for (int f : followers) {  // at once: read-your-writes through any replica
      auto r = only(f)->Get("/v1/jobs/" + id);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->status, 200) << "r" << f << ": " << r->text;
      EXPECT_EQ(r->body.value("name", ""), "read-" + std::to_string(k));
      EXPECT_EQ(header(*r, "X-Tianshu-Role"), "follower");
      EXPECT_EQ(header(*r, "X-Tianshu-Leader"), leader_url);
    }
  }
  auto on_leader = only(leader)->Get("/v1/jobs?limit=100");
  ASSERT_TRUE(on_leader && on_leader->status == 200);
  for (int f : followers) {
    auto listed = only(f)->Get("/v1/jobs?limit=100");
    ASSERT_TRUE(listed && listed->status == 200) << (listed ? listed->text : "");
    EXPECT_EQ(listed->body["jobs"].size(), on_leader->body["jobs"].size());
    for (const char* path : {"/v1/nodes", "/v1/queues", "/v1/events?since=0"}) {
      auto r = only(f)->Get(path);
      EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->text : r.error().message);
    }
    auto events = only(f)->Get("/v1/events?since=0&limit=1000");
    ASSERT_TRUE(events && events->status == 200);
    EXPECT_GE(events->body["events"].size(), 5u) << "a follower sees the leader's events";
    // No token: refused as the leader refuses it.
    httplib::Client bare("127.0.0.1", ports_[f]);
    auto none = bare.Get("/v1/jobs");
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << none->body;
    // A token its view does not know goes to the leader, before the follower reads the store.
    auto wrong = bare.Get("/v1/jobs", {{"Authorization", "Bearer not-the-token-0123456789"}});
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 503) << wrong->body;
    EXPECT_EQ(wrong->get_header_value("X-Tianshu-Role"), "follower");
    EXPECT_EQ(wrong->get_header_value("X-Tianshu-Store-Revision"), "") << "it read the store";
    EXPECT_EQ(wrong->get_header_value("X-Tianshu-Leader"), leader_url);
    // A write: refused with the leader's address, and nothing written.
    auto w = only(f)->Post("/v1/jobs", JobYaml("to-a-follower", 1), "application/yaml");
    ASSERT_TRUE(w);
    EXPECT_EQ(w->status, 503) << w->text;
    EXPECT_EQ(header(*w, "X-Tianshu-Role"), "follower");
    EXPECT_EQ(header(*w, "X-Tianshu-Leader"), leader_url);
  }
  EXPECT_EQ(RecordsNamed("to-a-follower"), 0) << "a follower wrote to the store";
  // A client of every replica that starts on a follower: the read is answered there, the
  // write after it goes to the leader at once (no 503 on the way).
  auto all = std::make_unique<server::Client>(server::ClientOptions{
      .server = "127.0.0.1:" + std::to_string(ports_[followers[0]]) + "," + servers_,
      .token = kToken,
      .timeout_ms = 5000});
  auto read = all->Get("/v1/jobs");
  ASSERT_TRUE(read && read->status == 200);
  EXPECT_EQ(header(*read, "X-Tianshu-Role"), "follower");
  auto write = all->Post("/v1/jobs", JobYaml("after-a-read", 1), "application/yaml");
  ASSERT_TRUE(write && write->status == 201) << (write ? write->text : write.error().message);
  // Event reads that wait a minute on both followers: whichever is elected next must not wait
  // for them to end before it leads.
  auto next = only(leader)->Get("/v1/events?since=0&limit=1");
  ASSERT_TRUE(next && next->status == 200);
  std::vector<std::thread> waiting;
  for (int f : followers) {
    waiting.emplace_back([&, f] {
      server::Client c({.server = "127.0.0.1:" + std::to_string(ports_[f]),
                        .token = kToken,
                        .timeout_ms = 70000});
      (void)c.Get("/v1/events?wait_ms=60000&since=" + std::to_string(1 << 30));
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // The leader dies: until another is elected, followers still answer reads.
  Kill(replicas_[leader], SIGKILL);
  const auto killed = Clock::now();
  auto r = only(followers[0])->Get("/v1/jobs?limit=100");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200) << r->text;
  EXPECT_EQ(r->body["jobs"].size(), on_leader->body["jobs"].size() + 1);
  EXPECT_LT(Since(killed), 2.0) << "the read was not answered within the dead leader's lease";
  const int elected = WaitLeader(leader, 10);
  EXPECT_GE(elected, 0) << "no follower took over while event reads waited on it";
  std::cout << "a follower with a waiting event read led " << Since(killed)
            << " s after the leader was killed\n";
  // The other follower's read waits its minute as it should: end it with its process.
  for (int f : followers) {
    if (f != elected) Kill(replicas_[f], SIGKILL);
  }
  for (auto& t : waiting) t.join();
  EXPECT_LT(Since(killed), 30.0) << "the elected follower's waiting read ran its full minute";
}

// etcd loses one member: service goes on. Two: writes are refused with a 503 that says why,
// nothing acknowledged is lost, and service resumes when a member comes back.
TEST_F(ControlPlaneHa, EtcdLosingOneMemberIsNothingAndTwoStopsWritesUntilOneReturns) {
  ASSERT_FALSE(SubmitSafely("before", "before").empty());
  auto pid_of = [&](int m) {
    std::ifstream f(dir_ + "/etcd/m" + std::to_string(m) + ".pid");
    pid_t p = -1;
    f >> p;
    return p;
  };
  ::kill(pid_of(3), SIGKILL);
  EXPECT_FALSE(SubmitSafely("one-down", "one-down").empty()) << "a member lost stopped service";
  ::kill(pid_of(2), SIGKILL);
  // Without a quorum: a plain submission (no retries) is refused with a 503 naming the cause.
  int refused = 0;
  std::string message;
  const auto lost = Clock::now();
  WaitForSeconds(
      [&] {
        auto r = ClientOfAll(20000)->Post("/v1/jobs", JobYaml("no-quorum", 1), "application/yaml");
        if (r && r->status == 201) return false;  // written before the quorum was gone
        refused = r ? r->status : 0;
        message = r ? r->ErrorText() : r.error().message;
        return true;
      },
      60);
  std::cout << "without a quorum: HTTP " << refused << " after " << Since(lost) << " s: " << message
            << "\n";
  EXPECT_EQ(refused, 503) << message;
  EXPECT_TRUE(message.find("etcd") != std::string::npos ||
              message.find("store") != std::string::npos)
      << message;
  auto restarted = RunCommand(std::string(TIANSHU_SOURCE_DIR) + "/tests/testing/etcd.sh restart " +
                              dir_ + "/etcd 2");
  ASSERT_EQ(restarted.exit_code, 0) << restarted.out << restarted.err;
  const auto back = Clock::now();
  const std::string after = SubmitSafely("after", "after");
  EXPECT_FALSE(after.empty()) << "service did not resume with two members of three";
  std::cout << "service resumed " << Since(back) << " s after a member came back\n";
  std::set<std::string> names;
  for (const auto& j : Jobs()) names.insert(j["name"]);
  for (const char* n : {"before", "one-down", "after"}) EXPECT_TRUE(names.contains(n)) << n;
}

// The store over TLS to an etcd that requires client certificates (etcd+tls://): with the CA,
// certificate and key it writes and reads back; without a client certificate etcd refuses it, and
// the error says what to check; a CA that did not sign etcd's certificate is refused too.
TEST(EtcdOverTls, TheStoreUsesClientCertificatesAndIsRefusedWithoutThem) {
  // etcd closes the connection of a client without a certificate; OpenSSL's next write to it
  // raises SIGPIPE, which killed this test (1 run in 9, then once in CI) as it killed `tianshu`
  // until its main() ignored the signal. Ignored here as there.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string dir = MakeTempDir("tianshu-etcd-tls");
  auto sh = [&](const std::string& cmd) {
    auto r = RunCommand("cd " + dir + " && " + cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.out << r.err;
    return r.exit_code == 0;
  };
  const std::string subj_alt =
      "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth";
  ASSERT_TRUE(
      sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout "
         "ca.key -out ca.pem 2>/dev/null && openssl req -x509 -newkey rsa:2048 -nodes "
         "-days 2 -subj /CN=other-ca -keyout other.key -out other.pem 2>/dev/null"));
  for (const std::string n : {"server", "client"}) {
    ASSERT_TRUE(sh("openssl req -newkey rsa:2048 -nodes -subj /CN=" + n + " -keyout " + n +
                   ".key -out " + n + ".csr 2>/dev/null && printf '" + subj_alt + "\\n' > " + n +
                   ".ext && openssl x509 -req -in " + n +
                   ".csr -CA ca.pem -CAkey ca.key "
                   "-CAcreateserial -days 2 -out " +
                   n + ".pem -extfile " + n + ".ext 2>/dev/null"));
  }
  const int client_port = FreeLoopbackPort();
  int peer_port = FreeLoopbackPort();
  while (peer_port == client_port) peer_port = FreeLoopbackPort();  // two ports, not one twice
  const std::string endpoint = "127.0.0.1:" + std::to_string(client_port);
  std::string etcd_binary = RunCommand("command -v etcd").out;
  while (!etcd_binary.empty() && std::isspace(static_cast<unsigned char>(etcd_binary.back()))) {
    etcd_binary.pop_back();
  }
  ASSERT_FALSE(etcd_binary.empty()) << "no etcd (scripts/install-deps.sh installs etcd-server)";
  pid_t etcd = SpawnLogged({etcd_binary,
                            "--name",
                            "tls",
                            "--data-dir",
                            dir + "/data",
                            "--listen-client-urls",
                            "https://" + endpoint,
                            "--advertise-client-urls",
                            "https://" + endpoint,
                            "--listen-peer-urls",
                            "http://127.0.0.1:" + std::to_string(peer_port),
                            "--initial-advertise-peer-urls",
                            "http://127.0.0.1:" + std::to_string(peer_port),
                            "--initial-cluster",
                            "tls=http://127.0.0.1:" + std::to_string(peer_port),
                            "--cert-file",
                            dir + "/server.pem",
                            "--key-file",
                            dir + "/server.key",
                            "--trusted-ca-file",
                            dir + "/ca.pem",
                            "--client-cert-auth",
                            "--max-txn-ops",
                            "4096"},
                           dir + "/etcd.log");
  ASSERT_GT(etcd, 0);
  const std::string base = "etcd+tls://" + endpoint + "/tls?ca=" + dir + "/ca.pem";
  auto open = [&](const std::string& extra) {
    auto url = server::ParseStoreUrl(base + extra);
    EXPECT_TRUE(url) << url.error().message;
    return server::OpenStore(*url);
  };
  const std::string certs = "&cert=" + dir + "/client.pem&key=" + dir + "/client.key";
  Result<std::unique_ptr<server::Store>> store = Fail("not opened");
  WaitForSeconds([&] { return (store = open(certs)).has_value(); }, 20);
  ASSERT_TRUE(store) << store.error().message << "\n" << Slurp(dir + "/etcd.log");
  server::Change c{.jobs = {{"j-000001", 1, "pending", "{\"secret\":\"s3cr3t\"}"}}};
  ASSERT_TRUE((*store)->Write({&c})) << Slurp(dir + "/etcd.log");
  auto back = (*store)->ReadJob("j-000001");
  ASSERT_TRUE(back && *back);
  EXPECT_EQ((*back)->doc, "{\"secret\":\"s3cr3t\"}");

  auto anonymous = open("");
  ASSERT_FALSE(anonymous) << "etcd took a client without a certificate";
  EXPECT_NE(anonymous.error().message.find("client certificate"), std::string::npos)
      << anonymous.error().message;
  auto url =
      server::ParseStoreUrl("etcd+tls://" + endpoint + "/tls?ca=" + dir + "/other.pem" + certs);
  ASSERT_TRUE(url);
  auto wrong_ca = server::OpenStore(*url);
  EXPECT_FALSE(wrong_ca) << "a CA that did not sign etcd's certificate was trusted";
  ::kill(etcd, SIGKILL);
  ::waitpid(etcd, nullptr, 0);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace tianshu::testing
