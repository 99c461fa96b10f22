// Scale benchmark (issue 8): 256 agents, each declaring 8 A100s with its own address and work
// directory, against one `tianshu serve` on this machine; measures the agents' idle CPU and
// memory, then a burst of 2,000 `sleep` jobs of 1-1,024 GPUs (placeholder ranks that end after
// the job's duration) run to completion, and prints: time to allocate all, allocations per
// second, GPU utilization over the run, leaf switches spanned per job. A benchmark: it prints
// and asserts only that the burst completes. Sizes: TIANSHU_SCALE_AGENTS, TIANSHU_SCALE_JOBS
// (CTest runs it with 500 jobs: tests/CMakeLists.txt). TIANSHU_SCALE_WORKLOAD (a workload CSV),
// TIANSHU_SCALE_HOLD (submit held, release at once), TIANSHU_SCALE_REAL_RANKS (`sleep`
// processes, not placeholders), TIANSHU_SCALE_BINARY (another build, for an A/B),
// TIANSHU_SCALE_DIR (where its files go) and TIANSHU_SCALE_JOBS_CSV (one row per job): below.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "testing/processes.h"
#include "tianshu/server/client.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

pid_t Spawn(std::vector<std::string> args, const std::string& log) {
  // TIANSHU_SCALE_BINARY: another build of tianshu, to compare two on the same machine state.
  const char* other = std::getenv("TIANSHU_SCALE_BINARY");
  args.insert(args.begin(), other != nullptr && *other != '\0' ? other : TIANSHU_BINARY);
  return tianshu::testing::SpawnLogged(std::move(args), log);
}

