#include "src/raylet/local_resources.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

ResourceSet Res(std::map<std::string, double> amounts) { return *ResourceSet::FromMap(amounts); }

TEST(LocalResourcesTest, WholeGpusGetDistinctDevices) {
  LocalResources node(Res({{"CPU", 8}, {"GPU", 4}}));
  auto a = node.Allocate(Res({{"CPU", 1}, {"GPU", 2}}));
  auto b = node.Allocate(Res({{"CPU", 1}, {"GPU", 1}}));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->GpuIds(), (std::vector<int>{0, 1}));
  EXPECT_EQ(b->GpuIds(), (std::vector<int>{2}));
  EXPECT_FALSE(node.Allocate(Res({{"GPU", 2}})));
  node.Free(*a);
  EXPECT_EQ(node.Allocate(Res({{"GPU", 2}}))->GpuIds(), (std::vector<int>{0, 1}));
}

TEST(LocalResourcesTest, FractionalGpusPackOntoOneDevice) {
  LocalResources node(Res({{"CPU", 8}, {"GPU", 2}}));
  std::vector<int> devices;
  for (int i = 0; i < 4; ++i) {
    auto half = node.Allocate(Res({{"GPU", 0.5}}));
    ASSERT_TRUE(half) << i;
    devices.push_back(half->GpuIds()[0]);
  }
  EXPECT_EQ(devices, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_FALSE(node.Allocate(Res({{"GPU", 0.5}})));
  EXPECT_EQ(node.available().Get("GPU").ToDouble(), 0);
}

TEST(LocalResourcesTest, AWholeGpuCannotBeTakenFromSharedDevices) {
  LocalResources node(Res({{"GPU", 2}}));
  ASSERT_TRUE(node.Allocate(Res({{"GPU", 0.5}})));
  ASSERT_TRUE(node.Allocate(Res({{"GPU", 1}})));   // device 1
  EXPECT_FALSE(node.Allocate(Res({{"GPU", 1}})));  // 0.5 free in total, no whole device
  EXPECT_FALSE(node.IsFeasible(Res({{"GPU", 1.5}})));
  EXPECT_TRUE(node.IsFeasible(Res({{"GPU", 2}})));
}

TEST(LocalResourcesTest, CustomResourcesAndBlockedCpus) {
  LocalResources node(Res({{"CPU", 2}, {"accel", 1}}));
  auto task = node.Allocate(Res({{"CPU", 2}, {"accel", 1}}));
  ASSERT_TRUE(task);
  EXPECT_FALSE(node.Allocate(Res({{"CPU", 1}})));
  node.ReleaseCpus(*task);  // blocked in Get: a nested task may run
  auto nested = node.Allocate(Res({{"CPU", 1}}));
  ASSERT_TRUE(nested);
  EXPECT_FALSE(node.Allocate(Res({{"accel", 1}})));
  node.Free(*nested);
  node.ReacquireCpus(*task);
  node.Free(*task);
  EXPECT_EQ(node.available(), node.total());
}

TEST(LocalResourcesTest, OverSubscriptionIsRepaidNotForgotten) {
  LocalResources node(Res({{"CPU", 1}}));
  auto blocked = node.Allocate(Res({{"CPU", 1}}));
  node.ReleaseCpus(*blocked);                      // blocked in Get
  auto nested = node.Allocate(Res({{"CPU", 1}}));  // runs meanwhile
  ASSERT_TRUE(nested);
  node.ReacquireCpus(*blocked);  // unblocked: 2 CPUs in use on a 1-CPU node
  EXPECT_FALSE(node.Allocate(Res({{"CPU", 1}})));
  node.Free(*nested);  // pays the debt: still nothing free
  EXPECT_FALSE(node.Allocate(Res({{"CPU", 1}})));
  node.Free(*blocked);
  EXPECT_EQ(node.available(), node.total());  // never more than the total
}

}  // namespace
}  // namespace troupe
