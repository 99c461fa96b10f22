// The control plane's durable store, behind a narrow interface: load everything at start,
// write batches of changes atomically and durably. The server keeps its working state in
// memory and writes every state change through here before it answers; an etcd-backed store
// only needs these three calls (a transaction of puts/deletes, and a range read at start).
//
//   auto store = OpenSqliteStore("/var/lib/tianshu/tianshu.db");
//   Status s = (*store)->Write({Change{.jobs = {{"j-000001", job_doc}}}});
// Rows of one table replace rows of the same key. A job is its record plus its progress rows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/server/etcd_client.h"

namespace tianshu::server {

// One row of a table: a key and an opaque document (JSON text) with a few indexed fields.
struct JobRow {
  std::string id;     // "j-000001"
  int64_t seq = 0;    // numeric part, submission order
  std::string state;  // "pending", "running", ...
  std::string doc;    // the full job record as JSON
};
struct NodeRow {
  std::string name;
  std::string doc;
};
struct OrderRow {
  std::string id;
  std::string node;
  std::string job_id;
  std::string status;  // "outstanding", "accepted", "done"
  std::string doc;     // the wire::WorkOrder as JSON
};
struct EventRow {
  int64_t seq = 0;
  int64_t time_ms = 0;
  std::string doc;  // the event as JSON
};
// One fact about a job's current attempt, kept apart from the job's record so that a report
// about one rank of a gang of a thousand writes a few bytes instead of the whole record. Keys:
// "a/NODE" the node journaled the launch, "s/RANK" the rank started, "x/RANK" the rank exited
// (value "CODE SIGNAL"), "r/KEY" another report already applied (value "").
struct ProgressRow {
  std::string job_id;
  int attempt = 0;  // rows of another attempt than the job's are ignored when loaded
  std::string key;
  std::string value;
};

// One state change: everything in it is written, or nothing. Rows replace rows of the same key.
struct Change {
  std::vector<JobRow> jobs;
  std::vector<NodeRow> nodes;
  std::vector<std::string> nodes_removed;  // node rows deleted (after `nodes` are written)
  std::vector<OrderRow> orders;
  std::vector<EventRow> events;
  std::map<std::string, std::string> meta;  // counters and the server id
  // Progress: first every row of these jobs is deleted (a new attempt starts clean), then the
  // rows are written.
  std::vector<std::string> progress_reset;
  std::vector<ProgressRow> progress;
};

// What Load returns: every job and node, the outstanding orders, the newest events.
struct StoredState {
  int schema_version = 0;
  std::vector<JobRow> jobs;  // in seq order
  std::vector<NodeRow> nodes;
  std::vector<OrderRow> orders;  // status "outstanding" or "accepted" only
  std::vector<EventRow> events;  // the newest `max_events`, in seq order
  std::map<std::string, std::string> meta;
  std::vector<ProgressRow> progress;  // every job's, in no particular order
};

// What one change may hold at most: operations (rows written or deleted) and bytes.
struct StoreLimits {
  size_t max_ops = 0;
  size_t max_bytes = 0;
};

class Store {
 public:
  virtual ~Store() = default;
  // The most one change may hold (etcd's transaction limits); none for SQLite. The control
  // plane refuses a request whose change would not fit, before it changes anything: one
  // oversized change would otherwise fail the store.
  virtual std::optional<StoreLimits> Limits() const { return std::nullopt; }
  // Reads the whole state (at start). Not concurrent with Write.
  [[nodiscard]] virtual Result<StoredState> Load(size_t max_events) = 0;
  // Writes the changes in order, durably: when it returns Ok, all of them survive a crash or
  // power loss. SQLite writes a batch as one transaction, so on error none of it was written;
  // etcd writes one that does not fit a transaction as several, each holding whole changes, so
  // on error a first part of the batch (whole changes, in order) may have been written, as if
  // the server had crashed after it. Called from one thread at a time (the Committer
  // serialises callers).
  [[nodiscard]] virtual Status Write(const std::vector<const Change*>& batch) = 0;
  // The store's version now, which every committed write changes (etcd's revision, read from a
  // quorum); 0 when the store cannot tell (SQLite). A follower re-reads the store for a read only
  // when it changed since its last Load.
  [[nodiscard]] virtual Result<int64_t> Revision() { return int64_t{0}; }
  // Reads one job's row (for tests and tools that inspect a store after a crash).
  [[nodiscard]] virtual Result<std::optional<JobRow>> ReadJob(const std::string& id) = 0;
  virtual std::string Describe() const = 0;
};

// The schema version this build writes; older stores are migrated on open.
inline constexpr int kSchemaVersion = 3;

// SQLite in WAL mode with synchronous=FULL. Creates the file (and its directory) if missing,
// migrates an older schema in one transaction, refuses a newer one.
[[nodiscard]] Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

// The store on etcd (etcd_store.cc): every record one key under `prefix`, a batch written as
// etcd transactions that each hold whole changes. A write returns once etcd has committed it
// (a quorum of members has it on disk). While etcd cannot serve (no quorum, unreachable), a
// request is tried again for up to unavailable_wait_ms, then fails.
inline constexpr int kMaxTxnOps = 16384;  // the most max_txn_ops may be
struct EtcdStoreOptions {
  EtcdOptions etcd;
  std::string prefix = "/tianshu/";
  int max_txn_ops = 1024;                  // etcd's --max-txn-ops must be at least this
  size_t max_request_bytes = 1536 * 1024;  // etcd's --max-request-bytes (default 1.5 MiB)
  int64_t events_kept = 100000;            // older events are deleted (etcd is no log store)
  int64_t unavailable_wait_ms = 10000;
  // A replica's store: every write needs its leadership (leader.h); one refused fails.
  std::optional<EtcdGuard> guard;
};
[[nodiscard]] Result<std::unique_ptr<Store>> OpenEtcdStore(EtcdStoreOptions options);

// A store named by URL, as `tianshu serve --store` and `tianshu store copy` take it:
//   sqlite:PATH (or a plain path)                     the SQLite store in that file
//   etcd://HOST:PORT[,HOST:PORT...][/PREFIX][?OPTIONS]    etcd over plain HTTP
//   etcd+tls://HOST:PORT[,...][/PREFIX]?ca=FILE[&cert=FILE&key=FILE][&OPTIONS]   over TLS
// OPTIONS: max-txn-ops=N, max-request-bytes=N, events-kept=N, timeout-ms=N, and
// insecure-plain-http=true, without which plain etcd:// is refused to a host off loopback (the
// store holds the jobs' environments, API keys among them).
struct StoreUrl {
  std::string sqlite_path;  // set for SQLite
  std::optional<EtcdStoreOptions> etcd;
};
[[nodiscard]] Result<StoreUrl> ParseStoreUrl(const std::string& url);
// Opens it (a SQLite file is created 0600 with its directory, as the server's own is).
[[nodiscard]] Result<std::unique_ptr<Store>> OpenStore(const StoreUrl& url);

// What `tianshu store copy` copied, table by table, once the destination read back equal.
struct CopyCounts {
  int64_t jobs = 0, nodes = 0, orders = 0, events = 0, meta = 0, progress = 0;
  int64_t events_in_source = 0;  // the destination may keep fewer (etcd's events_kept)
};
// Copies every record of `from` into `to`, which must hold none (a fresh file or prefix); done
// orders are not copied (no server reads them back). Then reads `to` back and compares it with
// `from`, record by record. `progress` is told the records written so far and their total.
// Stop the servers on both first: the copy is of one moment of `from`.
[[nodiscard]] Result<CopyCounts> CopyStore(Store& from, Store& to,
                                           const std::function<void(int64_t, int64_t)>& progress);

}  // namespace tianshu::server
