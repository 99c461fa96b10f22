#include "tianshu/agent/progress_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace tianshu::agent {
namespace {

std::string Line(int64_t step, double t) {
  return R"({"step": )" + std::to_string(step) + R"(, "step_time_s": )" + std::to_string(t) + "}\n";
}

TEST(ProgressFile, LastStepAndTheMedianOfTheLastEightStepTimes) {
  std::string text;
  for (int i = 1; i <= 10; ++i) text += Line(i, i == 10 ? 9.0 : 0.1 * i);  // a slow last step
  auto s = SummariseProgress(text, true);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 10);
  EXPECT_EQ(s->samples, 10);
  // The last 8: 0.3 .. 0.9 and 9.0; the median is (0.6 + 0.7) / 2 whatever the slow one took.
  EXPECT_NEAR(s->step_time_s, 0.65, 1e-9);
  auto one = SummariseProgress(Line(3, 0.5), true);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->step, 3);
  EXPECT_DOUBLE_EQ(one->step_time_s, 0.5);
}

TEST(ProgressFile, OptionalFieldsAreCheckedAndUnknownOnesIgnored) {
  auto s = SummariseProgress(
      R"({"step": 7, "step_time_s": 0.25, "time": 1700000000.5, "samples_per_s": 812.5, )"
      R"("total_steps": 1000, "loss": 2.1})"
      "\n",
      true);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 7);
}

TEST(ProgressFile, MalformedLinesAreSkipped) {
  const std::string bad[] = {
      "not json",
      "[1, 2]",
      R"({"step": 5})",                                         // no step time
      R"({"step_time_s": 0.1})",                                // no step
      R"({"step": -1, "step_time_s": 0.1})",                    // negative step
      R"({"step": 1.5, "step_time_s": 0.1})",                   // fractional step
      R"({"step": 18446744073709551615, "step_time_s": 0.1})",  // beyond int64
      R"({"step": 5, "step_time_s": "0.1"})",                   // a string
      R"({"step": 5, "step_time_s": -0.1})",                    // negative time
      R"({"step": 5, "step_time_s": 1e300})",                   // absurd
      R"({"step": 5, "step_time_s": 0.1, "time": "now"})",      // optional of the wrong type
      R"({"step": 5, "step_time_s": 0.1, "total_steps": -3})",
      R"({"step": 5, "step_time_s": 0.1, "x": [[[[[[1]]]]]]})",  // nested deeper than 4
      R"({"step": 5, "step_time_s": 0.1, "pad": ")" + std::string(5000, 'x') + R"("})",  // long
  };
  std::string text = Line(1, 0.2);
  for (const std::string& b : bad) text += b + "\n";
  text += Line(2, 0.4);
  text += R"({"step": 3, "step_ti)";  // being written: no newline yet
  auto s = SummariseProgress(text, true);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->samples, 2);
  EXPECT_EQ(s->step, 2);
  EXPECT_NEAR(s->step_time_s, 0.3, 1e-9);
  EXPECT_FALSE(SummariseProgress("garbage\n\n\n", true));
  EXPECT_FALSE(SummariseProgress("", true));
  EXPECT_FALSE(SummariseProgress(Line(1, 0.1).substr(0, 10), true));  // no complete line
}

TEST(ProgressFile, OnlyTheTailOfALargeFileIsRead) {
  FakeSystemFiles fs;
  std::string text;
  int64_t step = 0;
  while (text.size() < 3 * kProgressTailBytes) text += Line(++step, 0.5);
  fs.AddFile("/w/p.jsonl", text);
  fs.SetMtime("/w/p.jsonl", 1'700'000'000'123'456'789);
  auto p = ReadProgressFile(fs, "/w/p.jsonl");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->summary.step, step);
  EXPECT_LT(p->summary.samples, step / 2);  // the window, not the whole file
  EXPECT_GT(p->summary.samples, 100);
  EXPECT_EQ(p->updated_ms, 1'700'000'000'123);
  EXPECT_FALSE(ReadProgressFile(fs, "/w/missing.jsonl"));
  // A cut first line is skipped, not misread: here its cut leaves `5, "step_time_s": 9}`.
  auto cut = SummariseProgress(R"(5, "step_time_s": 9})"
                               "\n" +
                                   Line(6, 0.5),
                               false);
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->samples, 1);
}

// The real file system: the workload's file is read from its end, and anything but a plain
// file (a symlink to a file the workload may not read, a FIFO to block on) is refused.
TEST(ProgressFile, RealFilesAreReadFromTheirEndAndOddFilesRefused) {
  char tmpl[] = "/tmp/tianshu-progress-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  RealSystemFiles fs;
  const std::string path = dir + "/progress-rank-0.jsonl";
  {
    std::ofstream f(path);
    for (int i = 1; i <= 5000; ++i) f << Line(i, 0.25);
  }
  auto p = ReadProgressFile(fs, path);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->summary.step, 5000);
  EXPECT_DOUBLE_EQ(p->summary.step_time_s, 0.25);
  EXPECT_GT(p->updated_ms, 1'600'000'000'000);
  auto tail = fs.ReadUntrustedTail(path, 100);
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->data.size(), 100u);
  EXPECT_GT(tail->size, 100);
  ASSERT_EQ(::symlink(path.c_str(), (dir + "/link").c_str()), 0);
  EXPECT_FALSE(ReadProgressFile(fs, dir + "/link"));
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(ReadProgressFile(fs, dir + "/fifo"));  // refused at once, not blocked on
  ASSERT_EQ(::link(path.c_str(), (dir + "/hard").c_str()), 0);
  EXPECT_FALSE(ReadProgressFile(fs, dir + "/hard"));  // two links: refused
  (void)!std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace tianshu::agent
