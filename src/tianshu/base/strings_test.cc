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

TEST(Strings, LinesAndFieldsReadInPlace) {
  const std::string_view text = "cpu  1\t2 3\n\nlast";
  size_t at = 0;
  EXPECT_EQ(NextLine(text, &at), "cpu  1\t2 3");
  EXPECT_EQ(NextLine(text, &at), "");
  EXPECT_EQ(NextLine(text, &at), "last");
  EXPECT_GT(at, text.size());  // done
  at = 0;
  EXPECT_EQ(NextField(text, &at), "cpu");
  EXPECT_EQ(NextField(text, &at), "1");
  EXPECT_EQ(NextField(text, &at), "2");
  EXPECT_EQ(NextField(text, &at), "3");
  EXPECT_EQ(NextField(text, &at), "");  // a field ends at the line's end
  size_t end = 99;
  EXPECT_EQ(NextField(text, &end), "");
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

// Hostile names: a forged row (newline), a cleared screen (ESC), a hidden NUL, a right-to-left
// override that reorders what follows, a C1 control and a stray byte all come out escaped.
TEST(ForTerminal, EscapesWhatCouldForgeOrHideText) {
  EXPECT_EQ(ForTerminal("gpt-7b"), "gpt-7b");
  EXPECT_EQ(ForTerminal("\u6a21\u578b"), "\u6a21\u578b");  // UTF-8 text is kept
  EXPECT_EQ(ForTerminal("a\nj-000009 running"), "a\\x0aj-000009 running");
  EXPECT_EQ(ForTerminal("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(ForTerminal(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(ForTerminal("x\u202egnp.exe"), "x\\u{202e}gnp.exe");
  EXPECT_EQ(ForTerminal("\u2067x"), "\\u{2067}x");
  EXPECT_EQ(ForTerminal("\xc2\x9b"), "\\u{009b}");            // C1 CSI
  EXPECT_EQ(ForTerminal("\xff\xc3"), "\\xff\\xc3");           // invalid and truncated UTF-8
  EXPECT_EQ(ForTerminal("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(ForTerminal("\x7f"), "\\x7f");
  EXPECT_EQ(ForTerminal("\xf8\x9b\x9b"), "\\xf8\\x9b\\x9b");  // no such lead byte
}

}  // namespace
}  // namespace tianshu
