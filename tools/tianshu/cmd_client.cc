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
#include <yaml-cpp/yaml.h>

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
                  "File holding the API token (default: ~/.tianshu/token; the token itself, not "
                  "a file, may instead be given in $TIANSHU_TOKEN)");
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
  AddClientOutputFlag(cmd, &c->out);
  return cmd;
}

namespace {

// A string YAML would read as another type (a number, a boolean, null) or as nothing.
bool LooksTyped(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<std::string> words = {"true", "false", "yes", "no", "on",
                                              "off",  "null",  "~",   "y",  "n"};
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (words.contains(lower) || lower == ".inf" || lower == "-.inf" || lower == ".nan") {
    return true;
  }
  // Numbers in any notation a YAML 1.1 or 1.2 reader knows (0x1f, 0o17, 0b101, 1_000, 1e3),
  // dates and times (2026-12-01, 12:30): anything that starts like a number is quoted.
  const char c = s[0];
  return std::isdigit(static_cast<unsigned char>(c)) ||
         ((c == '-' || c == '+' || c == '.') && s.size() > 1 &&
          std::isdigit(static_cast<unsigned char>(s[1])));
}

void EmitYaml(YAML::Emitter& e, const json& j) {
  if (j.is_object()) {
    if (j.empty()) e << YAML::Flow;
    e << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      e << YAML::Key;
      if (LooksTyped(k)) e << YAML::DoubleQuoted;  // a key `on` or `1` stays a string key
      e << k << YAML::Value;
      EmitYaml(e, v);
    }
    e << YAML::EndMap;
  } else if (j.is_array()) {
    if (j.empty()) e << YAML::Flow;
    e << YAML::BeginSeq;
    for (const auto& v : j) EmitYaml(e, v);
    e << YAML::EndSeq;
  } else if (j.is_string()) {
    const std::string& v = j.get_ref<const std::string&>();
    if (LooksTyped(v)) e << YAML::DoubleQuoted;
    e << v;
  } else {
    e << j.dump();  // numbers, booleans and null as JSON writes them: plain YAML scalars
  }
}

}  // namespace

void PrintStructured(const json& body, const OutputFlag& out) {
  if (out.Yaml()) {
    YAML::Emitter e;
    EmitYaml(e, body);
    std::cout << e.c_str() << "\n";
  } else {
    std::cout << body.dump(2) << "\n";
  }
}

std::string JobIdArg(const std::string& id) {
  auto seq = server::ParseJobId(id);
  return seq ? server::FormatJobId(*seq) : id;
}

void Table::Print(std::ostream& out, bool with_headers) const {
  std::vector<size_t> width(headers_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(headers_);
  for (const auto& r : rows_) measure(r);
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      const bool last = i + 1 == width.size();
      const size_t pad = width[i] - row[i].size();
      if (right_.contains(i)) line += std::string(pad, ' ');
      line += row[i];
      if (!right_.contains(i) && !last) line += std::string(pad, ' ');
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  if (with_headers) print(headers_);
  for (const auto& r : rows_) print(r);
}

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

namespace {

void PrintEvent(const json& e) {
  std::cout << fmt::format("{:>6}  {}  {:<4}  {:<10} {:>9} -> {:<9}  {}\n",
                           e.value("seq", int64_t{0}), Time(e.value("time_ms", int64_t{0})),
                           S(e, "type"), S(e, "id"), S(e, "from").empty() ? "-" : S(e, "from"),
                           S(e, "to"), S(e, "reason"));
}

}  // namespace

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
    auto r = (*client)->Post(
        "/v1/jobs/" + PercentEncode(JobIdArg(a->id)) + "/cancel" + (a->array ? "?array=true" : ""),
        "", "application/json");
    if (auto code = Failed(r, "cancel")) return *code;
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
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
      if (a->out.Structured()) {
        PrintStructured(f->body, a->out);
      } else {
        std::cout << "node " << ForTerminal(a->forget)
                  << ": credential dropped; its agent joins again with a join token\n";
      }
      return kExitOk;
    }
    auto r = (*client)->Get("/v1/nodes");
    if (auto code = Failed(r, "nodes")) return *code;
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
      return kExitOk;
    }
    Table t({"NAME", "STATE", "DEVICES", "USED", "HEARTBEAT", "ADDRESS / MESSAGE"}, {3, 4});
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
      // As kubectl shows it: Ready,SchedulingDisabled.
      std::string state = S(n, "state");
      if (n.value("draining", false)) {
        state += used > 0 ? ",draining" : ",drained";
      } else if (n.value("cordoned", false)) {
        state += ",cordoned";
      }
      t.Add({S(n, "name"), state, devices, std::to_string(used), heartbeat, tail});
    }
    t.Print(std::cout);
    return kExitOk;
  };
}

