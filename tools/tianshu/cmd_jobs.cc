// The job commands with the habits of Slurm and kubectl: `tianshu jobs` (active jobs newest
// first, filters, --all, -w), `job ID` and `job hold|release|requeue`, `logs` (the failing rank
// by default, --all-ranks) and `history` (GPU-hours by user and queue, as sreport). Each talks
// to the server's API (docs/api.md); -o json|yaml prints the server's answer.
#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "client_flags.h"
#include "commands.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/server/requests.h"

namespace tianshu::cli {

using nlohmann::json;

namespace {

constexpr const char* kActiveStates = "pending,starting,running,stopping";
constexpr const char* kEndedStates = "succeeded,failed,cancelled";

std::atomic<bool> interrupted{false};
void OnInterrupt(int) { interrupted = true; }

// Ends a watch on Ctrl-C or SIGTERM: the loop sees the flag within one long-poll (1 s).
void CatchInterrupts() {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // no SA_RESTART: a blocked read returns; a second Ctrl-C kills
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string Seconds(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  return FormatSeconds(j[key].get<double>());
}

std::vector<std::string> JobHeaders(bool wide) {
  if (wide) {
    return {"ID",  "NAME", "USER",  "QUEUE", "PRI",   "STATE",  "GPUS",
            "TRY", "RAN",  "LIMIT", "AGE",   "NODES", "MESSAGE"};
  }
  return {"ID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "TRY", "AGE", "NODES / REASON"};
}

std::vector<std::string> JobRow(const json& j, bool wide) {
  // A task of an array shows its index, as squeue shows JOBID_INDEX.
  const std::string index = j.contains("array") ? "[" + S(j["array"], "index") + "]" : "";
  const std::string name = S(j, "name") + index;
  const bool held = j.value("held", false) && j.value("state", "") == "pending";
  const std::string state = held ? "held" : S(j, "state");
  const std::string nodes = JoinArray(j.value("nodes", json::array()));
  if (wide) {
    return {S(j, "id"),
            name,
            S(j, "owner"),
            S(j, "queue"),
            S(j, "priority"),
            state,
            S(j, "gpus"),
            S(j, "attempt"),
            Seconds(j, "ran_s"),
            Seconds(j, "time_limit_s"),
            Age(j.value("submitted_ms", int64_t{0})),
            nodes.empty() ? "-" : nodes,
            S(j, "message")};
  }
  return {S(j, "id"),
          name,
          S(j, "owner"),
          S(j, "queue"),
          state,
          S(j, "gpus"),
          S(j, "attempt"),
          Age(j.value("submitted_ms", int64_t{0})),
          nodes.empty() ? S(j, "message") : nodes};
}

const std::set<size_t> kJobNumbers = {5, 6};  // GPUS, TRY in the text table

// Prints one line for a job that changed during a watch.
void PrintJobLine(const json& j, const OutputFlag& out) {
  if (out.Json()) {
    std::cout << j.dump() << "\n";
  } else if (out.Yaml()) {
    std::cout << "---\n";
    PrintStructured(j, out);
  } else {
    Table t(JobHeaders(out.Wide()));
    t.Add(JobRow(j, out.Wide()));
    t.Print(std::cout, /*with_headers=*/false);
  }
  std::cout.flush();
}

}  // namespace

std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == ',') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Runner RegisterJobs(CLI::App& app) {
  struct Args : Common {
    std::string state, queue, user, node;
    bool all = false, watch = false;
    int limit = 100;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "jobs",
                      "List jobs, newest first: the active ones (pending, starting, running, "
                      "stopping) unless --all or --state",
                      a.get());
  cmd->add_option("--state,-t", a->state,
                  "Only these states, comma-separated (pending, held, starting, running, "
                  "stopping, succeeded, failed, cancelled)");
  cmd->add_option("--queue,-q", a->queue, "Only this queue");
  cmd->add_option("--user,-u", a->user, "Only this user's");
  cmd->add_option("--node,-n", a->node, "Only jobs with a rank on this node");
  cmd->add_flag("--all,-a", a->all, "Every state, the ended jobs too");
  cmd->add_option("--limit", a->limit, "At most this many (the rest are counted)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--watch,-w", a->watch,
                "After the list, print each job again as it changes, until interrupted (Ctrl-C)");
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu jobs: " << client.error().message << "\n";
      return kExitInvalid;
    }
    const std::string states = !a->state.empty() ? a->state : a->all ? "" : kActiveStates;
    std::string filters;
    if (!a->queue.empty()) filters += "&queue=" + PercentEncode(a->queue);
    if (!a->user.empty()) filters += "&owner=" + PercentEncode(a->user);
    if (!a->node.empty()) filters += "&node=" + PercentEncode(a->node);
    // The newest event before the list: a watch misses nothing that happens after it.
    int64_t since = 0;
    if (a->watch) {
      auto e = (*client)->Get("/v1/events?since=0&limit=1");
      if (auto code = Failed(e, "jobs")) return *code;
      since = e->body.value("latest", int64_t{0});
    }
    auto r = (*client)->Get("/v1/jobs?order=newest&limit=" + std::to_string(a->limit) +
                            (states.empty() ? "" : "&state=" + PercentEncode(states)) + filters);
    if (auto code = Failed(r, "jobs")) return *code;
    const json& jobs = r->body["jobs"];
    std::set<std::string> shown;
    for (const auto& j : jobs) shown.insert(j.value("id", ""));
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
    } else {
      Table t(JobHeaders(a->out.Wide()), a->out.Wide() ? std::set<size_t>{4, 6, 7} : kJobNumbers);
      for (const auto& j : jobs) t.Add(JobRow(j, a->out.Wide()));
      t.Print(std::cout);
      // What the list left out, on stderr (a pipe gets the table alone).
      const int64_t total = r->body.value("total", int64_t{0});
      std::string note;
      if (total > static_cast<int64_t>(jobs.size())) {
        note = fmt::format("{} of {} matching jobs shown (--limit)", jobs.size(), total);
      }
      if (a->state.empty() && !a->all) {
        auto ended =
            (*client)->Get("/v1/jobs?limit=1&state=" + std::string(kEndedStates) + filters);
        const int64_t n = ended && ended->ok() ? ended->body.value("total", int64_t{0}) : 0;
        if (n > 0) {
          note += (note.empty() ? "" : "; ") +
                  fmt::format("{} ended job{} not shown (--all)", n, n == 1 ? "" : "s");
        }
      }
      if (!note.empty()) std::cerr << note << "\n";
    }
    if (!a->watch) return kExitOk;
    std::cout.flush();
    CatchInterrupts();
    const std::set<std::string> wanted = [&] {
      std::set<std::string> out;
      for (const auto& s : SplitString(states, ',')) out.insert(s);
      return out;
    }();
    while (!interrupted) {
      auto e = (*client)->Get("/v1/events?wait_ms=1000&since=" + std::to_string(since));
      if (interrupted) break;
      if (e && (e->status == 401 || e->status == 403)) {  // retrying would not help
        std::cerr << "tianshu jobs: " << e->ErrorText() << "\n";
        return kExitFailure;
      }
      if (!e || !e->ok()) {
        std::this_thread::sleep_for(std::chrono::seconds(1));  // the server may come back
        continue;
      }
      since = e->body.value("next", since);
      std::vector<std::string> changed;  // each job once a batch, in the order it changed
      for (const auto& ev : e->body["events"]) {
        const std::string id = ev.value("id", "");
        if (ev.value("type", "") == "job" &&
            std::find(changed.begin(), changed.end(), id) == changed.end()) {
          changed.push_back(id);
        }
      }
      for (const auto& changed_id : changed) {
        if (interrupted) break;
        auto jr = (*client)->Get("/v1/jobs/" + PercentEncode(changed_id));
        if (!jr || !jr->ok()) continue;
        json j = jr->body;
        for (const char* k : {"history", "placement", "run", "spec", "spec_format"}) j.erase(k);
        const std::string id = j.value("id", "");
        const std::string state = j.value("held", false) && j.value("state", "") == "pending"
                                      ? "held"
                                      : j.value("state", "");
        const auto nodes = j.value("nodes", std::vector<std::string>{});
        const bool match =
            (wanted.empty() || wanted.contains(state) || wanted.contains(j.value("state", ""))) &&
            (a->queue.empty() || j.value("queue", "") == a->queue) &&
            (a->user.empty() || j.value("owner", "") == a->user) &&
            (a->node.empty() || std::find(nodes.begin(), nodes.end(), a->node) != nodes.end());
        // A job shown before is printed as it leaves the filter too (kubectl get -w).
        if (!match && !shown.contains(id)) continue;
        shown.insert(id);
        PrintJobLine(j, a->out);
      }
    }
    return kExitOk;
  };
}

