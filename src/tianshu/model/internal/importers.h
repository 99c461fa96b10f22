// CSV importers behind load.h, reporting into diagnostics. Private to model/.
//   std::vector<Diagnostic> d;
//   Topology t = ImportLingjunText("topo.csv", text, "A100-80GB", &d);
#pragma once

#include <string>
#include <vector>

#include "tianshu/model/load.h"

namespace tianshu::model::internal {

const std::vector<std::string>& LingjunHeader();
const std::vector<std::string>& OpenbHeader();
Topology ImportLingjunText(const std::string& file, const std::string& text,
                           const std::string& server_gpu, std::vector<Diagnostic>* diags);
Topology ImportOpenbText(const std::string& file, const std::string& text, bool keep_cpu_nodes,
                         std::vector<Diagnostic>* diags);

}  // namespace tianshu::model::internal
