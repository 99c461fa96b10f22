// The shipped data sets by their bare names, as a user without any path meets them: found in the
// source tree, in an installed layout (share/tianshu/data beside bin/tianshu), or where
// TIANSHU_DATA says; missing or corrupt data is an error naming the file, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace tianshu {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;
const std::string kBin = TIANSHU_BINARY;

int JobsIn(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text);
  const auto& c = j["configs"][0];
  return c["jobs_completed"].get<int>() + c["jobs_unfinished"].get<int>() +
         c["jobs_failed"].get<int>();
}

class CliData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tianshu-cli-data-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A data folder with a 3-job Philly trace, distinguishable from the shipped one.
  void MakeData(const fs::path& at) {
    fs::create_directories(at / "philly");
    std::ofstream(at / "README.md") << "test data\n";
    std::ofstream(at / "philly/philly.csv") << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                                               "2017-10-09 07:01:55,66.0,1,66.0,vc1\n"
                                               "2017-10-09 07:02:55,600.0,8,4800.0,vc1\n"
                                               "2017-10-09 07:03:55,60.0,2,120.0,vc2\n";
  }
  fs::path dir_;
};

TEST_F(CliData, BareNamesNeedNoPathFromAnyDirectory) {
  // From a directory with nothing in it, TIANSHU_DATA unset: the binary finds the source tree's
  // data/ (the ITP trace is read from its .csv.gz).
  auto r = RunCommand("cd " + dir_.string() + " && env -u TIANSHU_DATA " + kBin +
                      " simulate --trace itp:cluster01 --config tianshu --no-progress -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JobsIn(r.out), 1595);
  auto t = RunCommand("cd " + dir_.string() + " && env -u TIANSHU_DATA " + kBin +
                      " topology show lingjun -o json");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(nlohmann::json::parse(t.out)["nodes"].get<int>(), 847);
}

TEST_F(CliData, BenchDefaultsToTheShippedOpenbData) {
  auto r = RunCommand("cd " + dir_.string() + " && env -u TIANSHU_DATA " + kBin +
                      " bench fragmentation --strategy fgd --seed 42 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["allocation_ratio"].get<double>(), 0.5) << r.out;
  EXPECT_EQ(j["score"], "integer");
  EXPECT_EQ(j["ties"], "shuffled");
  EXPECT_EQ(j["weight"], "count");
  auto none = RunCommand("TIANSHU_DATA=" + dir_.string() + "/none " + kBin +
                         " bench fragmentation --strategy fgd --seed 42");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("TIANSHU_DATA " + dir_.string() + "/none is not a data folder"),
            std::string::npos)
      << none.err;
}

// The default fgd (integer score, shuffled ties, typical tasks by count) places more of the
// openb trace than the exact score it replaced (seed 42: 95.43% against 95.14%); options that
// contradict each other are refused and nothing runs.
TEST_F(CliData, BenchFgdDefaultPlacesMoreThanTheExactScore) {
  auto ratio = [&](const std::string& flags) {
    auto r = RunCommand(kBin + " bench fragmentation --seed 42 -o json " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["allocation_ratio"].get<double>() : 0;
  };
  const double by_default = ratio("");
  const double exact = ratio("--score exact --weight share");
  EXPECT_GT(by_default, exact);
  for (const char* bad : {"--faithful --score exact", "--score exact --ties first",
                          "--paper-fgd --weight share", "--score fuzzy"}) {
    auto r = RunCommand(kBin + " bench fragmentation --seed 42 " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_EQ(r.out, "") << bad;
    EXPECT_NE(r.err.find(std::string(bad).substr(2, 5)), std::string::npos) << bad << ": " << r.err;
  }
}

// A node list without a GPU printed "nan %" and exited 0.
TEST_F(CliData, BenchRefusesANodeListWithoutGpus) {
  std::ofstream(dir_ / "nodes.csv") << "sn,cpu_milli,memory_mib,gpu,model\n"
                                       "cpu-1,96000,786432,0,\n"
                                       "cpu-2,96000,786432,0,\n";
  auto r = RunCommand(kBin + " bench fragmentation --nodes " + (dir_ / "nodes.csv").string() +
                      " --strategy fgd --seed 42");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("nodes.csv: 2 node(s) and not one GPU"), std::string::npos) << r.err;
}

TEST_F(CliData, InstalledLayoutReadsShareTianshuData) {
  // <prefix>/bin/tianshu finds <prefix>/share/tianshu/data before the source tree.
  fs::create_directories(dir_ / "usr/bin");
  std::error_code ec;
  fs::create_hard_link(kBin, dir_ / "usr/bin/tianshu", ec);
  if (ec) fs::copy_file(kBin, dir_ / "usr/bin/tianshu");
  MakeData(dir_ / "usr/share/tianshu/data");
  auto r = RunCommand("cd / && env -u TIANSHU_DATA " + (dir_ / "usr/bin/tianshu").string() +
                      " simulate --trace philly --config tianshu --no-progress -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JobsIn(r.out), 3);
}

TEST_F(CliData, TianshuDataAndDataFlagChooseTheFolder) {
  MakeData(dir_ / "mine");
  auto env = RunCommand("TIANSHU_DATA=" + (dir_ / "mine").string() + " " + kBin +
                        " simulate --trace philly --config mainstream --no-progress -o json");
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_EQ(JobsIn(env.out), 3);
  // --data wins over the environment.
  auto flag = RunCommand("TIANSHU_DATA=/nonexistent " + kBin + " simulate --trace philly --data " +
                         (dir_ / "mine").string() + " --config mainstream --no-progress -o json");
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(JobsIn(flag.out), 3);
}

TEST_F(CliData, MissingDataIsAnErrorNamingTheFile) {
  auto r = RunCommand("TIANSHU_DATA=" + dir_.string() + "/none " + kBin +
                      " simulate --trace philly --no-progress");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("TIANSHU_DATA " + dir_.string() + "/none is not a data folder"),
            std::string::npos)
      << r.err;
  // A data folder without the trace: the missing file is named.
  MakeData(dir_ / "partial");
  std::filesystem::remove(dir_ / "partial/philly/philly.csv");
  auto m = RunCommand("TIANSHU_DATA=" + (dir_ / "partial").string() + " " + kBin +
                      " simulate --trace philly --no-progress");
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_NE(m.err.find((dir_ / "partial").string() + "/philly/philly.csv: no such file (nor "),
            std::string::npos)
      << m.err;
  // A trace file given by path, its kind to be detected: the missing file is named.
  auto p = RunCommand(kBin + " simulate --trace " + dir_.string() + "/nosuch.csv --no-progress");
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_NE(p.err.find(dir_.string() + "/nosuch.csv: no such file"), std::string::npos) << p.err;
  auto c = RunCommand("TIANSHU_DATA=" + dir_.string() + "/none " + kBin + " topology show openb");
  EXPECT_EQ(c.exit_code, 1) << c.err;
  EXPECT_NE(c.err.find("cluster 'openb': TIANSHU_DATA"), std::string::npos) << c.err;
}

TEST_F(CliData, CorruptCompressedDataIsAnErrorNamingTheFile) {
  fs::create_directories(dir_ / "d/philly");
  std::ofstream(dir_ / "d/README.md") << "x\n";
  // A gzip header followed by garbage, and an empty trace: errors, never a crash.
  std::ofstream(dir_ / "d/philly/philly.csv.gz", std::ios::binary)
      << std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03", 10) << "not deflate data";
  auto r = RunCommand("TIANSHU_DATA=" + (dir_ / "d").string() + " " + kBin +
                      " simulate --trace philly --no-progress");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find((dir_ / "d/philly/philly.csv.gz").string() + ": corrupt gzip data"),
            std::string::npos)
      << r.err;
  fs::remove(dir_ / "d/philly/philly.csv.gz");
  std::ofstream(dir_ / "d/philly/philly.csv") << "";
  auto e = RunCommand("TIANSHU_DATA=" + (dir_ / "d").string() + " " + kBin +
                      " simulate --trace philly --no-progress");
  EXPECT_EQ(e.exit_code, 1) << e.out << e.err;
  EXPECT_NE(e.err.find("philly.csv"), std::string::npos) << e.err;
}

}  // namespace
}  // namespace tianshu
