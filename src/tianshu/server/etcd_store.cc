// The store on etcd: every row of the SQLite store is one key under the store's prefix, and a
// batch of changes is written as etcd transactions (docs/operations.md, "The store on etcd").
//
//   PREFIX schema                      the layout's version ("1")
//   PREFIX jobs/ID                     [seq,"state"] \n the job's document
//   PREFIX nodes/NAME                  the node's document
//   PREFIX orders/ID                   ["node","job","status"] \n the order (done ones deleted)
//   PREFIX events/SEQ (20 digits)      time_ms \n the event (the newest events_kept kept)
//   PREFIX meta/KEY                    the value
//   PREFIX progress/JOB/ATTEMPT/KEY    the value (ATTEMPT: 10 digits)
//
// A transaction may hold at most max_txn_ops operations (etcd's --max-txn-ops) and
// max_request_bytes bytes (--max-request-bytes), and may not put one key twice: a batch is
// written as few transactions as fit, each holding whole changes, each change's operations
// merged (the last write of a key wins, a progress reset drops what came before it). Every
// operation is a put or a delete of a fixed key or range, so a transaction whose answer was
// lost is sent again as it is.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "tianshu/base/log.h"
#include "tianshu/server/etcd_client.h"
#include "tianshu/server/store.h"

namespace tianshu::server {

namespace {

constexpr int kEtcdLayout = 1;

std::string Padded(int64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*lld", width, static_cast<long long>(v));
  return buf;
}

// The header line of a value and what follows it.
std::pair<std::string_view, std::string_view> SplitHeader(std::string_view v) {
  const size_t nl = v.find('\n');
  if (nl == std::string_view::npos) return {v, {}};
  return {v.substr(0, nl), v.substr(nl + 1)};
}

// The operations of one transaction, merged: a key is put or deleted once (the last write
// wins), and a job's progress reset is one range delete that ends below the attempt whose rows
// the same transaction writes.
class TxnBuilder {
 public:
  explicit TxnBuilder(std::string prefix) : p_(std::move(prefix)) {}

  void Put(std::string key, std::string value) {
    bytes_ += key.size() + value.size();
    ops_[std::move(key)] = std::move(value);
  }
  void Delete(std::string key) {
    bytes_ += key.size();
    ops_[std::move(key)] = std::nullopt;
  }
  void ResetProgress(const std::string& job) {
    const std::string from = ProgressPrefix(job);
    ops_.erase(ops_.lower_bound(from), ops_.lower_bound(EtcdClient::PrefixEnd(from)));
    resets_[job] = -1;  // to the end of the job's rows, unless rows of an attempt follow
    bytes_ += 2 * from.size();
  }
  void PutProgress(const ProgressRow& row) {
    auto reset = resets_.find(row.job_id);
    if (reset != resets_.end() && (reset->second < 0 || row.attempt < reset->second)) {
      reset->second = row.attempt;
    }
    Put(ProgressPrefix(row.job_id) + Padded(row.attempt, 10) + "/" + row.key, row.value);
  }
  void PruneEventsBelow(int64_t seq) { prune_below_ = std::max(prune_below_, seq); }

  size_t Ops() const { return ops_.size() + resets_.size() + (prune_below_ > 0 ? 1 : 0); }
  size_t Bytes() const { return bytes_ + 64 * Ops(); }  // base64 and JSON add about a third
  bool Empty() const { return Ops() == 0; }

