#include "tianshu/base/data_files.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>

#include "tianshu/base/strings.h"

namespace tianshu {
namespace {

namespace fs = std::filesystem;

// Exists and is not a directory: regular files, and pipes (`<(zcat ...)`, /dev/stdin) too.
bool IsReadableKind(const std::string& path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  return !ec && fs::exists(st) && !fs::is_directory(st);
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

// gzip through zlib's inflate (windowBits 15 + 32: gzip or zlib header, detected). Several
// concatenated members are read as gunzip reads them, and zero bytes after the last member
// (tape padding) are ignored as gunzip does; anything else after it is an error.
Result<std::string> ReadGzip(const std::string& path, const std::string& packed, size_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return Fail(path, ": cannot start zlib");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  size_t fed = 0;  // bytes of `packed` handed to zlib so far (avail_in is 32-bit)
  auto feed = [&] {
    size_t n = std::min<size_t>(packed.size() - fed, size_t{1} << 30);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + fed));
    z.avail_in = static_cast<uInt>(n);
    fed += n;
  };
  feed();
  std::string text;
  char buf[1 << 16];
  while (true) {
    if (z.avail_in == 0 && fed < packed.size()) feed();
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
      size_t rest = packed.size() - fed + z.avail_in;
      if (rest == 0) break;
      std::string_view tail(packed.data() + packed.size() - rest, rest);
      if (tail.find_first_not_of('\0') == std::string_view::npos) break;
      if (inflateReset(&z) != Z_OK) return Fail(path, ": corrupt gzip data");
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && fed == packed.size()) {
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
  if (IsReadableKind(path)) return path;
  if (!EndsWith(path, ".gz") && IsReadableKind(path + ".gz")) return path + ".gz";
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
  if (EndsWith(file, ".gz")) {
    return Fail(file, ": not gzip data (a .gz file must start with the gzip magic bytes 1f 8b)");
  }
  return raw;
}

std::string DataDirSearch::Missing() const {
  if (!chosen_by.empty()) {
    return chosen_by + " " + looked.front() +
           " is not a data folder (no README.md there; the data sets ship in the source tree's "
           "data/ and in share/tianshu/data)";
  }
  return "no data folder (one holding README.md and the data sets): looked in " +
         Join(looked, ", ") + "; set TIANSHU_DATA or pass --data DIR";
}

DataDirSearch FindDataDir(const DataDirHints& hints) {
  DataDirSearch s;
  // An explicit choice is used or refused, never replaced by a default behind the user's back.
  for (const auto& [value, by] : {std::pair{hints.flag, "--data"}, {hints.env, "TIANSHU_DATA"}}) {
    if (value.empty()) continue;
    s.looked.push_back(value);
    s.chosen_by = by;
    if (HoldsData(value)) s.dir = value;
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

std::string RecordedSourceDir(const std::string& executable) {
  if (executable.empty()) return std::string();
  const fs::path file = fs::path(executable).parent_path() / "tianshu.source-dir";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > 4096 || ec) return std::string();
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  if (line.empty() || line[0] != '/' || line.find('\0') != std::string::npos) return std::string();
  return line;
}

}  // namespace tianshu
