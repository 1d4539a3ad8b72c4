// RemoveTree on real directories: trees deeper than PATH_MAX allows (which
// std::filesystem::remove_all cannot remove), wide ones, read-only ones, symlinks that must not
// be followed, and an error reported for what cannot be removed.
#include "src/common/remove_tree.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace troupe {
namespace {

std::string TmpDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// Makes `depth` nested directories named `name` under `dir` with a file at the bottom, working
// relative to directory fds (the whole path may be far past PATH_MAX).
void MakeDeepTree(const std::string& dir, int depth, const std::string& name = "a") {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < depth; ++i) {
    ASSERT_EQ(mkdirat(fd, name.c_str(), 0755), 0) << i;
    const int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
    close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  const int file = openat(fd, "bottom", O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(file, 0);
  close(file);
  close(fd);
}

// Regression: a job's 30,000 nested directories outlived DELETE and `troupe stop`: remove_all
// holds a descriptor per level and ran out (EMFILE), its error ignored. Here the process may open
// 64 files and the tree is 300 deep. A second tree goes past PATH_MAX (30 levels of 200-byte
// names).
TEST(RemoveTreeTest, RemovesTreesDeeperThanDescriptorsOrPathsReach) {
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const std::string dir = TmpDir("deep");
  MakeDeepTree(dir, 300);
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  const bool remove_all_failed = static_cast<bool>(error);
  const absl::Status removed = RemoveTree(dir);
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_TRUE(remove_all_failed) << "remove_all managed: the tree does not reproduce the bug";
  EXPECT_TRUE(removed.ok()) << removed;
  EXPECT_FALSE(std::filesystem::exists(dir));

  const std::string long_paths = TmpDir("long");
  MakeDeepTree(long_paths, 30, std::string(200, 'n'));
  EXPECT_TRUE(RemoveTree(long_paths).ok());
  EXPECT_FALSE(std::filesystem::exists(long_paths));
}

TEST(RemoveTreeTest, RemovesWideAndReadOnlyTreesAndNotWhatLinksPointAt) {
  const std::string outside = TmpDir("outside");
  std::ofstream(outside + "/keep") << "keep";
  const std::string dir = TmpDir("wide");
  for (int i = 0; i < 5000; ++i) std::ofstream(dir + "/f" + std::to_string(i)) << i;  // > a batch
  std::filesystem::create_directories(dir + "/ro/inner");
  std::ofstream(dir + "/ro/inner/file") << "x";
  chmod((dir + "/ro/inner").c_str(), 0500);
  chmod((dir + "/ro").c_str(), 0500);
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/link").c_str()), 0);
  ASSERT_EQ(symlink((outside + "/keep").c_str(), (dir + "/ro_link").c_str()), 0);
  EXPECT_TRUE(RemoveTree(dir).ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  std::ifstream kept(outside + "/keep");
  std::string text;
  kept >> text;
  EXPECT_EQ(text, "keep") << "a symlink was followed";
  // Gone already, a file, a symlink: all fine.
  EXPECT_TRUE(RemoveTree(dir).ok());
  std::ofstream(outside + "/file") << "x";
  EXPECT_TRUE(RemoveTree(outside + "/file").ok());
  EXPECT_TRUE(std::filesystem::exists(outside + "/keep"));
}

TEST(RemoveTreeTest, SaysWhatItCouldNotRemove) {
  // Nothing in /proc can be removed, not even by root.
  absl::Status status = RemoveTree("/proc/self/fdinfo");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("cannot remove /proc/self/fdinfo"), std::string::npos) << status;
  EXPECT_TRUE(std::filesystem::exists("/proc/self/fdinfo"));
  if (geteuid() == 0) return;  // root may remove what follows
  // The tree's parent is read-only: everything inside goes, the directory itself cannot.
  const std::string parent = TmpDir("locked");
  const std::string dir = parent + "/tree";
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/sub/file") << "x";
  chmod(parent.c_str(), 0500);
  status = RemoveTree(dir);
  chmod(parent.c_str(), 0755);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_NE(status.message().find(dir), std::string::npos) << status;
  EXPECT_FALSE(std::filesystem::exists(dir + "/sub"));
  EXPECT_TRUE(RemoveTree(dir).ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace troupe