  nlohmann::json Request(const std::optional<EtcdGuard>& guard) const {
    nlohmann::json success = nlohmann::json::array();
    auto range = [&](const std::string& from, const std::string& to) {
      success.push_back(
          {{"requestDeleteRange",
            {{"key", EtcdClient::Encode(from)}, {"range_end", EtcdClient::Encode(to)}}}});
    };
    for (const auto& [job, attempt] : resets_) {
      const std::string from = ProgressPrefix(job);
      range(from, attempt < 0 ? EtcdClient::PrefixEnd(from) : from + Padded(attempt, 10));
    }
    if (prune_below_ > 0) {
      const std::string from = p_ + "events/";
      const std::string to = from + Padded(prune_below_, 20);
      // Never over an event this transaction writes (the range and a put may not meet).
      auto first_put = ops_.lower_bound(from);
      range(from, first_put != ops_.end() && first_put->first < to ? first_put->first : to);
    }
    for (const auto& [key, value] : ops_) {
      if (value) {
        success.push_back(
            {{"requestPut",
              {{"key", EtcdClient::Encode(key)}, {"value", EtcdClient::Encode(*value)}}}});
      } else {
        success.push_back({{"requestDeleteRange", {{"key", EtcdClient::Encode(key)}}}});
      }
    }
    nlohmann::json txn = {{"success", std::move(success)}};
    if (guard) txn["compare"] = nlohmann::json::array({guard->Compare()});
    return txn;
  }

 private:
  std::string ProgressPrefix(const std::string& job) const { return p_ + "progress/" + job + "/"; }

  std::string p_;
  std::map<std::string, std::optional<std::string>> ops_;
  std::map<std::string, int> resets_;  // job -> first attempt written after the reset (-1: none)
  int64_t prune_below_ = 0;
  size_t bytes_ = 0;
};

class EtcdStore final : public Store {
 public:
  EtcdStore(std::unique_ptr<EtcdClient> client, EtcdStoreOptions options)
      : client_(std::move(client)), o_(std::move(options)) {}

  Status Init() {
    // A transaction of max_txn_ops reads: etcd refuses it when its --max-txn-ops is lower, and a
    // change as large as the store allows would then fail in the middle of serving.
    nlohmann::json probe = nlohmann::json::array();
    for (int i = 0; i < o_.max_txn_ops; ++i) {
      probe.push_back({{"requestRange", {{"key", EtcdClient::Encode(o_.prefix)}}}});
    }
    auto r = Call("/v3/kv/txn", {{"success", probe}}, /*retry=*/false);
    if (!r) {
      if (r.error().message.find("too many operations") != std::string::npos) {
        return Fail("etcd at ", client_->Endpoints(), " refuses transactions of ",
                    std::to_string(o_.max_txn_ops),
                    " operations (its --max-txn-ops is lower): start every member with "
                    "--max-txn-ops=",
                    std::to_string(o_.max_txn_ops),
                    " or more, or give max-txn-ops=N in the store URL (a change then holds at "
                    "most N operations: a job's launch takes one per node it spans)");
      }
      return Fail(r.error().message);
    }
    // The layout: written by the first server on this prefix, refused when newer.
    const std::string key = o_.prefix + "schema";
    nlohmann::json txn = {{"compare",
                           {{{"key", EtcdClient::Encode(key)},
                             {"target", "CREATE"},
                             {"result", "EQUAL"},
                             {"create_revision", "0"}}}},
                          {"success",
                           {{{"requestPut",
                              {{"key", EtcdClient::Encode(key)},
                               {"value", EtcdClient::Encode(std::to_string(kEtcdLayout))}}}}}},
                          {"failure", {{{"requestRange", {{"key", EtcdClient::Encode(key)}}}}}}};
    auto w = Call("/v3/kv/txn", txn, /*retry=*/false);
    if (!w) return Fail(w.error().message);
    if (!EtcdClient::Bool(*w, "succeeded")) {
      const nlohmann::json responses = EtcdClient::Array(*w, "responses");
      const nlohmann::json kvs =
          responses.empty()
              ? nlohmann::json::array()
              : EtcdClient::Array(EtcdClient::Object(responses[0], "response_range"), "kvs");
      auto v = kvs.empty() ? Result<std::string>("")
                           : EtcdClient::Decode(EtcdClient::Str(kvs[0], "value"));
      if (!v) return Fail(v.error().message);
      int layout = 0;
      try {
        layout = std::stoi(*v);
      } catch (...) {
      }
      if (layout > kEtcdLayout || layout <= 0) {
        return Fail("etcd store ", Describe(), ": its layout (", *v,
                    ") is newer than this build reads (", std::to_string(kEtcdLayout),
                    "): run a newer tianshu");
      }
    }
    return Ok();
  }

