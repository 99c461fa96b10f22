// Who is calling: the identities of the control plane and their tokens. Like Slurm and
// Kubernetes, users, nodes and the tokens that let nodes join are told apart:
//   admin  the server's own token file (and users an admin makes admin): everything;
//   user   submits, lists, sees and cancels its own jobs (an admin any job); its jobs' ranks
//          run as its Unix user on the nodes (when the agent runs as root);
//   join   may only register a node name nobody holds yet (a bootstrap token, as kubeadm's);
//   node   one node's credential, minted at its first registration and bound to its name: the
//          only way to heartbeat, fetch work and report for that node, or register it again.
// Tokens are 256 random bits in hex, shown once and stored as their SHA-256 only.
//
//   std::string token = NewToken();             // to hand out once
//   std::string stored = TokenHash(token);       // what the store keeps
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tianshu/net/tokens.h"

namespace tianshu::server {

enum class Role { kAdmin, kUser, kJoin, kNode };
std::string_view RoleName(Role r);
std::optional<Role> ParseRole(std::string_view name);  // "admin", "user", "join"

struct Identity {
  std::string name;  // user name; "node:<name>" for a node credential
  Role role = Role::kUser;
  std::string unix_user;  // the account the user's ranks run as ("" = the agent's own)
  std::string node;       // for kNode: the node it is bound to
  bool IsAdmin() const { return role == Role::kAdmin; }
  // Whether it may act on what `owner` owns (cancel a job, read its spec and logs).
  bool ActsFor(const std::string& owner) const { return IsAdmin() || name == owner; }
};

using net::NewToken;
using net::TokenHash;
// A user name: 1-64 of [a-z0-9._-], starting with a letter (like a Unix login name).
bool IsValidUserName(std::string_view name);

}  // namespace tianshu::server
