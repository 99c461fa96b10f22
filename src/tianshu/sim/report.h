// What a simulation run prints and writes: the side-by-side table, the JSON document (one entry
// per configuration), the per-job CSV and a self-contained HTML report with SVG charts
// (utilization over time, JCT CDF, queue length, communication share, energy, and a heat map
// of the cluster at its busiest moment). No network, no scripts: the page renders offline.
//   std::cout << FormatTable(results);
//   auto st = WriteHtmlReport("report.html", "philly on fat-tree:256", topology, results);
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
// job_id,num_gpu,submit_time,start_time,end_time,jct,queue_time,slowdown,preemptions,nodes,
// leaves_spanned,slo_attainment,p99_latency_ms,colocated (the last three for inference services
// only), with a leading `config` column when several configurations ran.
[[nodiscard]] Status WriteJobsCsv(const std::string& path, const std::vector<SimResult>& results);
std::string RenderHtml(const std::string& title, const model::Topology& topology,
                       const std::vector<SimResult>& results);
[[nodiscard]] Status WriteHtmlReport(const std::string& path, const std::string& title,
                                     const model::Topology& topology,
                                     const std::vector<SimResult>& results);

}  // namespace tianshu::sim
