#include "tianshu/base/data_files.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace tianshu {
namespace {

namespace fs = std::filesystem;

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tianshu-data-files-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void WritePlain(const std::string& name, const std::string& data) const {
    std::ofstream(Path(name), std::ios::binary) << data;
  }
  // Appends one gzip member (a second call makes a multi-member file, as `cat a.gz b.gz`).
  void AppendGzip(const std::string& name, const std::string& data) const {
    gzFile f = gzopen(Path(name).c_str(), "ab9");
    ASSERT_NE(f, nullptr);
    if (!data.empty()) {
      ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
                static_cast<int>(data.size()));
    }
    gzclose(f);
  }
  std::string ReadRaw(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

TEST_F(DataFilesTest, ReadsPlainAndCompressedFilesTheSame) {
  std::string csv = "timestamp,duration,num_gpus\n1,2,3\n4,5,6\n";
  WritePlain("plain.csv", csv);
  AppendGzip("packed.csv.gz", csv);
  auto plain = ReadDataFile(Path("plain.csv"));
  auto packed = ReadDataFile(Path("packed.csv.gz"));
  ASSERT_TRUE(plain) << plain.error().message;
  ASSERT_TRUE(packed) << packed.error().message;
  EXPECT_EQ(*plain, csv);
  EXPECT_EQ(*packed, csv);
  EXPECT_NE(ReadRaw("packed.csv.gz"), csv);  // it really is compressed on disk
}

TEST_F(DataFilesTest, NameWithoutGzFindsTheCompressedFile) {
  AppendGzip("philly.csv.gz", "a,b\n1,2\n");
  EXPECT_EQ(ExistingDataFile(Path("philly.csv")), Path("philly.csv.gz"));
  auto text = ReadDataFile(Path("philly.csv"));
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, "a,b\n1,2\n");
  // A plain file of the asked name is preferred to its compressed sibling.
  WritePlain("philly.csv", "plain\n");
  EXPECT_EQ(*ReadDataFile(Path("philly.csv")), "plain\n");
}

TEST_F(DataFilesTest, ConcatenatedGzipMembersAreReadWhole) {
  AppendGzip("two.csv.gz", "first\n");
  AppendGzip("two.csv.gz", "second\n");
  auto text = ReadDataFile(Path("two.csv.gz"));
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, "first\nsecond\n");
}

TEST_F(DataFilesTest, ZeroPaddingAfterTheStreamIsIgnoredOtherTrailingBytesAreNot) {
  AppendGzip("padded.csv.gz", "a,b\n");
  std::string raw = ReadRaw("padded.csv.gz");
  WritePlain("padded.csv.gz", raw + std::string(512, '\0'));
  auto padded = ReadDataFile(Path("padded.csv.gz"));
  ASSERT_TRUE(padded) << padded.error().message;
  EXPECT_EQ(*padded, "a,b\n");
  WritePlain("junk.csv.gz", raw + "trailing junk");
  auto junk = ReadDataFile(Path("junk.csv.gz"));
  ASSERT_FALSE(junk);
  EXPECT_NE(junk.error().message.find(Path("junk.csv.gz") + ": corrupt gzip data"),
            std::string::npos)
      << junk.error().message;
}

TEST_F(DataFilesTest, GzNameWithoutGzipDataIsAnError) {
  WritePlain("empty.csv.gz", "");
  WritePlain("text.csv.gz", "a,b\n");
  for (const char* name : {"empty.csv.gz", "text.csv.gz"}) {
    auto r = ReadDataFile(Path(name));
    ASSERT_FALSE(r) << name;
    EXPECT_NE(r.error().message.find(Path(name) + ": not gzip data"), std::string::npos)
        << r.error().message;
  }
}

TEST_F(DataFilesTest, ReadsAPipe) {
  // Process substitution and /dev/stdin are pipes, not regular files.
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(Path("fifo")) << "a,b\n1,2\n"; });
  auto text = ReadDataFile(Path("fifo"));
  writer.join();
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, "a,b\n1,2\n");
}

TEST_F(DataFilesTest, MissingFileNamesBothNamesTried) {
  auto r = ReadDataFile(Path("nowhere.csv"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(Path("nowhere.csv") + ": no such file"), std::string::npos);
  EXPECT_NE(r.error().message.find("nowhere.csv.gz"), std::string::npos);
  auto d = ReadDataFile(dir_.string());
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("is a directory"), std::string::npos);
}

TEST_F(DataFilesTest, CorruptAndTruncatedGzipAreErrorsNamingTheFile) {
  std::string big;
  for (int i = 0; i < 20000; ++i) big += std::to_string(i * 7919) + ",x\n";
  AppendGzip("whole.csv.gz", big);
  std::string raw = ReadRaw("whole.csv.gz");
  WritePlain("cut.csv.gz", raw.substr(0, raw.size() / 2));
  auto cut = ReadDataFile(Path("cut.csv.gz"));
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.error().message.find(Path("cut.csv.gz") + ": truncated gzip"), std::string::npos)
      << cut.error().message;
  std::string bad = raw;
  for (size_t i = 20; i < 60 && i < bad.size(); ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  WritePlain("bad.csv.gz", bad);
  auto corrupt = ReadDataFile(Path("bad.csv.gz"));
  ASSERT_FALSE(corrupt);
  EXPECT_NE(corrupt.error().message.find(Path("bad.csv.gz") + ": "), std::string::npos);
  EXPECT_NE(corrupt.error().message.find("gzip"), std::string::npos) << corrupt.error().message;
}

