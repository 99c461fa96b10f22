// The HTML report renders in a real browser: headless Chromium takes a screenshot of a report
// and the PNG must show the page (not blank). Skipped when chromium is not installed
// (`apt-get install -y chromium`); CTest label `chromium`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "tianshu/engine/engine.h"
#include "tianshu/sim/report.h"
#include "tianshu/sim/simulator.h"

namespace tianshu::sim {
namespace {

std::string Chromium() {
  for (const char* p :
       {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

TEST(SimReportScreenshot, RendersInHeadlessChromium) {
  std::string chromium = Chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed";
  model::FatTreeOptions fo;
  fo.nodes = 16;
  fo.nodes_per_leaf = 4;
  fo.oversubscription = 2;
  model::Topology topo = *model::GenerateFatTree(fo);
  auto w = LoadWorkload("llm:jobs=30,rate=6,seed=5,mix=small:1", {});
  ASSERT_TRUE(w) << w.error().message;
  std::vector<SimResult> rs;
  for (const char* p : {"mainstream", "tianshu"}) {
    auto r = Simulate(topo, *w, *engine::PresetOptions(p));
    ASSERT_TRUE(r) << r.error().message;
    rs.push_back(std::move(*r));
  }
  auto dir = std::filesystem::temp_directory_path() / "tianshu_sim_report_test";
  std::filesystem::create_directories(dir);
  std::string html = (dir / "report.html").string(), png = (dir / "report.png").string();
  std::filesystem::remove(png);
  ASSERT_TRUE(WriteHtmlReport(html, "screenshot test", topo, rs));
  std::string cmd = chromium +
                    " --headless --no-sandbox --disable-gpu --disable-background-networking "
                    "--disable-component-update --disable-sync --screenshot=" +
                    png + " --window-size=1400,2000 file://" + html + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(std::filesystem::exists(png));
  // A blank page compresses to a few KB; charts, table and heat maps do not.
  EXPECT_GT(std::filesystem::file_size(png), 30'000u);
}

}  // namespace
}  // namespace tianshu::sim