  Result<int64_t> Revision() override {
    // A linearizable read (etcd's default): a write acknowledged before it is counted.
    auto r = Call("/v3/kv/range",
                  {{"key", EtcdClient::Encode(o_.prefix + "schema")}, {"count_only", true}},
                  /*retry=*/false);
    if (!r) return Fail(r.error().message);
    const int64_t revision = EtcdClient::Int(EtcdClient::Object(*r, "header"), "revision");
    if (revision <= 0) return Fail("etcd store ", Describe(), ": an answer without a revision");
    return revision;
  }

  Result<StoredState> Load(size_t max_events) override {
    StoredState out;
    out.schema_version = kSchemaVersion;
    std::vector<std::tuple<int64_t, int64_t, size_t>> order_rank;  // revision, place, index
    // Every range at one revision: a consistent snapshot of the store.
    int64_t revision = 0;
    auto each = [&](const std::string& table, auto&& f) -> Status {
      const std::string from = o_.prefix + table;
      std::string key = from;
      const std::string end = EtcdClient::PrefixEnd(from);
      for (;;) {
        nlohmann::json req = {{"key", EtcdClient::Encode(key)},
                              {"range_end", EtcdClient::Encode(end)},
                              {"limit", "1000"}};
        if (revision > 0) req["revision"] = std::to_string(revision);
        auto r = Call("/v3/kv/range", req, /*retry=*/true);
        if (!r) return Fail(r.error().message);
        if (revision == 0) revision = EtcdClient::Int(EtcdClient::Object(*r, "header"), "revision");
        const nlohmann::json kvs = EtcdClient::Array(*r, "kvs");
        for (const auto& kv : kvs) {
          auto k = EtcdClient::Decode(EtcdClient::Str(kv, "key"));
          auto v = EtcdClient::Decode(EtcdClient::Str(kv, "value"));
          if (!k || !v || !k->starts_with(from)) {
            return Fail("etcd store: a key under ", from, " does not decode");
          }
          if (auto s = f(k->substr(from.size()), *v, EtcdClient::Int(kv, "mod_revision")); !s) {
            return s;
          }
          key = *k + std::string(1, '\0');
        }
        if (!EtcdClient::Bool(*r, "more") || kvs.empty()) return Ok();
      }
    };
    auto bad = [&](const std::string& what, const std::string& key) {
      return Fail("etcd store ", Describe(), ": cannot read ", what, " ", key);
    };
    auto s = each("jobs/", [&](const std::string& id, std::string_view v, int64_t) -> Status {
      auto [head, doc] = SplitHeader(v);
      auto h = nlohmann::json::parse(head, nullptr, false);
      if (!h.is_array() || h.size() != 2 || !h[0].is_number_integer() || !h[1].is_string()) {
        return bad("job", id);
      }
      out.jobs.push_back({id, h[0].get<int64_t>(), h[1].get<std::string>(), std::string(doc)});
      return Ok();
    });
    if (s) {
      s = each("nodes/", [&](const std::string& name, std::string_view v, int64_t) -> Status {
        out.nodes.push_back({name, std::string(v)});
        return Ok();
      });
    }
    if (s) {
      s = each("orders/", [&](const std::string& id, std::string_view v, int64_t rev) -> Status {
        auto [head, doc] = SplitHeader(v);
        auto h = nlohmann::json::parse(head, nullptr, false);
        if (!h.is_array() || h.size() != 4 || !h[0].is_string() || !h[1].is_string() ||
            !h[2].is_string() || !h[3].is_number_integer()) {
          return bad("order", id);
        }
        order_rank.push_back({rev, h[3].get<int64_t>(), out.orders.size()});
        out.orders.push_back({id, h[0].get<std::string>(), h[1].get<std::string>(),
                              h[2].get<std::string>(), std::string(doc)});
        return Ok();
      });
    }
    if (s) {
      s = each("meta/", [&](const std::string& k, std::string_view v, int64_t) -> Status {
        out.meta[k] = std::string(v);
        return Ok();
      });
    }
    if (s) {
      s = each("progress/", [&](const std::string& k, std::string_view v, int64_t) -> Status {
        // JOB/ATTEMPT/KEY (KEY may hold '/')
        const size_t a = k.find('/');
        const size_t b = a == std::string::npos ? a : k.find('/', a + 1);
        if (b == std::string::npos) return bad("progress row", k);
        int attempt = 0;
        try {
          attempt = std::stoi(k.substr(a + 1, b - a - 1));
        } catch (...) {
          return bad("progress row", k);
        }
        out.progress.push_back({k.substr(0, a), attempt, k.substr(b + 1), std::string(v)});
        return Ok();
      });
    }
    if (s && max_events > 0) s = LoadEvents(max_events, revision, out.events);
    if (!s) return std::unexpected(s.error());
    std::sort(out.jobs.begin(), out.jobs.end(),
              [](const JobRow& a, const JobRow& b) { return a.seq < b.seq; });
    // Orders in the order they were last written, as SQLite's rowids keep them (each node's
    // queue is delivered oldest first): by the revision that wrote each, then by its place in
    // that transaction.
    std::sort(order_rank.begin(), order_rank.end());
    std::vector<OrderRow> orders;
    for (const auto& [rev, place, index] : order_rank)
      orders.push_back(std::move(out.orders[index]));
    out.orders = std::move(orders);
    return out;
  }

