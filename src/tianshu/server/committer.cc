#include "tianshu/server/committer.h"

#include <chrono>
#include <vector>

namespace tianshu::server {

Committer::Committer(Store* store, size_t max_batch)
    : store_(store), max_batch_(max_batch == 0 ? 1 : max_batch) {
  thread_ = std::thread([this] { Run(); });
}

Committer::~Committer() {
  {
    std::lock_guard l(mu_);
    stopping_ = true;
  }
  queued_cv_.notify_all();
  thread_.join();
}

uint64_t Committer::Enqueue(Change change) {
  uint64_t t;
  {
    std::lock_guard l(mu_);
    t = next_ticket_++;
    queue_.emplace_back(t, std::move(change));
  }
  queued_cv_.notify_one();
  return t;
}

Status Committer::Wait(uint64_t ticket) {
  std::unique_lock l(mu_);
  done_cv_.wait(l, [&] { return durable_ >= ticket || failure_.has_value(); });
  if (durable_ >= ticket) return Ok();
  return std::unexpected(*failure_);
}

uint64_t Committer::Durable() const {
  std::lock_guard l(mu_);
  return durable_;
}

bool Committer::Failed() const {
  std::lock_guard l(mu_);
  return failure_.has_value();
}

CommitStats Committer::Stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

namespace {

int64_t BytesOf(const Change& c) {
  size_t n = 0;
  for (const auto& j : c.jobs) n += j.id.size() + j.state.size() + j.doc.size();
  for (const auto& r : c.nodes) n += r.name.size() + r.doc.size();
  for (const auto& name : c.nodes_removed) n += name.size();
  for (const auto& o : c.orders) n += o.id.size() + o.node.size() + o.status.size() + o.doc.size();
  for (const auto& e : c.events) n += e.doc.size();
  for (const auto& [k, v] : c.meta) n += k.size() + v.size();
  for (const auto& id : c.progress_reset) n += id.size();
  for (const auto& p : c.progress) n += p.job_id.size() + p.key.size() + p.value.size();
  return static_cast<int64_t>(n);
}

}  // namespace

void Committer::Run() {
  std::vector<std::pair<uint64_t, Change>> batch;
  for (;;) {
    {
      std::unique_lock l(mu_);
      queued_cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() && stopping_) return;
      while (!queue_.empty() && batch.size() < max_batch_) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (failure_) {  // nothing more is written after a failure
        batch.clear();
        continue;
      }
    }
    std::vector<const Change*> changes;
    changes.reserve(batch.size());
    int64_t bytes = 0;
    for (auto& [t, c] : batch) {
      changes.push_back(&c);
      bytes += BytesOf(c);
    }
    auto start = std::chrono::steady_clock::now();
    Status s = store_->Write(changes);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard l(mu_);
      if (s) {
        durable_ = batch.back().first;
        stats_.commits++;
        stats_.changes += static_cast<int64_t>(batch.size());
        stats_.commit_seconds += secs;
        stats_.bytes += bytes;
      } else {
        failure_ = s.error();
      }
    }
    done_cv_.notify_all();
    batch.clear();
  }
}

}  // namespace tianshu::server
