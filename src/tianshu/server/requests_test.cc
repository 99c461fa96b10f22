#include "tianshu/server/requests.h"

#include <gtest/gtest.h>

namespace tianshu::server {
namespace {

const char* kJob =
    "kind: training\n"
    "name: gpt\n"
    "run:\n"
    "  command: [python3, train.py, --steps, '10']\n"
    "  # a comment inside the block\n"
    "  env: {OMP_NUM_THREADS: '1'}\n"
    "model: {profile: llama2-7b}\n"
    "gpus: 4\n";

TEST(SubmitBody, YamlWithRunSectionKeepsLineNumbers) {
  auto r = ParseSubmitBody("application/yaml", kJob, "job.yaml");
  ASSERT_TRUE(r) << r.error().message << (r.error().details.empty() ? "" : r.error().details[0]);
  EXPECT_EQ(r->spec.gpus, 4);
  EXPECT_EQ(r->run.command.size(), 4u);
  EXPECT_EQ(r->run.env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(r->text.find("run:"), std::string::npos);

  std::string bad = std::string(kJob) + "gpu_count: 3\n";
  auto e = ParseSubmitBody("text/yaml; charset=utf-8", bad, "job.yaml");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 400);
  ASSERT_FALSE(e.error().details.empty());
  EXPECT_EQ(e.error().details[0].rfind("job.yaml:9:1: gpu_count", 0), 0u) << e.error().details[0];
}

TEST(SubmitBody, JsonAndErrors) {
  auto r = ParseSubmitBody(
      "application/json",
      R"({"name":"x","model":{"profile":"llama2-7b"},"gpus":2,"run":{"command":"echo hi"}})",
      "x.json");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->run.command, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(ParseSubmitBody("application/json", "{", "x").error().status, 400);
  EXPECT_EQ(ParseSubmitBody("application/xml", "<a/>", "x").error().status, 415);
  EXPECT_EQ(ParseSubmitBody("", std::string(kMaxBodyBytes + 1, ' '), "x").error().status, 413);
  auto run = ParseSubmitBody("application/json",
                             R"({"name":"x","model":{"profile":"llama2-7b"},"gpus":2,
                                 "run":{"command":[1]}})",
                             "x");
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().details[0].find("run.command"), std::string::npos);
}

// A body of deeply nested arrays, under the size limit: refused before it is parsed (it used to
// be expanded quadratically by the re-indenting dump, and overflowed the stack at 100,000).
TEST(SubmitBody, DeeplyNestedJsonIsRefusedBeforeParsing) {
  std::string deep = R"({"name":"x","model":{"profile":"llama2-7b"},"gpus":2,"labels":)" +
                     std::string(100000, '[') + std::string(100000, ']') + "}";
  ASSERT_LT(deep.size(), kMaxBodyBytes);
  auto r = ParseSubmitBody("application/json", deep, "x.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 400);
  EXPECT_NE(r.error().message.find("nested deeper than 64 levels"), std::string::npos)
      << r.error().message;
  // At the limit it is parsed (and refused for what it says, not for its depth).
  std::string ok = R"({"name":"x","model":{"profile":"llama2-7b"},"gpus":2,"labels":)" +
                   std::string(63, '[') + std::string(63, ']') + "}";
  auto at = ParseSubmitBody("application/json", ok, "x.json");
  if (!at) {
    EXPECT_EQ(at.error().message.find("nested deeper"), std::string::npos);
  }
}

// Inputs the fuzz target found that make yaml-cpp 0.7's LoadAll loop forever: refused at once.
TEST(SubmitBody, StreamsThatHangYamlCppAreRefused) {
  for (const char* text : {",", "{a: 1},", "!,ndus a\nmodelCHECKPdi", "\"x\","}) {
    auto r = ParseSubmitBody("application/yaml", text, "x.yaml");
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().status, 400);
  }
}

TEST(Query, ParsesAndRefuses) {
  auto f = ParseJobFilter({{"state", "running,pending"}, {"limit", "5"}});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->states.size(), 2u);
  EXPECT_EQ(f->limit, 5);
  EXPECT_FALSE(ParseJobFilter({{"state", "sleeping"}}));
  EXPECT_FALSE(ParseJobFilter({{"limit", "0"}}));
  EXPECT_FALSE(ParseJobFilter({{"x", "1"}}));
  EXPECT_FALSE(ParseEventQuery({{"since", "abc"}}));
  EXPECT_EQ(ParseEventQuery({{"since", "7"}})->since, 7);
  EXPECT_EQ(ParseJobId("j-000042"), 42);
  EXPECT_FALSE(ParseJobId("j-"));
  EXPECT_FALSE(ParseJobId("x-1"));
  EXPECT_EQ(FormatJobId(42), "j-000042");
}

}  // namespace
}  // namespace tianshu::server
