#include "tianshu/base/strings.h"

#include <gtest/gtest.h>

namespace tianshu {
namespace {

TEST(Strings, JsonNestingCountsBracketsOutsideStrings) {
  EXPECT_TRUE(JsonNestingWithin(R"({"a":[1,{"b":[]}]})", 4));
  EXPECT_FALSE(JsonNestingWithin(R"({"a":[1,{"b":[]}]})", 3));
  // Brackets inside strings, escaped quotes included, do not nest.
  EXPECT_TRUE(JsonNestingWithin(R"({"a":"[[[[\"[[[[","b":"{{{{"})", 1));
  EXPECT_FALSE(JsonNestingWithin(std::string(100000, '['), 64));
  EXPECT_TRUE(JsonNestingWithin(std::string(64, '[') + std::string(64, ']'), 64));
  // Closing brackets never make the depth negative (then let later ones through).
  EXPECT_FALSE(JsonNestingWithin("]]]][[", 1));
}

TEST(Strings, SplitKeepsEmptyFields) {
  EXPECT_EQ(SplitString("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
}

TEST(Strings, NearestWordFindsTyposOnly) {
  std::vector<std::string> keys = {"scheduler", "cluster", "task_scheduler"};
  EXPECT_EQ(NearestWord("schedular", keys), "scheduler");
  EXPECT_EQ(NearestWord("clustr", keys), "cluster");
  EXPECT_EQ(NearestWord("banana", keys), "");
}

TEST(Strings, StrictNumbers) {
  int64_t i = 0;
  EXPECT_TRUE(ParseInt64("42", &i));
  EXPECT_EQ(i, 42);
  EXPECT_FALSE(ParseInt64("42x", &i));
  double d = 0;
  EXPECT_TRUE(ParseDouble("0.6", &d));
  EXPECT_FALSE(ParseDouble("", &d));
}

}  // namespace
}  // namespace tianshu
