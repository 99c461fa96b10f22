// Bandwidth probes (wire::ProbeSpec) as the agent runs them: which tool measures, what each of
// the probe's ranks runs, and what rank 0 measured, read back when it exits 0.
//
// The tools: probes/gloo_bandwidth.py (torch.distributed over gloo, on CPU: an all-reduce, then
// send/recv from rank 0 to the last rank and back), which runs anywhere /usr/bin/python3 has
// torch; and the vendors' all-reduce tests -- nccl-tests' and rccl-tests' all_reduce_perf,
// HCCL's all_reduce_test (under mpirun). Those need MPI to span processes on several nodes, which
// the agent does not launch, so they measure a probe whose ranks are all on this node: its first
// rank runs the test over every rank's device, the others end at once. "auto" picks the vendor
// test for such a probe when it is installed, gloo otherwise. The vendor paths (command lines and
// output parsers) are unit-tested on output written from their documented format only: untested on
// hardware.
//   ProbeTools tools{.script = "/usr/share/tianshu/probes/gloo_bandwidth.py", .exists = exists};
//   Result<ProbeRank> run = PlanProbeRank(launch, launch.ranks[0], tools, dir +
//   "/rank-0.probe.json"); Result<wire::ProbeResult> got = CollectProbeResult(fs, run->method,
//   launch, result, log);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tianshu/agent/system_files.h"
#include "tianshu/base/status.h"
#include "tianshu/wire/wire.h"

namespace tianshu::agent {

inline constexpr size_t kProbeResultBytes = 4 << 10;    // the gloo result file, at most
inline constexpr size_t kProbeLogTailBytes = 64 << 10;  // what is read of a vendor test's log

struct ProbeTools {
  std::string python = "/usr/bin/python3";
  std::string script;             // probes/gloo_bandwidth.py; "" when the agent found none
  std::vector<std::string> path;  // directories searched for the vendor tests (the ranks' PATH)
  std::function<bool(const std::string&)> exists;  // whether a file exists
};

// The tool a probe uses on this node: "gloo", "nccl-tests", "rccl-tests" or "hccl-test". Fails
// when the order names a vendor test that is not installed or cannot run (ranks on other nodes).
[[nodiscard]] Result<std::string> ProbeMethod(const wire::LaunchOrder& launch,
                                              const ProbeTools& tools);

// What one rank of a probe runs.
struct ProbeRank {
  std::string method;
  std::vector<std::string> argv;           // empty: a vendor test's other rank, which ends at once
  std::map<std::string, std::string> env;  // laid over the rank's environment
};
// `launch` must carry a probe; `rank` is one of its ranks; `result_path` is where rank 0 of a
// gloo probe writes what it measured (TIANSHU_PROBE_RESULT).
[[nodiscard]] Result<ProbeRank> PlanProbeRank(const wire::LaunchOrder& launch,
                                              const wire::RankLaunch& rank, const ProbeTools& tools,
                                              const std::string& result_path);

// probes/gloo_bandwidth.py's result file: one JSON object, strict (known keys, finite values
// >= 0, method "gloo").
[[nodiscard]] Result<wire::ProbeResult> ParseGlooProbeResult(std::string_view text);
// all_reduce_perf's output (nccl-tests, rccl-tests): the row of `bytes` (else the last row),
// out-of-place algbw and busbw, "iters: N" from its header; `method` names the tool.
[[nodiscard]] Result<wire::ProbeResult> ParseAllReducePerf(std::string_view text,
                                                           const std::string& method,
                                                           int64_t bytes);
// HCCL all_reduce_test's output: the "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s):"
// table; busbw = algbw * 2(n-1)/n for `ranks` NPUs.
[[nodiscard]] Result<wire::ProbeResult> ParseHcclTest(std::string_view text, int64_t bytes,
                                                      int ranks);

// What rank 0 of a probe measured, once it exited 0: the result file for gloo, the tail of its
// log for the vendor tests. Bounded reads through ReadUntrusted*; errors say why there is none.
[[nodiscard]] Result<wire::ProbeResult> CollectProbeResult(SystemFiles& fs,
                                                           const std::string& method,
                                                           const wire::LaunchOrder& launch,
                                                           const std::string& result_path,
                                                           const std::string& log_path);

}  // namespace tianshu::agent
