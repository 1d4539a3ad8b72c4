#include "src/common/package.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace troupe {
namespace {

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

}  // namespace
}  // namespace troupe