namespace {

void PrintJob(const json& j) {
  std::cout << S(j, "id") << "  " << S(j, "name") << "  (" << S(j, "kind") << ", queue "
            << S(j, "queue") << ", priority " << S(j, "priority") << ", " << S(j, "gpus")
            << " GPUs)\n";
  std::cout << "owner:    " << S(j, "owner") << "\n";
  if (j.contains("array")) {
    std::cout << "array:    " << S(j["array"], "id") << ", task " << S(j["array"], "index") << " ("
              << S(j["array"], "count") << " tasks)\n";
  }
  std::cout << "state:    " << S(j, "state") << (j.value("held", false) ? " (held)" : "")
            << "  attempt " << S(j, "attempt") << ", retries " << S(j, "retries") << "/"
            << S(j, "max_retries") << "\n";
  if (!S(j, "message").empty()) std::cout << "message:  " << S(j, "message") << "\n";
  std::cout << "ran:      " << Seconds(j, "ran_s")
            << (j.contains("time_limit_s") ? " of a " + Seconds(j, "time_limit_s") + " limit" : "")
            << (j.contains("failed_rank") ? "; rank " + S(j, "failed_rank") + " failed it" : "")
            << "\n";
  const std::string source = j.value("runtime_estimate_source", "none");
  std::cout << "service:  " << fmt::format("{:.2f}", j.value("attained_gpu_s", 0.0) / 3600)
            << " GPU-h attained; runtime estimate "
            << (source == "none" ? std::string("unknown")
                                 : fmt::format("{:.2f} h ({})",
                                               j.value("runtime_estimate_s", 0.0) / 3600, source))
            << "\n";
  if (j.value("resizes", 0) + j.value("migrations", 0) > 0 || j.contains("reshape") ||
      j.value("colocated", false)) {
    std::cout << "reshaped: " << j.value("resizes", 0) << " resizes, " << j.value("migrations", 0)
              << " moves (holds " << S(j, "gpus") << " of " << S(j, "gpus_requested")
              << " GPUs asked)" << (j.value("colocated", false) ? "; overlaid on training" : "");
    if (j.contains("reshape")) {
      std::cout << "; " << j["reshape"].value("kind", "") << " to " << j["reshape"].value("gpus", 0)
                << " GPUs in progress";
    }
    std::cout << "\n";
  }
  if (j.value("last_step", int64_t{-1}) >= 0) {
    std::cout << "checkpoint: step " << S(j, "last_step") << " " << S(j, "last_checkpoint") << "\n";
  }
  if (j.contains("run") && !j["run"]["command"].empty()) {
    std::cout << "command:  " << JoinArray(j["run"]["command"]) << "\n";
  }
  std::cout << "history:\n";
  for (const auto& h : j["history"]) {
    std::cout << "  " << Time(h.value("time_ms", int64_t{0})) << "  "
              << (S(h, "from").empty() ? "-" : S(h, "from")) << " -> " << S(h, "to") << "  "
              << S(h, "reason") << "\n";
  }
  if (!j["placement"].empty()) {
    std::cout << "placement (rank: node/device):\n ";
    for (const auto& p : j["placement"]) {
      std::cout << " " << S(p, "rank") << ":" << S(p, "node") << "/" << S(p, "device");
    }
    std::cout << "\n";
  }
}

}  // namespace

