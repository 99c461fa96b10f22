// Workloads for the simulator: real traces (Philly, ITP, openb pods, Tiresias' format), our own
// YAML workload (job files with submit times, which may also name the cluster and the
// configurations to compare: a scenario), and a generator of LLM training mixes. Trace jobs
// carry only a GPU count and a duration; SpecFor gives them a model from the catalogue, chosen
// deterministically from the job's id and size class.
//   auto jobs = LoadWorkload("philly:data/philly/philly.csv", {.max_jobs = 1000});
//   model::JobSpec spec = SpecFor((*jobs)->jobs[0]);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/job.h"

namespace tianshu::sim {

struct TraceJob {
  int64_t id = 0;
  std::string name;       // trace's own id where it has one
  double submit_s = 0;    // seconds from the start of the trace
  double duration_s = 0;  // run time in the trace = ideal run time here
  int gpus = 1;
  int gpu_milli = 1000;                // per GPU (openb shares GPUs)
  std::string vc;                      // Philly virtual cluster
  std::optional<model::JobSpec> spec;  // full spec (YAML workload, generator)
};

struct WorkloadOptions {
  std::vector<std::string> vcs;  // Philly: keep these virtual clusters only
  std::string from, to;          // window: "2017-10-01", "2017-10-01 12:00:00" or seconds
  int max_jobs = 0;              // 0: all (the first N by submission time)
  double time_scale = 1;         // multiplies arrival times and durations (0.1: 10x shorter)
  double load = 0;               // >0: rescale arrivals to this offered load
  int cluster_gpus = 0;          // needed by `load`
  uint64_t seed = 42;            // generator
};

struct Workload {
  std::string name;            // "philly", "itp:cluster01", a scenario's name
  std::vector<TraceJob> jobs;  // by submission time, ids unique
  // From a scenario file: defaults the command line may override.
  std::string cluster;
  std::vector<std::string> configs;
  std::string description;
  std::vector<std::string> claims;
};

// `spec` is KIND:PATH (philly, itp, openb, tiresias, yaml), KIND:key=value,... (llm), or a
// path whose kind is detected from its header or extension. Relative paths inside a YAML
// workload resolve against its folder.
[[nodiscard]] Result<Workload> LoadWorkload(const std::string& spec,
                                            const WorkloadOptions& options);

// Offered load: sum of GPU x duration / (cluster GPUs x arrival span).
double OfferedLoad(const std::vector<TraceJob>& jobs, int cluster_gpus);

// The job spec the engine and the performance model see: the full spec if the workload had
// one; otherwise a catalogue model by size class (1-8 GPUs: resnet50 or bert-large; 9-63:
// llama2-7b, llama2-13b or gpt3-13b; 64-255: llama2-13b, gpt3-13b or llama2-70b; 256+:
// gpt3-175b, and gpt-530b from 1024), picked by a hash of the id.
model::JobSpec SpecFor(const TraceJob& job);

}  // namespace tianshu::sim
