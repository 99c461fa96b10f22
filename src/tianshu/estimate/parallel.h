// One concrete parallel configuration of a training job: the degrees, ZeRO sharding, sequence
// parallelism, recomputation, micro-batch size and pipeline interleaving that memory, FLOPs
// and time are estimated for.
//
// It is the resolved form of model::Parallelism (which may say `auto`).
//   ParallelConfig c{.tp = 8, .pp = 4, .dp = 32, .zero_stage = 1, .micro_batch = 1};
//   int m = c.MicroBatches(1536);   // 48 micro-batches per pipeline per iteration
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tianshu/model/job.h"

namespace tianshu::estimate {

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int ep = 1;
  int zero_stage = 0;             // 0..3; stage 1 is also Megatron's distributed optimizer
  bool sequence_parallel = true;  // only meaningful with tp > 1
  model::Recompute recompute = model::Recompute::kSelective;
  int micro_batch = 1;
  int virtual_stages = 1;  // interleaved 1F1B chunks per stage

  int Gpus() const { return tp * pp * dp; }
  // Micro-batches each pipeline runs per iteration: B / (d · b), at least 1.
  int64_t MicroBatches(int64_t global_batch) const {
    int64_t per = int64_t{dp} * micro_batch;
    return per > 0 ? std::max<int64_t>(1, global_batch / per) : 1;
  }
  // "tp=8 pp=4 dp=32 zero=1 sp recompute=selective mb=1 v=1"
  std::string ToString() const;
};

// The configuration a fixed (non-auto) job spec asks for on `gpus` accelerators (dp = 0 is
// derived; zero stage 1 when distributed_optimizer is set).
ParallelConfig FromSpec(const model::Parallelism& p, int gpus);

}  // namespace tianshu::estimate
