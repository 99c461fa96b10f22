#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>

#include "testing/etcd_env.h"
#include "tianshu/server/committer.h"
#include "tianshu/server/store.h"

namespace tianshu::server {
namespace {

std::string TempDb() {
  std::string p = (std::filesystem::temp_directory_path() / "tianshu-store-XXXXXX").string();
  return std::string(mkdtemp(p.data())) + "/t.db";
}

// Each test runs on both stores: a fresh SQLite file, and a fresh prefix of the tests' etcd
// (tests/testing/etcd.sh; CTest starts it). Open() opens the same store again.
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      url_ = "sqlite:" + TempDb();
    } else {
      const std::string endpoints = testing::TestEtcdEndpoints();
      if (endpoints.empty()) {
        GTEST_FAIL() << "TIANSHU_TEST_ETCD names no etcd: run it under CTest, which starts one "
                        "(tests/testing/etcd.sh)";
      }
      url_ = "etcd://" + endpoints + testing::FreshEtcdPrefix();
    }
  }
  Result<std::unique_ptr<Store>> Open(const std::string& options = "") {
    auto url = ParseStoreUrl(url_ + options);
    if (!url) return std::unexpected(url.error());
    return OpenStore(*url);
  }
  bool Etcd() const { return GetParam() == "etcd"; }
  std::string url_;
};

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("sqlite", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(StoreTest, WritesAreDurableAndLoadReadsThemBack) {
  {
    auto s = Open();
    ASSERT_TRUE(s) << s.error().message;
    Change a{.jobs = {{"j-000001", 1, "pending", "{}"}},
             .nodes = {{"n0", "{}"}},
             .orders = {{"o1", "n0", "j-000001", "outstanding", "{}"},
                        {"o2", "n0", "j-000001", "done", "{}"}},
             .events = {{1, 10, "{\"seq\":1}"}, {2, 11, "{\"seq\":2}"}},
             .meta = {{"k", "v"}}};
    Change b{.jobs = {{"j-000001", 1, "running", "{\"x\":1}"}}};
    ASSERT_TRUE((*s)->Write({&a, &b}));
  }
  auto s = Open();
  ASSERT_TRUE(s);
  auto st = (*s)->Load(1);
  ASSERT_TRUE(st) << st.error().message;
  ASSERT_EQ(st->jobs.size(), 1u);
  EXPECT_EQ(st->jobs[0].state, "running");  // the later change of the same key wins
  EXPECT_EQ(st->jobs[0].seq, 1);
  ASSERT_EQ(st->orders.size(), 1u);  // done orders are not loaded
  EXPECT_EQ(st->orders[0].node, "n0");
  EXPECT_EQ(st->orders[0].status, "outstanding");
  ASSERT_EQ(st->events.size(), 1u);  // the newest max_events
  EXPECT_EQ(st->events[0].seq, 2);
  EXPECT_EQ(st->events[0].time_ms, 11);
  EXPECT_EQ(st->meta.at("k"), "v");
  auto row = (*s)->ReadJob("j-000001");
  ASSERT_TRUE(row && row->has_value());
  EXPECT_EQ((*row)->doc, "{\"x\":1}");
  EXPECT_EQ((*row)->state, "running");
  EXPECT_FALSE((*(*s)->ReadJob("j-000002")).has_value());
}

// The revision a follower checks before it answers a read: etcd's grows with every committed
// write (seen from another client of the same store too) and never goes back; SQLite's is 0 (it
// cannot tell, and has no followers). The tests' etcd is shared by tests running in parallel,
// whose writes move the revision too: so no check here that it stays put without a write.
TEST_P(StoreTest, RevisionMovesWithEveryWriteOnEtcd) {
  auto writer = Open();
  auto reader = Open();
  ASSERT_TRUE(writer && reader);
  auto before = (*reader)->Revision();
  ASSERT_TRUE(before) << before.error().message;
  EXPECT_GE(*(*reader)->Revision(), *before);
  Change c{.jobs = {{"j-000001", 1, "pending", "{}"}}};
  ASSERT_TRUE((*writer)->Write({&c}));
  auto after = (*reader)->Revision();
  ASSERT_TRUE(after);
  if (!Etcd()) {
    EXPECT_EQ(*before, 0);
    EXPECT_EQ(*after, 0);
    return;
  }
  EXPECT_GT(*before, 0);
  EXPECT_GT(*after, *before);
  EXPECT_GE(*(*writer)->Revision(), *after);
}

// Progress rows: a later row of the same job and key replaces the earlier; a reset deletes every
// row of its job before the change's own rows are written, whatever came in earlier changes.
// `tianshu node remove`: a node's row is deleted, durably; the others stay.
TEST_P(StoreTest, ARemovedNodesRowIsDeleted) {
  {
    auto s = Open();
    ASSERT_TRUE(s) << s.error().message;
    Change a{.nodes = {{"n0", "{\"cordoned\":true}"}, {"n1", "{}"}}};
    Change b{.nodes_removed = {"n0"}};
    ASSERT_TRUE((*s)->Write({&a}));
    ASSERT_TRUE((*s)->Write({&b}));
  }
  auto s = Open();
  ASSERT_TRUE(s) << s.error().message;
  auto st = (*s)->Load(1);
  ASSERT_TRUE(st) << st.error().message;
  ASSERT_EQ(st->nodes.size(), 1u);
  EXPECT_EQ(st->nodes[0].name, "n1");
  // Written and removed in one batch: gone.
  Change c{.nodes = {{"n2", "{}"}}};
  Change d{.nodes_removed = {"n2", "n1"}};
  ASSERT_TRUE((*s)->Write({&c, &d}));
  st = (*s)->Load(1);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->nodes.empty());
}

