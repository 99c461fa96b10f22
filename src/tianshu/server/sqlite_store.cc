#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "tianshu/server/store.h"

namespace tianshu::server {
namespace {

// Each migration takes the schema from version i to i + 1 (index i). Never edit a released
// migration: add one.
const char* const kMigrations[] = {
    // 0 -> 1: the tables.
    "CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state TEXT NOT NULL,"
    "                  doc TEXT NOT NULL);"
    "CREATE TABLE nodes(name TEXT PRIMARY KEY, doc TEXT NOT NULL);"
    "CREATE TABLE orders(id TEXT PRIMARY KEY, node TEXT NOT NULL, job_id TEXT NOT NULL,"
    "                    status TEXT NOT NULL, doc TEXT NOT NULL);"
    "CREATE TABLE events(seq INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, doc TEXT NOT NULL);"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    // 1 -> 2: indexes for the start-up reads.
    "CREATE INDEX jobs_by_seq ON jobs(seq);"
    "CREATE INDEX orders_by_status ON orders(status);",
    // 2 -> 3: a job's per-rank progress as rows of its own (records of v2 carry it inside the
    // job's document; the control plane moves it out when it loads them).
    "CREATE TABLE job_progress(job_id TEXT NOT NULL, key TEXT NOT NULL,"
    "                          attempt INTEGER NOT NULL, value TEXT NOT NULL,"
    "                          PRIMARY KEY(job_id, key)) WITHOUT ROWID;",
};
static_assert(std::size(kMigrations) == kSchemaVersion);

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  int Step() { return sqlite3_step(s_); }
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string Col(int i) {
    const unsigned char* t = sqlite3_column_text(s_, i);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           static_cast<size_t>(sqlite3_column_bytes(s_, i)))
             : std::string();
  }
  int64_t ColInt(int i) { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(std::string path) : path_(std::move(path)) {}
  ~SqliteStore() override {
    put_job_.reset();
    put_node_.reset();
    delete_node_.reset();
    put_order_.reset();
    put_event_.reset();
    put_meta_.reset();
    put_progress_.reset();
    reset_progress_.reset();
    if (db_) sqlite3_close(db_);
  }

  Status Open() {
    std::error_code ec;
    auto dir = std::filesystem::path(path_).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (sqlite3_open_v2(path_.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
      return Fail("cannot open store ", path_, ": ", Msg());
    }
    sqlite3_busy_timeout(db_, 5000);
    for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                               "PRAGMA foreign_keys=ON", "PRAGMA wal_autocheckpoint=4000"}) {
      if (auto s = Exec(pragma); !s) return s;
    }
    if (auto s = Migrate(); !s) return s;
    put_job_ = std::make_unique<Stmt>(
        db_, "INSERT OR REPLACE INTO jobs(id, seq, state, doc) VALUES(?1, ?2, ?3, ?4)");
    put_node_ =
        std::make_unique<Stmt>(db_, "INSERT OR REPLACE INTO nodes(name, doc) VALUES(?1, ?2)");
    put_order_ = std::make_unique<Stmt>(
        db_, "INSERT OR REPLACE INTO orders(id, node, job_id, status, doc) VALUES(?1,?2,?3,?4,?5)");
    put_event_ = std::make_unique<Stmt>(
        db_, "INSERT OR REPLACE INTO events(seq, time_ms, doc) VALUES(?1, ?2, ?3)");
    put_meta_ =
        std::make_unique<Stmt>(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1,?2)");
    put_progress_ = std::make_unique<Stmt>(
        db_,
        "INSERT OR REPLACE INTO job_progress(job_id, key, attempt, value) VALUES(?1,?2,?3,?4)");
    reset_progress_ = std::make_unique<Stmt>(db_, "DELETE FROM job_progress WHERE job_id = ?1");
    delete_node_ = std::make_unique<Stmt>(db_, "DELETE FROM nodes WHERE name = ?1");
    for (auto* s :
         {put_job_.get(), put_node_.get(), put_order_.get(), put_event_.get(), put_meta_.get(),
          put_progress_.get(), reset_progress_.get(), delete_node_.get()}) {
      if (!s->ok()) return Fail("store ", path_, ": cannot prepare statement: ", Msg());
    }
    return Ok();
  }

  Result<StoredState> Load(size_t max_events) override {
    StoredState out;
    out.schema_version = kSchemaVersion;
    {
      Stmt q(db_, "SELECT id, seq, state, doc FROM jobs ORDER BY seq");
      while (q.Step() == SQLITE_ROW) {
        out.jobs.push_back({q.Col(0), q.ColInt(1), q.Col(2), q.Col(3)});
      }
    }
    {
      Stmt q(db_, "SELECT name, doc FROM nodes ORDER BY name");
      while (q.Step() == SQLITE_ROW) out.nodes.push_back({q.Col(0), q.Col(1)});
    }
    {
      Stmt q(db_,
             "SELECT id, node, job_id, status, doc FROM orders WHERE status != 'done' ORDER BY "
             "rowid");
      while (q.Step() == SQLITE_ROW) {
        out.orders.push_back({q.Col(0), q.Col(1), q.Col(2), q.Col(3), q.Col(4)});
      }
    }
    {
      Stmt q(db_, "SELECT seq, time_ms, doc FROM events ORDER BY seq DESC LIMIT ?1");
      q.Int(1, static_cast<int64_t>(max_events));
      while (q.Step() == SQLITE_ROW) out.events.push_back({q.ColInt(0), q.ColInt(1), q.Col(2)});
      std::reverse(out.events.begin(), out.events.end());
    }
    {
      Stmt q(db_, "SELECT key, value FROM meta");
      while (q.Step() == SQLITE_ROW) out.meta[q.Col(0)] = q.Col(1);
    }
    {
      Stmt q(db_, "SELECT job_id, attempt, key, value FROM job_progress");
      while (q.Step() == SQLITE_ROW) {
        out.progress.push_back({q.Col(0), static_cast<int>(q.ColInt(1)), q.Col(2), q.Col(3)});
      }
    }
    return out;
  }

