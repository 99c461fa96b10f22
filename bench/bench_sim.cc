// Simulator speed on the shared traces: the whole Philly trace on a 2,048-GPU fat tree under
// each preset, and every ITP cluster under `tianshu`. Prints wall time, events, cycles and the
// peak resident memory of the process after each run (targets in issue 5: <= 10 s and <= 1 GB
// per Philly configuration, <= 2 s per ITP trace). Measures only; asserts nothing.
//   bench_sim [philly|itp|all] [max_jobs]
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <string>

#include "tianshu/engine/engine.h"
#include "tianshu/model/load.h"
#include "tianshu/sim/simulator.h"
#include "tianshu/sim/trace.h"

namespace {

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void RunOne(const tianshu::model::Topology& topo, const tianshu::sim::Workload& w,
            const std::string& preset) {
  auto o = tianshu::engine::PresetOptions(preset);
  auto t0 = std::chrono::steady_clock::now();
  auto r = tianshu::sim::Simulate(topo, w, *o);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    std::cout << preset << ": " << r.error().message << "\n";
    return;
  }
  const auto& m = r->metrics;
  std::cout << fmt::format(
      "{:<14} {:<10} jobs={:<6} wall={:6.2f}s events={:<8} cycles={:<8} peak_rss={:.0f}MB "
      "avg_jct={:.2f}h util={:.1f}%\n",
      w.name, preset, w.jobs.size(), wall, m.events, m.cycles, PeakRssMb(), m.avg_jct_s / 3600,
      m.utilization * 100);
}

}  // namespace

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  int max_jobs = argc > 2 ? std::stoi(argv[2]) : 0;
  std::string data = TIANSHU_DATA_DIR;
  if (what == "philly" || what == "all") {
    auto topo = tianshu::model::LoadCluster("fat-tree:nodes=256,gpus_per_node=8,gpu=A100-80GB");
    auto w =
        tianshu::sim::LoadWorkload("philly:" + data + "/philly/philly.csv", {.max_jobs = max_jobs});
    if (!topo || !w) return 1;
    for (const auto& p : tianshu::engine::PresetNames()) RunOne(*topo, *w, p);
  }
  if (what == "itp" || what == "all") {
    auto topo = tianshu::model::LoadCluster("fat-tree:nodes=256,gpus_per_node=8,gpu=A100-80GB");
    for (int c = 1; c <= 8; ++c) {
      auto w = tianshu::sim::LoadWorkload(fmt::format("itp:{}/itp/cluster{:02d}.csv", data, c),
                                          {.max_jobs = max_jobs});
      if (!topo || !w) return 1;
      RunOne(*topo, *w, "tianshu");
    }
  }
  return 0;
}
