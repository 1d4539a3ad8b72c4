#include "src/cli/node_flags.h"

#include <string>

#include "gtest/gtest.h"
#include "src/raylet/node_resources.h"

namespace troupe {
namespace {

absl::StatusOr<ResourceSet> Build(const std::vector<std::string>& args) {
  NodeFlags node_flags;
  FlagParser parser("troupe start", "test");
  node_flags.Register(&parser);
  if (auto status = parser.Parse(args); !status.ok()) return status;
  return node_flags.BuildResources();
}

TEST(NodeFlagsTest, ExplicitValuesAndCustomResources) {
  auto resources = Build({"--num-cpus=3", "--num-gpus=2", "--memory=1GiB",
                          "--object-store-memory=512MiB", R"(--resources={"accel": 4})"});
  ASSERT_TRUE(resources.ok()) << resources.status();
  EXPECT_EQ(resources->Get("CPU").ToDouble(), 3);
  EXPECT_EQ(resources->Get("GPU").ToDouble(), 2);
  EXPECT_EQ(resources->Get("memory").ToDouble(), 1 << 30);
  EXPECT_EQ(resources->Get("object_store_memory").ToDouble(), 512 << 20);
  EXPECT_EQ(resources->Get("accel").ToDouble(), 4);
}

// What is not given is what node_resources.h detects, and the GPU note says what was found.
TEST(NodeFlagsTest, DefaultsAreDetected) {
  NodeFlags node_flags;
  FlagParser parser("troupe start", "test");
  node_flags.Register(&parser);
  ASSERT_TRUE(parser.Parse({}).ok());
  std::string gpu_note;
  auto resources = node_flags.BuildResources(&gpu_note);
  ASSERT_TRUE(resources.ok()) << resources.status();
  EXPECT_GE(DetectNumCpus(), 1);
  EXPECT_EQ(resources->Get("CPU").ToDouble(), DetectNumCpus());
  EXPECT_GT(DefaultMemoryBytes(), 0);
  EXPECT_EQ(resources->Get("memory").ToDouble(),
            FixedPoint(static_cast<double>(DefaultMemoryBytes())).ToDouble());
  EXPECT_GT(DefaultObjectStoreBytes(), 0);
  EXPECT_EQ(resources->Get("object_store_memory").ToDouble(),
            FixedPoint(static_cast<double>(DefaultObjectStoreBytes())).ToDouble());
  std::string why_none;
  const int gpus = DetectNumGpus(&why_none);
  EXPECT_EQ(resources->Get("GPU").ToDouble(), gpus);
  EXPECT_EQ(gpu_note, gpus == 0 ? "no GPUs detected: " + why_none
                                : std::to_string(gpus) + " GPU(s) detected");
}

TEST(NodeFlagsTest, BadResourcesSayWhichFlagAndWhy) {
  auto bad_json = Build({"--resources={accel: 4}"});
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.status().message().find("--resources"), std::string::npos);
  auto builtin = Build({R"(--resources={"CPU": 4})"});
  ASSERT_FALSE(builtin.ok());
  EXPECT_NE(builtin.status().message().find("use --num-cpus"), std::string::npos);
  EXPECT_FALSE(Build({"--num-gpus=-2"}).ok());
  auto fraction = Build({"--num-cpus=1.5"});
  ASSERT_FALSE(fraction.ok());
  EXPECT_NE(fraction.status().message().find("--num-cpus must be a whole number, got 1.5"),
            std::string::npos)
      << fraction.status();
}

TEST(NodeFlagsTest, ArgsRoundTrip) {
  NodeFlags original;
  FlagParser parser("troupe start", "test");
  original.Register(&parser);
  ASSERT_TRUE(parser.Parse({"--num-cpus=3", R"(--labels={"zone": "a"})"}).ok());
  NodeFlags copy;
  FlagParser copy_parser("troupe raylet", "test");
  copy.Register(&copy_parser);
  ASSERT_TRUE(copy_parser.Parse(original.ToArgs()).ok());
  EXPECT_EQ(copy.num_cpus, 3);
  EXPECT_EQ(copy.labels_json, original.labels_json);
  EXPECT_EQ(copy.BuildLabels()->at("zone"), "a");
}

}  // namespace
}  // namespace troupe
