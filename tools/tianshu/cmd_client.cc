// The client commands: `tianshu submit FILE`, `jobs`, `job ID`, `cancel ID`, `nodes`, `queues`,
// `events`, each talking to the server's API (docs/api.md) and printing a table or, with
// `--output json`, the server's JSON. Exit 0 on success, 1 when the server refused the request
// (its message is printed), 3 when the server is unreachable or the token is wrong.
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "client_flags.h"
#include "commands.h"
#include "tianshu/base/secret_files.h"
#include "tianshu/base/strings.h"
#include "tianshu/base/units.h"
#include "tianshu/server/requests.h"

namespace tianshu::cli {

using nlohmann::json;

std::string DefaultDataDir() {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.tianshu" : ".tianshu";
}

void AddClientFlags(CLI::App* cmd, ClientFlags* flags) {
  cmd->add_option("--server", flags->server,
                  "Server address (default: $TIANSHU_SERVER, else http://127.0.0.1:7070)");
  cmd->add_option("--token-file", flags->token_file,
                  "File holding the API token (default: $TIANSHU_TOKEN, else ~/.tianshu/token)");
  cmd->add_option("--ca-file", flags->ca_file,
                  "With an https:// server: the CA that signed its certificate (default: "
                  "$TIANSHU_CA_FILE, else the system's CAs)");
}

Result<std::unique_ptr<server::Client>> MakeClient(const ClientFlags& flags) {
  server::ClientOptions o;
  const char* env_server = std::getenv("TIANSHU_SERVER");
  o.server = !flags.server.empty()       ? flags.server
             : env_server && *env_server ? env_server
                                         : "http://127.0.0.1:7070";
  const char* env_ca = std::getenv("TIANSHU_CA_FILE");
  o.ca_file = !flags.ca_file.empty() ? flags.ca_file : env_ca ? env_ca : "";
  const char* env_token = std::getenv("TIANSHU_TOKEN");
  std::string file = flags.token_file;
  if (file.empty() && env_token && *env_token) {
    o.token = env_token;
  } else {
    if (file.empty()) file = DefaultDataDir() + "/token";
    // The default file is optional (the server answers 401 without a token); one given by
    // --token-file must be readable and private.
    if (!flags.token_file.empty() || std::filesystem::exists(file)) {
      auto token = ReadSecretFile(file);
      if (!token) return std::unexpected(token.error());
      o.token = *token;
    }
  }
  return std::make_unique<server::Client>(o);
}

// Prints the outcome of a call; returns the exit code when it was not a success.
int ExitCodeOf(const Result<server::ApiResponse>& r) {
  if (!r) return kExitFailure;
  if (!r->ok()) return r->status >= 500 ? kExitFailure : kExitInvalid;
  return kExitOk;
}

std::string ErrorOf(const Result<server::ApiResponse>& r) {
  return r ? r->ErrorText() : r.error().message;
}

std::optional<int> Failed(const Result<server::ApiResponse>& r, const std::string& what) {
  const int code = ExitCodeOf(r);
  if (code == kExitOk) return std::nullopt;
  std::cerr << "tianshu " << what << ": " << ErrorOf(r) << "\n";
  return code;
}

std::string S(const json& j, const char* key) {
  if (!j.contains(key)) return "";
  const json& v = j[key];
  if (v.is_string()) return ForTerminal(v.get<std::string>());  // what users sent, escaped
  if (v.is_null()) return "-";
  return v.dump();
}

CLI::App* Command(CLI::App& app, const char* name, const char* help, Common* c) {
  auto* cmd = app.add_subcommand(name, help);
  AddClientFlags(cmd, &c->client);
  AddOutputFlag(cmd, &c->out);
  return cmd;
}

namespace {

std::string Age(int64_t then_ms) {
  if (then_ms <= 0) return "-";
  int64_t now_ms = static_cast<int64_t>(std::time(nullptr)) * 1000;
  return FormatSeconds(static_cast<double>(std::max<int64_t>(0, now_ms - then_ms)) / 1000.0);
}

std::string Time(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms % 1000));
}

std::string JoinArray(const json& a) {
  std::vector<std::string> parts;
  if (a.is_array()) {
    for (const auto& e : a) {
      parts.push_back(e.is_string() ? ForTerminal(e.get<std::string>()) : e.dump());
    }
  }
  return Join(parts, ",");
}

