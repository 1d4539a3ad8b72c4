#include "src/common/resources.h"

#include <cmath>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(ResourcesTest, FractionalGpusAddUpExactly) {
  ResourceSet node = *ResourceSet::FromMap({{"GPU", 1}});
  ResourceSet tenth = *ResourceSet::FromMap({{"GPU", 0.1}});
  ResourceSet used;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(tenth.IsSubsetOf(node));
    used += tenth;
  }
  EXPECT_EQ(used, node);
  node -= used;
  EXPECT_TRUE(node.IsEmpty());
  EXPECT_FALSE(tenth.IsSubsetOf(node));
}

TEST(ResourcesTest, SubsetChecksEveryResourceIncludingCustom) {
  ResourceSet node = *ResourceSet::FromMap({{"CPU", 4}, {"GPU", 2}, {"accel", 1}});
  EXPECT_TRUE(ResourceSet::FromMap({{"CPU", 4}, {"accel", 0.5}})->IsSubsetOf(node));
  EXPECT_FALSE(ResourceSet::FromMap({{"CPU", 1}, {"accel", 2}})->IsSubsetOf(node));
  EXPECT_FALSE(ResourceSet::FromMap({{"other", 1}})->IsSubsetOf(node));
  EXPECT_TRUE(ResourceSet().IsSubsetOf(node));
}

TEST(ResourcesTest, ZeroIsNotStoredAndSubtractionFloorsAtZero) {
  ResourceSet set = *ResourceSet::FromMap({{"CPU", 0}, {"GPU", 1}});
  EXPECT_EQ(set.amounts().size(), 1u);
  set -= *ResourceSet::FromMap({{"GPU", 3}});
  EXPECT_TRUE(set.IsEmpty());
  EXPECT_EQ(set.Get("GPU").ToDouble(), 0);
}

TEST(ResourcesTest, NegativeAndNonFiniteQuantitiesAreRejectedByName) {
  auto negative = ResourceSet::FromMap({{"GPU", -1}});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("'GPU'"), std::string::npos);
  EXPECT_FALSE(ResourceSet::FromMap({{"x", std::nan("")}}).ok());
}

TEST(ResourcesTest, ParsesJson) {
  auto set = ResourceSet::FromJson(R"({"accel": 2, "slot": 0.25})");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->Get("accel").ToDouble(), 2);
  EXPECT_EQ(set->Get("slot").ToDouble(), 0.25);
}

TEST(ResourcesTest, BadJsonSaysWhatIsWrong) {
  auto not_json = ResourceSet::FromJson("{accel: 2");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("JSON object"), std::string::npos);
  auto not_number = ResourceSet::FromJson(R"({"accel": "two"})");
  ASSERT_FALSE(not_number.ok());
  EXPECT_NE(not_number.status().message().find("'accel' must be a number"), std::string::npos);
  EXPECT_FALSE(ResourceSet::FromJson("[1, 2]").ok());
}

TEST(ResourcesTest, FormatsBytesForHumans) {
  EXPECT_EQ(FormatBytes(512), "512B");
  EXPECT_EQ(FormatBytes(1536), "1.50KiB");
  EXPECT_EQ(FormatQuantity("memory", 2.0 * 1024 * 1024 * 1024), "2.00GiB");
  EXPECT_EQ(FormatQuantity("GPU", 0.5), "0.5");
  EXPECT_EQ(ResourceSet::FromMap({{"CPU", 2}, {"memory", 1024}})->ToString(),
            "CPU: 2, memory: 1.00KiB");
}

TEST(ResourcesTest, DemandChecksNameTheFieldTheResourceAndTheValue) {
  EXPECT_TRUE(CheckResourceDemand("task resources", {{"CPU", 1}, {"GPU", 0.5}}).ok());
  EXPECT_TRUE(CheckResourceDemand("task resources", {{"GPU", 2}, {"accel", 0}}).ok());
  EXPECT_TRUE(CheckResourceDemand("task resources", {}).ok());

  auto refused = [](const std::map<std::string, double>& demand) {
    absl::Status status = CheckResourceDemand("task resources", demand);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    return std::string(status.message());
  };
  EXPECT_EQ(refused({{"", 1}}),
            "task resources has a resource with an empty name (amount 1); name every resource, "
            "e.g. {\"CPU\", 1}");
  EXPECT_EQ(refused({{"CPU", -1}}),
            "task resources['CPU'] is -1; an amount must be a finite number from 0 to 1e+14");
  EXPECT_NE(refused({{"CPU", std::nan("")}}).find("['CPU'] is nan"), std::string::npos);
  EXPECT_NE(refused({{"CPU", INFINITY}}).find("['CPU'] is inf"), std::string::npos);
  EXPECT_NE(refused({{"CPU", 1e300}}).find("from 0 to 1e+14"), std::string::npos);
  EXPECT_NE(refused({{"CPU", 0.00001}}).find("steps of 0.0001"), std::string::npos);
  EXPECT_EQ(refused({{"GPU", 1.5}}),
            "task resources['GPU'] is 1.5; more than one GPU must be a whole number of GPUs (a "
            "fraction such as 0.5 shares one device)");
}

}  // namespace
}  // namespace troupe
