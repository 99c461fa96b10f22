// Errors as values for every module of Tianshu.
//
// A function that can fail for a reason outside the programmer's control returns
// `Result<T>` (std::expected<T, Error>); programmer errors are asserts.
//   Result<int64_t> r = ParseSize("8MB");
//   if (!r) std::cerr << r.error().message;
#pragma once

#include <version>
#if defined(__cpp_lib_expected)
#include <expected>
#else
#include "tianshu/base/internal/expected_polyfill.h"
#endif
#include <string>
#include <utility>

namespace tianshu {

// A failure that broke something: unreadable file, bad input, refused request.
// Placement outcomes such as "does not fit now" are never Errors (see placement/).
struct Error {
  std::string message;
};

template <typename T>
using Result = std::expected<T, Error>;

// Shorthand for the unexpected branch: `return Fail("no such node ", name);`.
template <typename... Args>
[[nodiscard]] std::unexpected<Error> Fail(Args&&... parts) {
  std::string s;
  (s.append(std::string(std::forward<Args>(parts))), ...);
  return std::unexpected<Error>(Error{std::move(s)});
}

// Status for functions that return nothing on success.
using Status = std::expected<void, Error>;

[[nodiscard]] inline Status Ok() { return {}; }

}  // namespace tianshu