void PrintEvent(const json& e) {
  std::cout << fmt::format("{:>6}  {}  {:<4}  {:<10} {:>9} -> {:<9}  {}\n",
                           e.value("seq", int64_t{0}), Time(e.value("time_ms", int64_t{0})),
                           S(e, "type"), S(e, "id"), S(e, "from").empty() ? "-" : S(e, "from"),
                           S(e, "to"), S(e, "reason"));
}

}  // namespace

Runner RegisterJobs(CLI::App& app) {
  struct Args : Common {
    std::string state, queue;
    int limit = 1000;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "jobs", "List jobs", a.get());
  cmd->add_option("--state", a->state, "Only these states (comma-separated)");
  cmd->add_option("--queue", a->queue, "Only this queue");
  cmd->add_option("--limit", a->limit, "At most this many")->capture_default_str();
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu jobs: " << client.error().message << "\n";
      return kExitInvalid;
    }
    std::string path = "/v1/jobs?limit=" + std::to_string(a->limit);
    if (!a->state.empty()) path += "&state=" + a->state;
    if (!a->queue.empty()) path += "&queue=" + a->queue;
    auto r = (*client)->Get(path);
    if (auto code = Failed(r, "jobs")) return *code;
    if (a->out.Json()) {
      std::cout << r->body.dump(2) << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("{:<10} {:<24} {:<10} {:<10} {:<10} {:>5} {:>4} {:>7}  {}\n", "ID",
                             "NAME", "OWNER", "QUEUE", "STATE", "GPUS", "TRY", "AGE",
                             "NODES / MESSAGE");
    for (const auto& j : r->body["jobs"]) {
      std::string where = j["nodes"].empty() ? S(j, "message") : JoinArray(j["nodes"]);
      // A task of an array shows its index, as sacct shows JOBID_INDEX.
      const std::string index = j.contains("array") ? "[" + S(j["array"], "index") + "]" : "";
      const std::string name = S(j, "name").substr(0, 24 - index.size()) + index;
      std::cout << fmt::format("{:<10} {:<24} {:<10} {:<10} {:<10} {:>5} {:>4} {:>7}  {}\n",
                               S(j, "id"), name, S(j, "owner").substr(0, 10), S(j, "queue"),
                               j.value("held", false) ? "held" : S(j, "state"), S(j, "gpus"),
                               S(j, "attempt"), Age(j.value("submitted_ms", int64_t{0})), where);
    }
    return kExitOk;
  };
}

Runner RegisterJob(CLI::App& app) {
  struct Args : Common {
    std::string id;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "job", "Show one job: state, history, placement", a.get());
  cmd->add_option("id", a->id, "Job id (j-000001)")->required();
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu job: " << client.error().message << "\n";
      return kExitInvalid;
    }
    auto r = (*client)->Get("/v1/jobs/" + a->id);
    if (auto code = Failed(r, "job")) return *code;
    const json& j = r->body;
    if (a->out.Json()) {
      std::cout << j.dump(2) << "\n";
      return kExitOk;
    }
    std::cout << S(j, "id") << "  " << S(j, "name") << "  (" << S(j, "kind") << ", queue "
              << S(j, "queue") << ", priority " << S(j, "priority") << ", " << S(j, "gpus")
              << " GPUs)\n";
    std::cout << "owner:    " << S(j, "owner") << "\n";
    if (j.contains("array")) {
      std::cout << "array:    " << S(j["array"], "id") << ", task " << S(j["array"], "index")
                << " (" << S(j["array"], "count") << " tasks)\n";
    }
    std::cout << "state:    " << S(j, "state") << (j.value("held", false) ? " (held)" : "")
              << "  attempt " << S(j, "attempt") << ", retries " << S(j, "retries") << "/"
              << S(j, "max_retries") << "\n";
    if (!S(j, "message").empty()) std::cout << "message:  " << S(j, "message") << "\n";
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
        std::cout << "; " << j["reshape"].value("kind", "") << " to "
                  << j["reshape"].value("gpus", 0) << " GPUs in progress";
      }
      std::cout << "\n";
    }
    if (j.value("last_step", int64_t{-1}) >= 0) {
      std::cout << "checkpoint: step " << S(j, "last_step") << " " << S(j, "last_checkpoint")
                << "\n";
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
    return kExitOk;
  };
}

