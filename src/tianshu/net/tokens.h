// Secrets of the control plane's identities: tokens are 256 random bits in hex, and what is
// stored of them is their SHA-256 (never the token).
//   std::string t = NewToken();        // shown once
//   std::string h = TokenHash(t);      // kept
#pragma once

#include <string>
#include <string_view>

namespace tianshu::net {

// 64 hex digits from the kernel's random source.
std::string NewToken();
// Lower-case hex SHA-256 of `token`.
std::string TokenHash(std::string_view token);
// Whether `s` has the form of a TokenHash (64 lower-case hex digits).
bool IsTokenHash(std::string_view s);

}  // namespace tianshu::net
