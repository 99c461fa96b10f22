#include "tianshu/base/units.h"

#include <gtest/gtest.h>

namespace tianshu {
namespace {

TEST(ParseSize, AcceptsSiIecAndPlainBytes) {
  EXPECT_EQ(*ParseSize("8MB"), 8'000'000);
  EXPECT_EQ(*ParseSize("512KiB"), 512 * 1024);
  EXPECT_EQ(*ParseSize("1GiB"), 1073741824);
  EXPECT_EQ(*ParseSize("4096"), 4096);
  EXPECT_EQ(*ParseSize("1.5GiB"), 1610612736);
  EXPECT_EQ(*ParseSize("2TB"), 2'000'000'000'000);
  EXPECT_EQ(*ParseSize(" 16 MiB "), 16 * 1048576);
}

TEST(ParseSize, RejectsNonsenseWithTheText) {
  auto r = ParseSize("8XB");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "unknown size unit 'XB' in '8XB' (expected one of B, K, KB, M, MB, G, GB, T, TB, P, "
            "PB, Ki, KiB, Mi, MiB, Gi, GiB, Ti, TiB, Pi, PiB)");
  EXPECT_FALSE(ParseSize("-1MB"));
  EXPECT_FALSE(ParseSize("MB"));
  EXPECT_FALSE(ParseSize("0.5"));
  EXPECT_FALSE(ParseSize("99999999999PB"));
}

TEST(ParseBandwidth, BitsAndBytesDiffer) {
  EXPECT_EQ(ParseBandwidth("200Gbps")->bits_per_sec, 200'000'000'000);
  EXPECT_EQ(ParseBandwidth("200Gb/s")->bits_per_sec, 200'000'000'000);
  EXPECT_DOUBLE_EQ(ParseBandwidth("600GB/s")->GBps(), 600.0);
  EXPECT_DOUBLE_EQ(ParseBandwidth("200Gbps")->GBps(), 25.0);
  auto plain = ParseBandwidth("200");
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().message.find("needs a unit"), std::string::npos);
  EXPECT_FALSE(ParseBandwidth("200gbps"));  // unit case matters: bits vs bytes
}

TEST(ParseDuration, SecondsByDefault) {
  EXPECT_EQ(*ParseDurationNs("1800"), 1800'000'000'000);
  EXPECT_EQ(*ParseDurationNs("30m"), 1800'000'000'000);
  EXPECT_EQ(*ParseDurationNs("2us"), 2000);
  EXPECT_EQ(*ParseDurationNs("1.5h"), 5400'000'000'000);
  EXPECT_FALSE(ParseDurationNs("5 fortnights"));
}

TEST(Format, ReadableForms) {
  EXPECT_EQ(FormatBytes(80.0 * 1073741824), "80.0 GiB");
  EXPECT_EQ(FormatBandwidth(Bandwidth::FromGbps(1600)), "1.60 Tb/s");
  EXPECT_EQ(FormatBandwidth(Bandwidth::FromGbps(200)), "200 Gb/s");
}

}  // namespace
}  // namespace tianshu
