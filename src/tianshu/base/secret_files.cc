#include "tianshu/base/secret_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tianshu/base/strings.h"

namespace tianshu {
namespace {

std::string Errno() { return std::strerror(errno); }

std::string Octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777u);
  return buf;
}

}  // namespace

Result<std::string> ReadSecretFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Fail("cannot read token file ", path, ": ", Errno());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Fail("token file ", path, " is not a regular file");
  }
  if ((st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
    ::close(fd);
    return Fail("token file ", path, " is readable or writable by every user (mode ",
                Octal(st.st_mode), "): anyone on this host could act with it; run: chmod 600 ",
                path);
  }
  std::string text;
  char buf[4096];
  while (text.size() < 65536) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string e = Errno();
      ::close(fd);
      return Fail("cannot read token file ", path, ": ", e);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  std::string token(Trim(text.substr(0, text.find('\n'))));
  if (token.empty()) return Fail("token file ", path, " is empty");
  if (token.size() < kMinSecretBytes) {
    return Fail("token file ", path, " holds a token of ", std::to_string(token.size()),
                " bytes: at least ", std::to_string(kMinSecretBytes),
                " are required (a guessable token is no protection)");
  }
  return token;
}

namespace {

// Writes `content` to a new private temporary beside `path`; returns its name.
Result<std::string> WriteTemporary(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // a leftover of a crashed write by this pid
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Fail("cannot create ", tmp, ": ", Errno());
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string e = Errno();
      ::close(fd);
      ::unlink(tmp.c_str());
      return Fail("cannot write ", tmp, ": ", e);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string e = Errno();
    ::unlink(tmp.c_str());
    return Fail("cannot write ", tmp, ": ", e);
  }
  return tmp;
}

}  // namespace

Status WritePrivateFile(const std::string& path, const std::string& content) {
  auto tmp = WriteTemporary(path, content);
  if (!tmp) return std::unexpected(tmp.error());
  // link(2) fails when `path` exists: never replaces a file someone else made meanwhile.
  if (::link(tmp->c_str(), path.c_str()) != 0) {
    std::string e = Errno();
    ::unlink(tmp->c_str());
    return Fail("cannot create ", path, ": ", e);
  }
  ::unlink(tmp->c_str());
  return Ok();
}

Status ReplacePrivateFile(const std::string& path, const std::string& content) {
  auto tmp = WriteTemporary(path, content);
  if (!tmp) return std::unexpected(tmp.error());
  if (::rename(tmp->c_str(), path.c_str()) != 0) {
    std::string e = Errno();
    ::unlink(tmp->c_str());
    return Fail("cannot replace ", path, ": ", e);
  }
  return Ok();
}

Status MakePrivateDirs(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path at;
  for (const auto& part : p) {
    at /= part;
    if (at.empty() || at == at.root_path()) continue;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) {
      return Fail("cannot create directory ", at.string(), ": ", Errno());
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Fail("cannot create directory ", path, ": not a directory");
  }
  return Ok();
}

Result<int> OpenPrivateAppend(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Fail("cannot open ", path, ": ", Errno());
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (st.st_mode & 077) != 0) ::fchmod(fd, 0600);
  return fd;
}

Status NarrowToPrivate(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Ok();
  if (!S_ISREG(st.st_mode)) return Fail(path, " is not a regular file");
  if ((st.st_mode & 077) != 0 && ::chmod(path.c_str(), 0600) != 0) {
    return Fail("cannot make ", path, " private: ", Errno());
  }
  return Ok();
}

}  // namespace tianshu
