// A bounded loopback load test: 2,000 submissions from 16 concurrent clients, one in eight of
// them invalid. Every accepted job is in the store afterwards (read back through the store
// interface once the server has stopped); every rejected one got an error body.
#include <atomic>
#include <mutex>
#include <thread>

#include "server_fixture.h"
#include "tianshu/server/store.h"

namespace tianshu::testing {
namespace {

TEST(ServerLoad, TwoThousandSubmissionsFromSixteenClients) {
  constexpr int kClients = 16;
  constexpr int kPerClient = 125;
  ServerFixture f;
  f.Start();
  std::mutex mu;
  std::vector<std::string> accepted;
  std::atomic<int> rejected{0}, errors_with_body{0}, transport{0}, unexpected{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = f.NewClient();
      for (int i = 0; i < kPerClient; ++i) {
        bool bad = (t * kPerClient + i) % 8 == 0;
        std::string body = bad ? "kind: training\nname: bad\nmodel: {profile: llama2-7b}\ngpus: 0\n"
                               : JobYaml("load-" + std::to_string(t) + "-" + std::to_string(i), 1);
        auto r = c->Post("/v1/jobs", body, "application/yaml");
        if (!r) {
          if (transport++ == 0) std::cerr << "transport error: " << r.error().message << "\n";
          continue;
        }
        if (r->status == 201) {
          std::lock_guard l(mu);
          accepted.push_back(r->body["id"]);
          if (bad) unexpected++;
        } else {
          rejected++;
          if (r->status == 400 && !r->ErrorText().empty() && r->body.contains("error")) {
            errors_with_body++;
          }
          if (!bad) unexpected++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "load: " << accepted.size() << " accepted, " << rejected << " rejected in " << secs
            << " s (" << static_cast<double>(kClients * kPerClient) / secs << " requests/s)\n";
  EXPECT_EQ(transport, 0);
  EXPECT_EQ(unexpected, 0);
  EXPECT_EQ(static_cast<int>(accepted.size()) + rejected, kClients * kPerClient);
  EXPECT_EQ(rejected, kClients * kPerClient / 8);
  EXPECT_EQ(errors_with_body, rejected.load());
  EXPECT_EQ(f.Get("/v1/jobs?limit=1").body["total"], accepted.size());
  f.Stop();

  auto url = server::ParseStoreUrl(f.store().empty() ? f.dir() + "/tianshu.db" : f.store());
  ASSERT_TRUE(url) << url.error().message;
  auto store = server::OpenStore(*url);
  ASSERT_TRUE(store) << store.error().message;
  auto all = (*store)->Load(10);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->jobs.size(), accepted.size());
  for (const auto& id : accepted) {
    auto row = (*store)->ReadJob(id);
    ASSERT_TRUE(row);
    ASSERT_TRUE(row->has_value()) << id << " was accepted but is not in the store";
    EXPECT_EQ((*row)->state, "pending");
  }
}

}  // namespace
}  // namespace tianshu::testing
