#include "tianshu/wire/json_writer.h"

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tianshu/wire/wire.h"

namespace tianshu::wire {
namespace {

using json = nlohmann::json;

// Every string class the writer escapes or passes through, and strings that are not UTF-8.
const std::vector<std::string> kStrings = {
    "",
    "plain",
    "quote \" backslash \\ slash /",
    "\b\f\n\r\t",
    std::string("nul \0 inside", 12),
    "\x01\x1f\x7f",
    "caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x9a\x80",  // 2-, 3- and 4-byte sequences
    "\xff bad lead",
    "\xc3 cut short",
    "\xe6\xa8 cut short",
    "\xc0\xaf overlong",
    "\xed\xa0\x80 surrogate",
    "\xf4\x90\x80\x80 above U+10FFFF",
    "tail \xe6",
};

TEST(JsonWriter, WritesWhatDumpWritesForTheSameDocument) {
  const std::vector<double> doubles = {0.0,
                                       -0.0,
                                       1.0,
                                       8.0,
                                       0.1,
                                       3600.5,
                                       1e-7,
                                       123456789012345678.0,
                                       1e300,
                                       -2.5e-300,
                                       std::numeric_limits<double>::quiet_NaN(),
                                       std::numeric_limits<double>::infinity()};
  const std::vector<int64_t> ints = {0, -1, 42, std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()};
  std::string text;
  JsonWriter w(&text);
  json expected = json::object();
  w.BeginObject();
  w.Key("a_doubles"), w.BeginArray();
  for (double d : doubles) w.Double(d);
  w.EndArray();
  expected["a_doubles"] = doubles;
  w.Key("b_ints"), w.BeginArray();
  for (int64_t i : ints) w.Int(i);
  w.EndArray();
  expected["b_ints"] = ints;
  w.Key("c_strings"), w.Array(kStrings);
  expected["c_strings"] = kStrings;
  w.Key("d_bools"), w.BeginArray(), w.Bool(true), w.Bool(false), w.EndArray();
  expected["d_bools"] = {true, false};
  std::map<std::string, std::string> env = {{"A", "1"}, {"B \"x\"", "\n"}, {"\xff", "\xfe"}};
  w.Key("e_env"), w.Object(env);
  expected["e_env"] = env;
  std::map<std::string, int> fence = {{"n0", 3}, {"n1", -1}};
  w.Key("f_fence"), w.Object(fence);
  expected["f_fence"] = fence;
  w.Key("g_empty"), w.BeginArray(), w.BeginObject(), w.EndObject(), w.BeginArray(), w.EndArray(),
      w.EndArray();
  expected["g_empty"] = json::array({json::object(), json::array()});
  for (size_t i = 0; i < kStrings.size(); ++i) {  // also as keys (written in sorted order)
    const std::string key = "h" + std::string(1, static_cast<char>('a' + i)) + kStrings[i];
    w.Key(key), w.String(kStrings[i]);
    expected[key] = kStrings[i];
  }
  w.EndObject();
  EXPECT_EQ(text, Dump(expected));
  // And it reads back as what was written (NaN and infinity become null, as in Dump).
  const json back = json::parse(text);
  EXPECT_EQ(back["b_ints"], expected["b_ints"]);
  EXPECT_EQ(back["c_strings"][5], kStrings[5]);
  EXPECT_EQ(back["c_strings"][6], kStrings[6]);
  EXPECT_TRUE(back["a_doubles"][10].is_null());
}

TEST(JsonWriter, EachStringAloneIsDumpsString) {
  for (const auto& s : kStrings) {
    std::string out = "prefix";
    AppendJsonString(&out, s);
    EXPECT_EQ(out, "prefix" + Dump(json(s)))
        << json(s).dump(-1, ' ', true, json::error_handler_t::replace);
  }
}

}  // namespace
}  // namespace tianshu::wire
