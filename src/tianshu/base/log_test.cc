#include "tianshu/base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace tianshu {
namespace {

// 2026-01-02T03:04:05.678Z
constexpr int64_t kTimeMs = 1767323045678;

TEST(Log, TextLineHasTimeLevelAndComponent) {
  EXPECT_EQ(FormatLogLine(LogFormat::kText, kTimeMs, LogLevel::kWarning, "serve", "store: x"),
            "2026-01-02T03:04:05.678Z warning serve: store: x\n");
  // One event stays one line.
  EXPECT_EQ(FormatLogLine(LogFormat::kText, kTimeMs, LogLevel::kInfo, "agent", "a\nb"),
            "2026-01-02T03:04:05.678Z info agent: a\\nb\n");
}

TEST(Log, JsonLineEscapesTheMessage) {
  EXPECT_EQ(FormatLogLine(LogFormat::kJson, kTimeMs, LogLevel::kError, "ledger",
                          "say \"hi\"\\\n\t\x01{}"),
            R"({"time":"2026-01-02T03:04:05.678Z","level":"error","component":"ledger",)"
            R"("message":"say \"hi\"\\\n\t\u0001{}"})"
            "\n");
}

TEST(Log, ParsesFormats) {
  EXPECT_EQ(ParseLogFormat("text").value(), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("json").value(), LogFormat::kJson);
  ASSERT_FALSE(ParseLogFormat("xml"));
  EXPECT_EQ(ParseLogFormat("xml").error().message, "log format 'xml': expected text or json");
  EXPECT_EQ(ParseLogLevel("debug").value(), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("warning").value(), LogLevel::kWarning);
  ASSERT_FALSE(ParseLogLevel("warn"));
  EXPECT_NE(ParseLogLevel("warn").error().message.find("debug, info, warning or error"),
            std::string::npos);
}

// Through spdlog to the real stderr (redirected to a file here), with the level filter.
TEST(Log, WritesToStderrThroughSpdlog) {
  char path[] = "/tmp/tianshu-log-test-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::fflush(stderr);
  int saved = ::dup(2);
  ::dup2(fd, 2);
  SetLogFormat(LogFormat::kJson);
  LogInfo("serve", "braces {} are not a format");
  SetLogLevel(LogLevel::kWarning);
  LogInfo("serve", "dropped");
  LogWarning("agent", "kept");
  SetLogLevel(LogLevel::kInfo);
  SetLogFormat(LogFormat::kText);
  LogError("store", "text again");
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::FILE* f = std::fopen(path, "r");
  ASSERT_NE(f, nullptr);
  std::string got;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) got.append(buf, n);
  std::fclose(f);
  ::unlink(path);
  EXPECT_NE(
      got.find(R"("level":"info","component":"serve","message":"braces {} are not a format"})"),
      std::string::npos)
      << got;
  EXPECT_EQ(got.find("dropped"), std::string::npos) << got;
  EXPECT_NE(got.find(R"("level":"warning","component":"agent","message":"kept"})"),
            std::string::npos)
      << got;
  EXPECT_NE(got.find("Z error store: text again\n"), std::string::npos) << got;
}

}  // namespace
}  // namespace tianshu