// utime + stime of a process, in clock ticks.
int64_t CpuTicks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto p = s.rfind(')');
  if (p == std::string::npos) return 0;
  std::istringstream in(s.substr(p + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return utime + stime;
}

// kB of a "Key:   123 kB" line in a /proc file.
int64_t ProcKb(pid_t pid, const std::string& file, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return 0;
}

// The sum of the samples of metric `name` (every label set) in a /metrics text.
double MetricSum(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.rfind(' ');
    if (space == std::string::npos || !line.starts_with(name)) continue;
    const char next = line.size() > name.size() ? line[name.size()] : ' ';
    if (next == ' ' || next == '{') sum += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

TEST(AgentScale, TwoHundredFiftySixAgentsRunABurstOfSleepJobs) {
  const int kAgents = EnvInt("TIANSHU_SCALE_AGENTS", 256);
  const int kJobs = EnvInt("TIANSHU_SCALE_JOBS", 2000);
  const int kGpusPerNode = 8, kNodesPerLeaf = 16;
  // TIANSHU_SCALE_DIR: where the run's directory (the server's store, every agent's work
  // directory) is made; /tmp by default. On one machine every node's journal syncs share one
  // disk, where a real node has its own: /dev/shm takes the disk out of the measurement.
  const char* base_env = std::getenv("TIANSHU_SCALE_DIR");
  std::string tmpl = std::string(base_env != nullptr && *base_env != 0 ? base_env : "/tmp") +
                     "/tianshu-scale-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << tmpl << ": " << std::strerror(errno);
  std::string dir = tmpl;
  int port = tianshu::testing::FreeLoopbackPort();
  std::string server_addr = "127.0.0.1:" + std::to_string(port);
  // TIANSHU_SCALE_HEARTBEAT=3s: the heartbeat period the server asks of its agents (serve's
  // --heartbeat-interval; 1 s by default).
  std::vector<std::string> serve = {"serve",         "--listen",     server_addr, "--data",
                                    dir + "/server", "--lost-after", "30s"};
  if (const char* hb = std::getenv("TIANSHU_SCALE_HEARTBEAT"); hb != nullptr && *hb != 0) {
    serve.insert(serve.end(), {"--heartbeat-interval", hb});
  }
  // TIANSHU_SCALE_PROBES=0: no bandwidth probes (network.probes: false). A probe is two Python
  // processes importing torch (about 1.5 CPU-seconds each) on two idle nodes; on a real cluster
  // those nodes' own CPUs run it, here the one machine every emulated node shares does, and a
  // probe that overlaps the release slows every node's launches. On by default, as shipped.
  if (EnvInt("TIANSHU_SCALE_PROBES", 1) == 0) {
    std::ofstream(dir + "/engine.yaml") << "network:\n  probes: false\n";
    serve.insert(serve.end(), {"--config", dir + "/engine.yaml"});
  }
  pid_t server = Spawn(serve, dir + "/server.log");
  for (int i = 0; i < 300 && !fs::exists(dir + "/server/token"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string token;
  std::getline(std::ifstream(dir + "/server/token"), token);
  tianshu::server::Client client({.server = "http://" + server_addr, .token = token});

  std::vector<pid_t> agents;
  // Every process goes when the test ends, also when an assertion returns early.
  // The directory goes last, once nothing writes there any more (when the test passed).
  struct Reaper {
    std::vector<pid_t>* agents;
    pid_t server;
    std::string dir;
    bool remove_dir = false;
    ~Reaper() {
      for (pid_t p : *agents) ::kill(p, SIGTERM);
      for (pid_t p : *agents) ::waitpid(p, nullptr, 0);
      ::kill(server, SIGTERM);
      ::waitpid(server, nullptr, 0);
      std::error_code ec;
      if (remove_dir) fs::remove_all(dir, ec);
    }
  } reaper{&agents, server, dir};
  // Each agent's log port: free now and distinct (fixed ports may be taken on a CI machine).
  std::set<int> log_ports;
  auto log_port = [&] {
    int p = 0;
    for (int tries = 0; tries < 100 && (p == 0 || log_ports.count(p) || p == port); ++tries) {
      p = tianshu::testing::FreeLoopbackPort();
    }
    log_ports.insert(p);
    return p;
  };
  auto t_start_agents = Clock::now();
  for (int i = 0; i < kAgents; ++i) {
    std::string n = std::to_string(i);
    agents.push_back(Spawn(
        {"agent", "--server", server_addr, "--token-file", dir + "/server/token", "--node", "s" + n,
         "--workdir", dir + "/a" + n, "--devices", "8xA100-80GB", "--address",
         "127.0.0.1:" + std::to_string(log_port()), "--label",
         "leaf=leaf-" + std::to_string(i / kNodesPerLeaf), "--cgroup-mode", "none", "--no-nvml"},
        dir + "/agents.log"));
  }
  auto ready = [&] {
    auto r = client.Get("/v1/nodes");
    if (!r || !r->ok()) return 0;
    const json& list = r->body.is_array() ? r->body : r->body.value("nodes", json::array());
    int n = 0;
    for (const auto& node : list) n += node.value("state", "") == "ready";
    return n;
  };
  int up = 0;
  for (int i = 0; i < 600 && (up = ready()) < kAgents; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  double start_s = std::chrono::duration<double>(Clock::now() - t_start_agents).count();
  std::cout << "agents registered: " << up << "/" << kAgents << " in " << start_s << " s\n";
  ASSERT_EQ(up, kAgents);

  // Idle cost: CPU over 10 s, memory.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  int64_t ticks0 = 0, server0 = CpuTicks(server);
  for (pid_t p : agents) ticks0 += CpuTicks(p);
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(10));
  int64_t ticks1 = 0, server1 = CpuTicks(server);
  for (pid_t p : agents) ticks1 += CpuTicks(p);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  double agents_cpu = static_cast<double>(ticks1 - ticks0) / hz / secs;
  int64_t rss = 0, pss = 0, priv = 0;
  for (pid_t p : agents) {
    rss += ProcKb(p, "status", "VmRSS");
    pss += ProcKb(p, "smaps_rollup", "Pss");
    priv += ProcKb(p, "smaps_rollup", "Private_Clean") + ProcKb(p, "smaps_rollup", "Private_Dirty");
  }
  std::printf("idle: %d agents use %.1f%% of one CPU in all (%.3f%% each); server %.1f%%\n",
              kAgents, 100 * agents_cpu, 100 * agents_cpu / kAgents,
              100.0 * static_cast<double>(server1 - server0) / hz / secs);
  std::printf("memory per agent: RSS %.1f MB, PSS %.1f MB, private %.1f MB\n",
              static_cast<double>(rss) / kAgents / 1024, static_cast<double>(pss) / kAgents / 1024,
              static_cast<double>(priv) / kAgents / 1024);

  // The burst: sizes 1..1024 GPUs, mostly small (as in published cluster traces), 1-10 s each;
  // or the jobs of TIANSHU_SCALE_WORKLOAD (the Slurm peer's workload.csv: idx,gpus,nodes,
  // gpus_per_node,duration_s).
  std::vector<std::pair<int, int>> jobs;
  if (const char* w = std::getenv("TIANSHU_SCALE_WORKLOAD")) {
    std::ifstream in(w);
    ASSERT_TRUE(in) << w;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line) && static_cast<int>(jobs.size()) < kJobs) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
      ASSERT_EQ(f.size(), 5u) << line;
      jobs.push_back({std::stoi(f[1]), std::stoi(f[4])});
    }
  } else {
    std::mt19937_64 rng(42);
    const std::vector<int> sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    std::discrete_distribution<int> pick({35, 15, 15, 15, 8, 5, 3, 2, 1, 0.5, 0.5});
    std::uniform_int_distribution<int> dur(1, 10);
    for (int i = 0; i < kJobs; ++i) jobs.push_back({sizes[pick(rng)], dur(rng)});
  }
  const int kJobsRun = static_cast<int>(jobs.size());
  double gpu_seconds = 0;
  for (auto [g, d] : jobs) gpu_seconds += double(g) * d;
  // TIANSHU_SCALE_HOLD=1: every job is submitted held, then all are released in one call (as
  // the Slurm peer does with sbatch -H and scontrol release); the clock starts at the release.
  const bool hold = EnvInt("TIANSHU_SCALE_HOLD", 0) != 0;
  // TIANSHU_SCALE_REAL_RANKS=1: each rank is a real process (`sleep DURATION`, through the
  // agent's shim) instead of a placeholder, so the overhead includes spawning and reaping.
  const bool real_ranks = EnvInt("TIANSHU_SCALE_REAL_RANKS", 0) != 0;
  // TIANSHU_SCALE_LEAVES=minimum (or N): every job asks for `topology: {leaves: ...}`, a
  // required bound on the leaf switches it spans (as Slurm's --switches=N).
  const char* leaves_env = std::getenv("TIANSHU_SCALE_LEAVES");
  const std::string leaf_bound = leaves_env != nullptr ? leaves_env : "";
  const int total_gpus = kAgents * kGpusPerNode;
  std::atomic<int> next{0}, accepted{0};
  std::vector<std::string> ids(kJobsRun);
  auto t_submit = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      tianshu::server::Client c({.server = "http://" + server_addr, .token = token});
      for (int i = next++; i < kJobsRun; i = next++) {
        auto [g, d] = jobs[i];
        std::string yaml = "kind: training\nname: sleep-" + std::to_string(i) +
                           "\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, pp: 1}\ngpus: " +
                           std::to_string(g) + "\n" +
                           (leaf_bound.empty() ? "" : "topology: {leaves: " + leaf_bound + "}\n") +
                           (real_ranks ? "run: {command: [sleep, \"" + std::to_string(d) + "\"]}\n"
                                       : "duration: " + std::to_string(d) + "s\n");
        auto r = c.Post(hold ? "/v1/jobs?hold=true" : "/v1/jobs", yaml, "application/yaml");
        if (r && r->ok()) {
          ids[i] = r->body.value("id", "");
          ++accepted;
        } else if (r) {
          std::printf("job %d (%d GPUs) rejected: %s\n", i, g, r->ErrorText().c_str());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  double submit_s = std::chrono::duration<double>(Clock::now() - t_submit).count();
  std::printf("submitted %d/%d jobs in %.1f s\n", accepted.load(), kJobsRun, submit_s);
  // Bandwidth probes running when the clock starts, and those that end before it stops.
  auto probes = [&] {
    auto m = client.Get("/metrics");
    return m && m->ok() ? std::pair{MetricSum(m->text, "tianshu_network_probes_running"),
                                    MetricSum(m->text, "tianshu_network_probes_total")}
                        : std::pair{-1.0, -1.0};
  };
  const auto probes0 = probes();
  int64_t release_ms = 0;
  if (hold) {
    json all = json::array();
    for (const auto& id : ids) {
      if (!id.empty()) all.push_back(id);
    }
    t_submit = Clock::now();
    release_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
    auto r = client.Post("/v1/jobs/release", json{{"ids", all}}.dump(), "application/json");
    ASSERT_TRUE(r && r->ok()) << (r ? r->ErrorText() : r.error().message);
    std::printf("released %zu jobs in one call in %.3f s\n", all.size(),
                std::chrono::duration<double>(Clock::now() - t_submit).count());
  }

  // The CPU the agents and the server use from here (the release, or the first submission
  // without holds) until the last job ended: on a machine the agents share, launch overhead is
  // mostly CPU, and this figure varies less from run to run than the times do.
  int64_t run_agents0 = 0, run_server0 = CpuTicks(server);
  for (pid_t p : agents) run_agents0 += CpuTicks(p);
  // Until every job ended: sample the allocated GPUs for utilization, from the server's gauges
  // (tianshu_jobs by state, tianshu_gpus{state="allocated"}: jobs starting, running or
  // stopping). Listing every job each second instead (placements of up to 1,024 ranks) cost the
  // server about a tenth of its time, under its lock, during the measurement.
  double util_sum = 0;
  int util_n = 0, done = 0;
  auto deadline = Clock::now() + std::chrono::minutes(30);
  while (Clock::now() < deadline) {
    auto m = client.Get("/metrics");
    double alloc = 0;
    done = 0;
    if (m && m->ok()) {
      std::istringstream lines(m->text);
      for (std::string line; std::getline(lines, line);) {
        const size_t space = line.rfind(' ');
        if (space == std::string::npos) continue;
        const std::string key = line.substr(0, space);
        const double value = std::strtod(line.c_str() + space + 1, nullptr);
        for (const char* s : {"succeeded", "failed", "cancelled"}) {
          if (key == std::string("tianshu_jobs{state=\"") + s + "\"}") {
            done += static_cast<int>(value);
          }
        }
        if (key == "tianshu_gpus{state=\"allocated\"}") alloc = value;
      }
    }
    util_sum += alloc / total_gpus;
    ++util_n;
    if (done >= accepted.load()) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  double run_s = std::chrono::duration<double>(Clock::now() - t_submit).count();
  int64_t run_agents1 = 0, run_server1 = CpuTicks(server);
  for (pid_t p : agents) run_agents1 += CpuTicks(p);
  int64_t ranks_run = 0;
  for (auto [g, d] : jobs) ranks_run += g;
  std::printf("CPU over the run: agents %.1f s, server %.1f s (%.2f ms per rank launched)\n",
              static_cast<double>(run_agents1 - run_agents0) / hz,
              static_cast<double>(run_server1 - run_server0) / hz,
              1000.0 * static_cast<double>(run_agents1 - run_agents0 + run_server1 - run_server0) /
                  hz / static_cast<double>(std::max<int64_t>(1, ranks_run)));
  std::printf("completed %d/%d jobs in %.1f s (ideal packing of the GPU-seconds: %.1f s)\n", done,
              accepted.load(), run_s, gpu_seconds / total_gpus);
  std::printf("GPU utilization over the run: %.1f%%\n", 100 * util_sum / std::max(1, util_n));
  const auto probes1 = probes();
  std::printf("bandwidth probes: %.0f running at the start, %.0f ended during the run\n",
              probes0.first, probes1.second - probes0.second);

  // From each job's history and placement: when it was allocated, and the leaves it spans.
  std::vector<double> alloc_times;
  std::vector<double> overheads;  // (done - allocated) - duration, per job (the peer's figure)
  std::map<int, std::vector<double>> overhead_by_size, launch_by_size;
  int64_t last_done_ms = 0;
  int multi_node = 0, multi_node_at_min = 0;
  std::map<int, std::vector<int>> leaves_by_size;
  int64_t submit_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count() -
                      static_cast<int64_t>(run_s * 1000);
  if (release_ms > 0) submit_ms = release_ms;
  // TIANSHU_SCALE_JOBS_CSV=FILE: one row per job (its size and when it was placed, ran and
  // ended, in ms after the release), for a look at where a run's time went.
  std::ofstream jobs_csv;
  if (const char* out = std::getenv("TIANSHU_SCALE_JOBS_CSV"); out != nullptr && *out != 0) {
    jobs_csv.open(out);
    jobs_csv << "idx,gpus,duration_s,placed_ms,running_ms,done_ms,first_node\n";
  }
  for (int i = 0; i < kJobsRun; ++i) {
    if (ids[i].empty()) continue;
    auto r = client.Get("/v1/jobs/" + ids[i]);
    if (!r || !r->ok()) continue;
    int64_t alloc_ms = 0, done_ms = 0, running_ms = 0;
    for (const auto& h : r->body.value("history", json::array())) {
      const std::string to = h.value("to", "");
      if (to == "running" && running_ms == 0) running_ms = h.value("time_ms", int64_t{0});
      if (to == "starting" && alloc_ms == 0) {
        alloc_ms = h.value("time_ms", int64_t{0});
        alloc_times.push_back(double(alloc_ms - submit_ms) / 1000.0);
      }
      if (to == "succeeded" || to == "failed" || to == "cancelled") {
        done_ms = h.value("time_ms", int64_t{0});
      }
    }
    if (alloc_ms > 0 && done_ms > 0) {
      overheads.push_back(double(done_ms - alloc_ms) / 1000.0 - jobs[i].second);
      overhead_by_size[jobs[i].first].push_back(overheads.back());
      if (running_ms > 0) {  // the launch (placed -> every rank started) and the end
        launch_by_size[jobs[i].first].push_back(double(running_ms - alloc_ms) / 1000.0);
      }
      last_done_ms = std::max(last_done_ms, done_ms);
    }
    const json place = r->body.value("placement", json::array());  // (a copy: read once)
    if (jobs_csv.is_open()) {
      jobs_csv << i << ',' << jobs[i].first << ',' << jobs[i].second << ','
               << (alloc_ms > 0 ? alloc_ms - submit_ms : -1) << ','
               << (running_ms > 0 ? running_ms - submit_ms : -1) << ','
               << (done_ms > 0 ? done_ms - submit_ms : -1) << ','
               << (place.empty() ? "" : place[0].value("node", "")) << '\n';
    }
    std::set<std::string> leaves;
    for (const auto& p : place) {
      std::string node = p.value("node", "");
      if (node.size() > 1) leaves.insert(std::to_string(std::stoi(node.substr(1)) / kNodesPerLeaf));
    }
    leaves_by_size[jobs[i].first].push_back(static_cast<int>(leaves.size()));
    const int nodes = (jobs[i].first + kGpusPerNode - 1) / kGpusPerNode;
    if (nodes > 1) {
      ++multi_node;
      multi_node_at_min +=
          static_cast<int>(leaves.size()) <= (nodes + kNodesPerLeaf - 1) / kNodesPerLeaf;
    }
  }
  if (!overheads.empty()) {
    double sum = 0;
    for (double o : overheads) sum += o;
    std::sort(overheads.begin(), overheads.end());
    std::printf(
        "last job done %.1f s after %s; per-job overhead (done - allocated - duration): mean "
        "%.3f s, median %.3f s, p95 %.3f s\n",
        double(last_done_ms - submit_ms) / 1000.0,
        release_ms > 0 ? "the release" : "the first submission", sum / double(overheads.size()),
        overheads[overheads.size() / 2], overheads[overheads.size() * 95 / 100]);
  }
  std::printf("multi-node jobs on the minimum number of leaves: %d of %d\n", multi_node_at_min,
              multi_node);
  for (const auto& [size, v] : overhead_by_size) {
    double sum = 0;
    for (double o : v) sum += o;
    double launch = 0;
    for (double o : launch_by_size[size]) launch += o;
    std::printf("  %4d GPUs: mean overhead %.3f s, of which placed -> all ranks started %.3f s\n",
                size, sum / double(v.size()),
                launch / double(std::max<size_t>(1, launch_by_size[size].size())));
  }
  // Where the server's time went: its scheduling cycles and store commits.
  if (auto m = client.Get("/metrics"); m && m->ok()) {
    std::istringstream lines(m->text);
    for (std::string line; std::getline(lines, line);) {
      for (const char* name :
           {"tianshu_cycle_seconds_sum", "tianshu_cycle_seconds_count", "tianshu_store_commit",
            "tianshu_store_changes", "tianshu_store_written_bytes", "tianshu_job_preemptions_total",
            "tianshu_job_retries_total", "tianshu_gang_timeouts_total", "tianshu_ledger_",
            "tianshu_http_requests_total"}) {
        if (line.starts_with(name)) std::printf("  server: %s\n", line.c_str());
      }
    }
  }
  std::sort(alloc_times.begin(), alloc_times.end());
  if (!alloc_times.empty()) {
    double last = alloc_times.back();
    std::printf("time to allocate all: %.1f s; allocations per second: %.1f\n", last,
                double(alloc_times.size()) / std::max(last, 1e-3));
  }
  for (const auto& [size, v] : leaves_by_size) {
    double mean = 0;
    for (int x : v) mean += x;
    mean /= static_cast<double>(std::max<size_t>(1, v.size()));
    int ideal = (size + kGpusPerNode * kNodesPerLeaf - 1) / (kGpusPerNode * kNodesPerLeaf);
    std::printf("  %4d GPUs: %4zu jobs, leaf switches spanned %.2f (minimum %d)\n", size, v.size(),
                mean, ideal);
  }
  std::printf(
      "anchor: Slurm 22.05 with 256 slurmd allocated ~80 jobs/s and took 462 s for such a "
      "burst whose ideal packing is 186 s\n");

  EXPECT_EQ(done, accepted.load());
  // TIANSHU_SCALE_KEEP=1 keeps the directory (the server's store and log, the agents' work
  // directories and log) for a look after the run.
  reaper.remove_dir = !HasFailure() && std::getenv("TIANSHU_SCALE_KEEP") == nullptr;
}

}  // namespace
