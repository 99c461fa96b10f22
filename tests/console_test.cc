// The web console (issue 19) through the real binary: `tianshu serve`, two agents on two leaf
// switches, a running job and a pending one that cannot fit. Over HTTP: the login sets a
// session cookie (HttpOnly, SameSite=Strict, not the token) that reads the API but cannot change
// anything, a wrong token is refused and logout ends the session. In headless Chromium (label
// `chromium`; skipped without it): the page logs in with a token in the URL fragment, and the
// DOM shows the running job on the GPUs of its nodes, the pending job's reason and a chart with
// data, drawn by the packaged dygraphs; screenshots of each view are kept in
// <temp>/tianshu_console_test/ whether the test passes or not.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "testing/chromium.h"
#include "testing/processes.h"
#include "testing/run_command.h"
#include "tianshu/server/console.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tianshu::testing::Slurp;
using tianshu::testing::WaitForSeconds;

std::string ShellJob(const std::string& name, int gpus, const std::string& script) {
  json command = json::array({"/bin/sh", "-c", script});
  return "kind: training\nname: " + name +
         "\nmodel: {profile: llama2-7b}\ngpus: " + std::to_string(gpus) +
         "\nrun:\n  command: " + command.dump() + "\n";
}

TEST(ConsoleSessions, ExpireCloseAndStayBounded) {
  tianshu::server::ConsoleSessions s(1000, 2);
  const std::string a = s.Open("token-a", 0);
  EXPECT_EQ(s.TokenOf(a, 999), "token-a");
  EXPECT_EQ(s.TokenOf(a, 1000), std::nullopt);  // expired
  EXPECT_EQ(s.TokenOf("not-a-session", 0), std::nullopt);
  const std::string b = s.Open("token-b", 10), c = s.Open("token-c", 20);
  EXPECT_NE(b, c);
  EXPECT_EQ(b.size(), 64u);                     // 256 random bits in hex
  const std::string d = s.Open("token-d", 30);  // at the bound: the oldest (b) goes
  EXPECT_EQ(s.TokenOf(b, 30), std::nullopt);
  EXPECT_EQ(s.TokenOf(c, 30), "token-c");
  EXPECT_EQ(s.TokenOf(d, 30), "token-d");
  s.Close(c);
  EXPECT_EQ(s.TokenOf(c, 30), std::nullopt);
}

// Without Debian's libjs-dygraphs the page still loads; the library's path answers 404 and says
// which package is missing (the page then shows its "chart library is missing" note).
TEST(ConsoleLibrary, AMissingChartLibraryIsA404ThatNamesThePackage) {
  tianshu::server::Console console(nullptr, {.javascript_root = "/nonexistent/javascript"});
  httplib::Server h;
  console.AddRoutes(h, [] { return int64_t{0}; });
  const int port = h.bind_to_any_port("127.0.0.1");
  std::thread serve([&] { h.listen_after_bind(); });
  ASSERT_TRUE(WaitForSeconds([&] { return h.is_running(); }, 10));
  httplib::Client c("127.0.0.1", port);
  auto lib = c.Get("/console/lib/dygraph.min.js");
  ASSERT_TRUE(lib);
  EXPECT_EQ(lib->status, 404);
  EXPECT_NE(lib->body.find("libjs-dygraphs"), std::string::npos) << lib->body;
  EXPECT_EQ(c.Get("/console/lib/passwd")->status, 404);  // only the files it knows
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("chart-missing"), std::string::npos);
  h.stop();
  serve.join();
}

