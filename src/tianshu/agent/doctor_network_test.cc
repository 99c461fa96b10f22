#include "tianshu/agent/doctor.h"

#include <gtest/gtest.h>

#include "tianshu/agent/discovery.h"
#include "tianshu/agent/doctor_test_fixtures.h"

// The doctor's network checks: RDMA ports, NICs, GPU-NIC affinity, and the server (reachability,
// token, clock), with the real HTTP probe.
namespace tianshu::agent {
namespace {

using doctor_fixtures::Answer;
using doctor_fixtures::Find;
using doctor_fixtures::Node;
using doctor_fixtures::NodeBuilder;

TEST(Doctor, RdmaPortDownFailsAndNamesThePort) {
  Node s;
  s.fs.AddFile("/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  s.fs.AddFile("/sys/class/infiniband/mlx5_1/ports/1/phys_state", "2: Polling\n");
  auto f = s.Run();
  const Finding* port = Find(f, "rdma", "mlx5_1 port 1");
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->status, CheckStatus::kFail);
  EXPECT_EQ(port->detail, "State: Down, Physical state: Polling, Rate: 200, Link layer: Ethernet");
  EXPECT_NE(port->fix.find("cable"), std::string::npos);
  EXPECT_EQ(Find(f, "rdma", "mlx5_0 port 1")->status, CheckStatus::kOk);
  EXPECT_EQ(DoctorExitStatus(f), kDoctorExitFailed);
  EXPECT_NE(FindingsToText(f).find("fail   rdma"), std::string::npos);
}

TEST(Doctor, InfinibandPortWithoutSubnetManager) {
  auto fs = NodeBuilder()
                .Nic("ib0", "0000:1c:00.0", 0, 2044)
                .Rdma("mlx5_0", "ib0", "0000:1c:00.0", 0, "InfiniBand", "2: INIT")
                .Build();
  auto f = CheckRdmaPorts(fs, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, CheckStatus::kFail);
  EXPECT_EQ(f[0].detail,
            "State: Initializing, Physical state: LinkUp, Rate: 200, Link layer: InfiniBand");
  EXPECT_NE(f[0].fix.find("subnet manager"), std::string::npos);
  // IPoIB's small MTU is not a RoCE problem.
  auto nics = CheckNics(fs);
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_EQ(nics[0].status, CheckStatus::kOk);
}

TEST(Doctor, NicLinkAndMtu) {
  auto fs = NodeBuilder()
                .Nic("ens1", "0000:1c:00.0", 0, 1500)  // RoCE with a small MTU
                .Rdma("mlx5_0", "ens1", "0000:1c:00.0", 0, "Ethernet")
                .Nic("ens2", "0000:9c:00.0", 1, 9000, "down", -1)  // backs RDMA, down
                .Rdma("mlx5_1", "ens2", "0000:9c:00.0", 1, "Ethernet")
                .Nic("eth0", "0000:00:03.0", 0, 1400)              // plain NIC below 1500
                .Nic("eth1", "0000:00:04.0", 0, 1500, "down", -1)  // unused port
                .Build();
  auto f = CheckNics(fs);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(Find(f, "nic", "ens1")->status, CheckStatus::kWarn);
  EXPECT_NE(Find(f, "nic", "ens1")->fix.find("mtu 4200"), std::string::npos);
  EXPECT_EQ(Find(f, "nic", "ens2")->status, CheckStatus::kFail);
  EXPECT_EQ(Find(f, "nic", "ens2")->detail,
            "operstate down, mtu 9000, speed unknown, backs mlx5_1 (RoCE)");
  EXPECT_EQ(Find(f, "nic", "eth0")->status, CheckStatus::kWarn);
  EXPECT_EQ(Find(f, "nic", "eth1")->status, CheckStatus::kOk);
  EXPECT_NE(Find(f, "nic", "eth1")->detail.find("not used for RDMA"), std::string::npos);
}

TEST(Doctor, AffinityWarnsForAGpuWithoutALocalRdmaNic) {
  auto fs = NodeBuilder()
                .Gpu("0000:1b:00.0", 0)
                .Gpu("0000:9b:00.0", 1)
                .Nic("ens1", "0000:1c:00.0", 0, 9000)
                .Rdma("mlx5_0", "ens1", "0000:1c:00.0", 0, "Ethernet")
                .Build();
  auto host = Discover(fs, {}, {});
  ASSERT_TRUE(host);
  auto f = CheckAffinity(*host);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].status, CheckStatus::kOk);
  EXPECT_EQ(f[1].subject, "accelerator 1 (0000:9b:00.0)");
  EXPECT_EQ(f[1].status, CheckStatus::kWarn);
  EXPECT_EQ(f[1].detail, "NUMA 1: no RDMA NIC on this NUMA node (mlx5_0 elsewhere)");
}

