#include "tianshu/agent/journal.h"

#include "tianshu/base/strings.h"

namespace tianshu::agent {

Status Journal::AppendAll(std::span<const nlohmann::json> records) {
  std::string text;
  // Invalid UTF-8 in a message is replaced, never thrown (the batch is written from a
  // destructor).
  for (const auto& r : records) {
    text += r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return fs_.Append(path_, text);
}

Result<Journal::Contents> Journal::ReadAll() {
  Contents out;
  if (!fs_.Exists(path_)) return out;
  auto text = fs_.Read(path_);
  if (!text) return std::unexpected(text.error());
  auto lines = SplitString(*text, '\n');
  std::string rejected;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (Trim(lines[i]).empty()) continue;
    auto j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      // A torn append (a crash mid-write) is a last line without its newline; a complete
      // line that is not a record was put there.
      if (i + 1 == lines.size()) break;
      out.skipped.push_back(path_ + ":" + std::to_string(i + 1) + std::string(kCorruptRecord));
      rejected += lines[i].substr(0, 4096) + "\n";
      continue;
    }
    out.records.push_back(std::move(j));
  }
  if (!rejected.empty()) (void)fs_.Append(path_ + ".rejected", rejected);
  return out;
}

Status Journal::Rewrite(const std::vector<nlohmann::json>& records) {
  std::string text;
  for (const auto& r : records) text += r.dump() + "\n";
  return fs_.Replace(path_, text, SystemFiles::Sync::kDurable);
}

}  // namespace tianshu::agent
