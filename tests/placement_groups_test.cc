// Placement groups on real clusters: strategies, pending until nodes fit, bundles hosting tasks
// and actors (with their GPUs), removal freeing everything.
#include <signal.h>

#include <cstdlib>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

std::string WhereAmI(int) { return std::getenv("TROUPE_NODE_ID"); }

class Trainer {
 public:
  static Trainer* Create() { return new Trainer(); }
  std::string Node() { return std::getenv("TROUPE_NODE_ID"); }
  std::string Devices() {
    std::string ids;
    for (int id : troupe::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    return ids.empty() ? "<unset>" : ids;
  }
};

TROUPE_REMOTE(WhereAmI, Trainer::Create, &Trainer::Node, &Trainer::Devices);

using troupe::testing::TestCluster;

using troupe::testing::Driver;

TEST(PlacementGroupsTest, StrictSpreadWaitsForAThirdNode) {
  TestCluster cluster({"--num-cpus=2"});
  cluster.AddWorker({"--num-cpus=2"});
  Driver driver(cluster);
  auto group = troupe::CreatePlacementGroup({"three",
                                             {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
                                             troupe::PlacementStrategy::kStrictSpread});
  EXPECT_FALSE(group.Wait(std::chrono::milliseconds(1500)));
  auto pending = cluster.Troupe({"status"});
  EXPECT_TRUE(absl::StrContains(pending.out, "STRICT_SPREAD needs 3 different nodes"))
      << pending.out;
  std::string third = cluster.AddWorker({"--num-cpus=2"});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(20)));
  // One task per bundle: three different nodes.
  std::set<std::string> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.insert(*troupe::Get(troupe::Task(WhereAmI).SetPlacementGroup(group, i).Remote(0)));
  }
  EXPECT_EQ(nodes.size(), 3u);
  EXPECT_TRUE(nodes.count(third));
  troupe::RemovePlacementGroup(group);
}

TEST(PlacementGroupsTest, PackReservesOnOneNodeAndRemovalFreesEverything) {
  TestCluster cluster({"--num-cpus=4"});
  Driver driver(cluster);
  auto group = troupe::CreatePlacementGroup(
      {"packed", {{{"CPU", 1}}, {{"CPU", 2}}}, troupe::PlacementStrategy::kPack});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));
  // Reserved: 3 of 4 CPUs are taken from the node (reports every 100 ms).
  double available = -1;
  for (int i = 0; i < 30 && available != 1.0; ++i) {
    available = cluster.Status()["resources_available"]["CPU"];
    if (available != 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(available, 1.0);
  EXPECT_TRUE(troupe::GetPlacementGroup("packed").has_value());
  // A task needing 2 CPUs runs in bundle 1 although only 1 CPU is free outside the group.
  EXPECT_FALSE(
      troupe::Get(
          troupe::Task(WhereAmI).SetResources({{"CPU", 2}}).SetPlacementGroup(group, 1).Remote(0))
          ->empty());
  troupe::RemovePlacementGroup(group);
  EXPECT_FALSE(troupe::GetPlacementGroup("packed").has_value());
  for (int i = 0; i < 30 && available != 4.0; ++i) {
    available = cluster.Status()["resources_available"]["CPU"];
    if (available != 4.0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(available, 4.0);
}

TEST(PlacementGroupsTest, ActorsLiveInTheirBundleAndDieWithTheGroup) {
  TestCluster cluster({"--num-cpus=1"});
  std::string gpu_node = cluster.AddWorker({"--num-cpus=2", "--num-gpus=2"});
  Driver driver(cluster);
  auto group = troupe::CreatePlacementGroup({"",
                                             {{{"CPU", 1}, {"GPU", 1}}, {{"CPU", 1}, {"GPU", 1}}},
                                             troupe::PlacementStrategy::kStrictPack});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));
  auto first = troupe::Actor(Trainer::Create)
                   .SetResources({{"GPU", 1}})
                   .SetPlacementGroup(group, 0)
                   .Remote();
  auto second = troupe::Actor(Trainer::Create)
                    .SetResources({{"GPU", 1}})
                    .SetPlacementGroup(group, 1)
                    .Remote();
  EXPECT_EQ(*troupe::Get(first.Task(&Trainer::Node).Remote()), gpu_node);
  std::set<std::string> devices = {*troupe::Get(first.Task(&Trainer::Devices).Remote()),
                                   *troupe::Get(second.Task(&Trainer::Devices).Remote())};
  EXPECT_EQ(devices, (std::set<std::string>{"0", "1"}));
  troupe::RemovePlacementGroup(group);
  try {
    for (int i = 0; i < 100; ++i) {
      troupe::Get(first.Task(&Trainer::Node).Remote());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "the group's actors must die with it";
  } catch (const troupe::ActorDiedError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "placement group was removed")) << e.what();
  }
}

TEST(PlacementGroupsTest, BundlesOfADeadNodeMoveToAnotherNode) {
  TestCluster cluster({"--num-cpus=1"});
  std::vector<std::string> workers;
  for (int i = 0; i < 3; ++i)
    workers.push_back(cluster.AddWorker({"--num-cpus=1", R"(--resources={"slot": 1})"}));
  Driver driver(cluster);
  auto group = troupe::CreatePlacementGroup(
      {"movable", {{{"slot", 1}}, {{"slot", 1}}}, troupe::PlacementStrategy::kStrictSpread});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));
  std::string first = *troupe::Get(
      troupe::Task(WhereAmI).SetResources({{"slot", 1}}).SetPlacementGroup(group, 0).Remote(0));
  std::string second = *troupe::Get(
      troupe::Task(WhereAmI).SetResources({{"slot", 1}}).SetPlacementGroup(group, 1).Remote(0));
  ASSERT_NE(first, second);
  const int raylet_pid = troupe::testing::FindNode(cluster.Status(), first)["raylet_pid"];
  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
  // Once the node is declared dead, bundle 0 is reserved again on the spare node.
  std::string moved;
  for (int i = 0; i < 100 && (moved.empty() || moved == first); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    try {
      moved = *troupe::Get(
          troupe::Task(WhereAmI).SetResources({{"slot", 1}}).SetPlacementGroup(group, 0).Remote(0),
          std::chrono::seconds(10));
    } catch (const troupe::TroupeError&) {
    }
  }
  EXPECT_NE(moved, first);
  EXPECT_NE(moved, second);  // still STRICT_SPREAD
  troupe::RemovePlacementGroup(group);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
