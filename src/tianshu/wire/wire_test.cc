#include "tianshu/wire/wire.h"

#include <gtest/gtest.h>

namespace tianshu::wire {
namespace {

WorkOrder SampleLaunch() {
  WorkOrder w;
  w.id = "j-000001.a1.launch.node-0";
  w.kind = OrderKind::kLaunch;
  w.job_id = "j-000001";
  w.attempt = 1;
  LaunchOrder l;
  l.job_name = "gpt";
  l.backend = "cuda";
  l.world_size = 2;
  l.master_addr = "127.0.0.1";
  l.master_port = 29501;
  l.checkpoint_dir = "/tmp/ckpt/j-000001";
  l.workdir = "/srv/gpt";
  l.run_as = "alice";
  RankLaunch r;
  r.rank = 1;
  r.local_rank = 1;
  r.node_rank = 1;
  r.gpu_milli = 500;
  r.devices = {3};
  r.command = {"python3", "train.py"};
  r.env = {{"RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "3"}};
  l.ranks.push_back(r);
  l.cgroup.numa_nodes = {0};
  l.cgroup.devices = {3};
  l.cgroup.cpu_milli = 16000;
  l.cgroup.memory_bytes = int64_t{64} << 30;
  l.cgroup.io_weight = 300;
  l.cgroup.io_write_bps = 500 << 20;
  l.cgroup.traffic_class = 106;
  w.launch = l;
  return w;
}

TEST(Wire, OrderRoundTrips) {
  WorkOrder w = SampleLaunch();
  w.attempt = 3;
  auto back = ParseWorkOrder(ToJson(w).dump());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->id, w.id);
  EXPECT_EQ(back->job_id, w.job_id);
  EXPECT_EQ(back->attempt, 3);
  EXPECT_EQ(back->kind, OrderKind::kLaunch);
  ASSERT_TRUE(back->launch);
  const LaunchOrder &l = *back->launch, &sent = *w.launch;
  EXPECT_EQ(l.job_name, sent.job_name);
  EXPECT_EQ(l.backend, sent.backend);
  EXPECT_EQ(l.world_size, sent.world_size);
  EXPECT_EQ(l.master_addr, sent.master_addr);
  EXPECT_EQ(l.master_port, sent.master_port);
  EXPECT_EQ(l.checkpoint_dir, sent.checkpoint_dir);
  EXPECT_EQ(l.workdir, sent.workdir);
  EXPECT_EQ(l.run_as, sent.run_as);
  ASSERT_EQ(l.ranks.size(), 1u);
  EXPECT_EQ(l.ranks[0].rank, 1);
  EXPECT_EQ(l.ranks[0].local_rank, 1);
  EXPECT_EQ(l.ranks[0].node_rank, 1);
  EXPECT_EQ(l.ranks[0].gpu_milli, 500);
  EXPECT_EQ(l.ranks[0].devices, std::vector<int>{3});
  EXPECT_EQ(l.ranks[0].env, sent.ranks[0].env);
  EXPECT_EQ(l.ranks[0].command, sent.ranks[0].command);
  EXPECT_EQ(l.cgroup.numa_nodes, std::vector<int>{0});
  EXPECT_EQ(l.cgroup.devices, std::vector<int>{3});
  EXPECT_EQ(l.cgroup.cpu_milli, 16000);
  EXPECT_EQ(l.cgroup.memory_bytes, int64_t{64} << 30);
  EXPECT_EQ(l.cgroup.io_weight, 300);
  EXPECT_EQ(l.cgroup.io_write_bps, 500 << 20);
  EXPECT_EQ(l.cgroup.traffic_class, 106);
  EXPECT_FALSE(l.probe);
}

// A batch assembled from orders serialized once is the batch ToJson writes, byte for byte,
// and parses back (a cursor with characters JSON escapes, and an empty batch, included).
TEST(Wire, ABatchOfOrderTextsIsTheBatchToJsonWrites) {
  WorkOrder a = SampleLaunch(), b = SampleLaunch(), p = SampleLaunch();
  a.launch->ranks[0].env["NOTE"] = "a \"quoted\" \\ line\nand \xff byte";  // escaped, replaced
  p.id = "probe-1.a1.launch.node-0";
  p.launch->probe = ProbeSpec{.method = "auto", .bytes = 1 << 20, .seconds = 0.5};
  p.launch->ranks[0].command.clear();
  b.id = "j-2.a1.stop.node-0";
  b.kind = OrderKind::kStop;
  b.launch.reset();
  b.stop = StopOrder{.reason = "cancel", .checkpoint_first = true, .grace_ms = 5};
  WorkOrder c{.id = "j-3.a1.checkpoint.node-0", .kind = OrderKind::kCheckpoint, .job_id = "j-3"};
  c.checkpoint = CheckpointOrder{.reason = "periodic"};
  const std::string tc = OrderText(c);
  EXPECT_EQ(OrderMessageText(tc), Dump(ToJson(c)));
  for (const std::string cursor : {"e\"1.7", ""}) {
    const std::string ta = OrderText(a), tb = OrderText(b);
    const WorkBatch batch{.orders = {a, b}, .cursor = cursor};
    EXPECT_EQ(WorkBatchText({&ta, &tb}, cursor), Dump(ToJson(batch)));
    EXPECT_EQ(OrderMessageText(ta), Dump(ToJson(a)));
    EXPECT_EQ(OrderMessageText(tb), Dump(ToJson(b)));
    const std::string tp = OrderText(p);
    EXPECT_EQ(OrderMessageText(tp), Dump(ToJson(p)));
    EXPECT_EQ(WorkBatchText({&tp, &ta}, cursor), Dump(ToJson(WorkBatch{{p, a}, cursor})));
    EXPECT_EQ(WorkBatchText({}, cursor), Dump(ToJson(WorkBatch{.cursor = cursor})));
    auto back = ParseWorkBatch(WorkBatchText({&ta, &tb}, cursor));
    ASSERT_TRUE(back) << back.error().message;
    ASSERT_EQ(back->orders.size(), 2u);
    EXPECT_EQ(back->orders[1].stop->grace_ms, 5);
    EXPECT_TRUE(back->orders[1].stop->checkpoint_first);
    EXPECT_EQ(back->orders[1].stop->reason, "cancel");
    EXPECT_EQ(back->orders[0].launch->ranks[0].env.at("NOTE"),
              "a \"quoted\" \\ line\nand \xef\xbf\xbd byte");  // U+FFFD for the bad byte
    EXPECT_EQ(back->cursor, cursor);
    auto probe = ParseWorkOrder(OrderMessageText(tp));
    ASSERT_TRUE(probe) << probe.error().message;
    ASSERT_TRUE(probe->launch && probe->launch->probe);
    EXPECT_EQ(probe->launch->probe->method, "auto");
    EXPECT_EQ(probe->launch->probe->bytes, 1 << 20);
    EXPECT_DOUBLE_EQ(probe->launch->probe->seconds, 0.5);
    auto checkpoint = ParseWorkOrder(OrderMessageText(tc));
    ASSERT_TRUE(checkpoint) << checkpoint.error().message;
    ASSERT_TRUE(checkpoint->checkpoint);
    EXPECT_EQ(checkpoint->checkpoint->reason, "periodic");
  }
}

TEST(Wire, RegisterAndHeartbeatRoundTrip) {
  RegisterRequest r;
  r.node = "node-0";
  r.agent_id = "a1";
  r.hardware.devices.push_back({.index = 0, .model = "A100-80GB", .declared = true});
  r.hardware.labels["leaf"] = "leaf-0";
  r.running.push_back({.order_id = "o", .job_id = "j", .attempt = 1, .rank = 0, .pid = 7});
  auto back = ParseRegisterRequest(ToJson(r).dump());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->hardware.devices[0].declared);
  EXPECT_EQ(back->running[0].pid, 7);

  Heartbeat h{.agent_id = "a1", .health = Health::kDegraded, .message = "fan"};
  h.devices.push_back({.index = 0, .utilization = 0.5});
  auto hb = ParseHeartbeat(ToJson(h).dump());
  ASSERT_TRUE(hb) << hb.error().message;
  EXPECT_EQ(hb->health, Health::kDegraded);
}

// A heartbeat rides in a report batch only when there is one (an older server refuses the
// field); the answer to both carries the heartbeat's answer only then, and an older server's
// answer ({"accepted": N}) still parses. Problems inside it are named by their whole path.
TEST(Wire, AHeartbeatInAReportBatchAndItsAnswerRoundTrip) {
  ReportBatch b{
      .agent_id = "a",
      .reports = {Report{.order_id = "o", .kind = ReportKind::kStarted, .rank = 0}},
      .heartbeat = Heartbeat{.agent_id = "a",
                             .health = Health::kDegraded,
                             .cpu_utilization = 0.5,
                             .running = {RunningRank{.order_id = "o", .job_id = "j", .rank = 0}}}};
  auto back = ParseReportBatch(ToJson(b).dump());
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_TRUE(back->heartbeat);
  EXPECT_EQ(back->heartbeat->health, Health::kDegraded);
  EXPECT_DOUBLE_EQ(back->heartbeat->cpu_utilization, 0.5);
  ASSERT_EQ(back->heartbeat->running.size(), 1u);
  EXPECT_EQ(back->reports.size(), 1u);
  b.heartbeat.reset();
  EXPECT_EQ(ToJson(b).dump().find("heartbeat"), std::string::npos);
  EXPECT_FALSE(ParseReportBatch(ToJson(b).dump())->heartbeat);
  auto other = ParseReportBatch(R"({"agent_id":"a","reports":[],"heartbeat":{"agent_id":"b"}})");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().message, "heartbeat.agent_id: differs from the batch's agent_id");
  auto bad = ParseReportBatch(
      R"({"agent_id":"a","reports":[],"heartbeat":{"agent_id":"a","health":"sad"}})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "heartbeat.health: expected one of ok, degraded, failed");
  auto deep = ParseReportBatch(
      R"({"agent_id":"a","reports":[],"heartbeat":{"agent_id":"a","devices":[{"index":-1}]}})");
  ASSERT_FALSE(deep);
  EXPECT_EQ(deep.error().message.rfind("heartbeat.devices[0].index", 0), 0u)
      << deep.error().message;

  ReportsAnswer a{.accepted = 3, .heartbeat = HeartbeatResponse{.pending_orders = 2}};
  auto answer = ParseReportsAnswer(ToJson(a).dump());
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->accepted, 3);
  ASSERT_TRUE(answer->heartbeat);
  EXPECT_EQ(answer->heartbeat->pending_orders, 2);
  auto older = ParseReportsAnswer(R"({"version":1,"accepted":4})");
  ASSERT_TRUE(older);
  EXPECT_EQ(older->accepted, 4);
  EXPECT_FALSE(older->heartbeat);
  EXPECT_FALSE(ParseReportsAnswer(R"({"accepted":1,"heartbeat":{"pending_orders":-1}})"));
}

TEST(Wire, DeeplyNestedMessagesAreRefused) {
  std::string deep =
      R"({"agent_id":"a","reports":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto r = ParseReportBatch(deep);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("nested deeper than 64"), std::string::npos)
      << r.error().message;
}

TEST(Wire, StrictParsingNamesTheField) {
  auto a = ParseHeartbeat(R"({"agent_id":"a","health":"ok","bogus":1})");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().message, "bogus: unknown field");
  auto b = ParseHeartbeat(R"({"agent_id":"a","devices":[{"index":0,"utilization":2}]})");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, "devices[0].utilization: expected a number in [0, 1]");
  auto c = ParseReportBatch(R"({"agent_id":"a","reports":[{"order_id":"o","kind":"exploded"}]})");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("reports[0].kind"), std::string::npos);
  EXPECT_FALSE(ParseWorkOrder("{"));
  EXPECT_FALSE(ParseWorkOrder(R"({"id":"x","kind":"launch","job_id":"j"})"));  // no payload
  EXPECT_FALSE(ParseRegisterRequest(R"({"node":"a b","agent_id":"x","hardware":{}})"));
  EXPECT_FALSE(ParseHeartbeat(R"({"version":2,"agent_id":"a"})"));
}

