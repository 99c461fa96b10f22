#include "tianshu/wire/internal/object_reader.h"

#include "tianshu/base/strings.h"

namespace tianshu::wire::internal {

Result<json> ParseText(std::string_view text) {
  // Messages nest 4 levels; a deeper one is refused before it is built (and destroyed)
  // recursively.
  constexpr int kMaxNesting = 64;
  if (!JsonNestingWithin(text, kMaxNesting)) {
    return Fail("JSON nested deeper than ", std::to_string(kMaxNesting), " levels");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail("malformed JSON");
  return j;
}

json Versioned(json j) {
  j["version"] = kWireVersion;
  return j;
}

}  // namespace tianshu::wire::internal
