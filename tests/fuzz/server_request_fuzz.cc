// libFuzzer target for the control plane's request parsers: the job submission body (YAML and
// JSON, with its run: section), the agent messages of the wire format, the job ids of hold and
// release, and the query
// parameters of the list and event calls. The first byte picks the parser; the rest is the
// input. Every input must give a value or an error, never a crash, a hang or a leak.
//   build-server/tests/server_request_fuzz -max_total_time=60 CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "tianshu/base/strings.h"
#include "tianshu/server/requests.h"
#include "tianshu/wire/wire.h"

namespace {

std::map<std::string, std::string> QueryParams(const std::string& s) {
  std::map<std::string, std::string> out;
  for (const auto& pair : tianshu::SplitString(s, '&')) {
    size_t eq = pair.find('=');
    out[pair.substr(0, eq)] = eq == std::string::npos ? "" : pair.substr(eq + 1);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace tianshu;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 10) {
    case 0:
      (void)server::ParseSubmitBody("application/yaml", text, "fuzz.yaml");
      break;
    case 1:
      (void)server::ParseSubmitBody("application/json", text, "fuzz.json");
      break;
    case 2:
      (void)wire::ParseRegisterRequest(text);
      break;
    case 3:
      (void)wire::ParseHeartbeat(text);
      break;
    case 4:
      (void)wire::ParseReportBatch(text);
      break;
    case 5: {
      auto b = wire::ParseWorkBatch(text);
      if (b) (void)wire::Dump(wire::ToJson(*b));  // what parses also serialises
      break;
    }
    case 6:
      (void)server::ParseJobFilter(QueryParams(text));
      break;
    case 7:
      (void)server::ParseEventQuery(QueryParams(text));
      break;
    case 8:
      (void)server::ParseJobId(text);
      (void)server::ParseJobIds(text);
      (void)wire::ParseErrorBody(text);
      break;
    case 9:
      (void)server::ParseSubmitBody(text.substr(0, text.find('\n')), text, text.substr(0, 16));
      break;
  }
  return 0;
}
