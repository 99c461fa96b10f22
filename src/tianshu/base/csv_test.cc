#include "tianshu/base/csv.h"

#include <gtest/gtest.h>

namespace tianshu {
namespace {

using Fields = std::vector<std::string>;

std::vector<Fields> FieldsOf(std::string_view text, const CsvOptions& o = {}) {
  auto r = ParseCsv("t.csv", text, o);
  EXPECT_TRUE(r) << r.error().ToString();
  std::vector<Fields> out;
  if (r) {
    for (const auto& rec : *r) out.push_back(rec.fields);
  }
  return out;
}

std::string ErrorOf(std::string_view text, const CsvOptions& o = {}) {
  auto r = ParseCsv("t.csv", text, o);
  EXPECT_FALSE(r) << "parsed: " << text;
  return r ? "" : r.error().ToString();
}

TEST(Csv, PlainFieldsAndLineEnds) {
  EXPECT_EQ(FieldsOf("a,b,c\n1,2,3\n"), (std::vector<Fields>{{"a", "b", "c"}, {"1", "2", "3"}}));
  EXPECT_EQ(FieldsOf("a,b\r\n1,2"), (std::vector<Fields>{{"a", "b"}, {"1", "2"}}));
  EXPECT_EQ(FieldsOf("a,,\n"), (std::vector<Fields>{{"a", "", ""}}));
  EXPECT_EQ(FieldsOf(""), std::vector<Fields>{});
  // Blank lines (also spaces only) are skipped; a quoted empty field is not blank.
  EXPECT_EQ(FieldsOf("\na\n  \r\n\"\"\n"), (std::vector<Fields>{{"a"}, {""}}));
  // A byte-order mark is not part of the first field.
  EXPECT_EQ(FieldsOf("\xEF\xBB\xBFts,d\n"), (std::vector<Fields>{{"ts", "d"}}));
}

TEST(Csv, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  auto r = ParseCsv("t.csv", "id,note\n1,\"a, \"\"b\"\"\nnext line\"\n2,x\n");
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1].fields, (Fields{"1", "a, \"b\"\nnext line"}));
  EXPECT_EQ((*r)[1].line, 2);
  EXPECT_EQ((*r)[2].line, 4);  // the record after a two-line one
  EXPECT_EQ((*r)[1].positions[1].column, 3);
  // Spaces around a quoted field go; inside it they stay.
  EXPECT_EQ(FieldsOf("a, \" b \" ,c\n"), (std::vector<Fields>{{"a", " b ", "c"}}));
}

TEST(Csv, TrimAndCommentsAreOptions) {
  EXPECT_EQ(FieldsOf(" a , b\n"), (std::vector<Fields>{{" a ", " b"}}));
  CsvOptions o{.trim = true, .comment = '#'};
  auto r = ParseCsv("t.csv", "# probe\n a , b # measured\n\"#1\",c\n", o);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].fields, (Fields{"a", "b"}));
  EXPECT_EQ((*r)[0].line, 2);
  EXPECT_EQ((*r)[0].positions[1].column, 6);  // where "b" starts
  EXPECT_EQ((*r)[1].fields, (Fields{"#1", "c"}));
  // Without the option '#' is text.
  EXPECT_EQ(FieldsOf("a#b\n"), (std::vector<Fields>{{"a#b"}}));
}

TEST(Csv, MalformedTextNamesFileLineAndColumn) {
  EXPECT_EQ(ErrorOf("a,b\n1,\"open\n2,3\n"),
            "t.csv:2:3: a quoted field is not closed (its quote opens here)");
  EXPECT_EQ(ErrorOf("a,\"b\"c\n").find("t.csv:1:6: unexpected 'c' after a closing quote"), 0u);
  EXPECT_EQ(ErrorOf("a,b\nx,y\"z\n").find("t.csv:2:4: a quote inside an unquoted field"), 0u);
  auto r = ParseCsv("f.csv", "\"x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().file, "f.csv");
  EXPECT_EQ(r.error().line, 1);
  EXPECT_EQ(r.error().column, 1);
  EXPECT_EQ(r.error().ToError().message, r.error().ToString());
}

TEST(Csv, WrittenFieldsReadBackUnchanged) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField(" pad"), "\" pad\"");
  EXPECT_EQ(CsvLine({"1", "x\ny", ""}), "1,\"x\ny\",\n");
  EXPECT_EQ(CsvLine({""}), "\"\"\n");  // not a blank line, which a reader skips
  Fields tricky = {"", "a,b", "\"", "two\r\nlines", " sp ", "#", "last"};
  for (CsvOptions o : {CsvOptions{}, CsvOptions{.trim = true}}) {
    auto r = ParseCsv("t.csv", CsvLine(tricky) + CsvLine({"z"}), o);
    ASSERT_TRUE(r) << r.error().ToString();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0].fields, tricky);
    EXPECT_EQ((*r)[1].fields, Fields{"z"});
  }
}

}  // namespace
}  // namespace tianshu