TEST_P(StoreTest, ProgressRowsAreReplacedAndResetPerJob) {
  auto s = Open();
  ASSERT_TRUE(s) << s.error().message;
  Change a{.progress = {{"j-000001", 1, "s/0", ""},
                        {"j-000001", 1, "x/0", "1 0"},
                        {"j-000002", 1, "s/0", ""}}};
  Change b{.progress = {{"j-000001", 1, "x/0", "0 9"}}};
  ASSERT_TRUE((*s)->Write({&a, &b}));
  auto st = (*s)->Load(1);
  ASSERT_TRUE(st);
  ASSERT_EQ(st->progress.size(), 3u);
  for (const auto& p : st->progress) {
    if (p.key == "x/0") {
      EXPECT_EQ(p.value, "0 9");
    }
  }
  Change reset{.progress_reset = {"j-000001"}, .progress = {{"j-000001", 2, "a/n0", ""}}};
  ASSERT_TRUE((*s)->Write({&reset}));
  st = (*s)->Load(1);
  ASSERT_TRUE(st);
  ASSERT_EQ(st->progress.size(), 2u);
  for (const auto& p : st->progress) {
    if (p.job_id == "j-000001") {
      EXPECT_EQ(p.attempt, 2);
      EXPECT_EQ(p.key, "a/n0");
    }
  }
  // Two attempts in one batch, rows of each, and a key written twice: what the last attempt
  // wrote is what is left.
  Change c1{.progress = {{"j-000003", 1, "s/0", ""}, {"j-000003", 1, "r/k/1", "x"}}};
  Change c2{.progress_reset = {"j-000003"}, .progress = {{"j-000003", 2, "s/0", ""}}};
  Change c3{.progress = {{"j-000003", 2, "x/0", "0 0"}, {"j-000003", 2, "x/0", "1 0"}}};
  Change c4{.progress_reset = {"j-000003"}};
  Change c5{.progress = {{"j-000003", 3, "r/k/1", "y"}}};
  ASSERT_TRUE((*s)->Write({&c1, &c2, &c3}));
  st = (*s)->Load(1);
  ASSERT_TRUE(st);
  std::map<std::string, std::string> rows;
  for (const auto& p : st->progress) {
    if (p.job_id == "j-000003") rows[std::to_string(p.attempt) + " " + p.key] = p.value;
  }
  EXPECT_EQ(rows, (std::map<std::string, std::string>{{"2 s/0", ""}, {"2 x/0", "1 0"}}));
  ASSERT_TRUE((*s)->Write({&c4, &c5}));
  st = (*s)->Load(1);
  ASSERT_TRUE(st);
  rows.clear();
  for (const auto& p : st->progress) {
    if (p.job_id == "j-000003") rows[std::to_string(p.attempt) + " " + p.key] = p.value;
  }
  EXPECT_EQ(rows, (std::map<std::string, std::string>{{"3 r/k/1", "y"}}));
}

