#include "tianshu/base/data_files.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "tianshu/base/strings.h"

namespace tianshu {
namespace {

namespace fs = std::filesystem;

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

Result<std::string> ReadPlain(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(path, ": cannot open: ", std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    size_t n = static_cast<size_t>(in.gcount());
    if (text.size() + n > max_bytes) {
      return Fail(path, ": larger than the ", std::to_string(max_bytes >> 20),
                  " MiB allowed for a data file");
    }
    text.append(buf, n);
  }
  if (in.bad()) return Fail(path, ": read error: ", std::strerror(errno));
  return text;
}

// gzip through zlib's inflate (windowBits 15 + 32: gzip or zlib header, detected), several
// concatenated members allowed as gunzip does.
Result<std::string> ReadGzip(const std::string& path, const std::string& packed, size_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return Fail(path, ": cannot start zlib");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  z.avail_in = static_cast<uInt>(packed.size());
  std::string text;
  char buf[1 << 16];
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    int rc = inflate(&z, Z_NO_FLUSH);
    size_t n = sizeof buf - z.avail_out;
    if (text.size() + n > max_bytes) {
      return Fail(path, ": expands to more than the ", std::to_string(max_bytes >> 20),
                  " MiB allowed for a data file");
    }
    text.append(buf, n);
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      if (inflateReset(&z) != Z_OK) return Fail(path, ": corrupt gzip data");
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0) {
      return Fail(path, ": truncated gzip data (the file ends inside the stream)");
    }
    if (rc != Z_OK) {
      std::string why = z.msg ? z.msg : "zlib error " + std::to_string(rc);
      return Fail(path, ": corrupt gzip data (", why, ")");
    }
  }
  return text;
}

bool HoldsData(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "README.md", ec);
}

}  // namespace

std::string ExistingDataFile(const std::string& path) {
  if (IsRegularFile(path)) return path;
  if (!EndsWith(path, ".gz") && IsRegularFile(path + ".gz")) return path + ".gz";
  return "";
}

Result<std::string> ReadDataFile(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Fail(path, ": is a directory, not a data file");
  std::string file = ExistingDataFile(path);
  if (file.empty()) {
    if (EndsWith(path, ".gz")) return Fail(path, ": no such file");
    return Fail(path, ": no such file (nor ", path, ".gz)");
  }
  // The compressed file itself is bounded too (a gzip expands at most ~1000x, but a plain
  // file read as such must not exceed the limit either).
  auto raw = ReadPlain(file, max_bytes);
  if (!raw) return raw;
  if (raw->size() >= 2 && static_cast<unsigned char>((*raw)[0]) == 0x1f &&
      static_cast<unsigned char>((*raw)[1]) == 0x8b) {
    return ReadGzip(file, *raw, max_bytes);
  }
  return raw;
}

std::string DataDirSearch::Missing() const {
  return "no data folder (one holding README.md and the data sets): looked in " +
         Join(looked, ", ") + "; set TIANSHU_DATA or pass --data DIR";
}

DataDirSearch FindDataDir(const DataDirHints& hints) {
  DataDirSearch s;
  if (!hints.flag.empty()) {
    s.looked.push_back(hints.flag);
    s.dir = hints.flag;
    return s;
  }
  if (!hints.env.empty()) {
    s.looked.push_back(hints.env + " (TIANSHU_DATA)");
    s.dir = hints.env;
    return s;
  }
  std::vector<fs::path> candidates;
  if (!hints.executable.empty()) {
    fs::path bin = fs::path(hints.executable).parent_path();
    // Installed: <prefix>/bin/tianshu -> <prefix>/share/tianshu/data.
    candidates.push_back(bin.parent_path() / "share" / "tianshu" / "data");
    // A build tree inside the source tree (build/tools/tianshu/tianshu): data/ in an ancestor.
    for (fs::path p = bin; !p.empty() && p != p.root_path(); p = p.parent_path()) {
      if (HoldsData(p / "data") && fs::exists(p / "CMakeLists.txt")) {
        candidates.push_back(p / "data");
        break;
      }
    }
  }
  if (!hints.source_dir.empty()) candidates.push_back(fs::path(hints.source_dir) / "data");
  for (const fs::path& c : candidates) {
    std::string name = c.lexically_normal().string();
    if (std::find(s.looked.begin(), s.looked.end(), name) != s.looked.end()) continue;
    s.looked.push_back(name);
    if (HoldsData(c)) {
      s.dir = name;
      break;
    }
  }
  return s;
}

}  // namespace tianshu
