// What a simulation run prints and writes: the side-by-side table, the JSON document (one entry
// per configuration), the per-job CSV (base/csv.h) and a self-contained HTML report with SVG
// charts: utilization over time (useful work and allocation), pending jobs, communication share,
// energy, wait-time and JCT CDFs, waits by queue (a Philly job's queue is its virtual cluster),
// a timeline of the largest jobs, and the cluster at its busiest moment by leaf switch. No
// network, no scripts: the page renders offline.
//   std::cout << FormatTable(results);
//   auto st = WriteHtmlReport("report.html", "philly on fat-tree:256", topology, results, &w);
#pragma once

#include <string>
#include <vector>

#include "tianshu/base/status.h"
#include "tianshu/model/topology.h"
#include "tianshu/sim/simulator.h"

namespace tianshu::sim {

std::string FormatTable(const std::vector<SimResult>& results);
// {"workload": ..., "cluster": ..., "configs": [{"config": "tianshu", "utilization": ...}]}
std::string FormatJson(const std::string& workload, const std::string& cluster,
                       const std::vector<SimResult>& results);
// job_id,queue,num_gpu,submit_time,start_time,end_time,jct,queue_time,slowdown,preemptions,
// nodes,leaves_spanned,slo_attainment,p99_latency_ms,colocated (the last three for inference
// services only), with a leading `config` column when several configurations ran; RFC 4180
// quoting. `queue` is the job's queue in `workload` (the queue its job file names, else its
// Philly virtual cluster, else default); empty when no workload is given.
std::string FormatJobsCsv(const std::vector<SimResult>& results,
                          const Workload* workload = nullptr);
// FormatJobsCsv into a file. Errors: the file cannot be written.
[[nodiscard]] Status WriteJobsCsv(const std::string& path, const std::vector<SimResult>& results,
                                  const Workload* workload = nullptr);
// The whole page. Without `workload` the waits by queue show one queue, "(unknown)".
std::string RenderHtml(const std::string& title, const model::Topology& topology,
                       const std::vector<SimResult>& results, const Workload* workload = nullptr);
// RenderHtml into a file. Errors: the file cannot be written.
[[nodiscard]] Status WriteHtmlReport(const std::string& path, const std::string& title,
                                     const model::Topology& topology,
                                     const std::vector<SimResult>& results,
                                     const Workload* workload = nullptr);

}  // namespace tianshu::sim
