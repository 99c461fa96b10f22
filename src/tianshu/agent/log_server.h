// Serves the rank logs this agent keeps, so that `tianshu logs JOB` works from anywhere
// through the control plane (which forwards to the agent of the rank's node):
//   GET /v1/logs/{job}/{rank}?offset=N&max=B   (bearer: the log key the server gave this node)
// answers the log's bytes from `offset` (at most `max`, 1 MiB by default) with
// `X-Tianshu-Log-Next` (the offset to ask for next), `X-Tianshu-Log-Size` and
// `X-Tianshu-Log-Ended` ("1" once the rank has ended); 404 when the agent has no such rank.
//   GET /metrics   (no token: counts only, no job ids; agent_metrics.h)
// answers the agent's metrics in the Prometheus text format, when `metrics` is set.
//   auto logs = LogServer::Start({.host = "0.0.0.0", .port = 0, .token = t, .workdir = w});
//   int port = (*logs)->port();   // registered with the node's address
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tianshu/base/status.h"

namespace tianshu::agent {

struct LogServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;         // 0: any free port
  std::string token;    // the key to accept; "" accepts nothing until SetKey
  std::string workdir;  // the agent's work directory (jobs/<cgroup>/rank-<R>.log)
  // The text of GET /metrics, called on the server's thread; 404 when empty.
  std::function<std::string()> metrics;
};

class LogServer {
 public:
  [[nodiscard]] static Result<std::unique_ptr<LogServer>> Start(LogServerOptions options);
  ~LogServer();
  int port() const;
  // The key the server presents (from its registration answer); thread-safe.
  void SetKey(const std::string& key);

 private:
  struct Impl;
  explicit LogServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Reads [offset, offset + max) of a rank's newest log under `workdir`: the bytes, the next
// offset, the size, and whether the rank has ended. Error when there is no such log.
struct LogChunk {
  std::string data;
  int64_t next = 0;
  int64_t size = 0;
  bool ended = false;
};
[[nodiscard]] Result<LogChunk> ReadRankLog(const std::string& workdir, const std::string& job,
                                           int rank, int64_t offset, int64_t max);

}  // namespace tianshu::agent