TEST(Doctor, ServerReachabilityTokenAndClock) {
  EXPECT_EQ(CheckServer(nullptr)[0].status, CheckStatus::kAbsent);
  FakeServerProbe down(Fail("cannot reach http://server:7070 (Connection)"));
  auto d = CheckServer(&down);
  EXPECT_EQ(d[0].status, CheckStatus::kFail);
  EXPECT_EQ(d[0].detail, "unreachable: cannot reach http://server:7070 (Connection)");
  FakeServerProbe refused(Answer(401, 0));
  EXPECT_EQ(CheckServer(&refused)[0].status, CheckStatus::kFail);
  EXPECT_EQ(CheckServer(&refused)[0].detail, "token refused: GET /v1/queues 401 in 10 ms");
  // A node's join token is known to the server but may not list queues: reachable, accepted.
  FakeServerProbe joiner(Answer(403, 0));
  EXPECT_EQ(CheckServer(&joiner)[0].status, CheckStatus::kOk);

  FakeServerProbe ahead(Answer(200, 3000));
  auto a = CheckServer(&ahead);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].status, CheckStatus::kOk);
  EXPECT_EQ(a[1].check, "clock");
  EXPECT_EQ(a[1].status, CheckStatus::kWarn);
  EXPECT_EQ(a[1].detail, "offset 3495 ms ±505 ms (server minus this node, from the Date header)");
  FakeServerProbe far(Answer(200, -10000));
  EXPECT_EQ(CheckServer(&far)[1].status, CheckStatus::kFail);
  // A 1 s Date cannot tell 800 ms from 0: no warning.
  FakeServerProbe close(Answer(200, 800));
  EXPECT_EQ(CheckServer(&close)[1].status, CheckStatus::kOk);

  ServerAnswer ms = Answer(200, 0);
  ms.headers.clear();
  ms.body = R"({"server_time_ms": 1700000001505})";
  FakeServerProbe precise(ms);
  EXPECT_EQ(CheckServer(&precise)[1].detail,
            "offset 1500 ms ±5 ms (server minus this node, from the server_time_ms)");
  EXPECT_EQ(CheckServer(&precise)[1].status, CheckStatus::kWarn);

  ServerAnswer none = Answer(200, 0);
  none.headers.clear();
  FakeServerProbe timeless(none);
  EXPECT_EQ(CheckServer(&timeless)[1].status, CheckStatus::kAbsent);
}

TEST(Doctor, ParsesHttpDates) {
  EXPECT_EQ(ParseHttpDateMs("Sun, 06 Nov 1994 08:49:37 GMT"), int64_t{784111777} * 1000);
  EXPECT_FALSE(ParseHttpDateMs("yesterday"));
  EXPECT_FALSE(ParseHttpDateMs(""));
}

TEST(DoctorProbes, HttpProbeReportsAnUnreachableServer) {
  HttpServerProbe p("http://127.0.0.1:1", "");
  auto a = p.Get("/v1/queues");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("cannot reach"), std::string::npos);
}

}  // namespace
}  // namespace tianshu::agent
