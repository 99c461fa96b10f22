// The server's side of a burst's first cycle (issue 16): 2,000 jobs submitted held on 256 nodes
// of 8 GPUs under 16 leaves, every job asking for the fewest leaves, released in one call. Times
// the release, the first tick after it (its cycle places what fits, its second change writes the
// waiting jobs' messages), every node fetching its orders (parsed here, as its agent would),
// and every node's reports that its ranks started: the control plane's share of the first
// launches, with agents faked and the SQLite store on /dev/shm. The jobs are the Slurm peer's
// mix (power-of-two sizes from 1 to 1,024 GPUs, about as many of each) unless --workload names
// its CSV (idx,gpus,...). Each repetition starts from a new store. Prints medians and p90s;
// `--output json` one object.
//   build/bench/bench_server_release [--jobs 2000] [--nodes 256] [--reps 5] [--workload CSV]
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/direct_node.h"
#include "tianshu/server/control_plane.h"

namespace {

using namespace tianshu;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point s) {
  return std::chrono::duration<double, std::milli>(Clock::now() - s).count();
}

struct Figures {
  double median_ms = 0, p90_ms = 0;
};

Figures Summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[ms.size() * 9 / 10]};
}

// The GPUs of each job: the CSV's `gpus` column, or the peer's mix drawn from a fixed seed.
std::vector<int> Sizes(const std::string& workload, int jobs) {
  std::vector<int> sizes;
  if (!workload.empty()) {
    std::ifstream in(workload);
    std::string line;
    std::getline(in, line);  // header: idx,gpus,...
    while (std::getline(in, line) && static_cast<int>(sizes.size()) < jobs) {
      std::stringstream row(line);
      std::string idx, gpus;
      std::getline(row, idx, ',');
      std::getline(row, gpus, ',');
      sizes.push_back(std::atoi(gpus.c_str()));
    }
    if (sizes.empty()) {
      std::fprintf(stderr, "%s: no jobs read\n", workload.c_str());
      std::exit(1);
    }
    return sizes;
  }
  uint64_t x = 12345;
  for (int i = 0; i < jobs; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sizes.push_back(1 << ((x >> 33) % 11));
  }
  return sizes;
}

struct Rep {
  double release_ms = 0, tick_ms = 0, work_ms = 0, reports_ms = 0;
  size_t placed = 0;
};