class Console : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/tianshu-console-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    port_ = tianshu::testing::FreeLoopbackPort();
    server_ = tianshu::testing::SpawnLogged(
        {TIANSHU_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(port_), "--data",
         dir_ + "/server", "--heartbeat-interval", "300ms"},
        dir_ + "/server.log");
    ASSERT_TRUE(WaitForSeconds([] { return fs::exists(dir_ + "/server/token"); }, 30));
    token_ = Slurp(dir_ + "/server/token");
    while (!token_.empty() && std::isspace(static_cast<unsigned char>(token_.back()))) {
      token_.pop_back();
    }
    ASSERT_TRUE(WaitForSeconds([] { return Api("GET", "/v1/jobs").first == 200; }, 60))
        << Slurp(dir_ + "/server.log");
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i);
      agents_.push_back(tianshu::testing::SpawnLogged(
          {TIANSHU_BINARY, "agent", "--server", "127.0.0.1:" + std::to_string(port_),
           "--token-file", dir_ + "/server/token", "--node", "n" + n, "--workdir",
           dir_ + "/agent" + n, "--devices", "2xA100-80GB", "--address", "127.0.0.1",
           "--cgroup-mode", "none", "--label", "leaf=leaf-" + n},
          dir_ + "/agent" + n + ".log"));
    }
    ASSERT_TRUE(WaitForSeconds(
        [] {
          auto [status, body] = Api("GET", "/v1/nodes");
          int ready = 0;
          if (status == 200) {
            const json nodes = json::parse(body)["nodes"];  // not a temporary's member
            for (const auto& n : nodes) ready += n["state"] == "ready";
          }
          return ready == 2;
        },
        60))
        << Slurp(dir_ + "/agent0.log");
    running_ = Submit(ShellJob("trainer", 2, "echo console-log-$RANK; sleep 120"));
    pending_ = Submit(ShellJob("too-big", 8, "sleep 1"));
    ASSERT_TRUE(WaitForSeconds([] { return Job(running_).value("state", "") == "running"; }, 60))
        << Job(running_).dump(2);
    // Two utilisation samples (one every 2 s) with the job running: a chart with data.
    ASSERT_TRUE(WaitForSeconds(
        [] {
          auto [status, body] = Api("GET", "/v1/utilization");
          if (status != 200) return false;
          int busy = 0;
          const json samples = json::parse(body)["samples"];
          for (const auto& s : samples) busy += s["gpus_allocated"] == 2.0;
          return busy >= 2;
        },
        30));
  }
  static void TearDownTestSuite() {
    // The ranks' shims outlive a stopped agent (until the node lease runs out): stop them first.
    if (!running_.empty() && Api("POST", "/v1/jobs/" + running_ + "/cancel").first == 200) {
      WaitForSeconds([] { return Job(running_).value("state", "") == "cancelled"; }, 20);
    }
    for (pid_t a : agents_) {
      ::kill(a, SIGTERM);
      ::waitpid(a, nullptr, 0);
    }
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  static httplib::Client Client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  // A call with the server's token: {status, body}.
  static std::pair<int, std::string> Api(const std::string& method, const std::string& path,
                                         const std::string& body = "",
                                         const std::string& type = "application/json") {
    auto c = Client();
    httplib::Headers h = {{"Authorization", "Bearer " + token_}};
    auto r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body, type);
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  }
  static std::string Submit(const std::string& yaml) {
    auto [status, body] = Api("POST", "/v1/jobs", yaml, "application/yaml");
    EXPECT_EQ(status, 201) << body;
    return status == 201 ? json::parse(body).value("id", "") : "";
  }
  static json Job(const std::string& id) {
    auto [status, body] = Api("GET", "/v1/jobs/" + id);
    return status == 200 ? json::parse(body) : json::object();
  }
  // The DOM after the page has logged in with the token and shown `view`, and its screenshot.
  static std::string Render(const std::string& chromium, const std::string& view,
                            const fs::path& png) {
    auto r = tianshu::testing::RenderConsole(chromium, "http://127.0.0.1:" + std::to_string(port_),
                                             token_, view, png.string());
    // The page's console messages: nothing the policy refused, no script error.
    EXPECT_EQ(tianshu::testing::PageProblems(r), "") << view;
    return r.out;
  }

  static inline std::string dir_, token_, running_, pending_;
  static inline int port_ = 0;
  static inline pid_t server_ = -1;
  static inline std::vector<pid_t> agents_;
};

