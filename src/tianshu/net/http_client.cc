#include "tianshu/net/http_client.h"

#include <httplib.h>

#include <filesystem>
#include <optional>

namespace tianshu::net {

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

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

Result<std::unique_ptr<ServerSet>> ServerSet::Open(const std::string& servers,
                                                   const std::string& ca_file) {
  auto set = std::unique_ptr<ServerSet>(new ServerSet());
  size_t start = 0;
  while (start <= servers.size()) {
    size_t comma = servers.find(',', start);
    if (comma == std::string::npos) comma = servers.size();
    const std::string one = servers.substr(start, comma - start);
    start = comma + 1;
    if (one.empty()) continue;
    auto c = OpenHttpClient(one, ca_file);
    if (!c) return std::unexpected(c.error());
    set->urls_.push_back(ServerUrl(one));
    set->clients_.push_back(std::move(*c));
  }
  if (set->clients_.empty()) return Fail("no server address in '", servers, "'");
  return set;
}

ServerSet::~ServerSet() = default;

httplib::Result ServerSet::Send(const std::function<httplib::Result(httplib::Client&)>& send) {
  const size_t n = clients_.size();
  size_t at = current_.load() % n;
  for (size_t tries = 0;; ++tries) {
    httplib::Result r = send(*clients_[at]);
    size_t next = (at + 1) % n;
    const bool never_reached = !r && (r.error() == httplib::Error::Connection ||
                                      r.error() == httplib::Error::ConnectionTimeout);
    const bool follower =
        r && r->status == 503 && r->get_header_value("X-Tianshu-Role") == "follower";
    // A follower names the leader; the leader when it is in the list, or else the next one.
    std::optional<size_t> leader_at;
    if (r && r->get_header_value("X-Tianshu-Role") == "follower") {
      const std::string leader = ServerUrl(r->get_header_value("X-Tianshu-Leader"));
      for (size_t i = 0; i < n; ++i) {
        if (urls_[i] == leader) leader_at = i;
      }
    }
    if (leader_at) next = *leader_at;
    if (r && !follower) {
      // A read a follower answered: this call is done, the next goes to the leader.
      current_ = leader_at.value_or(at);
      return r;
    }
    current_ = next;
    if (!(never_reached || follower) || tries + 1 >= n) return r;
    at = next;
  }
}

void ServerSet::Configure(const std::function<void(httplib::Client&)>& f) {
  for (auto& c : clients_) f(*c);
}

void ServerSet::Stop() {
  for (auto& c : clients_) c->stop();
}

std::string ServerSet::Current() const { return urls_[current_.load() % urls_.size()]; }

}  // namespace tianshu::net
