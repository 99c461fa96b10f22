#include "tianshu/agent/system_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tianshu::agent {
namespace {

// The real file system: MakeDirs makes every missing directory (0711) and accepts one that
// exists; a path under a file is an error naming the path; Replace leaves no temporary file;
// Overwrite writes in place or not at all.
TEST(RealSystemFiles, MakeDirsReplaceAndOverwrite) {
  char tmpl[] = "/tmp/tianshu-files-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  RealSystemFiles fs;
  const std::string deep = dir + "/a/b/c";
  ASSERT_TRUE(fs.MakeDirs(deep));
  struct stat st {};
  ASSERT_EQ(::stat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0711u & ~mask);
  ASSERT_TRUE(fs.MakeDirs(deep));            // there already
  ASSERT_TRUE(fs.MakeDirs(deep + "/d"));     // one below an existing one
  ASSERT_TRUE(fs.MakeDirs(dir + "/a/x/y"));  // a branch from the middle
  EXPECT_TRUE(fs.Exists(dir + "/a/x/y"));
  for (auto sync : {SystemFiles::Sync::kDurable, SystemFiles::Sync::kThisBoot}) {
    ASSERT_TRUE(fs.Replace(dir + "/a/f", "one\n", sync));
    ASSERT_TRUE(fs.Replace(dir + "/a/f", "two\n", sync));
    EXPECT_EQ(*fs.Read(dir + "/a/f"), "two\n");
    EXPECT_FALSE(fs.Exists(dir + "/a/f.tmp"));
  }
  // Overwrite: in place (the same inode), only over a regular file of exactly that length,
  // never through a link.
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat((dir + "/a/f").c_str(), &before), 0);
  ASSERT_TRUE(fs.Overwrite(dir + "/a/f", "six\n"));
  EXPECT_EQ(*fs.Read(dir + "/a/f"), "six\n");
  ASSERT_EQ(::stat((dir + "/a/f").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_FALSE(fs.Overwrite(dir + "/a/f", "seven\n"));
  EXPECT_FALSE(fs.Overwrite(dir + "/a/none", "six\n"));
  EXPECT_FALSE(fs.Overwrite(dir + "/a/x", "six\n"));  // a directory
  ASSERT_EQ(::symlink((dir + "/a/f").c_str(), (dir + "/a/link").c_str()), 0);
  EXPECT_FALSE(fs.Overwrite(dir + "/a/link", "ten\n"));
  // A FIFO planted there fails at once (nobody reads it), and a hard link is not written.
  ASSERT_EQ(::mkfifo((dir + "/a/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(fs.Overwrite(dir + "/a/fifo", "ten\n"));
  ASSERT_TRUE(fs.Replace(dir + "/a/other", "one\n", SystemFiles::Sync::kThisBoot));
  ASSERT_EQ(::link((dir + "/a/other").c_str(), (dir + "/a/hard").c_str()), 0);
  EXPECT_FALSE(fs.Overwrite(dir + "/a/hard", "ten\n"));
  EXPECT_EQ(*fs.Read(dir + "/a/other"), "one\n");
  EXPECT_EQ(*fs.Read(dir + "/a/f"), "six\n");
  auto under_file = fs.MakeDirs(dir + "/a/f/g");
  ASSERT_FALSE(under_file);
  EXPECT_NE(under_file.error().message.find(dir + "/a/f/g"), std::string::npos)
      << under_file.error().message;
  (void)!std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace tianshu::agent