  Status Write(const std::vector<const Change*>& batch) override {
    if (auto s = Exec("BEGIN IMMEDIATE"); !s) return s;
    for (const Change* c : batch) {
      for (const auto& j : c->jobs) {
        put_job_->Text(1, j.id);
        put_job_->Int(2, j.seq);
        put_job_->Text(3, j.state);
        put_job_->Text(4, j.doc);
        if (!Done(*put_job_)) return Abort("job " + j.id);
      }
      for (const auto& n : c->nodes) {
        put_node_->Text(1, n.name);
        put_node_->Text(2, n.doc);
        if (!Done(*put_node_)) return Abort("node " + n.name);
      }
      for (const auto& name : c->nodes_removed) {
        delete_node_->Text(1, name);
        if (!Done(*delete_node_)) return Abort("node " + name);
      }
      for (const auto& o : c->orders) {
        put_order_->Text(1, o.id);
        put_order_->Text(2, o.node);
        put_order_->Text(3, o.job_id);
        put_order_->Text(4, o.status);
        put_order_->Text(5, o.doc);
        if (!Done(*put_order_)) return Abort("order " + o.id);
      }
      for (const auto& e : c->events) {
        put_event_->Int(1, e.seq);
        put_event_->Int(2, e.time_ms);
        put_event_->Text(3, e.doc);
        if (!Done(*put_event_)) return Abort("event");
      }
      for (const auto& [k, v] : c->meta) {
        put_meta_->Text(1, k);
        put_meta_->Text(2, v);
        if (!Done(*put_meta_)) return Abort("meta " + k);
      }
      for (const auto& id : c->progress_reset) {
        reset_progress_->Text(1, id);
        if (!Done(*reset_progress_)) return Abort("progress of " + id);
      }
      for (const auto& p : c->progress) {
        put_progress_->Text(1, p.job_id);
        put_progress_->Text(2, p.key);
        put_progress_->Int(3, p.attempt);
        put_progress_->Text(4, p.value);
        if (!Done(*put_progress_)) return Abort("progress of " + p.job_id);
      }
    }
    if (auto s = Exec("COMMIT"); !s) {
      (void)Exec("ROLLBACK");
      return s;
    }
    return Ok();
  }

  Result<std::optional<JobRow>> ReadJob(const std::string& id) override {
    Stmt q(db_, "SELECT id, seq, state, doc FROM jobs WHERE id = ?1");
    q.Text(1, id);
    int rc = q.Step();
    if (rc == SQLITE_ROW) return JobRow{q.Col(0), q.ColInt(1), q.Col(2), q.Col(3)};
    if (rc == SQLITE_DONE) return std::optional<JobRow>();
    return Fail("store: ", Msg());
  }

  std::string Describe() const override {
    return "sqlite:" + path_ + " (WAL, synchronous=FULL, schema v" +
           std::to_string(kSchemaVersion) + ")";
  }

 private:
  std::string Msg() const { return db_ ? sqlite3_errmsg(db_) : "out of memory"; }

  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : Msg();
      sqlite3_free(err);
      return Fail("store ", path_, ": ", sql, ": ", m);
    }
    return Ok();
  }

  bool Done(Stmt& s) {
    int rc = s.Step();
    s.Reset();
    return rc == SQLITE_DONE;
  }

  Status Abort(const std::string& what) {
    std::string m = Msg();
    (void)Exec("ROLLBACK");
    return Fail("store ", path_, ": cannot write ", what, ": ", m);
  }

  Status Migrate() {
    int version = 0;
    {
      Stmt q(db_, "PRAGMA user_version");
      if (q.Step() == SQLITE_ROW) version = static_cast<int>(q.ColInt(0));
    }
    if (version > kSchemaVersion) {
      return Fail("store ", path_, " has schema v", std::to_string(version),
                  ", newer than this build's v", std::to_string(kSchemaVersion),
                  ": upgrade tianshu");
    }
    if (version == kSchemaVersion) return Ok();
    if (auto s = Exec("BEGIN IMMEDIATE"); !s) return s;
    for (int v = version; v < kSchemaVersion; ++v) {
      if (auto s = Exec(kMigrations[v]); !s) {
        (void)Exec("ROLLBACK");
        return s;
      }
    }
    std::string set = "PRAGMA user_version=" + std::to_string(kSchemaVersion);
    if (auto s = Exec(set.c_str()); !s) {
      (void)Exec("ROLLBACK");
      return s;
    }
    return Exec("COMMIT");
  }

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<Stmt> put_job_, put_node_, delete_node_, put_order_, put_event_, put_meta_,
      put_progress_, reset_progress_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path) {
  auto s = std::make_unique<SqliteStore>(path);
  if (auto st = s->Open(); !st) return std::unexpected(st.error());
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace tianshu::server
