// How the simulator prices inference services: each replica is an M/M/c queue (c = its batch,
// the sequences it decodes together; service time = one request's latency from
// estimate::EstimateInference), and a service that overlays GPUs training holds
// (scheduler.colocation) is stretched by the interference of the mode, while the training job
// loses part of those GPUs. The interference figures are modelling assumptions (named below),
// not measurements: time slicing alternates whole-device slices (CUDA's default between
// processes); priority sharing runs both at once with inference first on memory bandwidth and
// training first on compute (MPS with client priorities, as REEF and Orion schedule kernels).
//   Interference f = InterferenceOf(Colocation::kPriority);
//   Latency l = MmcLatency(/*lambda=*/20, /*service_s=*/1.2 * f.decode_stretch, 32, /*slo_s=*/2);
#pragma once

#include <string_view>

namespace tianshu::sim {

enum class Colocation { kNone, kTimeSlice, kPriority };
Colocation ColocationFrom(std::string_view name);  // "none" | "time-slice" | "priority"

struct Interference {
  double prefill_stretch = 1;  // inference prefill (compute-bound) time multiplier
  double decode_stretch = 1;   // inference decode (memory-bound) time multiplier
  // Share of the device training loses while the service is busy in each phase.
  double training_loss_prefill = 0;
  double training_loss_decode = 0;
};
// Inference next to training on the same GPUs, for a mode other than kNone.
Interference InterferenceOf(Colocation mode);

struct Latency {
  bool stable = true;      // arrivals below the replica's capacity
  double attainment = 0;   // P(latency <= slo), 0..1
  double p99_s = 0;        // 99th percentile latency (infinity when unstable)
  double utilization = 0;  // arrival rate / capacity (busy share of the replica)
};
// One replica as M/M/c: Poisson arrivals at `lambda` per second, `servers` concurrent
// sequences, each request `service_s` long; latency = queueing (Erlang C) + service.
Latency MmcLatency(double lambda, double service_s, int servers, double slo_s);

// Erlang C: probability that an arrival waits, for `servers` and offered load `a` = lambda x
// service time (a < servers).
double ErlangC(int servers, double a);

}  // namespace tianshu::sim
