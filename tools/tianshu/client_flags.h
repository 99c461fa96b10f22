// Flags shared by the commands that talk to a running server (submit, jobs, job, cancel,
// nodes, queues, events) and the resolution of server address and token from flags, the
// environment (TIANSHU_SERVER, TIANSHU_TOKEN) and the default token file ~/.tianshu/token.
//   ClientFlags f; AddClientFlags(cmd, &f);
//   auto client = MakeClient(f);   // Result<std::unique_ptr<server::Client>>
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"

#include "tianshu/base/status.h"
#include "tianshu/server/client.h"

namespace tianshu::cli {

struct ClientFlags {
  std::string server;      // --server, else TIANSHU_SERVER, else http://127.0.0.1:7070
  std::string token_file;  // --token-file, else TIANSHU_TOKEN, else ~/.tianshu/token
  std::string ca_file;     // --ca-file, else TIANSHU_CA_FILE (https servers)
};
void AddClientFlags(CLI::App* cmd, ClientFlags* flags);
[[nodiscard]] Result<std::unique_ptr<server::Client>> MakeClient(const ClientFlags& flags);
// $HOME/.tianshu (or ./.tianshu without HOME): where `up` and `serve` keep data and token.
std::string DefaultDataDir();

// What every client command takes: where the server is, and --output.
struct Common {
  ClientFlags client;
  OutputFlag out;
};
// A subcommand with the client flags and --output.
CLI::App* Command(CLI::App& app, const char* name, const char* help, Common* c);
// The exit code of a call's outcome: kExitOk for a success, kExitFailure when the server could
// not be reached or failed (5xx), kExitInvalid when it refused the request.
int ExitCodeOf(const Result<server::ApiResponse>& r);
// What went wrong with a call that was not a success (the server's message, or why it was not
// reached).
std::string ErrorOf(const Result<server::ApiResponse>& r);
// Prints the outcome of a call; returns the exit code when it was not a success.
std::optional<int> Failed(const Result<server::ApiResponse>& r, const std::string& what);
// Prints a server answer as --output json (indented) or yaml.
void PrintStructured(const nlohmann::json& body, const OutputFlag& out);
// A job id as typed ("42", "000042" or "j-000042") in the server's form ("j-000042"); anything
// else unchanged, for the server to refuse.
std::string JobIdArg(const std::string& id);
// `s` as one segment or value of a URL (RFC 3986 unreserved characters kept, and ","): a name
// a user typed cannot reach another route or add a parameter.
std::string PercentEncode(const std::string& s);
// A field of a server answer as text for a terminal ("" when absent).
std::string S(const nlohmann::json& j, const char* key);
// How long ago `then_ms` was ("3m20s"; "-" for 0), and `ms` as a UTC time with milliseconds.
std::string Age(int64_t then_ms);
std::string Time(int64_t ms);
// The elements of a JSON array, comma-separated, escaped for a terminal.
std::string JoinArray(const nlohmann::json& a);

// A table whose columns are as wide as their widest cell (the last one is not padded), as
// kubectl and squeue print them; `right`: the columns aligned right (numbers).
//   Table t({"ID", "STATE"}); t.Add({"j-000001", "running"}); t.Print(std::cout);
class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::set<size_t> right = {})
      : headers_(std::move(headers)), right_(std::move(right)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t Rows() const { return rows_.size(); }
  void Print(std::ostream& out, bool with_headers = true) const;

 private:
  std::vector<std::string> headers_;
  std::set<size_t> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tianshu::cli
