// The file system as the agent sees it: sysfs and procfs for discovery, cgroupfs for isolation,
// the work directory for the journal and logs. Real and fake implementations share this
// interface, so discovery and the cgroup drivers run in unit tests on a fake tree and on this
// machine for real.
//   RealSystemFiles fs;
//   Result<std::string> mounts = fs.Read("/proc/mounts");
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tianshu/base/status.h"

namespace tianshu::agent {

// The end of a file and when it last changed (SystemFiles::ReadUntrustedTail).
struct FileTail {
  std::string data;      // the last (at most max_bytes) bytes
  int64_t size = 0;      // the whole file's size
  int64_t mtime_ns = 0;  // last modification, ns since the epoch
};

class SystemFiles {
 public:
  virtual ~SystemFiles() = default;
  // Whole content of a file. Fails when it does not exist or cannot be read.
  [[nodiscard]] virtual Result<std::string> Read(const std::string& path) = 0;
  // A file a job's owner controls (its marker, its checkpoint directory's `latest`), read by
  // the root agent: refused unless a regular file with one link, not a symlink (no redirect to
  // a root-only file, no FIFO to block on), and at most `max_bytes` are read.
  [[nodiscard]] virtual Result<std::string> ReadUntrusted(const std::string& path,
                                                          size_t max_bytes) = 0;
  // The same refusals, but the file's last `max_bytes` (a log a job appends to, its progress
  // file) and its modification time.
  [[nodiscard]] virtual Result<FileTail> ReadUntrustedTail(const std::string& path,
                                                           size_t max_bytes) = 0;
  // Writes `data` in one write(2) call (cgroup files need exactly that). No truncation
  // semantics beyond O_WRONLY|O_TRUNC|O_CREAT for regular files. Fails with errno's text.
  [[nodiscard]] virtual Status Write(const std::string& path, const std::string& data) = 0;
  // Appends in one write(2), not flushed to disk (the journal: what it records are processes
  // of this boot, which a crash of the machine ends; a restarted agent reads the page cache).
  [[nodiscard]] virtual Status Append(const std::string& path, const std::string& data) = 0;
  // Names in a directory, sorted, without "." and "..". Empty list on a missing directory is
  // an error, not an empty result.
  [[nodiscard]] virtual Result<std::vector<std::string>> List(const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // mkdir -p, new directories 0711 (traverse, not list). Idempotent.
  [[nodiscard]] virtual Status MakeDirs(const std::string& path) = 0;
  // rmdir (cgroups) — the directory must be empty of subdirectories. Idempotent: a missing
  // directory is success.
  [[nodiscard]] virtual Status RemoveDir(const std::string& path) = 0;
  // Target of a symlink (sysfs device links), or an error.
  [[nodiscard]] virtual Result<std::string> ReadLink(const std::string& path) = 0;
  // Atomic replace via a temporary file and rename. kDurable syncs the data before the rename
  // (journal compaction, a checkpoint's `latest`); kThisBoot does not: for a file that means
  // nothing after a crash of the machine (the node lease, tied to the boot; isolation.txt), so
  // readers never see half of it, but it costs no disk flush.
  enum class Sync { kDurable, kThisBoot };
  [[nodiscard]] virtual Status Replace(const std::string& path, const std::string& data,
                                       Sync sync) = 0;
  // Writes `data` over a regular file in place (one pwrite(2) at offset 0, no new inode, no
  // flush), when the file exists, has one name and holds exactly data.size() bytes; fails
  // otherwise (a link, a FIFO, a hard link to another file included), and the
  // caller replaces it. A reader may see the old bytes and the new ones mixed: the data must
  // let it tell (the node lease repeats its number at both ends).
  [[nodiscard]] virtual Status Overwrite(const std::string& path, const std::string& data) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // "major:minor" of the file system that holds `path` (stat's st_dev).
  [[nodiscard]] virtual Result<std::string> DeviceOf(const std::string& path) = 0;
};

// The real file system. Thread-compatible (no state).
class RealSystemFiles final : public SystemFiles {
 public:
  Result<std::string> Read(const std::string& path) override;
  Result<std::string> ReadUntrusted(const std::string& path, size_t max_bytes) override;
  Result<FileTail> ReadUntrustedTail(const std::string& path, size_t max_bytes) override;
  Status Write(const std::string& path, const std::string& data) override;
  Status Append(const std::string& path, const std::string& data) override;
  Result<std::vector<std::string>> List(const std::string& path) override;
  bool Exists(const std::string& path) override;
  Status MakeDirs(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Result<std::string> ReadLink(const std::string& path) override;
  Status Replace(const std::string& path, const std::string& data, Sync sync) override;
  Status Overwrite(const std::string& path, const std::string& data) override;
  Status Remove(const std::string& path) override;
  Result<std::string> DeviceOf(const std::string& path) override;
};

// An in-memory tree for tests: files, directories and links, plus a log of writes. MakeDirs
// of a directory under one of `auto_files` prefixes creates the files a kernel would (cgroups).
class FakeSystemFiles final : public SystemFiles {
 public:
  void AddFile(const std::string& path, const std::string& data);
  void AddLink(const std::string& path, const std::string& target);
  // Every directory created below `prefix` gets these (empty) files, as cgroupfs does.
  void AutoFiles(const std::string& prefix, std::vector<std::string> names);
  // The modification time ReadUntrustedTail reports for a file (0 until set).
  void SetMtime(const std::string& path, int64_t mtime_ns) { mtimes_[path] = mtime_ns; }
  // Makes writes to this path fail (a controller file the kernel refuses).
  void FailWrites(const std::string& path) { failing_.insert(path); }
  const std::vector<std::pair<std::string, std::string>>& writes() const { return writes_; }
  std::string Content(const std::string& path) const;
  // How many Replace calls of this path asked for a sync (kDurable).
  int DurableReplaces(const std::string& path) const {
    auto it = durable_replaces_.find(path);
    return it == durable_replaces_.end() ? 0 : it->second;
  }
  // How many Overwrite calls wrote this path in place.
  int Overwrites(const std::string& path) const {
    auto it = overwrites_.find(path);
    return it == overwrites_.end() ? 0 : it->second;
  }
  // How many Read calls there were, of any path (found or not).
  int reads() const { return reads_; }
  // How many Append calls wrote to this path (each is one write(2) on the real file system).
  int Appends(const std::string& path) const {
    auto it = appends_.find(path);
    return it == appends_.end() ? 0 : it->second;
  }

