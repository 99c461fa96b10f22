// The wire format between `tianshu serve` and `tianshu agent`: JSON messages for registration,
// heartbeats, work orders (launch / checkpoint / stop, each with an id) and the agent's reports.
// Both sides use these structs and their To/From functions; docs/api.md is the prose contract.
//
//   wire::Heartbeat hb{.agent_id = "a1", .health = wire::Health::kOk};
//   Result<wire::Heartbeat> back = wire::ParseHeartbeat(wire::ToJson(hb).dump());
//
// Parsing is strict: unknown fields, wrong types and out-of-range values are errors that name
// the field ("heartbeat.devices[2].utilization: expected a number in [0, 1]"); parsers never
// throw. Every message carries `"version": 1` when serialised (kWireVersion); a parser accepts
// a missing version and rejects any other. Fields may be added in later versions only as
// optional fields, so an agent and a server of the same major version always understand each
// other. Thread-compatible plain data.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tianshu/base/status.h"

namespace tianshu::wire {

inline constexpr int kWireVersion = 1;

// ---- Registration (agent -> server, POST /v1/agents/register) ----------------------------

// One accelerator of a node, found by discovery or declared on the command line.
struct Device {
  int index = 0;             // local index, what CUDA_VISIBLE_DEVICES & co. take
  std::string model;         // catalogue name, "A100-80GB"
  std::string vendor;        // "nvidia", "huawei", "hygon", "moorethreads", "other"
  int64_t memory_bytes = 0;  // device memory
  std::string uuid;          // vendor UUID when known, "" for declared devices
  int numa = -1;             // NUMA node, -1 when unknown
  std::string pci_bus_id;    // "0000:17:00.0", "" when unknown
  bool mig_enabled = false;  // MIG (or vendor partitioning) mode is on
  bool declared = false;     // true: from --devices, not found on the machine
  bool operator==(const Device&) const = default;
};

struct NicInfo {
  std::string name;           // "eth0", "mlx5_0"
  int64_t bandwidth_bps = 0;  // line rate in bits per second, 0 when unknown
  bool rdma = false;          // has an RDMA device (/sys/class/infiniband)
  int numa = -1;
  bool operator==(const NicInfo&) const = default;
};

struct DiskInfo {
  std::string name;  // "nvme0n1"
  int64_t capacity_bytes = 0;
  bool nvme = false;
  bool operator==(const DiskInfo&) const = default;
};

struct Hardware {
  std::vector<Device> devices;
  int64_t cpu_milli = 0;     // logical CPUs x 1000
  int64_t memory_bytes = 0;  // host memory
  int numa_nodes = 1;
  std::vector<NicInfo> nics;
  std::vector<DiskInfo> disks;
  std::string backend;  // "cuda", "ascend", "rocm", "musa"; "" = from the devices' vendor
  std::map<std::string, std::string> labels;  // node labels for node_selector (e.g. "leaf")
  bool operator==(const Hardware&) const = default;
};

// A rank the agent is running (or knows it launched), reported at registration and in every
// heartbeat so that a restarted server neither launches it again nor forgets it.
struct RunningRank {
  std::string order_id;  // the launch order that started it
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int64_t pid = 0;
};

struct RegisterRequest {
  std::string node;      // unique node name; a re-registration under the same name is
                         // the same node (after an agent or server restart)
  std::string agent_id;  // changes every time the agent process starts
  std::string address;   // host[:port] reachable by other ranks (MASTER_ADDR) and for logs
  // SHA-256 of the credential the agent made itself (kept in its work directory), bound to the
  // name at its first registration; "" lets the server mint one and return it.
  std::string credential_sha256;
  // The fabric the job's ranks talk over, where it is not the address's network (a separate
  // data network): the host other ranks reach this node on (MASTER_ADDR, probes), and the
  // interface their traffic leaves by (GLOO_/NCCL_SOCKET_IFNAME). "" = the address's host.
  std::string data_address;
  std::string data_interface;
  Hardware hardware;
  std::vector<RunningRank> running;
};

struct RegisterResponse {
  std::string node;
  // Minted at the node's first registration (with a join token): the agent keeps it (0600) and
  // sends it as its bearer token from then on; "" when the node registered with it already.
  std::string credential;
  std::string log_key;  // what the server presents to read rank logs from this agent
  int64_t heartbeat_interval_ms = 1000;  // send a heartbeat at least this often
  int64_t lost_after_ms = 10000;         // silence after which the node is declared lost
  std::string server_id;                 // changes when the server's store is recreated
  // The node lease: with no answered heartbeat for this long the agent's ranks are killed
  // (fenced). 0: no lease (also what a server from before leases sends, by omission).
  int64_t lease_ms = 0;
};

// ---- Heartbeat (agent -> server, POST /v1/agents/{node}/heartbeat) -----------------------

enum class Health {
  kOk,        // everything works
  kDegraded,  // runs work, but something is wrong (message says what); no new placements
  kFailed,    // cannot run work; its ranks go to the retry path
};
std::string_view HealthName(Health h);
std::optional<Health> ParseHealth(std::string_view s);

struct DeviceUsage {
  int index = 0;
  double utilization = 0;  // 0..1, compute busy fraction
  int64_t memory_used_bytes = 0;
  bool healthy = true;
};

// One network interface over the last sampling window (agent/net_counters.h): byte rates from
// /sys/class/net/IF/statistics (RDMA ports: /sys/class/infiniband/DEV/ports/P/counters), and the
// congestion signs the host can see.
struct LinkSample {
  std::string name;  // "eth0", or "mlx5_0/1" for an RDMA port
  bool rdma = false;
  int64_t speed_bps = 0;  // line rate in bits/s, 0 when unknown (veth, some drivers)
  double rx_bytes_per_s = 0;
  double tx_bytes_per_s = 0;
  double drops_per_s = 0;      // rx_dropped + tx_dropped per second
  double xmit_wait_per_s = 0;  // RDMA port_xmit_wait ticks per second (0 without RDMA)
};

struct NetworkSample {
  int64_t window_ms = 0;  // what the rates cover; 0 = no earlier sample yet
  std::vector<LinkSample> links;
  // TCP over the agent's network namespace (/proc/net/snmp): retransmitted and sent segments
  // per second; a rising share of retransmissions is congestion on a TCP (gloo, socket) fabric.
  double tcp_retrans_per_s = 0;
  double tcp_out_segs_per_s = 0;
};

// What a running job's progress file said (TIANSHU_PROGRESS_FILE, docs/network.md), read from
// its lowest rank on this node.
struct JobProgress {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int64_t step = -1;       // the last step the file reported
  double step_time_s = 0;  // median step time over the last (at most 8) steps
  int64_t samples = 0;     // step times read this attempt
  int64_t updated_ms = 0;  // wall-clock time of the last line read (ms since the epoch)
};

struct Heartbeat {
  std::string agent_id;
  Health health = Health::kOk;
  std::string message;         // why degraded/failed
  double cpu_utilization = 0;  // 0..1 over the node
  int64_t memory_used_bytes = 0;
  std::vector<DeviceUsage> devices;
  std::vector<RunningRank> running;      // what the agent runs right now
  std::optional<NetworkSample> network;  // absent from older agents
  std::vector<JobProgress> progress;     // running jobs with a progress file
};

// The server's answer to a heartbeat. `reregister` is set when the server does not know this
// node or agent (it lost its state, or the node was declared lost): the agent registers again.
struct HeartbeatResponse {
  bool reregister = false;
  int64_t pending_orders = 0;  // orders waiting at GET /v1/agents/{node}/work
};

// ---- Work orders (server -> agent, GET /v1/agents/{node}/work) ---------------------------

enum class OrderKind {
  kLaunch,      // start these ranks of a job on this node
  kCheckpoint,  // ask the job's ranks on this node to checkpoint now (SIGUSR1), keep running
  kStop,        // stop the job's ranks on this node (checkpoint first when asked)
};
std::string_view OrderKindName(OrderKind k);
std::optional<OrderKind> ParseOrderKind(std::string_view s);

// One rank to launch: its identity in the job, its devices and its process.
struct RankLaunch {
  int rank = 0;                            // global rank, RANK
  int local_rank = 0;                      // index among the job's ranks on this node, LOCAL_RANK
  int node_rank = 0;                       // index of this node among the job's nodes, NODE_RANK
  std::vector<int> devices;                // local device indexes; empty for a CPU-only rank
  int gpu_milli = 1000;                    // share of each device (< 1000: shared)
  std::vector<std::string> command;        // argv; empty: the agent runs nothing (placeholder rank)
  std::map<std::string, std::string> env;  // full environment to add: rendezvous, visible
                                           // devices of the backend, communicator plan,
                                           // TIANSHU_JOB_ID, TIANSHU_CHECKPOINT_DIR, ...
};

// What the agent should enforce for the job on this node (what it cannot, it reports).
struct CgroupPlan {
  std::vector<int> numa_nodes;  // cpuset.mems and the CPUs of these nodes; empty = any
  int64_t cpu_milli = 0;        // CPU quota for all ranks on the node, 0 = none
  int64_t memory_bytes = 0;     // memory limit for all ranks on the node, 0 = none
  int io_weight = 100;          // 1..10000 (cgroup v2 io.weight)
  int64_t io_write_bps = 0;     // NVMe write limit, 0 = none
  std::vector<int> devices;     // local device indexes the job may open
  int traffic_class = -1;       // RoCE traffic class / DSCP for the job's traffic, -1 = none
};

// A bandwidth probe between the order's nodes (docs/network.md): the agent picks the tool
// (nccl-tests/rccl-tests/HCCL test binaries where installed, else a torch.distributed gloo
// all-reduce and send/recv) and runs it as the ranks' command.
struct ProbeSpec {
  std::string method = "auto";  // "auto", "gloo", "nccl-tests", "rccl-tests", "hccl-test"
  int64_t bytes = 16 << 20;     // message size
  double seconds = 2.0;         // how long to repeat each measurement
};

struct LaunchOrder {
  std::string job_name;
  std::string backend;  // "cuda", "ascend", "rocm", "musa"
  int world_size = 1;
  std::string master_addr;  // rendezvous host (node_rank 0's address)
  int master_port = 29500;
  std::string checkpoint_dir;     // where ranks write and find checkpoints
  std::string workdir;            // working directory of the ranks, "" = the agent's choice
  std::string run_as;             // the owner's Unix account, "" = the agent's own
  std::vector<RankLaunch> ranks;  // this node's ranks only
  CgroupPlan cgroup;
  std::optional<ProbeSpec> probe;  // set: the ranks run the probe (their command is empty)
};

struct CheckpointOrder {
  std::string reason;  // "periodic", "preempt", "migrate", "user"
};

struct StopOrder {
  std::string reason;             // "cancel", "preempt", "retry", "resize", "migrate", "stale"
  bool checkpoint_first = false;  // SIGUSR1 and wait for the marker before SIGTERM
  int64_t grace_ms = 30000;       // SIGTERM -> SIGKILL grace
};

// An order. `id` is unique and stable: delivering the same order twice must have the effect
// of delivering it once (the agent remembers ids it has acted on in its journal).
struct WorkOrder {
  std::string id;  // "j-000012.a1.launch.node-3"
  OrderKind kind = OrderKind::kLaunch;
  std::string job_id;
  int attempt = 1;                            // 1 on first start, +1 per retry
  std::optional<LaunchOrder> launch;          // set for kLaunch
  std::optional<CheckpointOrder> checkpoint;  // set for kCheckpoint
  std::optional<StopOrder> stop;              // set for kStop
};

struct WorkBatch {
  std::vector<WorkOrder> orders;  // every order not yet finished for this node, oldest first
  // Pass back as `after` to wait for orders newer than these (opaque; empty from old servers).
  std::string cursor;
};

// ---- Reports (agent -> server, POST /v1/agents/{node}/reports) ---------------------------

enum class ReportKind {
  kAccepted,      // the order was received and journaled (the server stops resending it)
  kStarted,       // a rank's process started (pid)
  kExited,        // a rank's process ended (exit_code, or signal)
  kCheckpointed,  // a rank finished a checkpoint (step, path)
  kStopped,       // every rank of the job on this node is gone after a stop order
  kRejected,      // the order cannot be carried out (message says why); treated as a failure
};
std::string_view ReportKindName(ReportKind k);
std::optional<ReportKind> ParseReportKind(std::string_view s);

// What a probe measured between its nodes (written by rank 0, reported with its exit).
struct ProbeResult {
  std::string method;        // the tool that ran: "gloo", "nccl-tests", ...
  int64_t bytes = 0;         // message size
  int64_t iterations = 0;    // all-reduces timed
  double busbw_gbps = 0;     // all-reduce bus bandwidth, GB/s (nccl-tests' definition)
  double algbw_gbps = 0;     // all-reduce algorithm bandwidth, GB/s
  double forward_gbps = 0;   // send/recv from the first node to the second, GB/s (0: not run)
  double backward_gbps = 0;  // and back
};

// One event about an order. A report is idempotent: (order_id, kind, rank) identifies it and a
// duplicate is ignored by the server.
struct Report {
  std::string order_id;
  ReportKind kind = ReportKind::kAccepted;
  std::string job_id;
  int rank = -1;                     // -1 for reports about the whole order
  int64_t pid = 0;                   // kStarted
  int exit_code = 0;                 // kExited: the exit status when it exited normally
  int signal = 0;                    // kExited: the signal that ended it, 0 when it exited normally
  int64_t step = -1;                 // kCheckpointed (and kExited when known): last completed step
  std::string path;                  // kCheckpointed: checkpoint location
  std::string message;               // free text: why rejected, what isolation could not be applied
  std::optional<ProbeResult> probe;  // kExited of a probe's rank 0 that exited 0
};

struct ReportBatch {
  std::string agent_id;
  std::vector<Report> reports;
  // A heartbeat sent with the reports, one request for both, when the agent's next one was
  // nearly due. Only to a server that takes it: an older one refuses the field (400, "heartbeat:
  // unknown field"), and the agent sends its heartbeats alone to it from then on.
  std::optional<Heartbeat> heartbeat;
};

// The server's answer to a report batch: how many reports it took, and its answer to the
// heartbeat that came with them (absent when none did).
struct ReportsAnswer {
  int64_t accepted = 0;
  std::optional<HeartbeatResponse> heartbeat;
};

// ---- Errors (server -> any client, every 4xx/5xx) -----------------------------------------

// `{"error": {"code": 400, "message": "...", "details": ["f.yaml:3:5: gpus: ..."]}}`
struct ErrorBody {
  int code = 400;
  std::string message;
  std::vector<std::string> details;
};

// ---- Serialisation -------------------------------------------------------------------------

nlohmann::json ToJson(const Device& v);
nlohmann::json ToJson(const Hardware& v);
nlohmann::json ToJson(const RunningRank& v);
nlohmann::json ToJson(const RegisterRequest& v);
nlohmann::json ToJson(const RegisterResponse& v);
nlohmann::json ToJson(const Heartbeat& v);
nlohmann::json ToJson(const HeartbeatResponse& v);
nlohmann::json ToJson(const WorkOrder& v);
nlohmann::json ToJson(const WorkBatch& v);
nlohmann::json ToJson(const Report& v);
nlohmann::json ToJson(const ReportBatch& v);
nlohmann::json ToJson(const ReportsAnswer& v);
nlohmann::json ToJson(const ErrorBody& v);

// Compact JSON text of a message; invalid UTF-8 in strings is replaced, never thrown about.
std::string Dump(const nlohmann::json& j);

// A work batch built from orders serialized once (the server keeps each order's text from its
// creation): OrderText is an order as a batch carries it, WorkBatchText the batch around such
// texts, the same bytes as Dump(ToJson(WorkBatch{orders, cursor})).
std::string OrderText(const WorkOrder& v);
// An order's text as one message (Dump(ToJson(order)): the store's form) from its OrderText.
std::string OrderMessageText(const std::string& order_text);
std::string WorkBatchText(const std::vector<const std::string*>& order_texts,
                          const std::string& cursor);

// Parsers of message text (a JSON document). Each fails with a message naming the field.
[[nodiscard]] Result<RegisterRequest> ParseRegisterRequest(std::string_view text);
[[nodiscard]] Result<RegisterResponse> ParseRegisterResponse(std::string_view text);
[[nodiscard]] Result<Heartbeat> ParseHeartbeat(std::string_view text);
[[nodiscard]] Result<HeartbeatResponse> ParseHeartbeatResponse(std::string_view text);
[[nodiscard]] Result<WorkOrder> ParseWorkOrder(std::string_view text);
[[nodiscard]] Result<WorkBatch> ParseWorkBatch(std::string_view text);
[[nodiscard]] Result<Report> ParseReport(std::string_view text);
[[nodiscard]] Result<ReportBatch> ParseReportBatch(std::string_view text);
[[nodiscard]] Result<ReportsAnswer> ParseReportsAnswer(std::string_view text);
[[nodiscard]] Result<ErrorBody> ParseErrorBody(std::string_view text);

// The same from an already parsed value (`where` prefixes field names in messages).
[[nodiscard]] Result<WorkOrder> WorkOrderFromJson(const nlohmann::json& j,
                                                  const std::string& where = "order");
[[nodiscard]] Result<Report> ReportFromJson(const nlohmann::json& j,
                                            const std::string& where = "report");

// Checks that an order carries the payload its kind needs (launch for kLaunch, ...).
[[nodiscard]] Status ValidateOrder(const WorkOrder& order);

}  // namespace tianshu::wire
