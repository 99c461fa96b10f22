// Leader election among `tianshu serve` replicas on etcd (issue 17): each replica campaigns for
// one key, PREFIX leader, put with a lease of its own; the replica whose put created the key
// leads until its lease runs out (it stops renewing it, or etcd stops hearing from it). Every
// write of the leader's store is conditioned on that key still being the one it created (its
// create revision, EtcdGuard), so a deposed or paused leader's writes fail: two leaders never
// act at once, whatever their clocks say.
//
//   auto e = LeaderElection::Open({.etcd = ..., .prefix = "/tianshu/", .url = "http://cp0:7070"});
//   if (!(*e)->Campaign(stop)) ...;          // blocks until this replica leads, or `stop`
//   options.guard = (*e)->Guard();            // the store's writes need the leadership
//   (*e)->WatchLease([] { /* lost: stop writing at once */ });
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "tianshu/base/status.h"
#include "tianshu/server/etcd_client.h"

namespace tianshu::server {

struct LeaderOptions {
  EtcdOptions etcd;
  std::string prefix = "/tianshu/";  // the store's prefix: the key is PREFIX leader
  std::string id;                    // this replica's name (host:port by default)
  std::string url;                   // where clients reach it (http(s)://host:port)
  int64_t lease_ttl_ms = 5000;       // a dead leader is replaced within about this long
};

// Who leads now, as the key says (empty when nobody does).
struct LeaderInfo {
  std::string id, url;
  int64_t create_revision = 0;
  std::string problem;  // why nobody can be elected now (etcd unavailable), "" otherwise
};

class LeaderElection {
 public:
  [[nodiscard]] static Result<std::unique_ptr<LeaderElection>> Open(LeaderOptions options);
  ~LeaderElection();  // stops renewing (and resigns when leading)

  // Blocks until this replica leads (true), or `stop` becomes true (false). `on_wait` is told,
  // each time it changes, who leads meanwhile (for the follower's answers).
  bool Campaign(const std::atomic<bool>& stop,
                const std::function<void(const LeaderInfo&)>& on_wait = {});
  // While leading: renews the lease every third of its time; calls `lost` once (from its own
  // thread) when it cannot be renewed before it runs out, or etcd says it is gone.
  void WatchLease(std::function<void()> lost);
  // Gives the leadership up at once (the lease is revoked, its key goes with it).
  void Resign();

  EtcdGuard Guard() const { return {Key(), create_revision_}; }
  std::string Key() const { return options_.prefix + "leader"; }
  // Who leads, as etcd says now.
  Result<LeaderInfo> Current();
  const LeaderOptions& options() const { return options_; }

 private:
  explicit LeaderElection(LeaderOptions options, std::unique_ptr<EtcdClient> client)
      : options_(std::move(options)), client_(std::move(client)) {}
  Result<int64_t> GrantLease();

  LeaderOptions options_;
  std::unique_ptr<EtcdClient> client_;
  int64_t lease_ = 0;
  int64_t create_revision_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread keeper_;
};

}  // namespace tianshu::server