TEST_F(DataFilesTest, ExpansionStopsAtTheLimit) {
  // 8 MiB of zeros compresses to a few KiB: a small file that would expand past the limit.
  AppendGzip("bomb.csv.gz", std::string(size_t{8} << 20, '0'));
  EXPECT_LT(ReadRaw("bomb.csv.gz").size(), size_t{64} << 10);
  auto r = ReadDataFile(Path("bomb.csv.gz"), size_t{1} << 20);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("expands to more than the 1 MiB"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(ReadDataFile(Path("bomb.csv.gz"), size_t{9} << 20));
  WritePlain("big.csv", std::string(size_t{2} << 20, 'x'));
  EXPECT_FALSE(ReadDataFile(Path("big.csv"), size_t{1} << 20));
}

TEST_F(DataFilesTest, DataDirPrecedence) {
  // An installed layout: <prefix>/bin/tianshu and <prefix>/share/tianshu/data/README.md.
  fs::create_directories(dir_ / "usr/bin");
  fs::create_directories(dir_ / "usr/share/tianshu/data");
  WritePlain("usr/share/tianshu/data/README.md", "data");
  // A source tree with a build tree inside it.
  fs::create_directories(dir_ / "src/build/tools/tianshu");
  fs::create_directories(dir_ / "src/data");
  WritePlain("src/CMakeLists.txt", "project(x)");
  WritePlain("src/data/README.md", "data");

  std::string installed = Path("usr/share/tianshu/data");
  std::string source = Path("src/data");
  EXPECT_EQ(FindDataDir({.executable = Path("usr/bin/tianshu")}).dir, installed);
  EXPECT_EQ(FindDataDir({.executable = Path("src/build/tools/tianshu/tianshu")}).dir, source);
  EXPECT_EQ(FindDataDir({.executable = Path("elsewhere/tianshu"), .source_dir = Path("src")}).dir,
            source);
  // Explicit choices win over a found default; one without the data is an error naming it.
  EXPECT_EQ(FindDataDir({.env = source, .executable = Path("usr/bin/tianshu")}).dir, source);
  EXPECT_EQ(FindDataDir({.flag = installed, .env = source}).dir, installed);
  DataDirSearch stale = FindDataDir({.env = "/x", .executable = Path("usr/bin/tianshu")});
  EXPECT_EQ(stale.dir, "");
  EXPECT_NE(stale.Missing().find("TIANSHU_DATA /x is not a data folder"), std::string::npos)
      << stale.Missing();
  EXPECT_NE(FindDataDir({.flag = "/y", .env = source}).Missing().find("--data /y"),
            std::string::npos);

  DataDirSearch none =
      FindDataDir({.executable = Path("elsewhere/bin/tianshu"), .source_dir = Path("gone")});
  EXPECT_EQ(none.dir, "");
  EXPECT_EQ(none.looked.size(), 2u);
  EXPECT_NE(none.Missing().find(Path("elsewhere/share/tianshu/data")), std::string::npos);
  EXPECT_NE(none.Missing().find("TIANSHU_DATA"), std::string::npos);
}

// A build tree names its source tree in tianshu.source-dir beside the binary; a binary without
// that file (an installed one), or with a file that does not name an absolute path, has none.
TEST_F(DataFilesTest, RecordedSourceDirIsReadFromBesideTheBinary) {
  fs::create_directories(dir_ / "build/bin");
  fs::create_directories(dir_ / "src/data");
  WritePlain("src/data/README.md", "data");
  EXPECT_EQ(RecordedSourceDir(Path("build/bin/tianshu")), "");
  EXPECT_EQ(RecordedSourceDir(""), "");
  WritePlain("build/bin/tianshu.source-dir", Path("src") + "\n");
  EXPECT_EQ(RecordedSourceDir(Path("build/bin/tianshu")), Path("src"));
  std::string hinted = RecordedSourceDir(Path("build/bin/tianshu"));
  EXPECT_EQ(FindDataDir({.executable = Path("build/bin/tianshu"), .source_dir = hinted}).dir,
            Path("src/data"));
  WritePlain("build/bin/tianshu.source-dir", "relative/src\n");
  EXPECT_EQ(RecordedSourceDir(Path("build/bin/tianshu")), "");
  WritePlain("build/bin/tianshu.source-dir", "/" + std::string(5000, 'x'));
  EXPECT_EQ(RecordedSourceDir(Path("build/bin/tianshu")), "");
  fs::remove(dir_ / "build/bin/tianshu.source-dir");
  fs::create_directories(dir_ / "build/bin/tianshu.source-dir");
  EXPECT_EQ(RecordedSourceDir(Path("build/bin/tianshu")), "");
}

}  // namespace
}  // namespace tianshu
