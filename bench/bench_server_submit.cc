// Durable job submissions per second through the whole stack: HTTP on loopback, YAML
// validation, the control plane, and SQLite (WAL, synchronous=FULL) with group commit; every
// submission is acknowledged only once it is durable. Anchor: Slurm's sbatch, ~1,000 jobs/s.
// Target: >= 2,000/s on this machine.
//   build-server/bench/bench_server_submit [clients=16] [jobs=4000] [etcd://HOST:PORT,...]
// With an etcd URL, the store is etcd (each run under a prefix of its own) instead of SQLite.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tianshu/server/client.h"
#include "tianshu/server/http_server.h"

namespace {

using namespace tianshu;

std::string Job(int i) {
  return "kind: training\nname: bench-" + std::to_string(i) +
         "\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, pp: 1}\ngpus: 8\nqueue: bench\n";
}

double Run(int clients, int jobs, size_t commit_batch, const std::string& etcd, int64_t* commits) {
  std::string pattern = (std::filesystem::temp_directory_path() / "tianshu-bench-XXXXXX").string();
  std::string dir = mkdtemp(pattern.data());
  server::ServerOptions o{.host = "127.0.0.1", .port = 0, .data_dir = dir, .token = "bench"};
  o.control.commit_batch = commit_batch;
  if (!etcd.empty()) {
    o.store = etcd + "/bench-" + std::to_string(::getpid()) + "-" + std::to_string(commit_batch) +
              "-" + std::to_string(clients) + "/";
  }
  auto s = server::Server::Start(o);
  if (!s) {
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    std::exit(1);
  }
  std::atomic<int> next{0}, ok{0}, failed{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      server::Client client(
          {.server = "http://127.0.0.1:" + std::to_string((*s)->port()), .token = "bench"});
      for (int i = next++; i < jobs; i = next++) {
        auto r = client.Post("/v1/jobs", Job(i), "application/yaml");
        if (r && r->status == 201) {
          ok++;
        } else if (failed++ == 0) {
          std::fprintf(
              stderr, "first failure: %s\n",
              r ? (std::to_string(r->status) + " " + r->text).c_str() : r.error().message.c_str());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *commits = (*s)->control_plane().StoreStats().commits;
  (*s)->Stop();
  s->reset();
  std::filesystem::remove_all(dir);
  if (ok != jobs) std::fprintf(stderr, "only %d of %d accepted\n", ok.load(), jobs);
  return ok / secs;
}

}  // namespace

int main(int argc, char** argv) {
  int clients = argc > 1 ? std::atoi(argv[1]) : 16;
  int jobs = argc > 2 ? std::atoi(argv[2]) : 4000;
  const std::string etcd = argc > 3 ? argv[3] : "";
  std::printf("durable submissions, %d clients, %d jobs, loopback HTTP + %s\n", clients, jobs,
              etcd.empty() ? "SQLite WAL FULL" : etcd.c_str());
  for (size_t batch : {size_t{512}, size_t{1}}) {
    int64_t commits = 0;
    double rate = Run(clients, jobs, batch, etcd, &commits);
    std::printf("  commit_batch=%-4zu %8.0f submissions/s  (%lld transactions)\n", batch, rate,
                static_cast<long long>(commits));
  }
  std::printf("  anchor: Slurm sbatch ~1,000/s; target >= 2,000/s\n");
  return 0;
}