TEST_P(StoreTest, CommitterGroupsConcurrentChangesAndKeepsTheirOrder) {
  auto s = Open();
  ASSERT_TRUE(s) << s.error().message;
  {
    Committer c(s->get(), 64);
    std::vector<uint64_t> tickets;
    for (int i = 0; i < 200; ++i) {
      tickets.push_back(c.Enqueue(Change{.jobs = {{"j", 1, std::to_string(i), "{}"}}}));
    }
    for (uint64_t t : tickets) ASSERT_TRUE(c.Wait(t));
    EXPECT_EQ(c.Durable(), tickets.back());
    EXPECT_EQ(c.Stats().changes, 200);
    EXPECT_LT(c.Stats().commits, 200);
  }
  auto job = (*s)->ReadJob("j");
  ASSERT_TRUE(job && *job);
  EXPECT_EQ((*job)->state, "199");
}

// etcd limits a transaction's operations (--max-txn-ops): a batch is split between changes,
// every change lands whole; a change larger than a transaction is written in pieces; a record
// larger than a transaction is refused with what to raise.
TEST_P(StoreTest, EtcdSplitsABatchAtChangesAndRefusesAChangeOverItsLimits) {
  if (!Etcd()) GTEST_SKIP() << "etcd's transaction limits";
  auto s = Open("?max-txn-ops=16");
  ASSERT_TRUE(s) << s.error().message;
  std::vector<Change> changes;
  for (int i = 0; i < 40; ++i) {
    changes.push_back(Change{.jobs = {{"j-" + std::to_string(i), i, "pending", "{}"}},
                             .orders = {{"o-" + std::to_string(i), "n0", "j", "outstanding", "{}"},
                                        {"o-" + std::to_string(i), "n0", "j", "accepted", "{}"}},
                             .events = {{i + 1, i, "{}"}}});
  }
  std::vector<const Change*> batch;
  for (const auto& c : changes) batch.push_back(&c);
  ASSERT_TRUE((*s)->Write(batch));
  auto st = (*s)->Load(100);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(st->jobs.size(), 40u);
  ASSERT_EQ(st->orders.size(), 40u);
  for (const auto& o : st->orders) EXPECT_EQ(o.status, "accepted");
  EXPECT_EQ(st->events.size(), 40u);
  for (size_t i = 0; i < st->jobs.size(); ++i) EXPECT_EQ(st->jobs[i].seq, int64_t(i));

  // A change larger than a transaction (a cycle starting many jobs) is written in pieces,
  // every row of it landing; refusing it would fail the store.
  Change big{.jobs = {{"j-big", 100, "starting", "{}"}}};
  for (int i = 0; i < 20; ++i) {
    big.nodes.push_back({"big-" + std::to_string(i), "{}"});
    big.orders.push_back(
        {"ob-" + std::to_string(i), "big-" + std::to_string(i), "j-big", "outstanding", "{}"});
  }
  ASSERT_TRUE((*s)->Write({&big}));
  st = (*s)->Load(1);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->nodes.size(), 20u);
  EXPECT_EQ(st->orders.size(), 60u);
  EXPECT_EQ(st->jobs.size(), 41u);
  // One record larger than a transaction's bytes cannot be written, and is refused.
  auto small = Open("?max-request-bytes=65536");
  ASSERT_TRUE(small) << small.error().message;
  Change huge{.jobs = {{"j-huge", 1, "pending", std::string(100000, 'x')}}};
  auto w = (*small)->Write({&huge});
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("--max-request-bytes"), std::string::npos) << w.error().message;

  // An etcd that allows fewer operations than the store asks for is refused at open.
  auto over = Open("?max-txn-ops=10000");
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message.find("--max-txn-ops=10000"), std::string::npos)
      << over.error().message;
}

