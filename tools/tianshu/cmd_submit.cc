// `tianshu submit FILE|DIR...` (many jobs in one call, optionally held), `tianshu hold ID...`
// and `tianshu release ID...` (sbatch -H, scontrol hold/release): the jobs of one call are held
// or released together, in one change on the server.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "client_flags.h"
#include "commands.h"
#include "tianshu/base/strings.h"
#include "tianshu/server/requests.h"

namespace tianshu::cli {

using nlohmann::json;

namespace {

// 128 random bits in hex: a fresh Idempotency-Key.
std::string RandomKey() {
  std::random_device rd;
  std::string out;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) out += hex[rd() % 16];
  return out;
}

bool IsSpecFile(const std::filesystem::path& p) {
  const std::string ext = ToLower(p.extension().string());
  return ext == ".yaml" || ext == ".yml" || ext == ".json";
}

struct Spec {
  std::string file, text, content_type;
};

// The files named, a directory standing for its *.yaml, *.yml and *.json files (not its
// subdirectories) in name order; "-" is stdin. Every problem is returned, none is skipped.
std::vector<Spec> ReadSpecs(const std::vector<std::string>& args,
                            std::vector<std::string>* errors) {
  std::vector<std::string> files;
  for (const auto& a : args) {
    std::error_code ec;
    if (a != "-" && std::filesystem::is_directory(a, ec)) {
      std::vector<std::string> in_dir;
      for (const auto& e : std::filesystem::directory_iterator(a, ec)) {
        if (e.is_regular_file() && IsSpecFile(e.path())) in_dir.push_back(e.path().string());
      }
      if (ec) errors->push_back(a + ": cannot list: " + ec.message());
      if (in_dir.empty() && !ec) errors->push_back(a + ": no *.yaml, *.yml or *.json file in it");
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.push_back(a);
    }
  }
  if (std::count(files.begin(), files.end(), "-") > 0 && files.size() > 1) {
    errors->push_back("-: stdin can only be submitted alone");
    return {};
  }
  std::vector<Spec> out;
  for (const auto& f : files) {
    std::ostringstream s;
    if (f == "-") {
      s << std::cin.rdbuf();
    } else {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        errors->push_back(f + ": cannot read");
        continue;
      }
      s << in.rdbuf();
    }
    Spec spec{f == "-" ? "stdin" : f, s.str(),
              EndsWith(ToLower(f), ".json") ? "application/json" : "application/yaml"};
    // Checked here first, so that one bad file submits nothing; the server checks again.
    if (auto parsed = server::ParseSubmitBody(spec.content_type, spec.text, spec.file); !parsed) {
      std::string text = parsed.error().message;
      for (const auto& d : parsed.error().details) text += "\n" + d;
      errors->push_back(text);
      continue;
    }
    out.push_back(std::move(spec));
  }
  return out;
}

struct Outcome {
  std::optional<json> job;
  std::string error;
  int code = kExitOk;
};

}  // namespace