// `tianshu job ID` shows a job; `job hold|release ID...` and `job requeue ID...` change them
// (scontrol hold/release/requeue).
Runner RegisterJob(CLI::App& app) {
  struct Args : Common {
    std::string id;
    std::vector<std::string> ids;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "job",
                      "Show one job (state, history, placement), or hold, release or requeue jobs",
                      a.get());
  cmd->fallthrough();  // --server, --token-file, -o after the verb too
  cmd->add_option("id", a->id, "Job id (j-000042 or 42)");
  auto* hold = cmd->add_subcommand("hold", "Hold pending jobs: not scheduled until released");
  auto* release = cmd->add_subcommand("release", "Release held jobs");
  auto* requeue = cmd->add_subcommand(
      "requeue",
      "Send jobs back to the queue: a running one is checkpointed and stopped (no retry spent), "
      "a failed or cancelled one waits again with its retries reset");
  for (auto* verb : {hold, release, requeue}) {
    verb->add_option("ids", a->ids, "Job ids")->required();
  }
  return [a, hold, release, requeue] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu job: " << client.error().message << "\n";
      return kExitInvalid;
    }
    for (auto& id : a->ids) id = JobIdArg(id);
    if (hold->parsed() || release->parsed()) {  // ids in the body: JSON escapes them
      const std::string what = hold->parsed() ? "hold" : "release";
      auto r =
          (*client)->Post("/v1/jobs/" + what, json{{"ids", a->ids}}.dump(), "application/json");
      if (auto code = Failed(r, "job " + what)) return *code;
      if (a->out.Structured()) {
        PrintStructured(r->body, a->out);
      } else {
        for (const auto& j : r->body["jobs"]) {
          std::cout << S(j, "id") << ": " << (what == "hold" ? "held" : "released") << "\n";
        }
      }
      return kExitOk;
    }
    if (requeue->parsed()) {
      int code = kExitOk;
      json out = json::array();
      for (const auto& id : a->ids) {
        auto r =
            (*client)->Post("/v1/jobs/" + PercentEncode(id) + "/requeue", "", "application/json");
        if (auto failed = Failed(r, "job requeue " + id)) {
          code = std::max(code, *failed);
          continue;
        }
        out.push_back(r->body);
        if (!a->out.Structured()) {
          std::cout << S(r->body, "id") << ": " << S(r->body, "state") << " ("
                    << S(r->body, "message") << ")\n";
        }
      }
      if (a->out.Structured()) PrintStructured(json{{"jobs", out}}, a->out);
      return code;
    }
    if (a->id.empty()) {
      std::cerr << "tianshu job: give a job id, or hold, release or requeue with ids\n";
      return kExitUsage;
    }
    auto r = (*client)->Get("/v1/jobs/" + PercentEncode(JobIdArg(a->id)));
    if (auto code = Failed(r, "job")) return *code;
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
    } else {
      PrintJob(r->body);
    }
    return kExitOk;
  };
}