Runner RegisterCancel(CLI::App& app) {
  struct Args : Common {
    std::string id;
    bool array = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "cancel", "Cancel a job (its ranks are stopped)", a.get());
  cmd->add_option("id", a->id, "Job id")->required();
  cmd->add_flag("--array", a->array,
                "ID is a job array's: cancel every unfinished task of it (scancel ARRAYID)");
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu cancel: " << client.error().message << "\n";
      return kExitInvalid;
    }
    auto r = (*client)->Post("/v1/jobs/" + a->id + "/cancel" + (a->array ? "?array=true" : ""), "",
                             "application/json");
    if (auto code = Failed(r, "cancel")) return *code;
    if (a->out.Json()) {
      std::cout << r->body.dump(2) << "\n";
    } else if (a->array) {
      std::cout << a->id << ": cancelled " << r->body["cancelled"].size() << " task(s), "
                << S(r->body, "already_finished") << " already finished\n";
    } else {
      std::string state = S(r->body, "state");
      std::cout << a->id << ": "
                << (state == "cancelled" ? "cancelled" : "cancelling (stopping its ranks)") << "\n";
    }
    return kExitOk;
  };
}

// `tianshu logs ID [--rank N] [-f]`: a rank's log, read through the server from the agent of
// its node; -f keeps printing until the job has ended and the log is read to its end.
Runner RegisterLogs(CLI::App& app) {
  struct Args : Common {
    std::string id;
    int rank = 0;
    bool follow = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "logs", "Print a rank's log (from the agent of its node)", a.get());
  cmd->add_option("id", a->id, "Job id")->required();
  cmd->add_option("--rank", a->rank, "Rank")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--follow,-f", a->follow, "Keep printing until the job has ended");
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu logs: " << client.error().message << "\n";
      return kExitInvalid;
    }
    int64_t offset = 0;
    while (true) {
      auto r = (*client)->Get("/v1/jobs/" + a->id + "/logs?rank=" + std::to_string(a->rank) +
                              "&offset=" + std::to_string(offset));
      if (!r) {
        std::cerr << "tianshu logs: " << r.error().message << "\n";
        return kExitFailure;
      }
      const bool waiting = r->status == 409 && a->follow;  // not placed yet: wait for it
      if (!r->ok() && !waiting) {
        std::cerr << "tianshu logs: " << r->ErrorText() << "\n";
        return r->status >= 500 ? kExitFailure : kExitInvalid;
      }
      if (r->ok()) {
        std::cout << r->text << std::flush;
        int64_t next = offset;
        if (auto h = r->headers.find("X-Tianshu-Log-Next"); h != r->headers.end()) {
          (void)ParseInt64(h->second, &next);
        }
        const bool more = next > offset;
        offset = next;
        if (more) continue;  // drain before deciding
        if (!a->follow) return kExitOk;
      }
      auto job = (*client)->Get("/v1/jobs/" + a->id);
      if (job && job->ok()) {
        std::string state = S(job->body, "state");
        if (state == "succeeded" || state == "failed" || state == "cancelled") return kExitOk;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  };
}

