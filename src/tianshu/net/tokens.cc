#include "tianshu/net/tokens.h"

#include <openssl/sha.h>

#include <cstdint>
#include <random>

namespace tianshu::net {

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

bool IsTokenHash(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace tianshu::net