namespace {

// Prints a rank's log from `offset` to its present end; returns the next offset, or nullopt
// (with the message printed) when the server refused. With a prefix, each line gets it.
struct LogRead {
  int64_t next = 0;
  int status = 0;
  std::string error;
  int rank = -1;  // the rank the server read (it picks one when none was asked)
};
LogRead ReadLog(server::Client& client, const std::string& id, int rank, int64_t offset,
                const std::string& prefix, std::string* partial) {
  LogRead out{offset, 0, "", rank};
  auto r = client.Get("/v1/jobs/" + id + "/logs?offset=" + std::to_string(offset) +
                      (rank >= 0 ? "&rank=" + std::to_string(rank) : ""));
  if (!r) {
    out.status = 503;
    out.error = r.error().message;
    return out;
  }
  out.status = r->status;
  if (!r->ok()) {
    out.error = r->ErrorText();
    return out;
  }
  if (auto h = r->headers.find("X-Tianshu-Log-Next"); h != r->headers.end()) {
    (void)ParseInt64(h->second, &out.next);
  }
  if (auto h = r->headers.find("X-Tianshu-Log-Rank"); h != r->headers.end()) {
    int64_t v = rank;
    if (ParseInt64(h->second, &v)) out.rank = static_cast<int>(v);
  }
  if (prefix.empty()) {
    std::cout << r->text;
  } else {  // whole lines only; a line cut at the end waits for the rest
    *partial += r->text;
    size_t start = 0;
    for (size_t nl; (nl = partial->find('\n', start)) != std::string::npos; start = nl + 1) {
      std::cout << prefix << std::string_view(*partial).substr(start, nl + 1 - start);
    }
    partial->erase(0, start);
  }
  std::cout.flush();
  return out;
}

bool Ended(server::Client& client, const std::string& id) {
  auto job = client.Get("/v1/jobs/" + id);
  if (!job || !job->ok()) return false;
  const std::string state = S(job->body, "state");
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

}  // namespace

// `tianshu logs ID [--rank N | --all-ranks] [-f]`: a rank's log, read through the server from
// the agent of its node. Without --rank: the rank that failed the job (when it failed), else 0.
Runner RegisterLogs(CLI::App& app) {
  struct Args : Common {
    std::string id;
    int rank = -1;
    bool all_ranks = false, follow = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "logs", "Print a rank's log (from the agent of its node)", a.get());
  cmd->add_option("id", a->id, "Job id (j-000042 or 42)")->required();
  auto* rank = cmd->add_option("--rank", a->rank,
                               "Rank (default: the rank that failed the job, when it failed; "
                               "else 0)")
                   ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--all-ranks", a->all_ranks, "Every rank's log, each line prefixed [rank N]")
      ->excludes(rank);
  cmd->add_flag("--follow,-f", a->follow, "Keep printing until the job has ended");
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu logs: " << client.error().message << "\n";
      return kExitInvalid;
    }
    const std::string id = PercentEncode(JobIdArg(a->id));
    std::vector<int> ranks = {a->rank};
    if (a->all_ranks) {
      auto job = (*client)->Get("/v1/jobs/" + id);
      if (auto code = Failed(job, "logs")) return *code;
      ranks.clear();
      for (const auto& p : job->body.value("placement", json::array())) {
        ranks.push_back(p.value("rank", 0));
      }
      if (ranks.empty()) {
        std::cerr << "tianshu logs: job " << id << " has not been placed yet: no log\n";
        return a->follow ? kExitOk : kExitInvalid;
      }
    }
    std::vector<int64_t> offsets(ranks.size(), 0);
    std::vector<std::string> partial(ranks.size());
    bool told = false;
    while (true) {
      bool more = false, waiting = false;
      for (size_t i = 0; i < ranks.size(); ++i) {
        const std::string prefix =
            a->all_ranks ? "[rank " + std::to_string(ranks[i]) + "] " : std::string();
        LogRead got = ReadLog(**client, id, ranks[i], offsets[i], prefix, &partial[i]);
        if (!got.error.empty()) {
          if (got.status == 409 && a->follow) {  // not placed yet: wait for it
            waiting = true;
            continue;
          }
          std::cerr << "tianshu logs: " << got.error << "\n";
          return got.status >= 500 ? kExitFailure : kExitInvalid;
        }
        if (ranks[i] < 0) {  // the server chose; say so when it is not rank 0
          ranks[i] = got.rank;
          if (got.rank > 0 && !told) {
            std::cerr << "tianshu logs: rank " << got.rank
                      << ", the rank that failed the job (--rank N for another)\n";
            told = true;
          }
        }
        more = more || got.next > offsets[i];
        offsets[i] = got.next;
      }
      if (more) continue;  // drain before deciding
      if (!a->follow && !waiting) break;
      if (Ended(**client, id) && !waiting) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    for (size_t i = 0; i < ranks.size(); ++i) {  // a last line without its newline
      if (!partial[i].empty()) {
        std::cout << "[rank " << ranks[i] << "] " << partial[i] << "\n";
      }
    }
    return kExitOk;
  };
}