Runner RegisterNodes(CLI::App& app) {
  struct Args : Common {
    std::string forget;
  };
  auto a = std::make_shared<Args>();
  auto* cmd =
      Command(app, "nodes", "List registered nodes with devices, health and allocations", a.get());
  cmd->fallthrough();
  auto* forget = cmd->add_subcommand(
      "forget",
      "Drop a node's credential (admin), so that its agent can join again with a join "
      "token; for an agent that lost its work directory");
  forget->add_option("name", a->forget, "Node name")->required();
  return [a, forget] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu nodes: " << client.error().message << "\n";
      return kExitInvalid;
    }
    if (forget->parsed()) {
      auto f = (*client)->Post("/v1/nodes/" + a->forget + "/forget", "", "application/json");
      if (auto code = Failed(f, "nodes forget")) return *code;
      if (a->out.Json()) {
        std::cout << f->body.dump(2) << "\n";
      } else {
        std::cout << "node " << ForTerminal(a->forget)
                  << ": credential dropped; its agent joins again with a join token\n";
      }
      return kExitOk;
    }
    auto r = (*client)->Get("/v1/nodes");
    if (auto code = Failed(r, "nodes")) return *code;
    if (a->out.Json()) {
      std::cout << r->body.dump(2) << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("{:<20} {:<9} {:<22} {:>5} {:>9}  {}\n", "NAME", "STATE", "DEVICES",
                             "USED", "HEARTBEAT", "ADDRESS / MESSAGE");
    for (const auto& n : r->body["nodes"]) {
      int used = 0;
      std::string model;
      bool declared = false;
      for (const auto& d : n["devices"]) {
        used += d["allocations"].empty() ? 0 : 1;
        model = S(d, "model");
        declared = declared || d.value("declared", false);
      }
      std::string devices =
          std::to_string(n["devices"].size()) + "x" + model + (declared ? " (declared)" : "");
      if (n["devices"].empty()) devices = "none";
      std::string tail = S(n, "address");
      if (!S(n, "message").empty()) tail += "  " + S(n, "message");
      std::string heartbeat =  // "-" for a static node whose agent has not registered
          n.contains("heartbeat_age_ms")
              ? FormatSeconds(static_cast<double>(n.value("heartbeat_age_ms", int64_t{0})) / 1000.0)
              : "-";
      std::cout << fmt::format("{:<20} {:<9} {:<22} {:>5} {:>9}  {}\n", S(n, "name"), S(n, "state"),
                               devices, used, heartbeat, tail);
    }
    return kExitOk;
  };
}

// `tianshu users add NAME [--role user|admin|join] [--unix-user U]`, `users list`,
// `users remove NAME`: an admin's (the server's token) management of identities.
Runner RegisterUsers(CLI::App& app) {
  struct Args : Common {
    std::string name, role = "user", unix_user;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "users", "Manage users and join tokens (admin)", a.get());
  cmd->require_subcommand(1, 1);
  cmd->fallthrough();  // --server, --token-file, -o after the subcommand too
  auto* add = cmd->add_subcommand(
      "add", "Create a user (or a join token for agents) and print its token, once");
  add->add_option("name", a->name, "User name (a-z 0-9 . _ -)")->required();
  add->add_option("--role", a->role, "user, admin or join (agents registering new nodes)")
      ->check(CLI::IsMember({"user", "admin", "join"}))
      ->capture_default_str();
  add->add_option("--unix-user", a->unix_user,
                  "Unix account the user's ranks run as on the nodes (default: the name)");
  auto* list = cmd->add_subcommand("list", "List users (never their tokens)");
  auto* remove = cmd->add_subcommand("remove", "Revoke a user's token (its jobs stay)");
  remove->add_option("name", a->name, "User name")->required();
  return [a, add, list, remove] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu users: " << client.error().message << "\n";
      return kExitInvalid;
    }
    Result<server::ApiResponse> r = Fail("no subcommand");
    if (add->parsed()) {
      json body = {{"name", a->name}, {"role", a->role}};
      if (!a->unix_user.empty()) body["unix_user"] = a->unix_user;
      r = (*client)->Post("/v1/users", body.dump(), "application/json");
    } else if (list->parsed()) {
      r = (*client)->Get("/v1/users");
    } else if (remove->parsed()) {
      r = (*client)->Delete("/v1/users/" + a->name);
    }
    if (auto code = Failed(r, "users")) return *code;
    if (a->out.Json()) {
      std::cout << r->body.dump(2) << "\n";
    } else if (add->parsed()) {
      std::cout << "user " << S(r->body, "name") << " (" << S(r->body, "role") << ")"
                << (S(r->body, "unix_user").empty() ? ""
                                                    : ", ranks run as " + S(r->body, "unix_user"))
                << "\ntoken (shown once; the server keeps only its SHA-256): "
                << S(r->body, "token") << "\n";
    } else if (list->parsed()) {
      std::cout << fmt::format("{:<24} {:<6} {}\n", "NAME", "ROLE", "RUNS AS");
      for (const auto& u : r->body["users"]) {
        std::string runs = S(u, "unix_user");
        std::cout << fmt::format("{:<24} {:<6} {}\n", S(u, "name"), S(u, "role"),
                                 runs.empty() ? "(the agent's user)" : runs);
      }
    } else {
      std::cout << "user " << S(r->body, "name") << " removed: its token no longer works\n";
    }
    return kExitOk;
  };
}

