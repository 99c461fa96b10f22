// The log of the long-running commands (`tianshu serve`, `up`, `agent`): one line per event on
// stderr with the time (UTC, milliseconds), the level and the component that speaks, as text or
// as one JSON object a line (--log-format), written through spdlog (thread-safe sinks).
//   SetLogFormat(*ParseLogFormat("json"));
//   LogInfo("serve", "listening on http://127.0.0.1:7070");
//   json: {"time":"2026-01-02T03:04:05.678Z","level":"info","component":"serve","message":"..."}
//   text: 2026-01-02T03:04:05.678Z info serve: listening on http://127.0.0.1:7070
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "tianshu/base/status.h"

namespace tianshu {

enum class LogFormat {
  kText,  // TIME LEVEL COMPONENT: MESSAGE
  kJson,  // {"time", "level", "component", "message"}
};

enum class LogLevel {
  kDebug,    // detail for a person debugging
  kInfo,     // what an operator wants to see happen
  kWarning,  // something is off, the process carries on
  kError,    // something failed
};

// "text" or "json"; an error names the values accepted.
[[nodiscard]] Result<LogFormat> ParseLogFormat(std::string_view text);
std::string_view LogLevelName(LogLevel level);  // "debug", "info", "warning", "error"
// One of LogLevelName's names; an error names the values accepted.
[[nodiscard]] Result<LogLevel> ParseLogLevel(std::string_view text);

// The format of every line logged from now on (text until set). Thread-safe.
void SetLogFormat(LogFormat format);
// Lines below `level` are dropped (info until set). Thread-safe.
void SetLogLevel(LogLevel level);

// Writes one line to stderr. `component` names the part of the program ("serve", "agent",
// "store", "ledger"); the message may hold any bytes (JSON escapes them). Thread-safe.
void Log(LogLevel level, std::string_view component, std::string_view message);
inline void LogInfo(std::string_view component, std::string_view message) {
  Log(LogLevel::kInfo, component, message);
}
inline void LogWarning(std::string_view component, std::string_view message) {
  Log(LogLevel::kWarning, component, message);
}
inline void LogError(std::string_view component, std::string_view message) {
  Log(LogLevel::kError, component, message);
}

// One line built with <<, logged when the statement ends:
//   LogLine(LogLevel::kInfo, "agent") << "node " << name << ", " << n << " device(s)";
class LogLine {
 public:
  LogLine(LogLevel level, std::string_view component) : level_(level), component_(component) {}
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine() { Log(level_, component_, text_.str()); }
  template <typename T>
  LogLine& operator<<(const T& value) {
    text_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::string component_;
  std::ostringstream text_;
};

// The line Log writes (with its newline), for a time in milliseconds since the epoch; for tests.
std::string FormatLogLine(LogFormat format, int64_t time_ms, LogLevel level,
                          std::string_view component, std::string_view message);

}  // namespace tianshu
