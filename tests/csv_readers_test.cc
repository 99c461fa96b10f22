// Every CSV reader of Tianshu goes through base/csv.h: the traces (Philly, ITP), the openb node
// and pod lists, the lingjun and openb cluster importers and the bandwidth probes. Each reads a
// quoted field and CRLF line ends, and a malformed file is an error naming file, line and
// column; the messages of their own checks (a bad number, a short row) still name the line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tianshu/comm/bandwidth_matrix.h"
#include "tianshu/model/load.h"
#include "tianshu/placement/openb.h"
#include "tianshu/sim/trace.h"

namespace tianshu {
namespace {

namespace fs = std::filesystem;

class CsvReaders : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("tianshu_csv_readers_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

TEST_F(CsvReaders, PhillyTrace) {
  const std::string ok = Write("philly.csv",
                               "timestamp,duration,num_gpus,gpu_time,cluster\r\n"
                               "2017-10-01 00:00:00,60,1,60,\"vc,1\"\r\n"
                               "\r\n"
                               "2017-10-01 00:10:00,120,2,240,vc2\r\n");
  auto w = sim::LoadWorkload("philly:" + ok, {});
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_EQ(w->jobs.size(), 2u);
  EXPECT_EQ(w->jobs[0].vc, "vc,1");
  EXPECT_EQ(w->jobs[1].gpus, 2);
  const std::string open = Write("open.csv",
                                 "timestamp,duration,num_gpus,gpu_time,cluster\n"
                                 "2017-10-01 00:00:00,60,1,60,\"vc1\n");
  auto e = sim::LoadWorkload("philly:" + open, {});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, open + ":2:29: a quoted field is not closed (its quote opens here)");
  // The reader's own checks name the row's line, blank lines counted.
  const std::string bad = Write("bad.csv",
                                "timestamp,duration,num_gpus,gpu_time,cluster\n\n"
                                "2017-10-01 00:00:00,x,1,60,vc1\n");
  auto b = sim::LoadWorkload("philly:" + bad, {});
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, bad + ":3: not a number: 'x'");
}

TEST_F(CsvReaders, ItpTrace) {
  const std::string ok = Write("itp.csv",
                               "job_id,submission_time,duration,num_gpu\n"
                               "\"job \"\"a\"\"\",0,60,1\n"
                               "b,30,60,4\n");
  auto w = sim::LoadWorkload("itp:" + ok, {});
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_EQ(w->jobs.size(), 2u);
  EXPECT_EQ(w->jobs[0].name, "job \"a\"");
  const std::string bad = Write("bad.csv", "job_id,submission_time,duration,num_gpu\na,0,6\"0,1\n");
  auto b = sim::LoadWorkload("itp:" + bad, {});
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message.find(bad + ":2:6: a quote inside an unquoted field"), 0u)
      << b.error().message;
}

TEST_F(CsvReaders, OpenbLists) {
  const std::string nodes = Write("nodes.csv",
                                  "sn,cpu_milli,memory_mib,gpu,model\r\n"
                                  "\"node,1\",96000,786432,8,V100M32\r\n");
  auto n = placement::ReadOpenbNodes(nodes);
  ASSERT_TRUE(n) << n.error().message;
  ASSERT_EQ(n->size(), 1u);
  EXPECT_EQ((*n)[0].name, "node,1");
  EXPECT_EQ((*n)[0].model, "V100M32");  // no '\r' left on the last field
  const std::string pods = Write("pods.csv",
                                 "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                                 "p1,1000,1024,1,500,\"V100M16|V100M32\" x\n");
  auto p = placement::ReadOpenbPods(pods);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message.find(pods + ":2:38: unexpected 'x' after a closing quote"), 0u)
      << p.error().message;
  const std::string short_row = Write("short.csv",
                                      "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                      "p1,1000,1024,1\n");
  auto s = placement::ReadOpenbPods(short_row);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, short_row + ":2: too few fields");
}

TEST_F(CsvReaders, ClusterImporters) {
  const std::string lingjun = Write("topo.csv",
                                    "ip,DSW,PSW,ASW\r\n"
                                    "h1,D1,P1,\"S1\"\r\n"
                                    "h2,D1,P1,S2\r\n");
  auto t = model::ImportLingjun(lingjun);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->NumNodes(), 2);
  const std::string broken = Write("broken.csv", "ip,DSW,PSW,ASW\nh1,D1,\"P1,S1\n");
  auto b = model::ImportLingjun(broken);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find(broken + ":2:7:"), std::string::npos) << b.error().message;
  EXPECT_NE(b.error().message.find("a quoted field is not closed"), std::string::npos);
  // The header check quotes the line as written.
  const std::string header = Write("header.csv", "sn,cpu,memory_mib,gpu,model\n");
  auto h = model::ImportOpenb(header);
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("expected the header 'sn,cpu_milli,memory_mib,gpu,model', got "
                                   "'sn,cpu,memory_mib,gpu,model'"),
            std::string::npos)
      << h.error().message;
}

TEST_F(CsvReaders, BandwidthProbes) {
  model::FatTreeOptions fo;
  fo.nodes = 2;
  fo.nodes_per_leaf = 2;
  auto topo = model::GenerateFatTree(fo);
  ASSERT_TRUE(topo) << topo.error().message;
  auto m = comm::ParseBandwidthMatrix(
      "probe.csv", "# a,b,gbps\r\n\"node-0\", node-1 , 50 # degraded\r\n", *topo);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_DOUBLE_EQ(*m->NodePair(0, 1), 50e9);
  auto bad = comm::ParseBandwidthMatrix("probe.csv", "node-0,\"node-1,50\n", *topo);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "probe.csv:1:8: a quoted field is not closed (its quote opens here)");
}

}  // namespace
}  // namespace tianshu
