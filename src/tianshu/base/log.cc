#include "tianshu/base/log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>

namespace tianshu {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};
std::atomic<LogLevel> g_level{LogLevel::kInfo};

// JSON string contents (RFC 8259 §7): quote, backslash and control characters escaped.
void AppendJsonEscaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
}

// RFC 3339 in UTC with milliseconds: 2026-01-02T03:04:05.678Z.
std::string Rfc3339(int64_t time_ms) {
  std::time_t secs = static_cast<std::time_t>(time_ms / 1000);
  int64_t ms = time_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms));
  return buf;
}

LogLevel FromSpdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return LogLevel::kDebug;
    case spdlog::level::info:
      return LogLevel::kInfo;
    case spdlog::level::warn:
      return LogLevel::kWarning;
    default:
      return LogLevel::kError;
  }
}

spdlog::level::level_enum ToSpdlog(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

// Every logger's formatter: the line FormatLogLine makes, in the format chosen now.
class LineFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    const std::string line =
        FormatLogLine(g_format.load(), ms, FromSpdlog(msg.level),
                      std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                      std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>();
  }
};

// One spdlog logger per component, all writing to one stderr sink (its mutex keeps lines whole).
std::shared_ptr<spdlog::logger> LoggerFor(std::string_view component) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
  static const std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink = [] {
    auto s = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    s->set_formatter(std::make_unique<LineFormatter>());
    return s;
  }();
  std::lock_guard l(mu);
  if (auto it = loggers.find(component); it != loggers.end()) return it->second;
  auto logger = std::make_shared<spdlog::logger>(std::string(component), sink);
  logger->set_level(spdlog::level::trace);  // Log filters by g_level
  logger->flush_on(spdlog::level::trace);
  loggers.emplace(std::string(component), logger);
  return logger;
}

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return Fail("log format '", std::string(text), "': expected text or json");
}

Result<LogLevel> ParseLogLevel(std::string_view text) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (text == LogLevelName(l)) return l;
  }
  return Fail("log level '", std::string(text), "': expected debug, info, warning or error");
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "error";
}

void SetLogFormat(LogFormat format) { g_format = format; }
void SetLogLevel(LogLevel level) { g_level = level; }

void Log(LogLevel level, std::string_view component, std::string_view message) {
  if (level < g_level.load()) return;
  LoggerFor(component)->log(ToSpdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

std::string FormatLogLine(LogFormat format, int64_t time_ms, LogLevel level,
                          std::string_view component, std::string_view message) {
  std::string out;
  out.reserve(message.size() + component.size() + 80);
  if (format == LogFormat::kJson) {
    out += "{\"time\":\"";
    out += Rfc3339(time_ms);
    out += "\",\"level\":\"";
    out += LogLevelName(level);
    out += "\",\"component\":\"";
    AppendJsonEscaped(out, component);
    out += "\",\"message\":\"";
    AppendJsonEscaped(out, message);
    out += "\"}\n";
    return out;
  }
  out += Rfc3339(time_ms);
  out += ' ';
  out += LogLevelName(level);
  out += ' ';
  out += component;
  out += ": ";
  // One event, one line: a message's own newlines are shown escaped.
  for (char c : message) {
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '\n';
  return out;
}

}  // namespace tianshu
