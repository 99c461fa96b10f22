// One tick of the control plane at scale (issue 16): 2,048 registered nodes of 8 GPUs under 128
// leaves, every GPU held by a running job (2,048 jobs of 8 GPUs), 10,000 pending jobs that do
// not fit, and finished (cancelled) jobs up to 100,000 records in all, in a SQLite store on
// /dev/shm (fsync there costs nothing: the setup is not what is measured). Measures the tick
// when nothing changed, the tick after one arrival (the submission itself not counted), and the
// tick after an admin cordons or uncordons a node, and after a node fails or comes back (the
// ledger is marked, not rebuilt), and API reads made under the control plane's lock (nodes,
// the console's job polls, queues, /metrics).
// Preemption is off, so that a tick changes nothing it measures. Prints medians and p90s;
// `--output json` prints one JSON object.
//   build/bench/bench_server_tick [--jobs 100000] [--pending 10000] [--nodes 2048] [--reps 20]
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/direct_node.h"
#include "tianshu/server/control_plane.h"

namespace {

using namespace tianshu;
using Clock = std::chrono::steady_clock;

std::string Job(int i, int gpus) {
  return "kind: training\nname: bench-" + std::to_string(i) +
         "\nmodel: {profile: llama2-7b}\nparallelism: {tp: 1, pp: 1}\ngpus: " +
         std::to_string(gpus) + "\nduration: 1h\n";
}

server::SubmitRequest Request(int i, int gpus) {
  auto r = server::ParseSubmitBody("application/yaml", Job(i, gpus), "bench.yaml");
  if (!r) {
    std::fprintf(stderr, "bad job: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  r->owner = "admin";
  return std::move(*r);
}

struct Figures {
  double median_ms = 0, p90_ms = 0;
};

Figures Summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[ms.size() * 9 / 10]};
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  int total = 100000, pending = 10000, nodes = 2048, reps = 20;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--jobs")
      total = next();
    else if (a == "--pending")
      pending = next();
    else if (a == "--nodes")
      nodes = next();
    else if (a == "--reps")
      reps = next();
    else if (a == "--output" && i + 1 < argc)
      json_out = std::strcmp(argv[++i], "json") == 0;
    else {
      std::fprintf(stderr,
                   "usage: %s [--jobs N] [--pending N] [--nodes N] [--reps N] "
                   "[--output text|json]\n",
                   argv[0]);
      return 2;
    }
  }
  const int running = nodes;  // one 8-GPU job per node
  const int finished = std::max(0, total - pending - running);
  const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string pattern = base + "/tianshu-tick-XXXXXX";
  const std::string dir = mkdtemp(pattern.data());
  auto store = server::OpenSqliteStore(dir + "/tianshu.db");
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message.c_str());
    return 1;
  }
  server::ControlPlaneOptions o;
  o.config.preemption = false;
  o.placement = "topology";
  o.lost_after_ms = 24 * 3600 * 1000;
  o.node_lease_ms = 0;
  o.admin_token = "bench";
  const int64_t t0 = NowMs();
  auto opened = server::ControlPlane::Open(std::move(*store), o, t0);
  if (!opened) {
    std::fprintf(stderr, "%s\n", opened.error().message.c_str());
    return 1;
  }
  server::ControlPlane& cp = **opened;
  const server::Identity admin{.name = "admin", .role = server::Role::kAdmin};
  auto progress = [&](const char* what, int done, int of) {
    if (!json_out && (done % 10000 == 0 || done == of)) {
      std::fprintf(stderr, "\r%s %d/%d", what, done, of);
      if (done == of) std::fprintf(stderr, "\n");
    }
  };
  auto t_setup = Clock::now();
  for (int n = 0; n < nodes; ++n) {
    const wire::RegisterRequest r = testing::A100Node(
        "n" + std::to_string(n), "a" + std::to_string(n), "leaf-" + std::to_string(n / 16));
    if (auto a = cp.Register(r, admin, t0); !a) {
      std::fprintf(stderr, "register: %s\n", a.error().message.c_str());
      return 1;
    }
    progress("nodes", n + 1, nodes);
  }
  // Submissions from 8 threads (group commit), in three phases.
  auto submit = [&](int from, int to, int gpus, bool cancel, const char* what) {
    std::atomic<int> next{from}, done{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = next++; i < to; i = next++) {
          auto made = cp.Submit(Request(i, gpus), t0);
          if (!made) {
            std::fprintf(stderr, "submit: %s\n", made.error().message.c_str());
            std::exit(1);
          }
          if (cancel) (void)cp.Cancel(made->job["id"].get<std::string>(), admin, t0);
          const int d = ++done;
          if (t == 0) progress(what, d, to - from);
        }
      });
    }
    for (auto& th : threads) th.join();
    progress(what, to - from, to - from);
  };
  submit(0, finished, 8, true, "finished jobs");
  submit(finished, finished + running, 8, false, "running jobs");
  cp.Tick(t0 + 1);  // places the running ones
  for (int n = 0; n < nodes; ++n) {
    const std::string node = "n" + std::to_string(n);
    (void)cp.Reports(node, testing::AcceptAllWork(cp, node, "a" + std::to_string(n)), t0 + 2);
    progress("launches", n + 1, nodes);
  }
  submit(finished + running, finished + running + pending, 8, false, "pending jobs");
  const double setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();
  int64_t now = t0 + 10;
  cp.Tick(now);  // the arrivals' cycle
  auto timed_tick = [&] {
    now += 10;
    auto s = Clock::now();
    cp.Tick(now);
    return std::chrono::duration<double, std::milli>(Clock::now() - s).count();
  };
  std::vector<double> idle, arrival;
  for (int r = 0; r < reps; ++r) idle.push_back(timed_tick());
  for (int r = 0; r < reps; ++r) {
    (void)cp.Submit(Request(total + r, 8), now);
    arrival.push_back(timed_tick());
  }
  // A node's state changes (an admin cordons it, then uncordons it): the topology is the same.
  std::vector<double> node_change;
  for (int r = 0; r < reps; ++r) {
    const std::string node = "n" + std::to_string(r % nodes);
    for (const char* action : {"cordon", "uncordon"}) {
      if (auto a = cp.AdminNode(node, action, admin, now); !a) {
        std::fprintf(stderr, "%s: %s\n", action, a.error().message.c_str());
        return 1;
      }
      node_change.push_back(timed_tick());
    }
  }
  // A node fails (its job goes to the retry path), then comes back (the job is placed on it
  // again): both are marks in the ledger, as the node stays in the cluster view.
  std::vector<double> node_loss;
  for (int r = 0; r < reps; ++r) {
    const int n = nodes - 1 - (r % nodes);
    const std::string node = "n" + std::to_string(n);
    for (const wire::Health health : {wire::Health::kFailed, wire::Health::kOk}) {
      auto hb = cp.Heartbeat(node, {.agent_id = "a" + std::to_string(n), .health = health}, now);
      if (!hb) {
        std::fprintf(stderr, "heartbeat: %s\n", hb.error().message.c_str());
        return 1;
      }
      node_loss.push_back(timed_tick());
    }
  }
  // API reads that take the control plane's lock, each timed alone: the node listing
  // (`tianshu nodes`), the console's two job polls (the 500 newest; the pending ones), the
  // queues (also sampled by the console every 2 s) and a /metrics scrape. Each is timed whole,
  // and by what it costs everyone else: the longest another caller (a heartbeat, the ticker),
  // asking for the lock again and again meanwhile, waited for it.
  struct ReadFigures {
    Figures call, held;
  };
  auto ms_since = [](Clock::time_point s) {
    return std::chrono::duration<double, std::milli>(Clock::now() - s).count();
  };
  auto timed_read = [&](const std::function<size_t()>& read) {
    std::vector<double> ms, held;
    for (int r = 0; r < std::min(reps, 5); ++r) {
      // The read on this thread (as earlier runs timed it), the other caller on a second one.
      std::atomic<bool> done{false};
      double longest = 0;
      std::thread other([&] {
        while (!done) {
          auto s = Clock::now();
          (void)cp.Ledger();
          longest = std::max(longest, ms_since(s));
        }
      });
      auto s = Clock::now();
      const size_t got = read();
      ms.push_back(ms_since(s));
      done = true;
      other.join();
      if (got == 0) {
        std::fprintf(stderr, "a read returned nothing\n");
        std::exit(1);
      }
      held.push_back(longest);
    }
    return ReadFigures{Summarise(ms), Summarise(held)};
  };
  const ReadFigures fls = timed_read([&] {
    const nlohmann::json j = cp.ListNodes(now);
    return j["nodes"].size() == static_cast<size_t>(nodes) ? j["nodes"].size() : 0;
  });
  const ReadFigures f_newest =
      timed_read([&] { return cp.ListJobs({.newest_first = true, .limit = 500})["jobs"].size(); });
  const ReadFigures f_pending =
      timed_read([&] { return cp.ListJobs({.states = {"pending"}, .limit = 500})["jobs"].size(); });
  const ReadFigures f_queues = timed_read([&] { return cp.ListQueues()["queues"].size(); });
  const ReadFigures f_metrics = timed_read([&] { return cp.Metrics().size(); });
  const Figures fi = Summarise(idle), fa = Summarise(arrival), fn = Summarise(node_change),
                fl = Summarise(node_loss);
  const server::ControlPlane::LedgerStats ledger = cp.Ledger();
  const auto stats = cp.StoreStats();
  if (json_out) {
    nlohmann::json j = {
        {"nodes", nodes},
        {"jobs", total},
        {"pending", pending},
        {"running", running},
        {"setup_s", setup_s},
        {"tick_unchanged_ms", {{"median", fi.median_ms}, {"p90", fi.p90_ms}}},
        {"tick_after_arrival_ms", {{"median", fa.median_ms}, {"p90", fa.p90_ms}}},
        {"tick_after_node_change_ms", {{"median", fn.median_ms}, {"p90", fn.p90_ms}}},
        {"tick_after_node_failure_or_return_ms", {{"median", fl.median_ms}, {"p90", fl.p90_ms}}},
        {"read_ms",
         {{"list_nodes", fls.call.median_ms},
          {"list_jobs_newest_500", f_newest.call.median_ms},
          {"list_jobs_pending_500", f_pending.call.median_ms},
          {"list_queues", f_queues.call.median_ms},
          {"metrics", f_metrics.call.median_ms}}},
        {"read_lock_wait_ms",
         {{"list_nodes", fls.held.median_ms},
          {"list_jobs_newest_500", f_newest.held.median_ms},
          {"list_jobs_pending_500", f_pending.held.median_ms},
          {"list_queues", f_queues.held.median_ms},
          {"metrics", f_metrics.held.median_ms}}},
        {"ledger_rebuilds", ledger.rebuilds},
        {"ledger_node_marks", ledger.node_marks},
        {"commits", stats.commits}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("control plane tick: %d nodes, %d jobs (%d pending, %d running), setup %.1f s\n",
                nodes, total, pending, running, setup_s);
    std::printf("  nothing changed:   median %8.3f ms, p90 %8.3f ms  (target <= 1 ms)\n",
                fi.median_ms, fi.p90_ms);
    std::printf("  after one arrival: median %8.3f ms, p90 %8.3f ms  (target <= 20 ms)\n",
                fa.median_ms, fa.p90_ms);
    std::printf("  after a cordon or uncordon: median %8.3f ms, p90 %8.3f ms\n", fn.median_ms,
                fn.p90_ms);
    std::printf("  after a node fails or returns: median %8.3f ms, p90 %8.3f ms\n", fl.median_ms,
                fl.p90_ms);
    std::printf(
        "  reads, median of the whole call: nodes %.3f ms, 500 newest jobs %.3f ms, 500 pending "
        "jobs %.3f ms, queues %.3f ms, /metrics %.3f ms\n",
        fls.call.median_ms, f_newest.call.median_ms, f_pending.call.median_ms,
        f_queues.call.median_ms, f_metrics.call.median_ms);
    std::printf(
        "  reads, median of another caller's longest wait for the lock: nodes %.3f ms, 500 "
        "newest jobs %.3f ms, 500 pending jobs %.3f ms, queues %.3f ms, /metrics %.3f ms\n",
        fls.held.median_ms, f_newest.held.median_ms, f_pending.held.median_ms,
        f_queues.held.median_ms, f_metrics.held.median_ms);
    std::printf("  ledger: %lld rebuilds, %lld node marks\n",
                static_cast<long long>(ledger.rebuilds), static_cast<long long>(ledger.node_marks));
  }
  opened->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
