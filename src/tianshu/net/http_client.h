// One way to open an HTTP(S) connection to the control plane, for the CLI, the agents and
// `tianshu doctor`: "host:port" means http://; "https://host:port" is TLS with the server's
// certificate verified (against `ca_file` when given, else the system's CAs), never a silent
// fallback to plain HTTP.
//
//   auto c = OpenHttpClient("https://cp0:7070", "/etc/tianshu/ca.pem");
//   if (!c) ...;                      // "not a server address", "cannot read CA file"
//   auto r = (*c)->Get("/healthz");
#pragma once

#include <memory>
#include <string>

#include "tianshu/base/status.h"

namespace httplib {
class Client;
}

namespace tianshu::net {

// The URL a server address means: "http://" added when it names no scheme, trailing '/' cut.
std::string ServerUrl(const std::string& server);

[[nodiscard]] Result<std::unique_ptr<httplib::Client>> OpenHttpClient(const std::string& server,
                                                                      const std::string& ca_file);

}  // namespace tianshu::net
