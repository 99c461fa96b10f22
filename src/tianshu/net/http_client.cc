#include "tianshu/net/http_client.h"

#include <httplib.h>

#include <filesystem>

namespace tianshu::net {

std::string ServerUrl(const std::string& server) {
  std::string url = server;
  if (url.find("://") == std::string::npos) url = "http://" + url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

Result<std::unique_ptr<httplib::Client>> OpenHttpClient(const std::string& server,
                                                        const std::string& ca_file) {
  const std::string url = ServerUrl(server);
  if (!url.starts_with("http://") && !url.starts_with("https://")) {
    return Fail("not a server address: ", server, " (expected host:port, http:// or https://)");
  }
  const bool tls = url.starts_with("https://");
  if (!ca_file.empty() && !tls) {
    return Fail("a CA file was given for ", server,
                ", which is plain HTTP: use https:// (nothing is sent in the clear silently)");
  }
  auto client = std::make_unique<httplib::Client>(url);
  if (!client->is_valid()) return Fail("not a server address: ", server);
  if (tls) {
    if (!ca_file.empty()) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(ca_file, ec)) {
        return Fail("cannot read CA file ", ca_file);
      }
      client->set_ca_cert_path(ca_file);
    }
    client->enable_server_certificate_verification(true);
  }
  return client;
}

}  // namespace tianshu::net
