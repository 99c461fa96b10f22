#include "tianshu/base/secret_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tianshu {
namespace {

namespace fs = std::filesystem;

class SecretFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tianshu-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  static unsigned Mode(const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777u;
  }
  std::string dir_;
};

TEST_F(SecretFiles, WrittenPrivateFromTheStartAndNeverReplaced) {
  ::umask(0);  // the widest umask: the mode must not depend on it
  std::string path = dir_ + "/token";
  ASSERT_TRUE(WritePrivateFile(path, "0123456789abcdef0123\n"));
  EXPECT_EQ(Mode(path), 0600u);
  auto again = WritePrivateFile(path, "other-token-other-token\n");
  EXPECT_FALSE(again);  // never replaces what exists
  auto token = ReadSecretFile(path);
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(*token, "0123456789abcdef0123");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
  ::umask(022);
}

TEST_F(SecretFiles, ReadingRefusesWorldReadableShortAndOddFiles) {
  std::string path = dir_ + "/token";
  std::ofstream(path) << "0123456789abcdef0123\n";
  ::chmod(path.c_str(), 0644);
  auto r = ReadSecretFile(path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("readable or writable by every user (mode 0644)"),
            std::string::npos)
      << r.error().message;
  ::chmod(path.c_str(), 0640);  // the package's root:tianshu 0640 is fine
  EXPECT_TRUE(ReadSecretFile(path));

  std::string short_path = dir_ + "/short";
  ASSERT_TRUE(WritePrivateFile(short_path, "abc\n"));
  auto s = ReadSecretFile(short_path);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("at least 16"), std::string::npos) << s.error().message;

  EXPECT_FALSE(ReadSecretFile(dir_));  // a directory
  fs::create_symlink(path, dir_ + "/link");
  EXPECT_FALSE(ReadSecretFile(dir_ + "/link"));  // O_NOFOLLOW
  EXPECT_FALSE(ReadSecretFile(dir_ + "/missing"));
}

TEST_F(SecretFiles, DirectoriesAndAppendFilesArePrivate) {
  ::umask(0);
  std::string d = dir_ + "/a/b/c";
  ASSERT_TRUE(MakePrivateDirs(d));
  EXPECT_EQ(Mode(dir_ + "/a"), 0700u);
  EXPECT_EQ(Mode(d), 0700u);
  auto fd = OpenPrivateAppend(d + "/log");
  ASSERT_TRUE(fd);
  ::close(*fd);
  EXPECT_EQ(Mode(d + "/log"), 0600u);
  std::ofstream(d + "/old") << "x";
  ::chmod((d + "/old").c_str(), 0644);
  auto fd2 = OpenPrivateAppend(d + "/old");  // an older, wider file is narrowed
  ASSERT_TRUE(fd2);
  ::close(*fd2);
  EXPECT_EQ(Mode(d + "/old"), 0600u);
  ::chmod((d + "/old").c_str(), 0644);
  ASSERT_TRUE(NarrowToPrivate(d + "/old"));
  EXPECT_EQ(Mode(d + "/old"), 0600u);
  EXPECT_TRUE(NarrowToPrivate(d + "/none"));
  ::umask(022);
}

}  // namespace
}  // namespace tianshu