  Status Write(const std::vector<const Change*>& batch) override {
    TxnBuilder txn(o_.prefix);
    auto fits = [&](const TxnBuilder& t) {
      return t.Ops() <= static_cast<size_t>(o_.max_txn_ops) && t.Bytes() <= o_.max_request_bytes;
    };
    // Whole changes per transaction (the sum bounds what they take merged).
    auto append = [&](const Change& c, const TxnBuilder& alone) -> Status {
      if (txn.Ops() + alone.Ops() > static_cast<size_t>(o_.max_txn_ops) ||
          txn.Bytes() + alone.Bytes() > o_.max_request_bytes) {
        if (auto s = Send(txn); !s) return s;
        txn = TxnBuilder(o_.prefix);
      }
      Add(c, txn);
      return Ok();
    };
    for (const Change* c : batch) {
      TxnBuilder one(o_.prefix);
      Add(*c, one);
      if (fits(one)) {
        if (auto s = append(*c, one); !s) return s;
        continue;
      }
      // Larger than one transaction (a cycle that starts hundreds of jobs): written as several,
      // the jobs' records before the orders that launch them, so that a crash in between
      // leaves jobs waiting for ranks that never start (the gang timeout retries them), never
      // orders for a job that does not know it was placed. Refusing it would fail the store,
      // and the next leader would make the same change again.
      std::vector<Change> pieces = Pieces(*c);
      LogWarning("store", "etcd store: a change of " + std::to_string(one.Ops()) +
                              " operations is over max-txn-ops " + std::to_string(o_.max_txn_ops) +
                              " or max-request-bytes " + std::to_string(o_.max_request_bytes) +
                              ": written as " + std::to_string(pieces.size()) +
                              " pieces, not atomically (raise etcd's --max-txn-ops and the store "
                              "URL's max-txn-ops)");
      for (const Change& piece : pieces) {
        TxnBuilder alone(o_.prefix);
        Add(piece, alone);
        if (!fits(alone)) {
          return Fail("etcd store: one record needs about ", std::to_string(alone.Bytes()),
                      " bytes, over max-request-bytes ", std::to_string(o_.max_request_bytes),
                      ": raise etcd's --max-request-bytes and the store URL's max-request-bytes");
        }
        if (auto s = append(piece, alone); !s) return s;
      }
    }
    return txn.Empty() ? Ok() : Send(txn);
  }