TEST_P(StoreTest, EtcdKeepsTheNewestEventsAndRefusesANewerLayout) {
  if (!Etcd()) GTEST_SKIP() << "etcd's own layout";
  auto s = Open("?events-kept=100");
  ASSERT_TRUE(s) << s.error().message;
  for (int round = 0; round < 3; ++round) {
    Change c;
    for (int i = 1; i <= 100; ++i) c.events.push_back({round * 100 + i, i, "{}"});
    ASSERT_TRUE((*s)->Write({&c}));
  }
  auto st = (*s)->Load(1000);
  ASSERT_TRUE(st) << st.error().message;
  ASSERT_EQ(st->events.size(), 100u);  // the older ones are gone from etcd, not just unread
  EXPECT_EQ(st->events.front().seq, 201);
  EXPECT_EQ(st->events.back().seq, 300);

  // A later layout of the keys, written by a newer build: this one does not touch it.
  Change layout{.meta = {{"x", "y"}}};
  ASSERT_TRUE((*s)->Write({&layout}));
  const std::string endpoints = testing::TestEtcdEndpoints();
  const std::string prefix = url_.substr(url_.find('/', 7));
  auto etcd =
      EtcdClient::Open({.endpoints = {"http://" + endpoints.substr(0, endpoints.find(','))}});
  ASSERT_TRUE(etcd) << etcd.error().message;
  ASSERT_TRUE((*etcd)->Call("/v3/kv/put", {{"key", EtcdClient::Encode(prefix + "schema")},
                                           {"value", EtcdClient::Encode("2")}}));
  auto newer = Open();
  ASSERT_FALSE(newer);
  EXPECT_NE(newer.error().message.find("newer than this build"), std::string::npos)
      << newer.error().message;
}

// A store that loses one job's row on its way in: what the copy's check is there to catch.
class LossyStore : public Store {
 public:
  explicit LossyStore(std::unique_ptr<Store> s) : s_(std::move(s)) {}
  Result<StoredState> Load(size_t n) override { return s_->Load(n); }
  Status Write(const std::vector<const Change*>& batch) override {
    std::vector<Change> copies;
    for (const Change* c : batch) {
      copies.push_back(*c);
      std::erase_if(copies.back().jobs, [](const JobRow& r) { return r.id == "j-000003"; });
    }
    std::vector<const Change*> out;
    for (const auto& c : copies) out.push_back(&c);
    return s_->Write(out);
  }
  Result<std::optional<JobRow>> ReadJob(const std::string& id) override { return s_->ReadJob(id); }
  std::string Describe() const override { return "lossy " + s_->Describe(); }

 private:
  std::unique_ptr<Store> s_;
};

// `tianshu store copy`: SQLite to etcd and back, every record equal; never into a store that
// holds records; and a copy that does not read back equal is an error.
TEST(StoreCopy, SqliteToEtcdAndBackReadsEqualAndRefusesAStoreInUse) {
  const std::string endpoints = testing::TestEtcdEndpoints();
  ASSERT_FALSE(endpoints.empty()) << "run under CTest, which starts the tests' etcd";
  auto open = [](const std::string& url) {
    auto u = ParseStoreUrl(url);
    EXPECT_TRUE(u) << u.error().message;
    auto s = OpenStore(*u);
    EXPECT_TRUE(s) << s.error().message;
    return std::move(*s);
  };
  auto sqlite = open(TempDb());
  std::vector<Change> changes;
  for (int i = 1; i <= 300; ++i) {
    const std::string id =
        "j-" + std::string(6 - std::to_string(i).size(), '0') + std::to_string(i);
    changes.push_back(Change{
        .jobs = {{id, i, i % 3 ? "running" : "pending", "{\"n\":" + std::to_string(i) + "}"}},
        .orders = {{"o-" + id, "n" + std::to_string(i % 7), id, i % 2 ? "outstanding" : "done",
                    "{}"}},
        .events = {{i, 1000 + i, "{}"}},
        .progress = {{id, 1, "s/0", ""}, {id, 1, "x/0", "0 0"}}});
  }
  changes.push_back(Change{.nodes = {{"n0", "{\"a\":1}"}, {"n1", "{}"}},
                           .meta = {{"server_id", "s-1"}, {"next_job_seq", "301"}}});
  std::vector<const Change*> batch;
  for (const auto& c : changes) batch.push_back(&c);
  ASSERT_TRUE(sqlite->Write(batch));

  auto etcd = open("etcd://" + endpoints + testing::FreshEtcdPrefix());
  auto n = CopyStore(*sqlite, *etcd, nullptr);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->jobs, 300);
  EXPECT_EQ(n->orders, 150);  // the outstanding ones
  EXPECT_EQ(n->progress, 600);
  EXPECT_EQ(n->events, 300);
  EXPECT_EQ(n->nodes, 2);
  EXPECT_EQ(n->meta, 2);

  auto again = open(TempDb());
  auto back = CopyStore(*etcd, *again, nullptr);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->jobs, 300);
  auto st = again->Load(1000);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->jobs[41].doc, "{\"n\":42}");
  EXPECT_EQ(st->meta.at("server_id"), "s-1");

  auto refused = CopyStore(*sqlite, *etcd, nullptr);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("already holds records"), std::string::npos);

  LossyStore lossy(open(TempDb()));
  auto caught = CopyStore(*sqlite, lossy, nullptr);
  ASSERT_FALSE(caught);
  EXPECT_NE(caught.error().message.find("jobs: 300 in the source, 299 read back"),
            std::string::npos)
      << caught.error().message;
}

