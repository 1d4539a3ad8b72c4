#include "src/raylet/simulated_node_resources.h"

#include <set>

#include "gtest/gtest.h"

namespace troupe {
namespace {

ResourceSet Set(const std::map<std::string, double>& amounts) {
  return *ResourceSet::FromMap(amounts);
}

TEST(SimulatedNodeResourcesTest, LeasesTakeWhatFitsAndGiveItBack) {
  SimulatedNodeResources node(Set({{"sim", 2}}), /*seed=*/7);
  auto first = node.Lease(Set({{"sim", 1}}));
  auto second = node.Lease(Set({{"sim", 1}}));
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(node.Available(), ResourceSet());
  EXPECT_FALSE(node.Lease(Set({{"sim", 1}})).has_value());  // full
  EXPECT_FALSE(node.Lease(Set({{"CPU", 1}})).has_value());  // a resource it lacks
  EXPECT_EQ(node.num_leases(), 2);
  EXPECT_TRUE(node.Return(*first));
  EXPECT_FALSE(node.Return(*first));  // already returned: nothing changes
  EXPECT_FALSE(node.Return("unknown"));
  EXPECT_EQ(node.Available(), Set({{"sim", 1}}));
  EXPECT_EQ(node.num_leases(), 1);
}

TEST(SimulatedNodeResourcesTest, EveryRedrawChangesWhatIsAvailableWithinTheTotal) {
  SimulatedNodeResources node(Set({{"sim", 4}, {"half", 0.5}}), /*seed=*/3);
  ResourceSet last = node.Available();
  std::set<double> seen;
  for (int i = 0; i < 200; ++i) {
    node.RedrawBackground();
    ResourceSet now = node.Available();
    EXPECT_FALSE(now == last) << "redraw " << i << " left " << now.ToString();
    EXPECT_TRUE(now.IsSubsetOf(node.total())) << now.ToString();
    EXPECT_EQ(now.Get("half").ToDouble(), 0.5);  // under one whole unit: no background load
    seen.insert(now.Get("sim").ToDouble());
    last = now;
  }
  EXPECT_EQ(seen, (std::set<double>{0, 1, 2, 3, 4}));
}

TEST(SimulatedNodeResourcesTest, BackgroundLoadLeavesLeasesAlone) {
  SimulatedNodeResources node(Set({{"sim", 3}}), /*seed=*/11);
  auto lease = node.Lease(Set({{"sim", 2}}));
  ASSERT_TRUE(lease.has_value());
  for (int i = 0; i < 50; ++i) {
    node.RedrawBackground();
    // The background takes at most what the lease left: 0 or 1 of the one free unit.
    EXPECT_LE(node.Available().Get("sim").ToDouble(), 1);
  }
  // A background load that holds the last free unit refuses a lease; once a redraw frees it,
  // a lease fits again.
  bool refused = false, granted = false;
  for (int i = 0; i < 50 && !(refused && granted); ++i) {
    node.RedrawBackground();
    auto next = node.Lease(Set({{"sim", 1}}));
    (next.has_value() ? granted : refused) = true;
    if (next.has_value()) ASSERT_TRUE(node.Return(*next));
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(granted);
  EXPECT_TRUE(node.Return(*lease));
  EXPECT_EQ(node.num_leases(), 0);
}

}  // namespace
}  // namespace troupe