  Result<std::optional<JobRow>> ReadJob(const std::string& id) override {
    auto r = Call("/v3/kv/range", {{"key", EtcdClient::Encode(o_.prefix + "jobs/" + id)}}, true);
    if (!r) return Fail(r.error().message);
    const nlohmann::json kvs = EtcdClient::Array(*r, "kvs");
    if (kvs.empty()) return std::optional<JobRow>();
    auto v = EtcdClient::Decode(EtcdClient::Str(kvs[0], "value"));
    if (!v) return std::unexpected(v.error());
    auto [head, doc] = SplitHeader(*v);
    auto h = nlohmann::json::parse(head, nullptr, false);
    if (!h.is_array() || h.size() != 2 || !h[0].is_number_integer() || !h[1].is_string()) {
      return Fail("etcd store ", Describe(), ": cannot read job ", id);
    }
    return JobRow{id, h[0].get<int64_t>(), h[1].get<std::string>(), std::string(doc)};
  }

  std::optional<StoreLimits> Limits() const override {
    return StoreLimits{.max_ops = static_cast<size_t>(o_.max_txn_ops),
                       .max_bytes = o_.max_request_bytes};
  }

  std::string Describe() const override {
    return "etcd:" + client_->Endpoints() + " prefix " + o_.prefix + " (max-txn-ops " +
           std::to_string(o_.max_txn_ops) + ")";
  }

 private:
  void Add(const Change& c, TxnBuilder& t) {
    const std::string& p = o_.prefix;
    for (const auto& j : c.jobs) {
      t.Put(p + "jobs/" + j.id, nlohmann::json::array({j.seq, j.state}).dump() + "\n" + j.doc);
    }
    for (const auto& n : c.nodes) t.Put(p + "nodes/" + n.name, n.doc);
    for (const auto& name : c.nodes_removed) t.Delete(p + "nodes/" + name);
    for (const auto& o : c.orders) {
      // Done orders are never read back (Load returns the outstanding and accepted ones).
      if (o.status == "done") {
        t.Delete(p + "orders/" + o.id);
      } else {
        t.Put(p + "orders/" + o.id,
              nlohmann::json::array({o.node, o.job_id, o.status, ++order_writes_}).dump() + "\n" +
                  o.doc);
      }
    }
    int64_t newest = 0;
    for (const auto& e : c.events) {
      t.Put(p + "events/" + Padded(e.seq, 20), std::to_string(e.time_ms) + "\n" + e.doc);
      newest = std::max(newest, e.seq);
    }
    if (newest > o_.events_kept) t.PruneEventsBelow(newest - o_.events_kept + 1);
    for (const auto& [k, v] : c.meta) t.Put(p + "meta/" + k, v);
    for (const auto& id : c.progress_reset) t.ResetProgress(id);
    for (const auto& row : c.progress) t.PutProgress(row);
  }

  // A change cut into pieces of one record each (or one kind: the progress resets, the meta),
  // in an order safe to apply one by one: jobs and their progress, nodes, meta, events, orders.
  static std::vector<Change> Pieces(const Change& c) {
    std::vector<Change> out;
    for (const auto& j : c.jobs) out.push_back(Change{.jobs = {j}});
    if (!c.progress_reset.empty()) out.push_back(Change{.progress_reset = c.progress_reset});
    for (const auto& p : c.progress) out.push_back(Change{.progress = {p}});
    for (const auto& n : c.nodes) out.push_back(Change{.nodes = {n}});
    for (const auto& n : c.nodes_removed) out.push_back(Change{.nodes_removed = {n}});
    if (!c.meta.empty()) out.push_back(Change{.meta = c.meta});
    for (const auto& e : c.events) out.push_back(Change{.events = {e}});
    for (const auto& o : c.orders) out.push_back(Change{.orders = {o}});
    return out;
  }

