#include "tianshu/base/timestamp.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <random>

namespace tianshu {
namespace {

double Timegm(int y, int mo, int d, int h, int mi, int s) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<double>(timegm(&tm));
}

TEST(Timestamp, TraceSpellingsCountAsTimegmDoes) {
  EXPECT_EQ(ParseUtcTimestamp("2017-10-09 07:01:55"), 1507532515.0);
  EXPECT_EQ(ParseUtcTimestamp("1970-01-01"), 0.0);
  // Every day of every month (31 for each: past the end counts on, as timegm does), leap years
  // and century years included, and random times of day.
  std::mt19937 rng(7);
  for (int y : {1900, 1969, 1970, 1999, 2000, 2016, 2017, 2100, 2400}) {
    for (int mo = 1; mo <= 12; ++mo) {
      for (int d = 1; d <= 31; ++d) {
        const int h = static_cast<int>(rng() % 24), mi = static_cast<int>(rng() % 60),
                  s = static_cast<int>(rng() % 61);
        char full[32], date[16];
        std::snprintf(full, sizeof full, "%04d-%02d-%02d %02d:%02d:%02d", y, mo, d, h, mi, s);
        std::snprintf(date, sizeof date, "%04d-%02d-%02d", y, mo, d);
        ASSERT_EQ(ParseUtcTimestamp(full), Timegm(y, mo, d, h, mi, s)) << full;
        ASSERT_EQ(ParseUtcTimestamp(date), Timegm(y, mo, d, 0, 0, 0)) << date;
      }
    }
  }
}

TEST(Timestamp, OtherSpellingsAndBadFields) {
  EXPECT_EQ(ParseUtcTimestamp("2017-1-2 3:4:5"), Timegm(2017, 1, 2, 3, 4, 5));
  EXPECT_EQ(ParseUtcTimestamp("1969-12-31 23:59:59"), -1.0);
  EXPECT_EQ(ParseUtcTimestamp("20000-2-30"), Timegm(20000, 2, 30, 0, 0, 0));
  EXPECT_EQ(ParseUtcTimestamp(" 2017-01-02"), ParseUtcTimestamp("2017-01-02"));
  for (const char* bad :
       {"", "yesterday", "2017-13-01", "2017-00-10", "2017-10-32", "2017-10-01 24:00:00",
        "2017-10-01 23:60:00", "2017-10-01 23:59:61", "2017-10", "2017-1a-01 00:00:00"}) {
    EXPECT_FALSE(ParseUtcTimestamp(bad)) << bad;
  }
}

}  // namespace
}  // namespace tianshu