TEST_F(Console, LoginSetsASessionCookieThatReadsButCannotChangeAnything) {
  auto c = Client();
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("script-src 'self';"),
            std::string::npos);
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  // Every script the page loads is this server's: its own and the packaged chart library.
  std::regex script(R"re(<script[^>]*src="([^"]*)")re");
  int scripts = 0;
  for (std::sregex_iterator it(page->body.begin(), page->body.end(), script), end; it != end;
       ++it, ++scripts) {
    EXPECT_TRUE((*it)[1].str().starts_with("/console/")) << (*it)[1];
  }
  EXPECT_EQ(scripts, 2);
  EXPECT_EQ(page->body.find("<script>"), std::string::npos);  // no inline script
  auto js = c.Get("/console/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  auto lib = c.Get("/console/lib/dygraph.min.js");
  ASSERT_TRUE(lib);
  EXPECT_TRUE(lib->status == 200 || lib->status == 404) << lib->status;
  if (lib->status == 200) {
    EXPECT_NE(lib->body.find("Dygraph"), std::string::npos);
  }
  EXPECT_EQ(c.Get("/console/lib/..%2F..%2Fetc%2Fpasswd")->status, 404);

  // Refused: a wrong token, a form post, a node's kind of body.
  auto wrong = c.Post("/console/login", R"({"token": "not-the-token"})", "application/json");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_FALSE(wrong->has_header("Set-Cookie"));
  EXPECT_EQ(
      c.Post("/console/login", "token=" + token_, "application/x-www-form-urlencoded")->status,
      415);
  // No cookie, no token: nothing.
  EXPECT_EQ(c.Get("/v1/jobs")->status, 401);
  EXPECT_EQ(c.Get("/console/session")->status, 401);

  auto in = c.Post("/console/login", json{{"token", token_}}.dump(), "application/json");
  ASSERT_EQ(in->status, 200) << in->body;
  const std::string set = in->get_header_value("Set-Cookie");
  EXPECT_NE(set.find("HttpOnly"), std::string::npos) << set;
  EXPECT_NE(set.find("SameSite=Strict"), std::string::npos) << set;
  EXPECT_NE(set.find("Path=/"), std::string::npos) << set;
  EXPECT_EQ(set.find(token_), std::string::npos) << "the cookie must not be the token";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(set, m, std::regex("tianshu_console=([0-9a-f]+)")));
  const httplib::Headers cookie = {{"Cookie", "other=1; tianshu_console=" + m[1].str()}};

  auto who = c.Get("/console/session", cookie);
  EXPECT_EQ(who->status, 200);
  EXPECT_EQ(json::parse(who->body)["name"], "admin");
  auto jobs = c.Get("/v1/jobs", cookie);
  ASSERT_EQ(jobs->status, 200) << jobs->body;
  EXPECT_EQ(json::parse(jobs->body)["total"], 2);
  EXPECT_EQ(c.Get("/v1/utilization", cookie)->status, 200);
  // The cookie reads, but changes nothing: no cancel, no submission.
  EXPECT_EQ(c.Post("/v1/jobs/" + running_ + "/cancel", cookie, "", "")->status, 401);
  EXPECT_EQ(c.Delete("/v1/jobs/" + running_, cookie)->status, 401);
  EXPECT_EQ(c.Post("/v1/jobs", cookie, ShellJob("x", 1, "true"), "application/yaml")->status, 401);
  EXPECT_EQ(Job(running_).value("state", ""), "running");

  EXPECT_EQ(c.Post("/console/logout", cookie, "", "")->status, 200);
  EXPECT_EQ(c.Get("/v1/jobs", cookie)->status, 401);
  EXPECT_EQ(c.Get("/console/session", cookie)->status, 401);
}

TEST_F(Console, HeadlessChromiumShowsTheJobOnItsNodesThePendingReasonAndAChart) {
  const std::string chromium = tianshu::testing::FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed";
  const fs::path artifacts = fs::temp_directory_path() / "tianshu_console_test";
  fs::create_directories(artifacts);

  // The cluster: the running job's ranks on the GPUs of the nodes it was placed on.
  const std::string cluster = Render(chromium, "cluster", artifacts / "cluster.png");
  std::ofstream(artifacts / "cluster.html") << cluster;
  EXPECT_NE(cluster.find("data-ready=\"cluster\""), std::string::npos) << cluster;
  std::set<std::pair<std::string, int>> shown, placed;
  std::regex gpu(R"re(data-node="(n\d)" data-index="(\d)" data-job="([^"]+)")re");
  for (std::sregex_iterator it(cluster.begin(), cluster.end(), gpu), end; it != end; ++it) {
    if ((*it)[3] == running_) shown.insert({(*it)[1], std::stoi((*it)[2])});
  }
  const json placement = Job(running_)["placement"];
  for (const auto& p : placement) {
    placed.insert({p["node"].get<std::string>(), p["device"].get<int>()});
  }
  EXPECT_EQ(placed.size(), 2u);
  EXPECT_EQ(shown, placed) << cluster;
  EXPECT_NE(cluster.find("leaf leaf-0"), std::string::npos);  // grouped by switch
  EXPECT_NE(cluster.find("leaf leaf-1"), std::string::npos);
  // A chart with data, drawn by dygraphs (its canvas), not the "library missing" note.
  std::smatch points;
  ASSERT_TRUE(std::regex_search(cluster, points, std::regex(R"re(data-points="(\d+)")re")));
  EXPECT_GE(std::stoi(points[1]), 2);
  const size_t chart = cluster.find("id=\"util-chart\"");
  ASSERT_NE(chart, std::string::npos);
  EXPECT_NE(cluster.find("<canvas", chart), std::string::npos) << "no chart drawn";
  EXPECT_NE(cluster.find("id=\"chart-missing\" class=\"error\" hidden"), std::string::npos);

  // The queues: the pending job and why it waits.
  const std::string queues = Render(chromium, "queues", artifacts / "queues.png");
  std::ofstream(artifacts / "queues.html") << queues;
  EXPECT_NE(queues.find(pending_), std::string::npos) << queues;
  const std::string reason = Job(pending_).value("message", "");
  EXPECT_NE(reason.find("cannot fit"), std::string::npos) << reason;
  EXPECT_NE(queues.find("cannot fit on the registered nodes"), std::string::npos) << queues;

  // The job: its attempt on the timeline, its ranks per node, its events and its log.
  const std::string page = Render(chromium, "job/" + running_, artifacts / "job.png");
  std::ofstream(artifacts / "job.html") << page;
  EXPECT_NE(page.find("#1 running"), std::string::npos) << page;
  EXPECT_NE(page.find("rank 0 (GPU "), std::string::npos);
  EXPECT_NE(page.find("all 2 ranks started"), std::string::npos);
  EXPECT_NE(page.find("console-log-0"), std::string::npos) << page;

  for (const char* png : {"cluster.png", "queues.png", "job.png"}) {
    ASSERT_TRUE(fs::exists(artifacts / png)) << png;
    EXPECT_GT(fs::file_size(artifacts / png), 10'000u) << png;  // not a blank page
    std::cout << "screenshot: " << (artifacts / png).string() << " ("
              << fs::file_size(artifacts / png) << " bytes)\n";
  }
}

}  // namespace
