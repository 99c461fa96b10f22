#include "tianshu/server/identity.h"

namespace tianshu::server {

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kAdmin:
      return "admin";
    case Role::kUser:
      return "user";
    case Role::kJoin:
      return "join";
    case Role::kNode:
      return "node";
  }
  return "user";
}

std::optional<Role> ParseRole(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "user") return Role::kUser;
  if (name == "join") return Role::kJoin;
  return std::nullopt;
}

bool IsValidUserName(std::string_view name) {
  if (name.empty() || name.size() > 64 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace tianshu::server
