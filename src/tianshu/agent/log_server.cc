#include "tianshu/agent/log_server.h"

#include <httplib.h>

#include <fstream>
#include <mutex>
#include <thread>

#include "tianshu/agent/agent.h"
#include "tianshu/agent/system_files.h"
#include "tianshu/base/strings.h"

namespace tianshu::agent {

Result<LogChunk> ReadRankLog(const std::string& workdir, const std::string& job, int rank,
                             int64_t offset, int64_t max) {
  RealSystemFiles fs;
  std::string path = RankLogPath(fs, workdir, job, rank);
  if (path.empty())
    return Fail("no log of rank ", std::to_string(rank), " of job ", job, " on this node");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail("cannot open ", path);
  in.seekg(0, std::ios::end);
  LogChunk c;
  c.size = static_cast<int64_t>(in.tellg());
  offset = std::clamp<int64_t>(offset, 0, c.size);
  const int64_t n = std::clamp<int64_t>(c.size - offset, 0, std::max<int64_t>(1, max));
  c.data.resize(static_cast<size_t>(n));
  in.seekg(offset);
  in.read(c.data.data(), n);
  c.data.resize(static_cast<size_t>(in.gcount()));
  c.next = offset + static_cast<int64_t>(c.data.size());
  c.ended = fs.Exists(path.substr(0, path.size() - 4) + ".exit");
  return c;
}

struct LogServer::Impl {
  std::mutex mu;  // guards options.token
  LogServerOptions options;
  httplib::Server http;
  std::thread thread;
  int port = 0;
};

LogServer::LogServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LogServer::~LogServer() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int LogServer::port() const { return impl_->port; }

void LogServer::SetKey(const std::string& key) {
  std::lock_guard l(impl_->mu);
  impl_->options.token = key;
}

Result<std::unique_ptr<LogServer>> LogServer::Start(LogServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl* self = impl.get();
  impl->http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  impl->http.Get(
      R"(/v1/logs/([^/]+)/(\d+))", [self](const httplib::Request& req, httplib::Response& res) {
        std::string key;
        {
          std::lock_guard l(self->mu);
          key = self->options.token;
        }
        if (key.empty() || req.get_header_value("Authorization") != "Bearer " + key) {
          res.status = 401;
          res.set_content("missing or wrong bearer token\n", "text/plain");
          return;
        }
        int64_t offset = 0, max = 1 << 20, rank = 0;
        if (!ParseInt64(req.matches[2].str(), &rank) ||
            (req.has_param("offset") && !ParseInt64(req.get_param_value("offset"), &offset)) ||
            (req.has_param("max") && !ParseInt64(req.get_param_value("max"), &max))) {
          res.status = 400;
          res.set_content("offset, max and rank are integers\n", "text/plain");
          return;
        }
        auto chunk = ReadRankLog(self->options.workdir, req.matches[1].str(),
                                 static_cast<int>(rank), offset, max);
        if (!chunk) {
          res.status = 404;
          res.set_content(chunk.error().message + "\n", "text/plain");
          return;
        }
        res.set_header("X-Tianshu-Log-Next", std::to_string(chunk->next));
        res.set_header("X-Tianshu-Log-Size", std::to_string(chunk->size));
        res.set_header("X-Tianshu-Log-Ended", chunk->ended ? "1" : "0");
        res.set_content(chunk->data, "application/octet-stream");
      });
  if (impl->options.metrics) {
    impl->http.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
      res.set_content(self->options.metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  const std::string& host = impl->options.host;
  if (impl->options.port == 0) {
    impl->port = impl->http.bind_to_any_port(host);
  } else {
    impl->port = impl->http.bind_to_port(host, impl->options.port) ? impl->options.port : -1;
  }
  if (impl->port <= 0) {
    return Fail("logs: cannot listen on ", host, ":", std::to_string(impl->options.port));
  }
  impl->thread = std::thread([self] { self->http.listen_after_bind(); });
  return std::unique_ptr<LogServer>(new LogServer(std::move(impl)));
}

}  // namespace tianshu::agent