  Status Send(const TxnBuilder& t) {
    auto r = Call("/v3/kv/txn", t.Request(o_.guard), /*retry=*/true);
    if (!r) return Fail(r.error().message);
    if (o_.guard && !EtcdClient::Bool(*r, "succeeded")) {
      return Fail("etcd store ", Describe(), ": this replica no longer leads (", o_.guard->key,
                  " is not the key it created at revision ",
                  std::to_string(o_.guard->create_revision),
                  "): this transaction was not applied; earlier ones of the same batch may have "
                  "been");
    }
    return Ok();
  }

  Status LoadEvents(size_t max_events, int64_t revision, std::vector<EventRow>& out) {
    const std::string from = o_.prefix + "events/";
    auto r = Call("/v3/kv/range",
                  {{"key", EtcdClient::Encode(from)},
                   {"range_end", EtcdClient::Encode(EtcdClient::PrefixEnd(from))},
                   {"limit", std::to_string(max_events)},
                   {"revision", std::to_string(revision)},
                   {"sort_order", "DESCEND"},
                   {"sort_target", "KEY"}},
                  /*retry=*/true);
    if (!r) return Fail(r.error().message);
    for (const auto& kv : EtcdClient::Array(*r, "kvs")) {
      auto k = EtcdClient::Decode(EtcdClient::Str(kv, "key"));
      auto v = EtcdClient::Decode(EtcdClient::Str(kv, "value"));
      if (!k || !v || !k->starts_with(from)) return Fail("etcd store: an event does not decode");
      auto [head, doc] = SplitHeader(*v);
      try {
        out.push_back(
            {std::stoll(k->substr(from.size())), std::stoll(std::string(head)), std::string(doc)});
      } catch (...) {
        return Fail("etcd store ", Describe(), ": cannot read event ", *k);
      }
    }
    std::reverse(out.begin(), out.end());
    return Ok();
  }

  // One request; with `retry`, tried again while etcd is unavailable (no quorum, unreachable),
  // for at most unavailable_wait_ms. Every request the store sends may be sent twice.
  std::expected<nlohmann::json, EtcdError> Call(const std::string& path, const nlohmann::json& body,
                                                bool retry) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(o_.unavailable_wait_ms);
    int64_t backoff_ms = 50;
    for (;;) {
      auto r = client_->Call(path, body);
      if (r || !r.error().unavailable || !retry || std::chrono::steady_clock::now() >= until) {
        if (!r) {
          r.error().message = "etcd store " + Describe() + ": " +
                              (r.error().unavailable ? "unavailable: " : "") + r.error().message;
        }
        return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 1000);
    }
  }

  std::unique_ptr<EtcdClient> client_;
  EtcdStoreOptions o_;
  // Orders written by this process, in order: an order's place among those of one transaction
  // (they share its revision).
  int64_t order_writes_ = 0;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenEtcdStore(EtcdStoreOptions options) {
  if (options.prefix.empty() || options.prefix.back() != '/') options.prefix += '/';
  if (options.max_txn_ops < 16 || options.max_txn_ops > kMaxTxnOps) {
    return Fail("etcd store: max-txn-ops must be between 16 and ", std::to_string(kMaxTxnOps));
  }
  if (options.max_request_bytes < 64 * 1024) {
    return Fail("etcd store: max-request-bytes must be at least 65536");
  }
  // One request may not outlast the wait for etcd: a member cut off from its quorum holds a
  // write until its own timeout (seconds), while the caller is owed an answer.
  options.etcd.request_timeout_ms = std::min(options.etcd.request_timeout_ms,
                                             std::max<int64_t>(500, options.unavailable_wait_ms));
  auto client = EtcdClient::Open(options.etcd);
  if (!client) return std::unexpected(client.error());
  auto store = std::make_unique<EtcdStore>(std::move(*client), std::move(options));
  if (auto s = store->Init(); !s) return std::unexpected(s.error());
  return store;
}

}  // namespace tianshu::server
