// The shipped data sets by their bare names, for every command that reads them: `philly`,
// `itp:clusterNN` and `openb` as traces, `lingjun` and `openb` as clusters. The data folder is
// found as base/data_files.h says: --data, TIANSHU_DATA, share/tianshu/data beside the
// installed binary, then the source tree.
//   Result<std::string> dir = DataDir(flags.data);          // "/usr/share/tianshu/data"
//   std::string spec = ResolveTrace("philly", *dir);         // "philly:/usr/.../philly.csv"
#pragma once

#include <string>

#include "tianshu/base/status.h"

namespace tianshu::cli {

// The data folder, or an error listing every place looked in.
[[nodiscard]] Result<std::string> DataDir(const std::string& flag);

// True when `spec` names a shipped data set rather than a file or a generator.
bool IsBareTrace(const std::string& spec);
bool IsBareCluster(const std::string& spec);

// "philly" -> "philly:DIR/philly/philly.csv" (read compressed), "itp:cluster04" ->
// "itp:DIR/itp/cluster04.csv", "openb" -> the default pod list; anything else unchanged.
std::string ResolveTrace(const std::string& spec, const std::string& dir);
// "lingjun" -> "lingjun:DIR/lingjun/topo.csv", "openb" -> the GPU node list; else unchanged.
std::string ResolveCluster(const std::string& spec, const std::string& dir);

// Resolves a bare trace or cluster name, finding the data folder only when one is named.
[[nodiscard]] Result<std::string> ResolveTraceSpec(const std::string& spec,
                                                   const std::string& flag);
[[nodiscard]] Result<std::string> ResolveClusterSpec(const std::string& spec,
                                                     const std::string& flag);

}  // namespace tianshu::cli