TEST(Wire, NetworkAndProgressRoundTrip) {
  RegisterRequest r{
      .node = "n0", .agent_id = "a1", .data_address = "10.1.0.7", .data_interface = "ens1f0"};
  auto reg = ParseRegisterRequest(ToJson(r).dump());
  ASSERT_TRUE(reg) << reg.error().message;
  EXPECT_EQ(reg->data_address, "10.1.0.7");
  EXPECT_EQ(reg->data_interface, "ens1f0");

  Heartbeat h{.agent_id = "a1"};
  h.network = NetworkSample{.window_ms = 1000, .tcp_retrans_per_s = 2, .tcp_out_segs_per_s = 900};
  h.network->links.push_back({.name = "eth0",
                              .speed_bps = 25'000'000'000,
                              .rx_bytes_per_s = 1e9,
                              .tx_bytes_per_s = 5e8,
                              .drops_per_s = 0.5});
  h.network->links.push_back({.name = "mlx5_0/1", .rdma = true, .xmit_wait_per_s = 12});
  h.progress.push_back({.job_id = "j-1",
                        .attempt = 2,
                        .rank = 4,
                        .step = 120,
                        .step_time_s = 0.41,
                        .samples = 8,
                        .updated_ms = 1700000000000});
  auto hb = ParseHeartbeat(ToJson(h).dump());
  ASSERT_TRUE(hb) << hb.error().message;
  ASSERT_TRUE(hb->network);
  EXPECT_EQ(hb->network->window_ms, 1000);
  ASSERT_EQ(hb->network->links.size(), 2u);
  EXPECT_EQ(hb->network->links[0].speed_bps, 25'000'000'000);
  EXPECT_DOUBLE_EQ(hb->network->links[0].rx_bytes_per_s, 1e9);
  EXPECT_DOUBLE_EQ(hb->network->links[0].drops_per_s, 0.5);
  EXPECT_TRUE(hb->network->links[1].rdma);
  EXPECT_DOUBLE_EQ(hb->network->links[1].xmit_wait_per_s, 12);
  EXPECT_DOUBLE_EQ(hb->network->tcp_retrans_per_s, 2);
  ASSERT_EQ(hb->progress.size(), 1u);
  EXPECT_EQ(hb->progress[0].job_id, "j-1");
  EXPECT_EQ(hb->progress[0].attempt, 2);
  EXPECT_EQ(hb->progress[0].rank, 4);
  EXPECT_EQ(hb->progress[0].step, 120);
  EXPECT_DOUBLE_EQ(hb->progress[0].step_time_s, 0.41);
  EXPECT_EQ(hb->progress[0].samples, 8);
  EXPECT_EQ(hb->progress[0].updated_ms, 1700000000000);
}

TEST(Wire, OlderMessagesWithoutTheNewFieldsParseToDefaults) {
  auto hb = ParseHeartbeat(R"({"agent_id":"a","health":"ok"})");
  ASSERT_TRUE(hb);
  EXPECT_FALSE(hb->network);
  EXPECT_TRUE(hb->progress.empty());
  auto reg = ParseRegisterRequest(R"({"node":"n","agent_id":"x","hardware":{}})");
  ASSERT_TRUE(reg);
  EXPECT_EQ(reg->data_address, "");
  EXPECT_EQ(reg->data_interface, "");
  auto order = ParseWorkOrder(ToJson(SampleLaunch()).dump());
  ASSERT_TRUE(order);
  EXPECT_FALSE(order->launch->probe);
  auto rep = ParseReport(R"({"order_id":"o","kind":"exited","exit_code":0})");
  ASSERT_TRUE(rep);
  EXPECT_FALSE(rep->probe);
  // And a message without them is sent without them (an older peer refuses unknown fields).
  const std::string text = ToJson(Heartbeat{.agent_id = "a"}).dump() +
                           ToJson(RegisterRequest{.node = "n", .agent_id = "a"}).dump() +
                           ToJson(SampleLaunch()).dump() + ToJson(Report{.order_id = "o"}).dump();
  for (const char* key : {"network", "progress", "data_address", "data_interface", "probe"}) {
    EXPECT_EQ(text.find(std::string("\"") + key + "\""), std::string::npos) << key;
  }
}

TEST(Wire, BadNetworkAndProgressAreRefused) {
  auto bad = [](const std::string& body) {
    auto h = ParseHeartbeat(R"({"agent_id":"a",)" + body + "}");
    return h ? std::string("accepted") : h.error().message;
  };
  EXPECT_EQ(bad(R"("network":{"links":[{"name":"eth0","rx_bytes_per_s":-1}]})"),
            "network.links[0].rx_bytes_per_s: expected a number in [0, 1000000000000000]");
  EXPECT_EQ(bad(R"("network":{"links":[{"rx_bytes_per_s":1}]})"),
            "network.links[0].name: is required");
  EXPECT_EQ(bad(R"("network":{"links":[{"name":")" + std::string(65, 'x') + R"("}]})"),
            "network.links[0].name: longer than 64");
  EXPECT_EQ(bad(R"("network":{"window_ms":-5})"),
            "network.window_ms: expected an integer in [0, 9223372036854775807]");
  EXPECT_EQ(bad(R"("network":{"tcp_retrans_per_s":1e400})"), "malformed JSON");
  EXPECT_EQ(bad(R"("network":{"bogus":1})"), "network.bogus: unknown field");
  EXPECT_EQ(bad(R"("network":[])"), "network: expected an object");
  std::string links;
  for (int i = 0; i < 257; ++i) links += std::string(i ? "," : "") + R"({"name":"e"})";
  EXPECT_EQ(bad(R"("network":{"links":[)" + links + "]}"), "network.links: more than 256 entries");
  std::string progress;
  for (int i = 0; i < 1025; ++i) progress += std::string(i ? "," : "") + R"({"job_id":"j"})";
  EXPECT_EQ(bad(R"("progress":[)" + progress + "]"), "progress: more than 1024 entries");
  EXPECT_EQ(bad(R"("progress":[{"job_id":"j","step_time_s":-0.1}])"),
            "progress[0].step_time_s: expected a number in [0, 1000000000]");
  EXPECT_EQ(bad(R"("progress":[{"step":3}])"), "progress[0].job_id: is required");
  EXPECT_EQ(bad(R"("progress":[{"job_id":"j","step":-2}])"),
            "progress[0].step: expected an integer in [-1, 9223372036854775807]");

  auto reg = [](const std::string& extra) {
    auto r = ParseRegisterRequest(R"({"node":"n","agent_id":"x","hardware":{},)" + extra + "}");
    return r ? std::string("accepted") : r.error().message;
  };
  EXPECT_EQ(reg(R"("data_interface":"eth0/x")"),
            "data_interface: expected a network interface name (letters, digits, -_.)");
  EXPECT_EQ(reg(R"("data_interface":"a-very-long-ifname")"), "data_interface: longer than 15");
  EXPECT_EQ(reg(R"("data_address":"10.0.0.1 evil")"),
            "data_address: expected a host name or an IP address");
  EXPECT_EQ(reg(R"("data_address":"fe80::1%eth0","data_interface":"bond0.100")"), "accepted");
}

TEST(Wire, ProbeOrdersAndResultsRoundTrip) {
  WorkOrder w = SampleLaunch();
  w.launch->ranks[0].command.clear();
  w.launch->probe = ProbeSpec{.method = "gloo", .bytes = 1 << 20, .seconds = 0.5};
  auto back = ParseWorkOrder(ToJson(w).dump());
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_TRUE(back->launch->probe);
  EXPECT_EQ(back->launch->probe->method, "gloo");
  EXPECT_EQ(back->launch->probe->bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(back->launch->probe->seconds, 0.5);
  EXPECT_TRUE(back->launch->ranks[0].command.empty());
  EXPECT_TRUE(ValidateOrder(*back));

  Report r{.order_id = "o", .kind = ReportKind::kExited, .job_id = "p", .rank = 0};
  r.probe = ProbeResult{.method = "gloo",
                        .bytes = 1 << 20,
                        .iterations = 40,
                        .busbw_gbps = 1.5,
                        .algbw_gbps = 1.5,
                        .forward_gbps = 2.25,
                        .backward_gbps = 2};
  auto rep = ParseReport(ToJson(r).dump());
  ASSERT_TRUE(rep) << rep.error().message;
  ASSERT_TRUE(rep->probe);
  EXPECT_EQ(rep->probe->iterations, 40);
  EXPECT_DOUBLE_EQ(rep->probe->busbw_gbps, 1.5);
  EXPECT_DOUBLE_EQ(rep->probe->forward_gbps, 2.25);
  EXPECT_DOUBLE_EQ(rep->probe->backward_gbps, 2);
}

TEST(Wire, BadProbesAreRefused) {
  auto order = [](const std::string& probe, bool with_command = false) {
    WorkOrder w = SampleLaunch();
    if (!with_command) w.launch->ranks[0].command.clear();
    nlohmann::json j = ToJson(w);
    j["launch"]["probe"] = nlohmann::json::parse(probe);
    auto o = ParseWorkOrder(j.dump());
    return o ? std::string("accepted") : o.error().message;
  };
  EXPECT_EQ(order(R"({"method":"iperf"})"),
            "order.launch.probe.method: expected one of auto, gloo, nccl-tests, rccl-tests, "
            "hccl-test");
  EXPECT_EQ(order(R"({"bytes":512})"),
            "order.launch.probe.bytes: expected an integer in [1024, 1073741824]");
  EXPECT_EQ(order(R"({"bytes":2147483648})"),
            "order.launch.probe.bytes: expected an integer in [1024, 1073741824]");
  EXPECT_EQ(order(R"({"seconds":0.05})"),
            "order.launch.probe.seconds: expected a number in [0.1, 60]");
  EXPECT_EQ(order(R"({"seconds":61})"),
            "order.launch.probe.seconds: expected a number in [0.1, 60]");
  EXPECT_EQ(order(R"({"timeout":1})"), "order.launch.probe.timeout: unknown field");
  EXPECT_EQ(order(R"({})"), "accepted");  // all defaults: auto, 16 MiB, 2 s
  EXPECT_EQ(order(R"({})", true), "order: rank 1 of a probe carries a command");

  auto report = [](const std::string& kind, const std::string& probe) {
    auto r = ParseReport(R"({"order_id":"o","kind":")" + kind + R"(","probe":)" + probe + "}");
    return r ? std::string("accepted") : r.error().message;
  };
  EXPECT_EQ(report("exited", R"({"method":"gloo","busbw_gbps":-1})"),
            "report.probe.busbw_gbps: expected a number in [0, 1000000]");
  EXPECT_EQ(report("exited", R"({"busbw_gbps":1})"), "report.probe.method: is required");
  EXPECT_EQ(report("exited", R"({"method":"magic"})"),
            "report.probe.method: expected one of gloo, nccl-tests, rccl-tests, hccl-test");
  EXPECT_EQ(report("started", R"({"method":"gloo"})"),
            "report.probe: only an exited report carries one");
  EXPECT_EQ(report("exited", R"({"method":"gloo","iterations":-1})"),
            "report.probe.iterations: expected an integer in [0, 9223372036854775807]");
}

}  // namespace
}  // namespace tianshu::wire
