// Importers of the real clusters in data/. Both formats are CSV (base/csv.h), fields trimmed.
#include <map>

#include "tianshu/base/csv.h"
#include "tianshu/base/strings.h"
#include "tianshu/model/internal/importers.h"

namespace tianshu::model::internal {
namespace {

struct CsvRow {
  int line;
  std::vector<std::string> fields;
  std::vector<CsvPosition> positions;
};

// Line `n` (1-based) of `text`, without its line end: what a diagnostic quotes.
std::string LineOf(const std::string& text, int n) {
  size_t begin = 0;
  for (int i = 1; i < n && begin != std::string::npos; ++i) {
    begin = text.find('\n', begin);
    if (begin != std::string::npos) ++begin;
  }
  if (begin == std::string::npos) return "";
  std::string line = text.substr(begin, text.find('\n', begin) - begin);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// Reads a CSV with the expected header; reports malformed CSV, a missing or different header.
bool ReadCsv(const std::string& file, const std::string& text,
             const std::vector<std::string>& header, std::vector<CsvRow>* rows,
             std::vector<Diagnostic>* diags) {
  auto records = ParseCsv(file, text, {.trim = true});
  if (!records) {
    const CsvError& e = records.error();
    diags->push_back({file, e.line, e.column, "(csv)", e.message});
    return false;
  }
  if (records->empty()) {
    diags->push_back({file, 0, 0, "(file)", "is empty; expected a CSV with a header"});
    return false;
  }
  const CsvRecord& first = records->front();
  if (first.fields != header) {
    diags->push_back({file, first.line, 1, "(header)",
                      "expected the header '" + Join(header, ",") + "', got '" +
                          LineOf(text, first.line) + "'"});
    return false;
  }
  for (size_t i = 1; i < records->size(); ++i) {
    CsvRecord& r = (*records)[i];
    if (r.fields.size() != header.size()) {
      diags->push_back({file, r.line, 1, "(row)",
                        "expected " + std::to_string(header.size()) + " fields, got " +
                            std::to_string(r.fields.size())});
      continue;
    }
    rows->push_back({r.line, std::move(r.fields), std::move(r.positions)});
  }
  return true;
}

// Column (1-based) where field i of a row starts, for diagnostics.
int ColumnOf(const CsvRow& row, size_t i) { return row.positions[i].column; }

}  // namespace

const std::vector<std::string>& LingjunHeader() {
  static const std::vector<std::string> h = {"ip", "DSW", "PSW", "ASW"};
  return h;
}
const std::vector<std::string>& OpenbHeader() {
  static const std::vector<std::string> h = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
  return h;
}

Topology ImportLingjunText(const std::string& file, const std::string& text,
                           const std::string& server_gpu, std::vector<Diagnostic>* diags) {
  Topology t;
  t.name = "lingjun";
  std::vector<CsvRow> rows;
  size_t before = diags->size();
  if (!ReadCsv(file, text, LingjunHeader(), &rows, diags)) return t;
  auto type = DefaultServerType(server_gpu, 8, 8, Bandwidth::FromGbps(200));
  if (!type) {
    diags->push_back({file, 0, 0, "(server)", type.error().message});
    return t;
  }
  type->group = "lingjun";
  t.types.push_back(*type);
  // Host -> ASW -> PSW -> DSW. An ASW name is only unique within its PSW ("S14" appears under
  // several PSWs), and a PSW within its DSW, so switches are keyed by their full path.
  t.tiers = {{"asw", 1000, 1.0, Bandwidth::FromGbps(400)},
             {"psw", 1000, 1.0, Bandwidth::FromGbps(400)},
             {"dsw", 1000, 1.0, Bandwidth::FromGbps(400)}};
  std::map<std::string, int> ids;
  auto switch_id = [&](const std::string& key, const std::string& name, int tier, int parent) {
    auto [it, fresh] = ids.emplace(key, static_cast<int>(t.switches.size()));
    if (fresh) t.switches.push_back({.name = name, .tier = tier, .parent = parent});
    return it->second;
  };
  std::map<std::string, int> hosts;
  for (const CsvRow& row : rows) {
    bool ok = true;
    for (size_t i = 0; i < row.fields.size(); ++i) {
      if (row.fields[i].empty()) {
        diags->push_back({file, row.line, ColumnOf(row, i), LingjunHeader()[i], "is empty"});
        ok = false;
      }
    }
    if (!ok) continue;
    const std::string& ip = row.fields[0];
    const std::string dsw = row.fields[1];
    const std::string psw = dsw + "/" + row.fields[2];
    const std::string asw = psw + "/" + row.fields[3];
    if (!hosts.emplace(ip, row.line).second) {
      diags->push_back({file, row.line, 1, "ip",
                        "host '" + ip.substr(0, 16) + "...' is listed twice (first on line " +
                            std::to_string(hosts[ip]) + ")"});
      continue;
    }
    int d = switch_id(dsw, dsw, 2, -1);
    int p = switch_id(psw, psw, 1, d);
    int a = switch_id(asw, asw, 0, p);
    Node node;
    node.name = "host-" + ip.substr(0, 12);
    node.type = 0;
    node.leaf = a;
    t.nodes.push_back(std::move(node));
  }
  if (diags->size() > before) return t;
  if (t.nodes.empty()) {
    diags->push_back({file, 0, 0, "(file)", "lists no hosts"});
    return t;
  }
  auto st = t.Finalize();
  if (!st) diags->push_back({file, 0, 0, "(fabric)", st.error().message});
  return t;
}

Topology ImportOpenbText(const std::string& file, const std::string& text, bool keep_cpu_nodes,
                         std::vector<Diagnostic>* diags) {
  Topology t;
  t.name = "openb";
  std::vector<CsvRow> rows;
  size_t before = diags->size();
  if (!ReadCsv(file, text, OpenbHeader(), &rows, diags)) return t;
  // The trace gives no network: one flat switch over all nodes.
  t.tiers = {{"flat", 1000, 1.0, Bandwidth::FromGbps(100)}};
  t.switches.push_back({.name = "flat0", .tier = 0});
  std::map<std::string, int> type_ids;  // model/gpus/cpu/mem -> type
  std::map<std::string, int> names;
  for (const CsvRow& row : rows) {
    int64_t cpu = 0, mem = 0, gpus = 0;
    const auto& f = row.fields;
    bool ok = true;
    auto need = [&](size_t i, int64_t* out) {
      if (!ParseInt64(f[i], out) || *out < 0) {
        diags->push_back({file, row.line, ColumnOf(row, i), OpenbHeader()[i],
                          "expected a whole number, got '" + f[i] + "'"});
        ok = false;
      }
    };
    need(1, &cpu);
    need(2, &mem);
    need(3, &gpus);
    if (!ok) continue;
    if (gpus == 0 && !keep_cpu_nodes) continue;
    if (!names.emplace(f[0], row.line).second) {
      diags->push_back({file, row.line, 1, "sn", "node '" + f[0] + "' is listed twice"});
      continue;
    }
    std::string model = gpus > 0 ? f[4] : "";
    if (gpus > 0 && model.empty()) {
      diags->push_back(
          {file, row.line, ColumnOf(row, 4), "model", "a node with GPUs needs a model"});
      continue;
    }
    std::string key = model + "/" + f[3] + "/" + f[1] + "/" + f[2];
    auto it = type_ids.find(key);
    if (it == type_ids.end()) {
      ServerType st;
      if (gpus > 0) {
        auto base = DefaultServerType(model, static_cast<int>(gpus), 1, Bandwidth::FromGbps(100));
        if (!base) {
          diags->push_back({file, row.line, ColumnOf(row, 4), "model", base.error().message});
          continue;
        }
        st = *base;
      } else {
        st.gpus_per_node = 0;
        st.nics = {Nic{0, Bandwidth::FromGbps(100), 0, 0}};
      }
      st.group = (model.empty() ? "cpu" : ToLower(model)) + "-" + f[3] + "g-" +
                 std::to_string(cpu / 1000) + "c";
      st.cpu_milli = cpu;
      st.memory_bytes = mem * 1024 * 1024;
      st.labels["gpu_model"] = model;
      it = type_ids.emplace(key, static_cast<int>(t.types.size())).first;
      t.types.push_back(std::move(st));
    }
    Node node;
    node.name = f[0];
    node.type = it->second;
    node.leaf = 0;
    t.nodes.push_back(std::move(node));
  }
  if (diags->size() > before) return t;
  auto st = t.Finalize();
  if (!st) diags->push_back({file, 0, 0, "(fabric)", st.error().message});
  return t;
}

}  // namespace tianshu::model::internal
