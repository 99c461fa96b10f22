#include "tianshu/estimate/serving.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tianshu/estimate/plan.h"

namespace tianshu::estimate {
namespace {

// Time slicing: while both have work, each gets alternate whole-device slices, so the
// service's phases take twice as long and training loses half the device for that time.
constexpr double kSliceStretch = 2.0;
constexpr double kSliceTrainingLoss = 0.5;
// Priority sharing: decode keeps its memory bandwidth (a little lost to training's traffic in
// the shared L2 and HBM queues); prefill runs on the compute training leaves, about half the
// SMs. Training loses the memory-bound part of its step while the service decodes (elementwise
// kernels, norms, optimizer: about 30% of an LLM step) and little while it prefills.
constexpr double kPriorityDecodeStretch = 1.05;
constexpr double kPriorityPrefillStretch = 2.0;
constexpr double kPriorityLossDecode = 0.3;
constexpr double kPriorityLossPrefill = 0.1;

}  // namespace

Colocation ColocationFrom(std::string_view name) {
  if (name == "time-slice") return Colocation::kTimeSlice;
  if (name == "priority") return Colocation::kPriority;
  return Colocation::kNone;
}

Interference InterferenceOf(Colocation mode) {
  switch (mode) {
    case Colocation::kTimeSlice:
      return {.prefill_stretch = kSliceStretch,
              .decode_stretch = kSliceStretch,
              .training_loss_prefill = kSliceTrainingLoss,
              .training_loss_decode = kSliceTrainingLoss};
    case Colocation::kPriority:
      return {.prefill_stretch = kPriorityPrefillStretch,
              .decode_stretch = kPriorityDecodeStretch,
              .training_loss_prefill = kPriorityLossPrefill,
              .training_loss_decode = kPriorityLossDecode};
    case Colocation::kNone:
      break;
  }
  return {};
}

double ErlangC(int servers, double a) {
  if (servers <= 0 || a <= 0) return 0;
  if (a >= servers) return 1;
  // Erlang B by its recurrence (stable for large c), then C from B.
  double b = 1;
  for (int k = 1; k <= servers; ++k) b = a * b / (k + a * b);
  const double rho = a / servers;
  return b / (1 - rho + rho * b);
}

Latency MmcLatency(double lambda, double service_s, int servers, double slo_s) {
  Latency l;
  servers = std::max(1, servers);
  if (service_s <= 0) {
    l.attainment = 1;
    return l;
  }
  const double a = std::max(0.0, lambda) * service_s;
  l.utilization = a / servers;
  if (a >= servers) {
    l.stable = false;
    l.attainment = 0;
    l.p99_s = std::numeric_limits<double>::infinity();
    return l;
  }
  const double c = ErlangC(servers, a);
  const double drain = servers / service_s - lambda;  // rate at which a queue empties
  l.attainment = slo_s < service_s ? 0 : 1 - c * std::exp(-drain * (slo_s - service_s));
  l.p99_s = service_s + (c > 0.01 ? std::log(c / 0.01) / drain : 0);
  return l;
}

std::optional<ServiceCost> CostOfService(const model::Topology& topo, const model::JobSpec& spec,
                                         std::span<const int> gpus) {
  const model::ModelSpec& m = spec.model;
  if (gpus.empty() || spec.kind != model::JobKind::kInference || m.layers <= 0 || m.hidden <= 0 ||
      spec.inference.request_rate <= 0) {
    return std::nullopt;
  }
  auto e = estimate::EstimateInference(topo, spec, gpus, estimate::EstimateOptions{}, nullptr);
  if (!e || !e->fits || e->request_latency_ms <= 0) return std::nullopt;
  ServiceCost c;
  const double share = 1000.0 / std::clamp(spec.gpu_milli, 1, 1000);
  c.pre_s = e->prefill_seconds * share;
  c.dec_s = std::max(0.0, e->request_latency_ms / 1000.0 - e->prefill_seconds) * share;
  c.servers = std::max(1, spec.inference.batch);
  c.replicas = std::max(1, e->replicas);
  c.lambda = spec.inference.request_rate / c.replicas;
  c.slo_s = spec.inference.latency_slo_ms / 1000.0;
  return c;
}

void SplitBusy(const Latency& l, double pre, double dec, double* busy_pre, double* busy_dec) {
  const double busy = std::min(1.0, l.utilization);
  *busy_pre = pre + dec > 0 ? busy * pre / (pre + dec) : 0;
  *busy_dec = busy - *busy_pre;
}

OverlayForecast ForecastOverlay(const ServiceCost& cost, Colocation mode) {
  const Interference f = InterferenceOf(mode);
  const double pre = cost.pre_s * f.prefill_stretch;
  const double dec = cost.dec_s * f.decode_stretch;
  OverlayForecast out;
  out.latency = MmcLatency(cost.lambda, pre + dec, cost.servers, cost.slo_s);
  double busy_pre = 0, busy_dec = 0;
  SplitBusy(out.latency, pre, dec, &busy_pre, &busy_dec);
  out.training_loss = TrainingLoss(f, busy_pre, busy_dec);
  return out;
}

bool OverlayAdmits(const OverlayForecast& f, std::span<const int> gpus,
                   const std::function<double(int)>& lost) {
  if (f.latency.attainment < kSloTarget) return false;
  return std::none_of(gpus.begin(), gpus.end(),
                      [&](int g) { return lost(g) + f.training_loss > kMaxTrainingLoss; });
}

}  // namespace tianshu::estimate
