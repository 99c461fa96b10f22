// A running rank's progress file ($TIANSHU_PROGRESS_FILE), which the workload appends one JSON
// object per completed step to, read back for the heartbeat:
//   {"step": 120, "step_time_s": 0.41, "time": 1700000000.5, "samples_per_s": 812.0,
//    "total_steps": 1000}
// ("step" and "step_time_s" required; the others optional; other keys ignored). The file is the
// job owner's: only its last 64 KiB are read, refused when it is not a plain file, lines longer
// than 4 KiB or malformed are skipped, and a half-written last line waits for its newline.
//   std::optional<ProgressSummary> p = ReadProgressFile(fs,
//   "/w/jobs/job-j-1-a1/progress-rank-0.jsonl"); if (p) hb.progress.push_back({.job_id = "j-1",
//   .step = p->step, ...});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tianshu/agent/system_files.h"

namespace tianshu::agent {

inline constexpr size_t kProgressTailBytes = 64 << 10;  // what is read of a progress file
inline constexpr size_t kProgressLineBytes = 4 << 10;   // a longer line is skipped
inline constexpr int kProgressMedianOf = 8;             // step times in the median

struct ProgressSummary {
  int64_t step = -1;       // the last valid line's step
  double step_time_s = 0;  // median of the last (at most 8) valid lines' step_time_s
  int64_t samples = 0;     // valid lines in what was read
};

// The summary of a progress file's tail; `from_start` says whether `tail` begins at the file's
// start (else its first, cut, line is skipped). nullopt when no line is valid. Pure.
std::optional<ProgressSummary> SummariseProgress(std::string_view tail, bool from_start);

// A rank's progress file read through `fs` (ReadUntrustedTail), with the file's modification
// time in ms since the epoch; nullopt when the file is missing, refused or holds no valid line.
struct FileProgress {
  ProgressSummary summary;
  int64_t updated_ms = 0;
};
std::optional<FileProgress> ReadProgressFile(SystemFiles& fs, const std::string& path);

}  // namespace tianshu::agent