  Result<std::string> Read(const std::string& path) override;
  Result<std::string> ReadUntrusted(const std::string& path, size_t max_bytes) override;
  Result<FileTail> ReadUntrustedTail(const std::string& path, size_t max_bytes) override;
  Status Write(const std::string& path, const std::string& data) override;
  Status Append(const std::string& path, const std::string& data) override;
  Result<std::vector<std::string>> List(const std::string& path) override;
  bool Exists(const std::string& path) override;
  Status MakeDirs(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Result<std::string> ReadLink(const std::string& path) override;
  Status Replace(const std::string& path, const std::string& data, Sync sync) override;
  Status Overwrite(const std::string& path, const std::string& data) override;
  Status Remove(const std::string& path) override;
  Result<std::string> DeviceOf(const std::string& path) override;
  std::string device_of = "254:0";  // what DeviceOf answers

 private:
  void AddDirs(const std::string& path);
  std::map<std::string, int> durable_replaces_, overwrites_;
  std::map<std::string, std::string> files_;
  std::map<std::string, std::string> links_;
  std::set<std::string> dirs_{"/"};
  std::map<std::string, std::vector<std::string>> auto_files_;
  std::set<std::string> failing_;
  std::map<std::string, int64_t> mtimes_;
  std::vector<std::pair<std::string, std::string>> writes_;
  std::map<std::string, int> appends_;
  int reads_ = 0;
};

// Directory part of a path ("/a/b" -> "/a"); "/" for top-level names.
std::string Dirname(const std::string& path);

}  // namespace tianshu::agent
