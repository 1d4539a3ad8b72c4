#include "src/common/package.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troupe {
namespace {

// One hand-made package entry, as a hostile client could upload it.
std::string Entry(const std::string& path, uint32_t mode, const std::string& content) {
  std::string out;
  uint32_t n = path.size();
  uint64_t size = content.size();
  out.append(reinterpret_cast<char*>(&n), 4).append(path);
  out.append(reinterpret_cast<char*>(&mode), 4).append(reinterpret_cast<char*>(&size), 8);
  return out.append(content);
}

std::string TmpDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Every path under `dir` (relative), sorted.
std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    paths.push_back(entry.path().lexically_relative(dir).string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PackageTest, RoundTripsATreeWithModes) {
  const std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/pkg";
  mkdir(base.c_str(), 0755);
  mkdir((base + "/src").c_str(), 0755);
  mkdir((base + "/src/deep").c_str(), 0755);
  std::ofstream(base + "/config.txt") << "epochs=5\n";
  std::ofstream(base + "/src/deep/run.sh") << "#!/bin/sh\necho hi\n";
  chmod((base + "/src/deep/run.sh").c_str(), 0755);
  auto package = PackDirectory(base);
  ASSERT_TRUE(package.ok()) << package.status();
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/unpacked";
  ASSERT_TRUE(UnpackDirectory(*package, out).ok());
  EXPECT_EQ(Read(out + "/config.txt"), "epochs=5\n");
  EXPECT_EQ(Read(out + "/src/deep/run.sh"), "#!/bin/sh\necho hi\n");
  struct stat st;
  ASSERT_EQ(stat((out + "/src/deep/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755);
}

TEST(PackageTest, RefusesTooBigAndHostilePackages) {
  const std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/big";
  mkdir(base.c_str(), 0755);
  std::ofstream(base + "/blob") << std::string(2048, 'x');
  auto big = PackDirectory(base, /*max_bytes=*/1024);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("larger than"), std::string::npos);
  EXPECT_FALSE(PackDirectory(base + "/missing").ok());

  std::string hostile;
  const std::string path = "../escape";
  uint32_t n = path.size(), mode = 0644;
  uint64_t size = 0;
  hostile.append(reinterpret_cast<char*>(&n), 4).append(path);
  hostile.append(reinterpret_cast<char*>(&mode), 4).append(reinterpret_cast<char*>(&size), 8);
  EXPECT_EQ(UnpackDirectory(hostile, base + "/out").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(UnpackDirectory("\x05", base + "/out").code(), absl::StatusCode::kDataLoss);
}

TEST(PackageTest, RefusesPathsThatLeaveTheDirectoryAndWritesNothing) {
  const std::string base = TmpDir("escape");
  for (const std::string& path :
       std::vector<std::string>{"../escape", "/tmp/absolute", "a/../../escape", "a/./b", "./a",
                                "a//b", "a/", "..", ".", "", std::string("a\0b", 3)}) {
    const std::string package = Entry("good.txt", 0644, "fine") + Entry(path, 0644, "bad");
    const absl::Status status = UnpackDirectory(package, base + "/out");
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << "path '" << path << "': " << status;
    EXPECT_NE(status.message().find("leaves the directory"), std::string::npos) << status;
    // Nothing at all was written: not the good entry before it, no staging directory.
    EXPECT_EQ(Listing(base), std::vector<std::string>{}) << "path '" << path << "'";
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/absolute"));
  // Names that merely contain dots are fine.
  ASSERT_TRUE(
      UnpackDirectory(Entry("a..b/..c", 0644, "x") + Entry(".hidden", 0644, "y"), base + "/dots")
          .ok());
  EXPECT_EQ(Read(base + "/dots/a..b/..c"), "x");
}

TEST(PackageTest, ABadEntryAfterGoodOnesLeavesNothingBehind) {
  const std::string base = TmpDir("partial");
  const std::string good = Entry("one.txt", 0644, "1") + Entry("sub/two.txt", 0644, "2");
  // A later entry whose content is cut off, a duplicate, and a file that is also a directory.
  for (const std::string& package :
       {good + Entry("three.txt", 0644, "333").substr(0, 20),
        good + Entry("one.txt", 0644, "again"), good + Entry("one.txt/inner", 0644, "x")}) {
    const absl::Status status = UnpackDirectory(package, base + "/out");
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_EQ(Listing(base), std::vector<std::string>{}) << status;
  }
  // A length that would overflow a naive bounds check is refused, not read past the end.
  std::string huge = Entry("x", 0644, "");
  const uint64_t size = ~uint64_t{0} - 8;
  huge.replace(huge.size() - 8, 8, reinterpret_cast<const char*>(&size), 8);
  EXPECT_EQ(UnpackDirectory(huge + "abc", base + "/out").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Listing(base), std::vector<std::string>{});
}

TEST(PackageTest, ModesAreReducedTo0755Or0644) {
  const std::string base = TmpDir("modes");
  const std::string package = Entry("setuid", 04755, "a") + Entry("setgid", 02711, "b") +
                              Entry("sticky", 01777, "c") + Entry("world_writable", 0666, "d") +
                              Entry("group_exec_only", 0070, "e");
  ASSERT_TRUE(UnpackDirectory(package, base + "/out").ok());
  auto mode = [&](const std::string& name) {
    struct stat st;
    EXPECT_EQ(stat((base + "/out/" + name).c_str(), &st), 0) << name;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode("setuid"), 0755u);
  EXPECT_EQ(mode("setgid"), 0755u);
  EXPECT_EQ(mode("sticky"), 0755u);
  EXPECT_EQ(mode("world_writable"), 0644u);
  EXPECT_EQ(mode("group_exec_only"), 0644u);
  // Packing records the same reduced modes.
  const std::string src = TmpDir("modes_src");
  std::ofstream(src + "/tool") << "#!/bin/sh\n";
  chmod((src + "/tool").c_str(), 04777);
  auto packed = PackDirectory(src);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(*packed, Entry("tool", 0755, "#!/bin/sh\n"));
}

// The format has no symlink entries: links in a packed directory are left out, and a symlink
// (planted where the target should go) is never followed.
TEST(PackageTest, SymlinksAreNeitherPackedNorFollowed) {
  const std::string src = TmpDir("links_src");
  const std::string outside = TmpDir("outside");
  std::ofstream(outside + "/secret") << "secret";
  std::ofstream(src + "/real.txt") << "real";
  ASSERT_EQ(symlink((outside + "/secret").c_str(), (src + "/link").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), (src + "/dirlink").c_str()), 0);
  auto packed = PackDirectory(src);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(*packed, Entry("real.txt", 0644, "real"));

  const std::string base = TmpDir("links");
  ASSERT_EQ(symlink(outside.c_str(), (base + "/target").c_str()), 0);
  const absl::Status status =
      UnpackDirectory(Entry("secret", 0644, "overwritten"), base + "/target");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(Read(outside + "/secret"), "secret");
  EXPECT_EQ(Listing(outside), std::vector<std::string>{"secret"});
  EXPECT_EQ(Listing(base), std::vector<std::string>{"target"});  // no staging directory left
}

TEST(PackageTest, UnpacksIntoAnEmptyDirectoryButNotOverFiles) {
  const std::string base = TmpDir("existing");
  std::filesystem::create_directories(base + "/empty");
  ASSERT_TRUE(UnpackDirectory(Entry("f", 0644, "x"), base + "/empty").ok());
  EXPECT_EQ(Read(base + "/empty/f"), "x");
  const absl::Status status = UnpackDirectory(Entry("g", 0644, "y"), base + "/empty");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("remove it first"), std::string::npos) << status;
  EXPECT_EQ(Listing(base), (std::vector<std::string>{"empty", "empty/f"}));
}

// Regression: a 60 KB package made 30,000 nested directories (too deep to remove) and a 26 MB one
// a million files. Depth, path length, entries and bytes are capped, the message names the limit
// and the value, and nothing is written.
TEST(PackageTest, PackagesPastTheLimitsAreRefusedBeforeAnythingIsWritten) {
  const std::string base = TmpDir("limits");
  std::string deep;
  for (int i = 0; i < 30000; ++i) deep += "a/";
  deep += "f";
  const std::string nested = Entry(deep, 0644, "x");
  ASSERT_LT(nested.size(), 61000u);
  absl::Status status = CheckPackage(nested);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("30001 levels deep"), std::string::npos) << status;
  EXPECT_NE(status.message().find("at most 64 levels"), std::string::npos) << status;
  EXPECT_EQ(UnpackDirectory(nested, base + "/out").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Listing(base), std::vector<std::string>{});

  std::string long_name = Entry(std::string(2000, 'n'), 0644, "x");
  status = CheckPackage(long_name);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("2000 bytes long"), std::string::npos) << status;

  // Many small files: the count is named with the limit.
  PackageLimits limits;
  limits.max_entries = 1000;
  std::string many;
  for (int i = 0; i < 1500; ++i) many += Entry("f" + std::to_string(i), 0644, "");
  status = UnpackDirectory(many, base + "/out", limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("holds 1500 files"), std::string::npos) << status;
  EXPECT_NE(status.message().find("at most 1000 files and directories"), std::string::npos)
      << status;
  EXPECT_EQ(Listing(base), std::vector<std::string>{});
  // Directories count too: 600 files each in its own directory make 1200 entries.
  std::string spread;
  for (int i = 0; i < 600; ++i) spread += Entry("d" + std::to_string(i) + "/f", 0644, "");
  status = CheckPackage(spread, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("directories"), std::string::npos) << status;
  // The default allows a million files nowhere near.
  std::string million_ish;
  for (int i = 0; i < 100001; ++i) million_ish += Entry(std::to_string(i), 0644, "");
  EXPECT_EQ(CheckPackage(million_ish).code(), absl::StatusCode::kResourceExhausted);

  limits = PackageLimits();
  limits.max_bytes = 10;
  status = CheckPackage(Entry("a", 0644, "123456") + Entry("b", 0644, "123456"), limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("add up to 12 bytes; at most 10"), std::string::npos) << status;

  // Within the limits: 64 levels and a shared directory counted once.
  std::string ok_deep;
  for (int i = 0; i < 63; ++i) ok_deep += "d/";
  EXPECT_TRUE(
      UnpackDirectory(Entry(ok_deep + "f", 0644, "x") + Entry("d/g", 0644, "y"), base + "/fine")
          .ok());
  EXPECT_EQ(Read(base + "/fine/" + ok_deep + "f"), "x");
}

TEST(PackageTest, PackingADirectoryPastTheLimitsSaysWhich) {
  const std::string src = TmpDir("deep_src");
  std::string path = src;
  for (int i = 0; i < 70; ++i) path += "/d";
  std::filesystem::create_directories(path);
  std::ofstream(path + "/f") << "x";
  auto packed = PackDirectory(src);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(packed.status().message().find("deeper than 64 levels"), std::string::npos)
      << packed.status();
}

}  // namespace
}  // namespace troupe
