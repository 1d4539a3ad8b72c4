// Placement groups on real clusters: strategies, pending until nodes fit, bundles hosting tasks
// and actors (with their GPUs), removal freeing everything.
#include <signal.h>

#include <cstdlib>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
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
using troupe::testing::WaitUntil;

// The CPUs available in the whole cluster, as `troupe status` reports them (-1 if unreadable).
double AvailableCpus(TestCluster& cluster) {
  nlohmann::json cpus = cluster.Status()["resources_available"]["CPU"];
  return cpus.is_number() ? cpus.get<double>() : -1;
}

TEST(PlacementGroupsTest, StrictSpreadWaitsForAThirdNode) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  auto group = troupe::CreatePlacementGroup({"three",
                                             {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
                                             troupe::PlacementStrategy::kStrictSpread});
  // Still unplaced after 1.5 s is the behaviour under test (two nodes cannot host it).
  EXPECT_FALSE(group.Wait(std::chrono::milliseconds(1500)));
  auto pending = cluster.Troupe({"status"});
  EXPECT_TRUE(absl::StrContains(pending.out, "STRICT_SPREAD needs 3 different nodes"))
      << pending.out;
  ASSERT_OK_AND_ASSIGN(std::string third, cluster.AddWorker({"--num-cpus=2"}));
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
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=4"}));
  Driver driver(cluster);
  auto group = troupe::CreatePlacementGroup(
      {"packed", {{{"CPU", 1}}, {{"CPU", 2}}}, troupe::PlacementStrategy::kPack});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));
  // Reserved: 3 of 4 CPUs are taken from the node (reports every 100 ms).
  double available = -1;
  EXPECT_TRUE(WaitUntil([&] { return (available = AvailableCpus(cluster)) == 1.0; },
                        absl::Seconds(5), "1 of 4 CPUs to be left outside the group",
                        absl::Milliseconds(100)))
      << available << " CPUs available";
  EXPECT_TRUE(troupe::GetPlacementGroup("packed").has_value());
  // A task needing 2 CPUs runs in bundle 1 although only 1 CPU is free outside the group.
  EXPECT_FALSE(
      troupe::Get(
          troupe::Task(WhereAmI).SetResources({{"CPU", 2}}).SetPlacementGroup(group, 1).Remote(0))
          ->empty());
  troupe::RemovePlacementGroup(group);
  EXPECT_FALSE(troupe::GetPlacementGroup("packed").has_value());
  EXPECT_TRUE(WaitUntil([&] { return (available = AvailableCpus(cluster)) == 4.0; },
                        absl::Seconds(5), "all 4 CPUs to be free again", absl::Milliseconds(100)))
      << available << " CPUs available";
}

TEST(PlacementGroupsTest, ActorsLiveInTheirBundleAndDieWithTheGroup) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string gpu_node, cluster.AddWorker({"--num-cpus=2", "--num-gpus=2"}));
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
  std::string cause;
  EXPECT_TRUE(WaitUntil(
      [&] {
        try {
          troupe::Get(first.Task(&Trainer::Node).Remote(), std::chrono::seconds(10));
          return false;
        } catch (const troupe::ActorDiedError& e) {
          cause = e.what();
          return true;
        }
      },
      absl::Seconds(10), "the group's actor to die with it"));
  EXPECT_TRUE(absl::StrContains(cause, "placement group was removed")) << cause;
}

TEST(PlacementGroupsTest, BundlesOfADeadNodeMoveToAnotherNode) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  std::vector<std::string> workers;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string worker,
                         cluster.AddWorker({"--num-cpus=1", R"(--resources={"slot": 1})"}));
    workers.push_back(worker);
  }
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
  EXPECT_TRUE(WaitUntil(
      [&] {
        try {
          moved = *troupe::Get(troupe::Task(WhereAmI)
                                   .SetResources({{"slot", 1}})
                                   .SetPlacementGroup(group, 0)
                                   .Remote(0),
                               std::chrono::seconds(10));
        } catch (const troupe::TroupeError&) {
        }
        return !moved.empty() && moved != first;
      },
      absl::Seconds(60), "bundle 0 to be reserved again off the dead node",
      absl::Milliseconds(200)))
      << "last ran on " << moved;
  EXPECT_NE(moved, second);  // still STRICT_SPREAD
  troupe::RemovePlacementGroup(group);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
