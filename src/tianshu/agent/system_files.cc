#include "tianshu/agent/system_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tianshu/base/strings.h"

namespace tianshu::agent {
namespace {

std::unexpected<Error> Errno(const char* what, const std::string& path) {
  return Fail(what, " ", path, ": ", std::strerror(errno));
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return Ok();
}

}  // namespace

std::string Dirname(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos || pos == 0) return "/";
  return path.substr(0, pos);
}

Result<std::string> RealSystemFiles::Read(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  std::string out;
  char buf[8192];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      auto e = Errno("read", path);
      ::close(fd);
      return e;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status RealSystemFiles::Write(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Errno("open", path);
  // One write call: cgroup files parse each write(2) as one command.
  ssize_t n = ::write(fd, data.data(), data.size());
  if (n < 0) {
    auto e = Errno("write", path);
    ::close(fd);
    return e;
  }
  ::close(fd);
  return Ok();
}

Status RealSystemFiles::Append(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return Errno("open", path);
  // Not flushed (see the header): the journal's records are the processes of this boot. A
  // flush each time put one disk flush per record on every launch's path, serially: nine for
  // an 8-rank job, 5-60 ms each on a busy disk.
  Status s = WriteAll(fd, data, path);
  ::close(fd);
  return s;
}

Result<std::vector<std::string>> RealSystemFiles::List(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return Errno("opendir", path);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool RealSystemFiles::Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status RealSystemFiles::MakeDirs(const std::string& path) {
  // 0711: others may pass through (a rank running as its job's owner reaches its own job
  // directory) but not list; every file the agent writes is 0600. Mostly the parent exists:
  // one mkdir, not one per component (a job start asks for several directories, and cgroup v1
  // for one per controller).
  if (path.size() > 1 && path[0] == '/') {
    if (::mkdir(path.c_str(), 0711) == 0 || errno == EEXIST) return Ok();
    if (errno != ENOENT) return Errno("mkdir", path);
  }
  std::string cur;
  for (const std::string& part : SplitString(path, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), 0711) != 0 && errno != EEXIST) return Errno("mkdir", cur);
  }
  return Ok();
}

Status RealSystemFiles::RemoveDir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Errno("rmdir", path);
  return Ok();
}

