#include "tianshu/server/leader.h"

#include <chrono>

namespace tianshu::server {

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Ms(int64_t ms) { return std::chrono::milliseconds(ms); }

}  // namespace

Result<std::unique_ptr<LeaderElection>> LeaderElection::Open(LeaderOptions options) {
  if (options.id.empty()) return Fail("leader election: a replica needs an id");
  if (options.lease_ttl_ms < 1000) return Fail("leader election: the lease must last 1 s or more");
  if (options.prefix.empty() || options.prefix.back() != '/') options.prefix += '/';
  // A request must come back well within the lease, or a renewal could outlive it.
  options.etcd.request_timeout_ms =
      std::min(options.etcd.request_timeout_ms, std::max<int64_t>(500, options.lease_ttl_ms / 3));
  auto client = EtcdClient::Open(options.etcd);
  if (!client) return std::unexpected(client.error());
  return std::unique_ptr<LeaderElection>(
      new LeaderElection(std::move(options), std::move(*client)));
}

LeaderElection::~LeaderElection() {
  {
    std::lock_guard l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

Result<LeaderInfo> LeaderElection::Current() {
  auto r = client_->Call("/v3/kv/range", {{"key", EtcdClient::Encode(Key())}});
  if (!r) return Fail("etcd: ", r.error().message);
  LeaderInfo out;
  const nlohmann::json kvs = EtcdClient::Array(*r, "kvs");
  if (kvs.empty()) return out;
  auto v = EtcdClient::Decode(EtcdClient::Str(kvs[0], "value"));
  if (!v) return std::unexpected(v.error());
  auto doc = nlohmann::json::parse(*v, nullptr, false);
  const std::string id = EtcdClient::Str(doc, "id");
  out.id = id.empty() ? std::string(1, '?') : id;  // a key someone else wrote: somebody leads
  out.url = EtcdClient::Str(doc, "url");
  out.create_revision = EtcdClient::Int(kvs[0], "create_revision");
  return out;
}

Result<int64_t> LeaderElection::GrantLease() {
  const int64_t ttl_s = std::max<int64_t>(1, (options_.lease_ttl_ms + 999) / 1000);
  auto r = client_->Call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}});
  if (!r) return Fail("etcd: ", r.error().message);
  const int64_t id = EtcdClient::Int(*r, "ID");
  if (id == 0) return Fail("etcd granted no lease: ", EtcdClient::Str(*r, "error"));
  return id;
}

bool LeaderElection::Campaign(const std::atomic<bool>& stop,
                              const std::function<void(const LeaderInfo&)>& on_wait) {
  const auto poll = Ms(std::clamp<int64_t>(options_.lease_ttl_ms / 10, 100, 500));
  LeaderInfo seen;
  bool told = false;
  while (!stop) {
    auto cur = Current();
    if (cur && !cur->id.empty()) {
      if (on_wait && (!told || cur->id != seen.id || cur->url != seen.url)) on_wait(*cur);
      seen = *cur;
      told = true;
      std::this_thread::sleep_for(poll);
      continue;
    }
    if (!cur) {  // etcd unavailable: nobody can be elected now
      LeaderInfo none{.problem = cur.error().message};
      if (on_wait && (!told || !seen.id.empty() || seen.problem.empty())) on_wait(none);
      seen = none;
      told = true;
      std::this_thread::sleep_for(poll);
      continue;
    }
    auto lease = GrantLease();
    if (!lease) {
      std::this_thread::sleep_for(poll);
      continue;
    }
    const std::string value = nlohmann::json{{"id", options_.id}, {"url", options_.url}}.dump();
    nlohmann::json txn = {{"compare",
                           {{{"key", EtcdClient::Encode(Key())},
                             {"target", "CREATE"},
                             {"result", "EQUAL"},
                             {"create_revision", "0"}}}},
                          {"success",
                           {{{"requestPut",
                              {{"key", EtcdClient::Encode(Key())},
                               {"value", EtcdClient::Encode(value)},
                               {"lease", std::to_string(*lease)}}}}}}};
    auto w = client_->Call("/v3/kv/txn", txn);
    if (w && EtcdClient::Bool(*w, "succeeded")) {
      lease_ = *lease;
      // The put is the transaction's only write: the revision it made created the key.
      create_revision_ = EtcdClient::Int(EtcdClient::Object(*w, "header"), "revision");
      return true;
    }
    (void)client_->Call("/v3/lease/revoke", {{"ID", std::to_string(*lease)}});
    std::this_thread::sleep_for(poll);
  }
  return false;
}

void LeaderElection::WatchLease(std::function<void()> lost) {
  keeper_ = std::thread([this, lost = std::move(lost)] {
    const auto every = Ms(std::max<int64_t>(200, options_.lease_ttl_ms / 3));
    auto renewed = Clock::now();
    std::unique_lock l(mu_);
    while (!stopping_) {
      cv_.wait_for(l, every, [&] { return stopping_; });
      if (stopping_) return;
      l.unlock();
      // A renewal counts from when it was asked for: the lease runs from then at the latest.
      const auto asked = Clock::now();
      auto r = client_->Call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}});
      const auto now = Clock::now();
      bool gone = false;
      if (r) {
        const nlohmann::json result = r->contains("result") ? (*r)["result"] : *r;
        if (result.is_object() && EtcdClient::Int(result, "TTL") > 0) {
          renewed = asked;
        } else {
          gone = true;  // etcd no longer has the lease: the key went with it
        }
      }
      // Unrenewed for a whole lease (etcd unreachable, or this process was paused): another
      // replica may lead by now.
      if (gone || now - renewed >= Ms(options_.lease_ttl_ms)) {
        lost();
        return;
      }
      l.lock();
    }
  });
}

void LeaderElection::Resign() {
  {
    std::lock_guard l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (keeper_.joinable() && keeper_.get_id() != std::this_thread::get_id()) keeper_.join();
  if (lease_ != 0) (void)client_->Call("/v3/lease/revoke", {{"ID", std::to_string(lease_)}});
  lease_ = 0;
}

}  // namespace tianshu::server