namespace {

// A point in time for --since/--until: "now", a duration back from now ("7d", "12h"), an ISO
// date or UTC time ("2026-12-01", "2026-12-01T08:00:00Z"), or milliseconds since the epoch.
Result<int64_t> WhenArg(const std::string& text, int64_t now_ms) {
  if (text == "now") return now_ms;
  if (auto ns = ParseDurationNs(text); ns && !text.empty() && std::isalpha(text.back())) {
    return now_ms - *ns / 1'000'000;
  }
  std::tm tm{};
  for (const char* format : {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"}) {
    tm = {};
    const char* end = strptime(text.c_str(), format, &tm);
    if (end && *end == '\0') return static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  int64_t ms = 0;
  if (ParseInt64(text, &ms) && ms >= 0) return ms;
  return Fail("'", text,
              "' is not a time: give now, a duration back from now (7d, 12h), a date "
              "(2026-12-01), a UTC time (2026-12-01T08:00:00Z) or milliseconds since the epoch");
}

}  // namespace

// `tianshu history [--since 7d] [--until now]`: GPU-hours by user and by queue over a window,
// from every job's runs in the store (Slurm's sreport cluster AccountUtilizationByUser).
Runner RegisterHistory(CLI::App& app) {
  struct Args : Common {
    std::string since = "7d", until = "now";
  };
  auto a = std::make_shared<Args>();
  auto* cmd =
      Command(app, "history", "GPU-hours used by user and by queue over a time window", a.get());
  cmd->add_option("--since", a->since,
                  "Start: a duration back from now (7d, 12h), a date, a UTC time, or all")
      ->capture_default_str();
  cmd->add_option("--until", a->until, "End (same forms)")->capture_default_str();
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu history: " << client.error().message << "\n";
      return kExitInvalid;
    }
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    auto since = a->since == "all" ? Result<int64_t>(0) : WhenArg(a->since, now_ms);
    auto until = WhenArg(a->until, now_ms);
    for (const auto* w : {&since, &until}) {
      if (!*w) {
        std::cerr << "tianshu history: " << (w == &since ? "--since " : "--until ")
                  << w->error().message << "\n";
        return kExitInvalid;
      }
    }
    // "now" is the server's now (this machine's clock may differ, and a run that ended in the
    // last instant counts).
    auto r = (*client)->Get("/v1/accounting?since_ms=" + std::to_string(*since) +
                            (a->until == "now" ? "" : "&until_ms=" + std::to_string(*until)));
    if (auto code = Failed(r, "history")) return *code;
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
      return kExitOk;
    }
    const double total = r->body.value("total_gpu_hours", 0.0);
    std::cout << "GPU-hours from " << Time(r->body.value("since_ms", *since)) << " to "
              << Time(r->body.value("until_ms", *until)) << ": " << fmt::format("{:.2f}", total)
              << "\n";
    for (const char* by : {"users", "queues"}) {
      std::cout << "\n";
      Table t({by == std::string("users") ? "USER" : "QUEUE", "GPU-HOURS", "SHARE", "JOBS"},
              {1, 2, 3});
      for (const auto& row : r->body[by]) {
        const double h = row.value("gpu_hours", 0.0);
        t.Add({S(row, "name"), fmt::format("{:.2f}", h),
               total > 0 ? fmt::format("{:.1f}%", 100 * h / total) : "-", S(row, "jobs")});
      }
      t.Print(std::cout);
    }
    return kExitOk;
  };
}

}  // namespace tianshu::cli
