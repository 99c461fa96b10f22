#include "tianshu/wire/wire.h"

#include "tianshu/wire/internal/object_reader.h"

// The message families live in registration.cc, orders.cc and reports.cc; what is left here is
// common to all of them: compact text and the error body every 4xx/5xx carries.
namespace tianshu::wire {

using internal::Finish;
using internal::ObjectReader;
using internal::ParseText;
using nlohmann::json;

json ToJson(const ErrorBody& e) {
  json j = {{"code", e.code}, {"message", e.message}};
  if (!e.details.empty()) j["details"] = e.details;
  return {{"error", j}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Result<ErrorBody> ParseErrorBody(std::string_view text) {
  auto j = ParseText(text);
  if (!j) return std::unexpected(j.error());
  std::vector<std::string> e;
  ErrorBody b;
  ObjectReader top(*j, "", &e, {"error"});
  if (const json* inner = top.Object("error", true)) {
    ObjectReader o(*inner, "error", &e, {"code", "message", "details"});
    o.Int("code", &b.code, 100, 599);
    o.Str("message", &b.message, false, 1 << 20);
    o.StrList("details", &b.details);
  }
  return Finish(std::move(b), e);
}

}  // namespace tianshu::wire
