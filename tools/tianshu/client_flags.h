// Flags shared by the commands that talk to a running server (submit, jobs, job, cancel,
// nodes, queues, events) and the resolution of server address and token from flags, the
// environment (TIANSHU_SERVER, TIANSHU_TOKEN) and the default token file ~/.tianshu/token.
//   ClientFlags f; AddClientFlags(cmd, &f);
//   auto client = MakeClient(f);   // Result<std::unique_ptr<server::Client>>
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

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

}  // namespace tianshu::cli
