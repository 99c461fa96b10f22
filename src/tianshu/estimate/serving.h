// How inference services are priced (by the simulator and the server's co-location check): each
// replica is an M/M/c queue (c = its batch, the sequences it decodes together; service time = one
// request's latency from estimate::EstimateInference), and a service that overlays GPUs training
// holds (scheduler.colocation) is stretched by the interference of the mode, while the training job
// loses part of those GPUs. The interference figures are modelling assumptions (named below),
// not measurements: time slicing alternates whole-device slices (CUDA's default between
// processes); priority sharing runs both at once with inference first on memory bandwidth and
// training first on compute (MPS with client priorities, as REEF and Orion schedule kernels).
//   Interference f = InterferenceOf(Colocation::kPriority);
//   Latency l = MmcLatency(/*lambda=*/20, /*service_s=*/1.2 * f.decode_stretch, 32, /*slo_s=*/2);
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include "tianshu/model/job.h"
#include "tianshu/model/topology.h"

namespace tianshu::estimate {

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
// Share of a device training loses next to a service busy this much in each phase.
inline double TrainingLoss(const Interference& f, double busy_pre, double busy_dec) {
  return busy_pre * f.training_loss_prefill + busy_dec * f.training_loss_decode;
}

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

// One request of an inference service alone on `gpus` (estimate::EstimateInference; a share of
// a device has that share of its SMs and bandwidth), and the queue it forms; nullopt when it
// has no model shape, no request rate, or does not fit.
struct ServiceCost {
  double pre_s = 0, dec_s = 0;  // prefill and decode seconds of one request
  int servers = 1;              // sequences one replica decodes together (its batch)
  int replicas = 1;
  double lambda = 0;  // requests per second per replica
  double slo_s = 0;   // the latency objective
};
std::optional<ServiceCost> CostOfService(const model::Topology& topo, const model::JobSpec& spec,
                                         std::span<const int> gpus);

// A replica's busy share (its utilization, at most 1) split over its phases by their shares of
// a request of `pre` + `dec` seconds.
void SplitBusy(const Latency& l, double pre, double dec, double* busy_pre, double* busy_dec);

// A service overlaid on training's GPUs under `mode`: its latency with the mode's stretches,
// and the share of each of those GPUs training loses to it.
struct OverlayForecast {
  Latency latency;
  double training_loss = 0;
};
OverlayForecast ForecastOverlay(const ServiceCost& cost, Colocation mode);
// The objective the engine's overlay check holds a service to (kSloTarget of its requests
// within latency_slo), and the most a training GPU may lose to the services on it.
inline constexpr double kSloTarget = 0.99;
inline constexpr double kMaxTrainingLoss = 0.25;
// The co-location admission rule both drivers apply: a service overlays `gpus` only if it keeps
// its objective there and no GPU's training loses more than kMaxTrainingLoss to all the
// services on it (`lost(g)`: what the services already there take from GPU g).
bool OverlayAdmits(const OverlayForecast& f, std::span<const int> gpus,
                   const std::function<double(int)>& lost);

}  // namespace tianshu::estimate
