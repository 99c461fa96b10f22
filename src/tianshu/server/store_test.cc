#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>

#include "tianshu/server/committer.h"
#include "tianshu/server/store.h"

namespace tianshu::server {
namespace {

std::string TempDb() {
  std::string p = (std::filesystem::temp_directory_path() / "tianshu-store-XXXXXX").string();
  return std::string(mkdtemp(p.data())) + "/t.db";
}

TEST(SqliteStore, WritesAreDurableAndLoadReadsThemBack) {
  std::string path = TempDb();
  {
    auto s = OpenSqliteStore(path);
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
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s);
  auto st = (*s)->Load(1);
  ASSERT_TRUE(st);
  ASSERT_EQ(st->jobs.size(), 1u);
  EXPECT_EQ(st->jobs[0].state, "running");  // the later change of the same key wins
  EXPECT_EQ(st->orders.size(), 1u);         // done orders are not loaded
  ASSERT_EQ(st->events.size(), 1u);         // the newest max_events
  EXPECT_EQ(st->events[0].seq, 2);
  EXPECT_EQ(st->meta.at("k"), "v");
  auto row = (*s)->ReadJob("j-000001");
  ASSERT_TRUE(row && row->has_value());
  EXPECT_EQ((*row)->doc, "{\"x\":1}");
  EXPECT_FALSE((*(*s)->ReadJob("j-000002")).has_value());
}

// Progress rows: a later row of the same job and key replaces the earlier; a reset deletes every
// row of its job before the change's own rows are written, whatever came in earlier changes.
TEST(SqliteStore, ProgressRowsAreReplacedAndResetPerJob) {
  std::string path = TempDb();
  auto s = OpenSqliteStore(path);
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

TEST(Committer, GroupsConcurrentChangesAndKeepsTheirOrder) {
  auto s = OpenSqliteStore(TempDb());
  ASSERT_TRUE(s);
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

}  // namespace
}  // namespace tianshu::server