Runner RegisterSubmit(CLI::App& app) {
  struct Args : Common {
    std::vector<std::string> files;
    std::string idempotency_key;
    bool hold = false;
    int parallel = 4;
    std::string array;
  };
  auto a = std::make_shared<Args>();
  auto* cmd =
      Command(app, "submit",
              "Submit jobs (YAML or JSON files, directories of them; '-' reads stdin)", a.get());
  cmd->add_option("files", a->files, "Job specs, as `tianshu validate` checks them")->required();
  cmd->add_flag("-H,--hold", a->hold,
                "Submit held: pending, not scheduled until `tianshu release` (sbatch -H)");
  cmd->add_option("--array", a->array,
                  "Submit one file as a job array (sbatch --array): one job per task index, "
                  "e.g. 0-99, 1,3,5 or 0-15:4; each task's ranks get TIANSHU_ARRAY_TASK_ID");
  cmd->add_option("--parallel", a->parallel, "Submissions in flight at once (many files)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--idempotency-key", a->idempotency_key,
                  "Key that makes a resubmission (by a retrying script) return the job the "
                  "first one made; with many files, file i gets KEY.i (default: a random key, "
                  "used for the CLI's own resends)")
      ->check([](const std::string& k) {
        return server::IsValidIdempotencyKey(k + ".99999")
                   ? std::string()
                   : std::string("1-122 of A-Z a-z 0-9 . _ : -");
      });
  return [a] {
    std::vector<std::string> errors;
    std::vector<Spec> specs = ReadSpecs(a->files, &errors);
    if (!errors.empty()) {
      for (const auto& e : errors) std::cerr << "tianshu submit: " << e << "\n";
      std::cerr << "tianshu submit: nothing submitted (" << errors.size() << " problem(s))\n";
      return kExitInvalid;
    }
    if (!a->array.empty() && specs.size() != 1) {
      std::cerr << "tianshu submit: --array takes exactly one job file, got " << specs.size()
                << "; nothing submitted\n";
      return kExitInvalid;
    }
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    std::string path = a->hold ? "/v1/jobs?hold=true" : "/v1/jobs";
    if (!a->array.empty()) {  // the server checks the spec; only the query's syntax is ours
      std::string encoded;
      for (unsigned char ch : a->array) {
        if (std::isalnum(ch) || ch == '-' || ch == ',' || ch == ':') {
          encoded += static_cast<char>(ch);
        } else {
          char buf[4];
          std::snprintf(buf, sizeof buf, "%%%02X", ch);
          encoded += buf;
        }
      }
      path += std::string(a->hold ? "&" : "?") + "array=" + encoded;
    }
    // One client per connection in flight (a Client serves one thread).
    std::vector<std::unique_ptr<server::Client>> clients;
    const size_t n = std::min<size_t>(static_cast<size_t>(a->parallel), specs.size());
    for (size_t i = 0; i < n; ++i) {
      auto client = MakeClient(a->client);
      if (!client) {
        std::cerr << "tianshu submit: " << client.error().message << "\n";
        return kExitInvalid;
      }
      clients.push_back(std::move(*client));
    }
    std::vector<Outcome> outcomes(specs.size());
    std::atomic<size_t> next{0};
    auto worker = [&](server::Client& client) {
      for (size_t i = next++; i < specs.size(); i = next++) {
        const Spec& s = specs[i];
        // The key makes a resend safe: after a lost answer or a restarting server the CLI
        // sends again, and the server answers with the job the first send made.
        std::string key = a->idempotency_key.empty() ? RandomKey()
                          : specs.size() == 1        ? a->idempotency_key
                                                     : a->idempotency_key + "." + std::to_string(i);
        auto r = client.PostIdempotent(
            path, s.text, s.content_type, key,
            {{"X-Tianshu-File", s.file}, {"X-Tianshu-Workdir", ec ? std::string() : cwd}});
        Outcome& o = outcomes[i];
        o.code = ExitCodeOf(r);
        if (o.code == kExitOk) {
          o.job = r->body;
        } else {
          o.error = ErrorOf(r);
        }
      }
    };
    std::vector<std::thread> threads;
    for (auto& c : clients) threads.emplace_back(worker, std::ref(*c));
    for (auto& t : threads) t.join();
    int code = kExitOk;
    json submitted = json::array(), failed = json::array();
    for (size_t i = 0; i < specs.size(); ++i) {
      const Outcome& o = outcomes[i];
      code = std::max(code, o.code);
      if (o.job) {
        submitted.push_back(*o.job);
        if (!a->out.Structured()) {
          const json& j = *o.job;
          if (j.contains("array_id")) {
            const json& ids = j.value("ids", json::array());
            std::cout << "submitted array " << S(j, "array_id") << " (" << S(j, "name") << ", "
                      << S(j, "count") << " tasks" << (a->hold ? ", held" : "")
                      << "): " << (ids.empty() ? "" : ids.front().get<std::string>())
                      << (ids.size() > 1 ? " .. " + ids.back().get<std::string>() : "") << "\n";
          } else {
            std::cout << "submitted " << S(j, "id") << " (" << S(j, "name") << ", " << S(j, "gpus")
                      << " GPUs, queue " << S(j, "queue") << (a->hold ? ", held" : "") << ")\n";
          }
        }
      } else {
        failed.push_back({{"file", specs[i].file}, {"error", o.error}});
        std::cerr << "tianshu submit: " << specs[i].file << ": " << o.error << "\n";
      }
    }
    if (a->out.Structured()) {
      // One file: the job itself (as before); many: what was submitted and what was not.
      if (specs.size() == 1 && !submitted.empty()) {
        PrintStructured(submitted[0], a->out);
      } else if (specs.size() > 1) {
        PrintStructured(json{{"submitted", submitted}, {"failed", failed}}, a->out);
      }
    }
    return code;
  };
}

namespace {

Runner HoldOrRelease(CLI::App& app, bool hold) {
  struct Args : Common {
    std::vector<std::string> ids;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = Command(app, hold ? "hold" : "release",
                      hold ? "Hold pending jobs: not scheduled until released (all or none)"
                           : "Release held jobs: they are scheduled together (all or none)",
                      a.get());
  cmd->add_option("ids", a->ids, "Job ids (j-000042 or 42)")->required();
  const std::string what = hold ? "hold" : "release";
  return [a, what] {
    for (auto& id : a->ids) id = JobIdArg(id);
    auto client = MakeClient(a->client);
    if (!client) {
      std::cerr << "tianshu " << what << ": " << client.error().message << "\n";
      return kExitInvalid;
    }
    auto r = (*client)->Post("/v1/jobs/" + what, json{{"ids", a->ids}}.dump(), "application/json");
    if (auto code = Failed(r, what)) return *code;
    if (a->out.Structured()) {
      PrintStructured(r->body, a->out);
    } else {
      const json& jobs = r->body["jobs"];
      std::cout << (what == "hold" ? "held " : "released ") << jobs.size() << " job(s)";
      if (jobs.size() <= 10) {
        std::vector<std::string> ids;
        for (const auto& j : jobs) ids.push_back(S(j, "id"));
        std::cout << ": " << Join(ids, " ");
      }
      std::cout << "\n";
    }
    return kExitOk;
  };
}

}  // namespace

Runner RegisterHold(CLI::App& app) { return HoldOrRelease(app, true); }
Runner RegisterRelease(CLI::App& app) { return HoldOrRelease(app, false); }

}  // namespace tianshu::cli
