// The engine's pending queue: the ids of the jobs waiting for a placement, always in submission
// order (submit time, then the batch key, then id: SubmittedBefore) whatever requeues happen, so
// that order policies can skip sorting when it is already their order, and a count of them per
// priority (whether the whole queue has one priority). Owned by the Engine; not thread-safe.
//   PendingQueue q;  q.Add(/*id=*/7, /*submit_s=*/30, /*batch_key=*/0, /*priority=*/0);
//   for (JobId id : q.Ids()) { /* oldest submission first */ }
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace tianshu::engine {

using JobId = int64_t;

class PendingQueue {
 public:
  // Inserts job `id`, submitted at `submit_s` (JobRecord::batch_key `batch_key`), at its place
  // in submission order. The caller queues an id at most once. `whole_gpus`: the job asks for at
  // least one whole GPU per rank.
  void Add(JobId id, double submit_s, double batch_key, int priority, bool whole_gpus = true);
  // Removes `id` if queued (idempotent).
  void Remove(JobId id);

  std::span<const JobId> Ids() const { return ids_; }
  bool Empty() const { return ids_.empty(); }
  // Every queued job has the same priority (then submission order is priority order).
  bool UniformPriority() const { return priorities_.size() <= 1; }
  // Every queued job asks for whole GPUs (none for a share of one, or for none).
  bool AllWholeGpus() const { return not_whole_ == 0; }

 private:
  struct Entry {
    double submit_s = 0;
    double batch_key = 0;
    int priority = 0;
    bool whole_gpus = true;
  };
  std::vector<JobId> ids_;         // submission order (time, batch key, id), always
  std::vector<Entry> entries_;     // entries_[i] is what ids_[i] was queued with
  std::map<int, int> priorities_;  // priority -> queued jobs with it
  int not_whole_ = 0;              // queued jobs that do not ask for whole GPUs
};

}  // namespace tianshu::engine