Rep RunOnce(const std::vector<int>& sizes, int nodes) {
  const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string pattern = base + "/tianshu-release-XXXXXX";
  const std::string dir = mkdtemp(pattern.data());
  auto store = server::OpenSqliteStore(dir + "/tianshu.db");
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    std::exit(1);
  }
  server::ControlPlaneOptions o;
  o.placement = "topology";
  o.lost_after_ms = 24 * 3600 * 1000;
  o.node_lease_ms = 0;
  o.admin_token = "bench";
  const int64_t t0 = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  auto opened = server::ControlPlane::Open(std::move(*store), o, t0);
  if (!opened) {
    std::fprintf(stderr, "%s\n", opened.error().message.c_str());
    std::exit(1);
  }
  server::ControlPlane& cp = **opened;
  const server::Identity admin{.name = "admin", .role = server::Role::kAdmin};
  for (int n = 0; n < nodes; ++n) {
    const wire::RegisterRequest r = testing::A100Node(
        "n" + std::to_string(n), "a" + std::to_string(n), "leaf-" + std::to_string(n / 16));
    if (auto a = cp.Register(r, admin, t0); !a) {
      std::fprintf(stderr, "register: %s\n", a.error().message.c_str());
      std::exit(1);
    }
  }
  std::vector<std::string> ids(sizes.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < sizes.size(); i = next++) {
        auto req = server::ParseSubmitBody(
            "application/yaml",
            "kind: training\nname: burst-" + std::to_string(i) +
                "\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, pp: 1}\ngpus: " +
                std::to_string(sizes[i]) + "\ntopology: {leaves: minimum}\nduration: 1s\n",
            "burst.yaml");
        if (!req) {
          std::fprintf(stderr, "bad job: %s\n", req.error().message.c_str());
          std::exit(1);
        }
        req->owner = "admin";
        req->hold = true;
        auto made = cp.Submit(std::move(*req), t0);
        if (!made) {
          std::fprintf(stderr, "submit: %s\n", made.error().message.c_str());
          std::exit(1);
        }
        ids[i] = made->job["id"].get<std::string>();
      }
    });
  }
  for (auto& th : threads) th.join();
  cp.Tick(t0 + 1);  // nothing to place: every job is held
  Rep rep;
  const int64_t now = t0 + 10;
  auto s = Clock::now();
  if (auto r = cp.SetHeld(ids, false, admin, now); !r) {
    std::fprintf(stderr, "release: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  rep.release_ms = MsSince(s);
  s = Clock::now();
  cp.Tick(now);
  rep.tick_ms = MsSince(s);
  std::vector<wire::ReportBatch> batches;
  s = Clock::now();
  for (int n = 0; n < nodes; ++n) {
    batches.push_back(
        testing::AcceptAllWork(cp, "n" + std::to_string(n), "a" + std::to_string(n), &rep.placed));
  }
  rep.work_ms = MsSince(s);
  s = Clock::now();
  for (int n = 0; n < nodes; ++n) {
    if (batches[n].reports.empty()) continue;
    (void)cp.Reports("n" + std::to_string(n), batches[n], now + 50);
  }
  rep.reports_ms = MsSince(s);
  opened->reset();
  std::filesystem::remove_all(dir);
  return rep;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 2000, nodes = 256, reps = 5;
  std::string workload;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--jobs") {
      jobs = next();
    } else if (a == "--nodes") {
      nodes = next();
    } else if (a == "--reps") {
      reps = next();
    } else if (a == "--workload" && i + 1 < argc) {
      workload = argv[++i];
    } else if (a == "--output" && i + 1 < argc) {
      json_out = std::strcmp(argv[++i], "json") == 0;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--jobs N] [--nodes N] [--reps N] [--workload CSV] "
                   "[--output text|json]\n",
                   argv[0]);
      return 2;
    }
  }
  if (jobs < 1 || nodes < 1 || reps < 1) {
    std::fprintf(stderr, "--jobs, --nodes and --reps must be at least 1\n");
    return 2;
  }
  const std::vector<int> sizes = Sizes(workload, jobs);
  std::vector<double> release, tick, work, reports;
  size_t placed = 0;
  for (int r = 0; r < reps; ++r) {
    const Rep rep = RunOnce(sizes, nodes);
    release.push_back(rep.release_ms);
    tick.push_back(rep.tick_ms);
    work.push_back(rep.work_ms);
    reports.push_back(rep.reports_ms);
    placed = rep.placed;
    if (!json_out) std::fprintf(stderr, "\rrepetition %d/%d", r + 1, reps);
  }
  if (!json_out) std::fprintf(stderr, "\n");
  const Figures fr = Summarise(release), ft = Summarise(tick), fw = Summarise(work),
                fp = Summarise(reports);
  if (json_out) {
    nlohmann::json j = {{"nodes", nodes},
                        {"jobs", sizes.size()},
                        {"placed_in_first_cycle", placed},
                        {"release_ms", {{"median", fr.median_ms}, {"p90", fr.p90_ms}}},
                        {"first_tick_ms", {{"median", ft.median_ms}, {"p90", ft.p90_ms}}},
                        {"work_fetch_ms", {{"median", fw.median_ms}, {"p90", fw.p90_ms}}},
                        {"started_reports_ms", {{"median", fp.median_ms}, {"p90", fp.p90_ms}}}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("release of %zu held jobs on %d nodes, %zu placed by the first cycle (%d reps):\n",
                sizes.size(), nodes, placed, reps);
    std::printf("  release call:                   median %8.1f ms, p90 %8.1f ms\n", fr.median_ms,
                fr.p90_ms);
    std::printf("  first tick:                     median %8.1f ms, p90 %8.1f ms\n", ft.median_ms,
                ft.p90_ms);
    std::printf("  every node fetches its orders:  median %8.1f ms, p90 %8.1f ms\n", fw.median_ms,
                fw.p90_ms);
    std::printf("  every node reports its starts:  median %8.1f ms, p90 %8.1f ms\n", fp.median_ms,
                fp.p90_ms);
  }
  return 0;
}
