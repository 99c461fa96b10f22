// `tianshu store copy FROM TO`: moves a control plane's state between stores (SQLite and etcd,
// either way), then reads the copy back and compares it record by record.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "tianshu/server/store.h"

namespace tianshu::cli {
namespace {

struct CopyArgs {
  std::string from, to;
  OutputFlag output;
};

// `must_exist`: a SQLite file that is not there is an error, not a new empty store.
Result<std::unique_ptr<server::Store>> Open(const std::string& url, bool must_exist) {
  auto parsed = server::ParseStoreUrl(url);
  if (!parsed) return std::unexpected(parsed.error());
  std::error_code ec;
  if (must_exist && !parsed->etcd && !std::filesystem::is_regular_file(parsed->sqlite_path, ec)) {
    return Fail("no SQLite store at ", parsed->sqlite_path);
  }
  return server::OpenStore(*parsed);
}

int Copy(const CopyArgs& a) {
  auto from = Open(a.from, /*must_exist=*/true);
  if (!from) {
    std::cerr << "tianshu store copy: " << from.error().message << "\n";
    return kExitFailure;
  }
  auto to = Open(a.to, /*must_exist=*/false);
  if (!to) {
    std::cerr << "tianshu store copy: " << to.error().message << "\n";
    return kExitFailure;
  }
  auto copied = server::CopyStore(**from, **to, [](int64_t done, int64_t total) {
    std::cerr << "copied " << done << " of " << total << " records\n";
  });
  if (!copied) {
    std::cerr << "tianshu store copy: " << copied.error().message << "\n";
    return kExitFailure;
  }
  const server::CopyCounts& n = *copied;
  if (a.output.Json()) {
    std::cout << nlohmann::json{{"from", (*from)->Describe()},
                                {"to", (*to)->Describe()},
                                {"jobs", n.jobs},
                                {"nodes", n.nodes},
                                {"orders", n.orders},
                                {"meta", n.meta},
                                {"progress", n.progress},
                                {"events", n.events},
                                {"events_in_source", n.events_in_source},
                                {"verified", true}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::cout << "copied " << (*from)->Describe() << "\n    to " << (*to)->Describe() << "\n"
            << "  jobs " << n.jobs << ", nodes " << n.nodes << ", outstanding orders " << n.orders
            << ", progress rows " << n.progress << ", meta " << n.meta << ", events " << n.events;
  if (n.events < n.events_in_source) {
    std::cout << " (the newest of " << n.events_in_source << "; the destination keeps no more)";
  }
  std::cout << "\nread back and compared: every record is equal\n";
  return kExitOk;
}

}  // namespace

Runner RegisterStore(CLI::App& app) {
  auto* store = app.add_subcommand("store", "Move the control plane's state between stores");
  store->require_subcommand(1);
  auto a = std::make_shared<CopyArgs>();
  auto* copy = store->add_subcommand(
      "copy",
      "Copy every record of store FROM into the empty store TO, then read TO back and compare "
      "(stop the servers first). A store is a SQLite file (PATH or sqlite:PATH) or "
      "etcd://HOST:PORT,...[/PREFIX] (docs/operations.md)");
  copy->add_option("FROM", a->from, "The store to copy")->required();
  copy->add_option("TO", a->to, "An empty store to copy into")->required();
  AddOutputFlag(copy, &a->output);
  return [a] { return Copy(*a); };
}

}  // namespace tianshu::cli
