#include "src/raylet/node_resources.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(AnyPathExists, FindsOnlyWhatExists) {
  std::string dir = ::testing::TempDir() + "/node_resources_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string present = dir + "/nvidiactl";
  FILE* f = fopen(present.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_FALSE(AnyPathExists({}));
  EXPECT_FALSE(AnyPathExists({dir + "/absent", dir + "/dxg"}));
  EXPECT_TRUE(AnyPathExists({dir + "/absent", present}));
  EXPECT_TRUE(AnyPathExists({dir}));  // a directory counts (/proc/driver/nvidia is one)
  unlink(present.c_str());
  rmdir(dir.c_str());
}

// Without a driver node, no GPUs and a reason that says so; with one, whatever CUDA reports.
TEST(DetectNumGpus, ZeroWithAReasonWhenNoDriverIsPresent) {
  std::string why;
  const int gpus = DetectNumGpus(&why);
  if (AnyPathExists({"/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"})) {
    GTEST_SKIP() << "this machine has a GPU driver (" << gpus << " GPUs)";
  }
  EXPECT_EQ(gpus, 0);
  EXPECT_NE(why.find("no GPU driver"), std::string::npos) << why;
}

}  // namespace
}  // namespace troupe
