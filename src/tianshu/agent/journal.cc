#include "tianshu/agent/journal.h"

#include "tianshu/base/strings.h"

namespace tianshu::agent {

Status Journal::Append(const nlohmann::json& record) {
  return fs_.Append(path_, record.dump() + "\n");
}

Result<std::vector<nlohmann::json>> Journal::ReadAll() {
  std::vector<nlohmann::json> out;
  if (!fs_.Exists(path_)) return out;
  auto text = fs_.Read(path_);
  if (!text) return std::unexpected(text.error());
  auto lines = SplitString(*text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    if (Trim(lines[i]).empty()) continue;
    auto j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      bool last = i + 1 == lines.size() || (i + 2 == lines.size() && lines.back().empty());
      if (last) break;  // torn final append
      return Fail(path_, ":", std::to_string(i + 1), ": corrupt journal record");
    }
    out.push_back(std::move(j));
  }
  return out;
}

Status Journal::Rewrite(const std::vector<nlohmann::json>& records) {
  std::string text;
  for (const auto& r : records) text += r.dump() + "\n";
  return fs_.Replace(path_, text);
}

}  // namespace tianshu::agent
