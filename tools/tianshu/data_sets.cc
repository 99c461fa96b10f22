#include "data_sets.h"

#include <cstdlib>
#include <filesystem>

#include "tianshu/base/data_files.h"
#include "tianshu/base/strings.h"

namespace tianshu::cli {

Result<std::string> DataDir(const std::string& flag) {
  DataDirHints hints;
  hints.flag = flag;
  if (const char* env = std::getenv("TIANSHU_DATA")) hints.env = env;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) hints.executable = exe.string();
  hints.source_dir = RecordedSourceDir(hints.executable);
  DataDirSearch s = FindDataDir(hints);
  if (s.dir.empty()) return Fail(s.Missing());
  return s.dir;
}

namespace {

bool IsBareTrace(const std::string& spec) {
  if (spec == "philly" || spec == "openb") return true;
  // "itp:cluster04" but not a file of that name in the working directory.
  return StartsWith(spec, "itp:cluster") && spec.find('/') == std::string::npos &&
         !std::filesystem::exists(spec.substr(4));
}

bool IsBareCluster(const std::string& spec) { return spec == "lingjun" || spec == "openb"; }

std::string ResolveTrace(const std::string& spec, const std::string& dir) {
  if (spec == "philly") return "philly:" + dir + "/philly/philly.csv";
  if (spec == "openb") return "openb:" + dir + "/" + kOpenbPods;
  if (IsBareTrace(spec)) return "itp:" + dir + "/itp/" + spec.substr(4) + ".csv";
  return spec;
}

std::string ResolveCluster(const std::string& spec, const std::string& dir) {
  if (spec == "lingjun") return "lingjun:" + dir + "/lingjun/topo.csv";
  if (spec == "openb") return "openb:" + dir + "/" + kOpenbNodes;
  return spec;
}

}  // namespace

Result<std::string> ResolveTraceSpec(const std::string& spec, const std::string& flag) {
  if (!IsBareTrace(spec)) return spec;
  auto dir = DataDir(flag);
  if (!dir) return Fail("trace '", spec, "': ", dir.error().message);
  return ResolveTrace(spec, *dir);
}

Result<std::string> ResolveClusterSpec(const std::string& spec, const std::string& flag) {
  if (!IsBareCluster(spec)) return spec;
  auto dir = DataDir(flag);
  if (!dir) return Fail("cluster '", spec, "': ", dir.error().message);
  return ResolveCluster(spec, *dir);
}

}  // namespace tianshu::cli
