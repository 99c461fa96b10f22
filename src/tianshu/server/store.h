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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tianshu/base/status.h"

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

class Store {
 public:
  virtual ~Store() = default;
  // Reads the whole state (at start). Not concurrent with Write.
  [[nodiscard]] virtual Result<StoredState> Load(size_t max_events) = 0;
  // Writes the changes in order, as one durable transaction: when it returns Ok, all of them
  // survive a crash or power loss; on error none of them was written. Called from one thread
  // at a time (the Committer serialises callers).
  [[nodiscard]] virtual Status Write(const std::vector<const Change*>& batch) = 0;
  // Reads one job's row (for tests and tools that inspect a store after a crash).
  [[nodiscard]] virtual Result<std::optional<JobRow>> ReadJob(const std::string& id) = 0;
  virtual std::string Describe() const = 0;
};

// The schema version this build writes; older stores are migrated on open.
inline constexpr int kSchemaVersion = 3;

// SQLite in WAL mode with synchronous=FULL. Creates the file (and its directory) if missing,
// migrates an older schema in one transaction, refuses a newer one.
[[nodiscard]] Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

}  // namespace tianshu::server
