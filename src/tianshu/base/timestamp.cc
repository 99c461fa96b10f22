#include "tianshu/base/timestamp.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tianshu {

namespace {

// Seconds since 1970-01-01 00:00:00 UTC of a date and time of the proleptic Gregorian calendar
// (H. Hinnant's days_from_civil), counted on as timegm counts them (a day past the end of its
// month is in the next); nullopt where a field is out of range.
std::optional<double> FromFields(int y, int mo, int d, int h, int mi, int s) {
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 ||
      s > 60) {
    return std::nullopt;
  }
  const int64_t yy = int64_t{y} - (mo <= 2);
  const int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
  const int64_t yoe = yy - era * 400;
  const int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = era * 146097 + doe - 719468;
  return static_cast<double>(days * 86400 + h * 3600 + mi * 60 + s);
}

// "YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS" exactly, as traces write them (a trace has one per
// job), read without sscanf; nullopt for any other text.
std::optional<double> ParseIso(std::string_view t) {
  if (t.size() != 10 && t.size() != 19) return std::nullopt;
  auto num = [&](size_t at, size_t len, int* out) {
    int v = 0;
    for (size_t i = at; i < at + len; ++i) {
      if (t[i] < '0' || t[i] > '9') return false;
      v = v * 10 + (t[i] - '0');
    }
    *out = v;
    return true;
  };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (!num(0, 4, &y) || t[4] != '-' || !num(5, 2, &mo) || t[7] != '-' || !num(8, 2, &d)) {
    return std::nullopt;
  }
  if (t.size() == 19 && (t[10] != ' ' || !num(11, 2, &h) || t[13] != ':' || !num(14, 2, &mi) ||
                         t[16] != ':' || !num(17, 2, &s))) {
    return std::nullopt;
  }
  return FromFields(y, mo, d, h, mi, s);
}

}  // namespace

std::optional<double> ParseUtcTimestamp(std::string_view text) {
  if (auto iso = ParseIso(text)) return iso;
  // Other spellings (no leading zeros, spaces around): what sscanf reads.
  const std::string z(text);
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const int n = std::sscanf(z.c_str(), "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &s);
  if (n != 3 && n != 6) return std::nullopt;
  return FromFields(y, mo, d, h, mi, s);
}

}  // namespace tianshu
