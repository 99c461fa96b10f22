// One way to open an HTTP(S) connection to the control plane, for the CLI, the agents and
// `tianshu doctor`: "host:port" means http://; "https://host:port" is TLS with the server's
// certificate verified (against `ca_file` when given, else the system's CAs), never a silent
// fallback to plain HTTP.
//
//   auto c = OpenHttpClient("https://cp0:7070", "/etc/tianshu/ca.pem");
//   if (!c) ...;                      // "not a server address", "cannot read CA file"
//   auto r = (*c)->Get("/healthz");
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/status.h"

namespace httplib {
class Client;
class Result;
}  // namespace httplib

namespace tianshu::net {

// Whether `host` (a name or address, IPv6 with or without brackets) is this machine's loopback:
// "localhost", 127.0.0.0/8 or ::1. What may be spoken to in plain HTTP without asking.
bool IsLoopbackHost(std::string_view host);

// The URL a server address means: "http://" added when it names no scheme, trailing '/' cut.
std::string ServerUrl(const std::string& server);

[[nodiscard]] Result<std::unique_ptr<httplib::Client>> OpenHttpClient(const std::string& server,
                                                                      const std::string& ca_file);

// The replicas of a control plane (issue 17), "host:port,host:port,..." (one is a list too):
// requests go to the one that answered last. One that cannot be reached (the request never got
// there), or that answers as a follower (503 with X-Tianshu-Role: follower: nothing was done),
// hands the request to the next, or to the leader it names when that is in the list; each is
// tried at most once a call. Any other failure moves the next call on to the next replica. A
// read a follower answered is returned, and the next call goes to the leader it named.
//
//   auto s = ServerSet::Open("cp0:7070,cp1:7070,cp2:7070", "");
//   httplib::Result r = (*s)->Send([](httplib::Client& c) { return c.Get("/v1/jobs"); });
//
// Thread-safe when `send` is (cpp-httplib clients without keep-alive are).
class ServerSet {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ServerSet>> Open(const std::string& servers,
                                                               const std::string& ca_file);
  ~ServerSet();
  httplib::Result Send(const std::function<httplib::Result(httplib::Client&)>& send);
  // Applies `f` to the client of every replica (timeouts, keep-alive).
  void Configure(const std::function<void(httplib::Client&)>& f);
  void Stop();                  // ends the requests in flight (their calls fail)
  std::string Current() const;  // the URL of the replica the next call goes to

 private:
  ServerSet() = default;
  std::vector<std::string> urls_;
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  std::atomic<size_t> current_{0};
};

}  // namespace tianshu::net
