// The shipped data sets by their bare names, for every command that reads them: `philly`,
// `itp:clusterNN` and `openb` as traces, `lingjun` and `openb` as clusters. The data folder is
// found as base/data_files.h says: --data, TIANSHU_DATA, share/tianshu/data beside the
// installed binary, then the source tree.
//   Result<std::string> dir = DataDir(flags.data);              // "/usr/share/tianshu/data"
//   Result<std::string> spec = ResolveTraceSpec("philly", "");  // "philly:/usr/.../philly.csv"
#pragma once

#include <string>

#include "tianshu/base/status.h"

namespace tianshu::cli {

// The openb files inside the data folder: the GPU nodes (a cluster) and the default pods.
inline constexpr const char* kOpenbNodes = "openb/openb_node_list_gpu_node.csv";
inline constexpr const char* kOpenbPods = "openb/openb_pod_list_default.csv";

// The data folder, or an error listing every place looked in.
[[nodiscard]] Result<std::string> DataDir(const std::string& flag);

// A bare trace name resolved in the data folder found from `flag` ("philly" ->
// "philly:DIR/philly/philly.csv", read compressed; "itp:cluster04" -> "itp:DIR/itp/cluster04.csv";
// "openb" -> the default pods); anything else unchanged, without looking for the folder.
[[nodiscard]] Result<std::string> ResolveTraceSpec(const std::string& spec,
                                                   const std::string& flag);
// "lingjun" -> "lingjun:DIR/lingjun/topo.csv", "openb" -> the GPU node list; else unchanged.
[[nodiscard]] Result<std::string> ResolveClusterSpec(const std::string& spec,
                                                     const std::string& flag);

}  // namespace tianshu::cli