// `tianshu node cordon|drain|uncordon|remove NAME...`: kubectl's node verbs, an admin's.
Runner RegisterNode(CLI::App& app) {
  struct Args : Common {
    std::vector<std::string> names;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, "node", "Cordon, drain, uncordon or remove nodes (admin)", a.get());
  cmd->require_subcommand(1, 1);
  cmd->fallthrough();
  std::vector<CLI::App*> verbs = {
      cmd->add_subcommand("cordon", "Place no new work on the nodes; what runs there goes on"),
      cmd->add_subcommand("drain",
                          "Cordon the nodes, and checkpoint and requeue the jobs running there "
                          "(they resume elsewhere; no retry spent)"),
      cmd->add_subcommand("uncordon", "Let the nodes take new work again"),
      cmd->add_subcommand("remove",
                          "Delete the nodes' records and credentials (a lost node, or one drained "
                          "empty); an agent there registers again with a join token")};
  for (auto* v : verbs) v->add_option("names", a->names, "Node names")->required();
  return [a, verbs] {
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu node: " << client.error().message << "\n";
      return kExitInvalid;
    }
    std::string verb;
    for (auto* v : verbs) {
      if (v->parsed()) verb = v->get_name();
    }
    int code = kExitOk;
    json out = json::array();
    for (const auto& name : a->names) {
      const std::string path = "/v1/nodes/" + PercentEncode(name);
      auto r = verb == "remove" ? (*client)->Delete(path)
                                : (*client)->Post(path + "/" + verb, "", "application/json");
      if (auto failed = Failed(r, "node " + verb)) {
        code = std::max(code, *failed);
        continue;
      }
      out.push_back(r->body);
      if (!a->out.Structured()) {
        std::cout << "node " << ForTerminal(name) << ": "
                  << (verb == "remove"  ? "removed"
                      : verb == "drain" ? "drained"
                                        : verb + "ed")
                  << "\n";
      }
    }
    if (a->out.Structured()) PrintStructured(json{{"nodes", out}}, a->out);
    return code;
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
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
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
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
      return kExitOk;
    }
    Table t({"QUEUE", "PENDING", "ACTIVE", "FINISHED", "GPUS", "SHARE", "QUOTA", "WEIGHT"},
            {1, 2, 3, 4, 5, 6, 7});
    for (const auto& q : r->body["queues"]) {
      const json& quota = q.value("quota_gpus", json(nullptr));
      t.Add({S(q, "name") + (q.value("configured", true) ? "" : " (not configured)"),
             S(q, "pending"), S(q, "active"), S(q, "finished"),
             fmt::format("{:.1f}", q.value("gpus_in_use", 0.0)),
             fmt::format("{:.1f}%", 100.0 * q.value("share_of_cluster", 0.0)),
             quota.is_number()
                 ? quota.dump() + " GPUs" + (q.value("borrow", true) ? "" : " (no borrowing)")
                 : "none",
             q.contains("weight") ? fmt::format("{:g}", q.value("weight", 1.0)) : "-"});
    }
    t.Print(std::cout);
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
    if (a->out.Structured()) {
      PrintStructured(nlohmann::json{{"servers", rows},
                                     {"leader", leader.empty() ? nlohmann::json(nullptr)
                                                               : nlohmann::json(leader)}},
                      a->out);
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
          std::cout << e.dump() << "\n";  // one JSON document a line, as it streams
        } else if (a->out.Yaml()) {
          std::cout << "---\n";
          PrintStructured(e, a->out);
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
