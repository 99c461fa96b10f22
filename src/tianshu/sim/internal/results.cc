#include "tianshu/sim/internal/results.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace tianshu::sim::internal {

void CollectResults(const ResultInputs& in, SimResult* out) {
  const UsageMeter& meter = *in.meter;
  const int n = static_cast<int>(in.workload->jobs.size());
  Metrics& m = out->metrics;
  std::vector<double> jcts;
  double queue_sum = 0, ideal_gpu_s = 0, completed_ideal_gpu_s = 0, lb_arrival = 0;
  double last_end = 0;
  double req_total = 0, req_ok = 0, p99_sum = 0;
  auto records = in.engine->AllJobs();
  out->jobs.reserve(n);
  for (const engine::JobRecord* rec : records) {
    int i = static_cast<int>(rec->id);
    const JobRun& r = (*in.runs)[i];
    JobResult jr;
    jr.id = in.workload->jobs[i].id;
    jr.name = in.workload->jobs[i].name;
    jr.model = r.spec.model.profile;
    jr.gpus = in.workload->jobs[i].gpus;
    jr.submit_s = rec->submit_s;
    jr.start_s = rec->first_start_s;
    jr.end_s = rec->end_s;
    jr.ideal_s = r.need0;
    jr.allocated_gpu_s = r.allocated_gpu_s;
    jr.preemptions = rec->preemptions;
    jr.retries = rec->retries;
    jr.migrations = rec->migrations;
    jr.nodes = static_cast<int>(r.nodes.size());
    jr.leaves = r.leaves;
    jr.state = std::string(engine::JobStateName(rec->state));
    if (r.serving && r.req_total > 0) {
      jr.slo_attainment = r.req_ok / r.req_total;
      jr.p99_latency_ms = 1000.0 * r.p99_sum / r.req_total;
      m.inference_services += 1;
      req_total += r.req_total;
      req_ok += r.req_ok;
      p99_sum += r.p99_sum;
    }
    jr.colocated = r.ever_colocated;
    if (r.ever_colocated) ++m.inference_colocated;
    double g = in.workload->jobs[i].gpus * in.workload->jobs[i].gpu_milli / 1000.0;
    ideal_gpu_s += g * r.need0;
    lb_arrival = std::max(lb_arrival, rec->submit_s + r.need0);
    m.preemptions += rec->preemptions;
    m.migrations += rec->migrations;
    m.retries += rec->retries;
    m.gpu_hours_lost += g * r.lost_s / 3600.0;
    if (rec->state == engine::JobState::kCompleted) {
      jr.jct_s = rec->end_s - rec->submit_s;
      jr.queue_s = std::max(0.0, jr.jct_s - r.ran_s);
      jr.slowdown = r.need0 > 0 ? jr.jct_s / r.need0 : 0;
      jcts.push_back(jr.jct_s);
      queue_sum += jr.queue_s;
      completed_ideal_gpu_s += g * r.need0;
      last_end = std::max(last_end, rec->end_s);
      ++m.jobs_completed;
    } else if (rec->state == engine::JobState::kFailed) {
      ++m.jobs_failed;
      ++m.jobs_unfinished;
    } else {
      ++m.jobs_unfinished;
    }
    out->jobs.push_back(std::move(jr));
  }
  for (int i = static_cast<int>(records.size()); i < n; ++i) ++m.jobs_unfinished;
  double t0 = n > 0 ? in.workload->jobs.front().submit_s : 0;
  m.makespan_s = std::max(last_end, in.end_s) - t0;
  double gpus = in.topology->NumGpus();
  double cap = gpus * m.makespan_s;
  m.utilization = cap > 0 ? meter.AllocatedGpuS() / cap : 0;
  m.effective_utilization = cap > 0 ? meter.EffectiveGpuS() / cap : 0;
  m.waiting_hours = meter.WaitS() / 3600.0;
  m.effective_utilization_while_waiting =
      meter.WaitS() > 0 ? meter.EffectiveGpuSWhileWaiting() / (gpus * meter.WaitS()) : -1;
  m.comm_share = meter.AllocatedGpuS() > 0 ? meter.CommGpuS() / meter.AllocatedGpuS() : 0;
  m.energy_kwh = meter.EnergyJ() / 3.6e6;
  if (req_total > 0) {
    m.slo_attainment = req_ok / req_total;
    m.inference_p99_ms = 1000.0 * p99_sum / req_total;
  }
  m.colocated_training_gpu_h = meter.ColocatedGpuS() / 3600.0;
  m.colocation_training_loss =
      meter.ColocatedGpuS() > 0 ? meter.ColocLossGpuS() / meter.ColocatedGpuS() : 0;
  m.throughput = m.makespan_s > 0 ? completed_ideal_gpu_s / m.makespan_s : 0;
  m.makespan_lower_bound_s = std::max(gpus > 0 ? ideal_gpu_s / gpus : 0, lb_arrival - t0);
  if (!jcts.empty()) {
    double sum = 0;
    for (double v : jcts) sum += v;
    m.avg_jct_s = sum / static_cast<double>(jcts.size());
    m.avg_queue_s = queue_sum / static_cast<double>(jcts.size());
    std::sort(jcts.begin(), jcts.end());
    auto pct = [&](double p) {
      size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(jcts.size()))) - 1;
      return jcts[std::min(k, jcts.size() - 1)];
    };
    m.p50_jct_s = pct(0.5);
    m.p99_jct_s = pct(0.99);
  }
  m.events = in.events;
  m.cycles = in.engine->Cycles();
  out->allocated_gpu_s = meter.AllocatedGpuS();
}

}  // namespace tianshu::sim::internal
