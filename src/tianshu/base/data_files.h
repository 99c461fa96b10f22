// Reading the project's data files and finding its data folder. The larger data sets ship
// gzip-compressed (data/philly/philly.csv.gz); every reader goes through ReadDataFile, which
// reads a plain or a gzip file (by its magic bytes, not its name), finds `F.gz` when `F` is
// asked for and absent, and bounds what it expands so a hostile file cannot exhaust memory.
// FindDataDir picks the data folder from hints the caller gathers (only main reads the
// environment and /proc/self/exe).
//   Result<std::string> csv = ReadDataFile("data/philly/philly.csv");  // reads philly.csv.gz
//   DataDirSearch s = FindDataDir({.env = getenv("TIANSHU_DATA"), .executable = exe});
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tianshu/base/status.h"

namespace tianshu {

// The most a data file may expand to (the whole Philly trace is 3.4 MB).
inline constexpr size_t kMaxDataFileBytes = size_t{256} << 20;

// Whole content of `path`, decompressed when it is gzip. When `path` does not exist and
// `path + ".gz"` does, reads that. Errors name the file and say why: missing (naming both
// names tried), a directory, unreadable (errno's text), corrupt or truncated gzip, or larger
// than `max_bytes` once expanded (reading stops there). Thread-safe (no shared state).
[[nodiscard]] Result<std::string> ReadDataFile(const std::string& path,
                                               size_t max_bytes = kMaxDataFileBytes);

// The file ReadDataFile would open for `path` ("F" or "F.gz"), or "" when neither exists.
std::string ExistingDataFile(const std::string& path);

// Where the caller may look for the data folder, in order of precedence.
struct DataDirHints {
  std::string flag;        // --data DIR; when given, the only candidate
  std::string env;         // TIANSHU_DATA; when set (and no flag), the only candidate
  std::string executable;  // the running binary (/proc/self/exe): <prefix>/share/tianshu/data
                           // beside it, then data/ in a source tree above it
  std::string source_dir;  // the source tree a build tree names beside its binary
                           // (RecordedSourceDir; "" when none)
};

struct DataDirSearch {
  std::string dir;                  // "" when none of the candidates holds the data
  std::vector<std::string> looked;  // every candidate tried, in order, for the error message
  std::string chosen_by;            // "--data" or "TIANSHU_DATA" when the user named the folder
  // "no data folder: looked in A, B, C; set TIANSHU_DATA or pass --data DIR".
  std::string Missing() const;
};

// The first candidate that holds the data (a folder with a README.md). An explicit flag or
// environment value is the only candidate when given: a folder without the data is an error
// naming it and where it came from, never silently replaced by a default.
DataDirSearch FindDataDir(const DataDirHints& hints);

// The source tree a build tree names in `tianshu.source-dir` beside the binary `executable`
// (CMake writes it where TIANSHU_FIND_SOURCE_DATA is on; the package installs no such file, so
// the installed binary records no build path): its first line where that is an absolute path,
// else "".
std::string RecordedSourceDir(const std::string& executable);

}  // namespace tianshu
