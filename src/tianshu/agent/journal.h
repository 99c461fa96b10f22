// The agent's local journal: one JSON object per line, appended and fsynced before the agent
// acts, so that a restarted agent knows every order it accepted, every rank it started (pid
// and kernel start time) and every exit it saw — and neither loses nor duplicates a rank.
//   Journal j(fs, "/var/lib/tianshu/agent/journal.jsonl");
//   (void)j.Append({{"t", "order"}, {"order", wire::ToJson(order)}});
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/agent/system_files.h"
#include "tianshu/base/status.h"

namespace tianshu::agent {

class Journal {
 public:
  Journal(SystemFiles& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  // Appends one record durably. Thread-compatible.
  [[nodiscard]] Status Append(const nlohmann::json& record);
  // Every record in order. A torn last line (crash mid-append) is skipped; a corrupt line in
  // the middle is an error naming its line number.
  [[nodiscard]] Result<std::vector<nlohmann::json>> ReadAll();
  // Atomically replaces the journal with `records` (compaction after recovery).
  [[nodiscard]] Status Rewrite(const std::vector<nlohmann::json>& records);
  const std::string& path() const { return path_; }

 private:
  SystemFiles& fs_;
  std::string path_;
};

}  // namespace tianshu::agent
