#include "tianshu/server/identity.h"

#include <openssl/sha.h>

#include <random>

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

std::string NewToken() {
  std::random_device rd;  // /dev/urandom
  const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 4; ++k) {
      out += hex[(v >> (8 * k + 4)) & 0xf];
      out += hex[(v >> (8 * k)) & 0xf];
    }
  }
  return out;
}

std::string TokenHash(std::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : digest) {
    out += hex[c >> 4];
    out += hex[c & 0xf];
  }
  return out;
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
