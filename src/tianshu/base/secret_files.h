// Files that hold secrets (tokens) or users' data (the store, journals, rank logs): created
// private from the moment they exist (files 0600, directories 0700, never created open and
// chmod-ed after), and a token file others can read is refused, saying why.
//
//   auto token = ReadSecretFile("/etc/tianshu/token");     // refuses mode 0644, < 16 bytes
//   if (auto s = WritePrivateFile(path, token + "\n"); !s) ...  // O_EXCL, 0600
#pragma once

#include <string>

#include "tianshu/base/status.h"

namespace tianshu {

// The shortest token a file may hold (a random 128-bit token in hex is 32).
inline constexpr size_t kMinSecretBytes = 16;

// Reads a secret: the file's first line, trimmed. Refuses a path that is not a regular file,
// a file that others (not owner or group) may read or write, and a secret shorter than
// kMinSecretBytes; each error names the file and the reason.
[[nodiscard]] Result<std::string> ReadSecretFile(const std::string& path);

// Creates `path` holding `content`, mode 0600 from its creation (O_CREAT|O_EXCL|O_NOFOLLOW);
// fails when it exists. Written to a temporary name and renamed, so a reader never sees it half
// written.
[[nodiscard]] Status WritePrivateFile(const std::string& path, const std::string& content);

// Writes `content` to `path`, replacing it atomically (a private temporary, then rename).
[[nodiscard]] Status ReplacePrivateFile(const std::string& path, const std::string& content);

// Creates `path` and its missing parents with mode 0700 (existing ones are left as they are).
[[nodiscard]] Status MakePrivateDirs(const std::string& path);

// Opens `path` for appending, creating it with mode 0600; an existing file others can read or
// write is narrowed to 0600. Returns the descriptor (O_CLOEXEC).
[[nodiscard]] Result<int> OpenPrivateAppend(const std::string& path);

// Narrows an existing file to 0600 (no error when it does not exist).
[[nodiscard]] Status NarrowToPrivate(const std::string& path);

}  // namespace tianshu