TEST(StoreUrl, NamesSqliteOrEtcdAndRefusesWhatItCannotUse) {
  EXPECT_EQ(ParseStoreUrl("/var/lib/tianshu/tianshu.db")->sqlite_path,
            "/var/lib/tianshu/tianshu.db");
  EXPECT_EQ(ParseStoreUrl("sqlite:a.db")->sqlite_path, "a.db");
  auto e = ParseStoreUrl(
      "etcd://h1:2379,h2:2379/prod?max-txn-ops=2048&events-kept=500&insecure-plain-http=true");
  ASSERT_TRUE(e && e->etcd) << (e ? "" : e.error().message);
  EXPECT_EQ(e->etcd->etcd.endpoints,
            (std::vector<std::string>{"http://h1:2379", "http://h2:2379"}));
  EXPECT_EQ(e->etcd->prefix, "/prod/");
  EXPECT_EQ(e->etcd->max_txn_ops, 2048);
  EXPECT_EQ(e->etcd->events_kept, 500);
  auto t = ParseStoreUrl("etcd+tls://h1:2379?ca=/etc/ca.pem&cert=/etc/c.pem&key=/etc/k.pem");
  ASSERT_TRUE(t && t->etcd);
  EXPECT_EQ(t->etcd->etcd.endpoints, (std::vector<std::string>{"https://h1:2379"}));
  EXPECT_EQ(t->etcd->prefix, "/tianshu/");
  EXPECT_EQ(t->etcd->etcd.ca_file, "/etc/ca.pem");
  for (const char* bad :
       {"etcd://h1:2379?ca=/x.pem", "etcd://h1", "etcd://h1:1?max-txn-ops=3",
        "etcd://h1:1?colour=red", "etcd://h1:1?max-txn-ops=20000", "redis://h:1", "sqlite:", ""}) {
    EXPECT_FALSE(ParseStoreUrl(bad)) << bad;
  }
}

TEST(SqliteStore, MigratesAnOlderSchemaAndRefusesANewerOne) {
  std::string path = TempDb();
  {
    // A version-1 store: the tables without the indexes of version 2.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state "
                           "TEXT NOT NULL, doc TEXT NOT NULL);"
                           "CREATE TABLE nodes(name TEXT PRIMARY KEY, doc TEXT NOT NULL);"
                           "CREATE TABLE orders(id TEXT PRIMARY KEY, node TEXT NOT NULL, job_id "
                           "TEXT NOT NULL, status TEXT NOT NULL, doc TEXT NOT NULL);"
                           "CREATE TABLE events(seq INTEGER PRIMARY KEY, time_ms INTEGER NOT "
                           "NULL, doc TEXT NOT NULL);"
                           "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                           "INSERT INTO jobs VALUES('j-000001', 1, 'pending', '{}');"
                           "PRAGMA user_version=1;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s) << s.error().message;
    auto loaded = (*s)->Load(10);
    ASSERT_TRUE(loaded) << loaded.error().message;
    EXPECT_EQ(loaded->jobs.size(), 1u);
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT count(*) FROM sqlite_master WHERE name IN ('jobs_by_seq', "
                     "'job_progress')",
                     -1, &q, nullptr);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(q, 0), 2);  // v2's index and v3's table
  sqlite3_finalize(q);
  sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto newer = OpenSqliteStore(path);
  ASSERT_FALSE(newer);
  EXPECT_NE(newer.error().message.find("newer than this build"), std::string::npos);
}

}  // namespace
}  // namespace tianshu::server