Runner RegisterQueues(CLI::App& app) {
  auto a = std::make_shared<Common>();
  Command(app, "queues", "List queues with their jobs and GPU use", a.get());
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu queues: " << client.error().message << "\n";
      return kExitInvalid;
    }
    auto r = (*client)->Get("/v1/queues");
    if (auto code = Failed(r, "queues")) return *code;
    if (a->out.Json()) {
      std::cout << r->body.dump(2) << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("{:<16} {:>8} {:>8} {:>9} {:>8} {:>7}  {}\n", "QUEUE", "PENDING",
                             "ACTIVE", "FINISHED", "GPUS", "SHARE", "QUOTA");
    for (const auto& q : r->body["queues"]) {
      std::cout << fmt::format("{:<16} {:>8} {:>8} {:>9} {:>8.1f} {:>6.1f}%  {}\n", S(q, "name"),
                               S(q, "pending"), S(q, "active"), S(q, "finished"),
                               q.value("gpus_in_use", 0.0),
                               100.0 * q.value("share_of_cluster", 0.0), "none");
    }
    return kExitOk;
  };
}

Runner RegisterStatus(CLI::App& app) {
  auto a = std::make_shared<Common>();
  Command(app, "status",
          "Ask each server given (TIANSHU_SERVER=a,b,c: the replicas on etcd) whether it answers "
          "and who leads",
          a.get());
  return [a] {
    auto all = MakeClient(a->client);  // resolves --server, the environment and the token
    if (!all) {
      std::cerr << "tianshu status: " << all.error().message << "\n";
      return kExitInvalid;
    }
    nlohmann::json rows = nlohmann::json::array();
    std::string leader;
    for (const std::string& server : SplitString((*all)->options().server, ',')) {
      if (server.empty()) continue;
      server::ClientOptions o = (*all)->options();
      o.server = server;
      o.timeout_ms = 3000;
      auto r = server::Client(o).Get("/v1/leader");
      nlohmann::json row = {{"server", server}};
      if (!r || r->status != 200) {
        row["role"] = "unreachable";
        row["error"] = ErrorOf(r);
      } else {
        row["role"] = r->body.value("role", "");
        row["replica"] = r->body.value("replica", "");
        row["leader"] = r->body.value("leader", nlohmann::json(nullptr));
        if (row["role"] == "leader" || row["role"] == "single") leader = server;
      }
      rows.push_back(row);
    }
    if (a->out.Json()) {
      std::cout << nlohmann::json{{"servers", rows},
                                  {"leader", leader.empty() ? nlohmann::json(nullptr)
                                                            : nlohmann::json(leader)}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt::format("{:<28} {:<12} {:<16} {}\n", "SERVER", "ROLE", "REPLICA", "LEADER");
      for (const auto& row : rows) {
        const auto& l = row.value("leader", nlohmann::json(nullptr));
        std::string led = l.is_object() ? l.value("id", "") + " " + l.value("url", "") : "";
        if (row["role"] == "unreachable") led = row.value("error", "");
        std::cout << fmt::format("{:<28} {:<12} {:<16} {}\n", S(row, "server"), S(row, "role"),
                                 S(row, "replica"), led);
      }
    }
    if (leader.empty()) {
      std::cerr << "tianshu status: no server given leads now\n";
      return kExitFailure;
    }
    return kExitOk;
  };
}

Runner RegisterEvents(CLI::App& app) {
  struct Args : Common {
    int64_t since = 0;
    bool follow = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "events", "Print state changes (jobs and nodes)", a.get());
  cmd->add_option("--since", a->since, "Only events after this sequence number");
  cmd->add_flag("--follow,-f", a->follow, "Keep printing new events until interrupted");
  return [a] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu events: " << client.error().message << "\n";
      return kExitInvalid;
    }
    int64_t since = a->since;
    do {
      std::string path =
          "/v1/events?since=" + std::to_string(since) + (a->follow ? "&wait_ms=20000" : "");
      auto r = (*client)->Get(path);
      if (auto code = Failed(r, "events")) return *code;
      for (const auto& e : r->body["events"]) {
        if (a->out.Json()) {
          std::cout << e.dump() << "\n";
        } else {
          PrintEvent(e);
        }
      }
      std::cout.flush();
      int64_t next = r->body.value("next", since);
      if (!a->follow && next == since) break;
      since = next;
    } while (true);
    return kExitOk;
  };
}

}  // namespace tianshu::cli