Result<std::string> RealSystemFiles::ReadUntrusted(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Errno("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    return Fail(path, ": not a regular file with one link (refused)");
  }
  std::string out(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {
    ssize_t n = ::read(fd, out.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Result<FileTail> RealSystemFiles::ReadUntrustedTail(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Errno("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    return Fail(path, ": not a regular file with one link (refused)");
  }
  FileTail tail;
  tail.size = st.st_size;
  tail.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  const off_t from =
      st.st_size > static_cast<off_t>(max_bytes) ? st.st_size - static_cast<off_t>(max_bytes) : 0;
  tail.data.assign(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {  // pread: the file may grow meanwhile; what is past max_bytes waits
    ssize_t n =
        ::pread(fd, tail.data.data() + got, max_bytes - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  tail.data.resize(got);
  return tail;
}

Result<std::string> RealSystemFiles::ReadLink(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n < 0) return Errno("readlink", path);
  return std::string(buf, static_cast<size_t>(n));
}

Status RealSystemFiles::Replace(const std::string& path, const std::string& data, Sync sync) {
  // A new file of our own, never one a directory's other writer planted (a symlink to a
  // system file): whatever `.tmp` is there goes (unlink removes a link, not its target), and
  // O_EXCL | O_NOFOLLOW refuses one that reappears.
  std::string tmp = path + ".tmp";
  (void)::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("open", tmp);
  Status s = WriteAll(fd, data, tmp);
  if (s && sync == Sync::kDurable && ::fdatasync(fd) != 0) s = Errno("fdatasync", tmp);
  ::close(fd);
  if (!s) return s;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename", tmp);
  return Ok();
}

Status RealSystemFiles::Overwrite(const std::string& path, const std::string& data) {
  // Never through a link (O_NOFOLLOW), never blocked by a FIFO planted there (O_NONBLOCK), and
  // never into another file a hard link shares.
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Errno("open", path);
  struct stat st;
  Status s = Ok();
  if (::fstat(fd, &st) != 0) {
    s = Errno("fstat", path);
  } else if (!S_ISREG(st.st_mode) || st.st_nlink != 1 ||
             st.st_size != static_cast<off_t>(data.size())) {
    s = Fail(path, ": not a regular file of ", std::to_string(data.size()), " bytes with one name");
  } else {
    ssize_t n = 0;
    do {
      n = ::pwrite(fd, data.data(), data.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      s = Errno("pwrite", path);
    } else if (static_cast<size_t>(n) != data.size()) {
      s = Fail("pwrite ", path, ": short write");
    }
  }
  ::close(fd);
  return s;
}

Status RealSystemFiles::Remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("unlink", path);
  return Ok();
}

Result<std::string> RealSystemFiles::DeviceOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno("stat", path);
  return std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
}

// ---- fake ----

void FakeSystemFiles::AddDirs(const std::string& path) {
  std::string cur;
  for (const std::string& part : SplitString(path, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    dirs_.insert(cur);
  }
}

void FakeSystemFiles::AddFile(const std::string& path, const std::string& data) {
  AddDirs(Dirname(path));
  files_[path] = data;
}

void FakeSystemFiles::AddLink(const std::string& path, const std::string& target) {
  AddDirs(Dirname(path));
  links_[path] = target;
}

void FakeSystemFiles::AutoFiles(const std::string& prefix, std::vector<std::string> names) {
  auto_files_[prefix] = std::move(names);
}

std::string FakeSystemFiles::Content(const std::string& path) const {
  auto it = files_.find(path);
  return it == files_.end() ? "" : it->second;
}

Result<std::string> FakeSystemFiles::Read(const std::string& path) {
  ++reads_;
  auto it = files_.find(path);
  if (it == files_.end()) return Fail("open ", path, ": No such file or directory");
  return it->second;
}

Result<std::string> FakeSystemFiles::ReadUntrusted(const std::string& path, size_t max_bytes) {
  auto text = Read(path);
  if (text && text->size() > max_bytes) text->resize(max_bytes);
  return text;
}

Result<FileTail> FakeSystemFiles::ReadUntrustedTail(const std::string& path, size_t max_bytes) {
  auto text = Read(path);
  if (!text) return std::unexpected(text.error());
  FileTail tail{.size = static_cast<int64_t>(text->size())};
  tail.data = text->size() > max_bytes ? text->substr(text->size() - max_bytes) : *text;
  auto m = mtimes_.find(path);
  tail.mtime_ns = m == mtimes_.end() ? 0 : m->second;
  return tail;
}

Status FakeSystemFiles::Write(const std::string& path, const std::string& data) {
  if (failing_.count(path)) return Fail("write ", path, ": Invalid argument");
  if (!dirs_.count(Dirname(path))) return Fail("open ", path, ": No such file or directory");
  writes_.emplace_back(path, data);
  files_[path] = data;
  return Ok();
}

Status FakeSystemFiles::Append(const std::string& path, const std::string& data) {
  if (!dirs_.count(Dirname(path))) return Fail("open ", path, ": No such file or directory");
  files_[path] += data;
  ++appends_[path];
  return Ok();
}

Result<std::vector<std::string>> FakeSystemFiles::List(const std::string& path) {
  if (!dirs_.count(path)) return Fail("opendir ", path, ": No such file or directory");
  std::set<std::string> names;
  std::string prefix = path == "/" ? "/" : path + "/";
  auto take = [&](const std::string& p) {
    if (!StartsWith(p, prefix)) return;
    std::string rest = p.substr(prefix.size());
    if (rest.empty()) return;
    names.insert(rest.substr(0, rest.find('/')));
  };
  for (const auto& [p, _] : files_) take(p);
  for (const auto& [p, _] : links_) take(p);
  for (const auto& p : dirs_) take(p);
  return std::vector<std::string>(names.begin(), names.end());
}

bool FakeSystemFiles::Exists(const std::string& path) {
  return files_.count(path) || dirs_.count(path) || links_.count(path);
}

Status FakeSystemFiles::MakeDirs(const std::string& path) {
  bool existed = dirs_.count(path) > 0;
  AddDirs(path);
  if (!existed) {
    for (const auto& [prefix, names] : auto_files_) {
      if (StartsWith(path, prefix + "/")) {
        for (const auto& n : names) files_.emplace(path + "/" + n, "");
      }
    }
  }
  return Ok();
}

Status FakeSystemFiles::RemoveDir(const std::string& path) {
  if (!dirs_.count(path)) return Ok();
  std::string prefix = path + "/";
  for (const auto& d : dirs_) {
    if (StartsWith(d, prefix)) return Fail("rmdir ", path, ": Directory not empty");
  }
  for (auto it = files_.begin(); it != files_.end();) {
    it = StartsWith(it->first, prefix) ? files_.erase(it) : std::next(it);
  }
  dirs_.erase(path);
  return Ok();
}

Result<std::string> FakeSystemFiles::ReadLink(const std::string& path) {
  auto it = links_.find(path);
  if (it == links_.end()) return Fail("readlink ", path, ": No such file or directory");
  return it->second;
}

Status FakeSystemFiles::Replace(const std::string& path, const std::string& data, Sync sync) {
  AddDirs(Dirname(path));
  if (sync == Sync::kDurable) ++durable_replaces_[path];
  files_[path] = data;
  return Ok();
}

Status FakeSystemFiles::Overwrite(const std::string& path, const std::string& data) {
  auto it = files_.find(path);
  if (it == files_.end()) return Fail("open ", path, ": No such file or directory");
  if (it->second.size() != data.size()) {
    return Fail(path, ": not a regular file of ", std::to_string(data.size()), " bytes");
  }
  ++overwrites_[path];
  it->second = data;
  return Ok();
}

Status FakeSystemFiles::Remove(const std::string& path) {
  files_.erase(path);
  return Ok();
}

}  // namespace tianshu::agent

namespace tianshu::agent {
Result<std::string> FakeSystemFiles::DeviceOf(const std::string&) { return device_of; }
}  // namespace tianshu::agent
