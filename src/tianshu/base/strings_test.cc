#include "tianshu/base/strings.h"

#include <gtest/gtest.h>

namespace tianshu {
namespace {

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
