// The three document parsers behind load.h. Each reads a YAML root that is already known to be
// a mapping, reports every problem through the reader, and returns a value only when it found
// none (the caller checks the reader's error count).
//   YamlReader r(file, &diags);
//   JobSpec job = ParseJob(r, root);  if (r.ErrorCount() == 0) use(job);
#pragma once

#include <yaml-cpp/yaml.h>

#include "tianshu/model/internal/yaml_reader.h"

namespace tianshu::model::internal {

EngineConfig ParseEngineConfig(YamlReader& r, const YAML::Node& root);
Topology ParseCluster(YamlReader& r, const YAML::Node& root);
JobSpec ParseJob(YamlReader& r, const YAML::Node& root);

}  // namespace tianshu::model::internal
