#include "tianshu/comm/bandwidth_matrix.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include "tianshu/base/csv.h"
#include "tianshu/base/strings.h"

namespace tianshu::comm {

Result<BandwidthMatrix> ParseBandwidthMatrix(const std::string& name, const std::string& text,
                                             const model::Topology& topo) {
  std::unordered_map<std::string, int> by_name;
  for (const auto& n : topo.nodes) by_name.emplace(n.name, n.id);
  BandwidthMatrix m;
  // An endpoint is NODE or NODE:LOCAL_GPU; returns {node, gpu or -1}.
  auto endpoint = [&](std::string_view s, int line) -> Result<std::pair<int, int>> {
    std::string text_s(Trim(s));
    if (auto it = by_name.find(text_s); it != by_name.end()) return std::pair{it->second, -1};
    auto colon = text_s.rfind(':');
    if (colon != std::string::npos) {
      auto it = by_name.find(text_s.substr(0, colon));
      int64_t local = 0;
      if (it != by_name.end() && ParseInt64(text_s.substr(colon + 1), &local)) {
        if (local < 0 || local >= topo.GpusOn(it->second)) {
          return Fail(name, ":", std::to_string(line), ": node '", it->first, "' has no GPU ",
                      std::to_string(local));
        }
        return std::pair{it->second, topo.nodes[it->second].first_gpu + static_cast<int>(local)};
      }
    }
    return Fail(name, ":", std::to_string(line), ": unknown node '", text_s, "'");
  };
  // CSV (base/csv.h) with '#' comments; fields trimmed.
  auto records = ParseCsv(name, text, {.trim = true, .comment = '#'});
  if (!records) return std::unexpected(records.error().ToError());
  for (const CsvRecord& record : *records) {
    const int line_no = record.line;
    const std::vector<std::string>& cols = record.fields;
    if (cols.size() != 3) {
      return Fail(name, ":", std::to_string(line_no), ": expected 3 columns a,b,gbps, got ",
                  std::to_string(cols.size()));
    }
    double gbps = 0;
    if (!ParseDouble(Trim(cols[2]), &gbps)) {
      if (line_no == 1 || m.size() == 0) continue;  // header
      return Fail(name, ":", std::to_string(line_no), ": '", std::string(Trim(cols[2])),
                  "' is not a bandwidth in GB/s");
    }
    if (!(gbps > 0)) {
      return Fail(name, ":", std::to_string(line_no), ": bandwidth must be positive");
    }
    auto a = endpoint(cols[0], line_no);
    if (!a) return std::unexpected(a.error());
    auto b = endpoint(cols[1], line_no);
    if (!b) return std::unexpected(b.error());
    if ((a->second < 0) != (b->second < 0)) {
      return Fail(name, ":", std::to_string(line_no),
                  ": mixes a node and a GPU; give NODE,NODE or NODE:GPU,NODE:GPU");
    }
    if (a->second < 0) {
      if (a->first == b->first) {
        return Fail(name, ":", std::to_string(line_no), ": a node pair needs two nodes");
      }
      m.SetNodePair(a->first, b->first, gbps);
    } else {
      if (a->second == b->second) {
        return Fail(name, ":", std::to_string(line_no), ": a GPU pair needs two GPUs");
      }
      m.SetGpuPair(a->second, b->second, gbps);
    }
  }
  return m;
}

Result<BandwidthMatrix> LoadBandwidthMatrix(const std::string& path, const model::Topology& topo) {
  std::ifstream f(path);
  if (!f) return Fail("cannot read bandwidth matrix '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseBandwidthMatrix(path, ss.str(), topo);
}

}  // namespace tianshu::comm
