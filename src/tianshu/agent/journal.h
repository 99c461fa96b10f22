// The agent's local journal: one JSON object per line, appended before the agent acts, so that
// a restarted agent knows every order it accepted, every rank it started (pid and kernel start
// time) and every exit it saw — and neither loses nor duplicates a rank. Appends are not
// flushed to disk: the ranks they record are processes of this boot, gone after a crash of the
// machine (a journal of an earlier boot is not resumed: Agent::Recover), and a restarted agent
// reads what was written from the page cache.
//   Journal j(fs, "/var/lib/tianshu/agent/journal.jsonl");
//   (void)j.AppendAll(std::vector<nlohmann::json>{{{"t", "order"}, {"order", ...}}});
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/agent/system_files.h"
#include "tianshu/base/status.h"

namespace tianshu::agent {

class Journal {
 public:
  // How ReadAll names a line it skipped: "path:line" then this.
  static constexpr std::string_view kCorruptRecord = ": corrupt journal record";
  Journal(SystemFiles& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  // Appends records in order, with one write. Thread-compatible.
  [[nodiscard]] Status AppendAll(std::span<const nlohmann::json> records);
  struct Contents {
    std::vector<nlohmann::json> records;  // in order
    // Lines that are not a JSON object, as "path:line: corrupt journal record" (a torn last
    // line, without its newline, from a crash mid-append is not one of them: it is dropped).
    std::vector<std::string> skipped;
  };
  // Every readable record in order. A corrupt line is skipped, named in `skipped` and copied
  // to path() + ".rejected" for inspection: one bad line never keeps the agent from starting.
  // Fails only when the file cannot be read.
  [[nodiscard]] Result<Contents> ReadAll();
  // Atomically replaces the journal with `records` (compaction after recovery).
  [[nodiscard]] Status Rewrite(const std::vector<nlohmann::json>& records);
  const std::string& path() const { return path_; }

 private:
  SystemFiles& fs_;
  std::string path_;
};

}  // namespace tianshu::agent
