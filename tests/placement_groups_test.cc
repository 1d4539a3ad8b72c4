// Placement groups on real clusters: strategies, pending until nodes fit, bundles hosting tasks
// and actors (with their GPUs), removal freeing everything, lifetimes (a group ends with its job
// unless detached; `troupe remove placement-group`), and actors created right after a removal.
#include <signal.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

using troupe::testing::CommandResult;
using troupe::testing::PickFreePort;
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

// Regression (issue 30 item 7): a finished job's group kept 1 of 2 CPUs, and the next job could
// not be placed; nothing in the CLI removed one.
TEST(PlacementGroupsTest, GroupsEndWithTheirJobUnlessDetachedAndTheCliRemovesThem) {
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start({"--num-cpus=2", absl::StrCat("--http-port=", PickFreePort())}));
  auto cli = [&cluster](std::vector<std::string> args) {
    args.push_back("--address=" + cluster.HttpAddress());
    args.push_back("--token=" + cluster.token());
    return cluster.Troupe(args);
  };
  {
    Driver first(cluster);
    auto scoped = troupe::CreatePlacementGroup({"scoped", {{{"CPU", 1}}}});
    troupe::PlacementGroupOptions options;
    options.name = "kept";
    options.bundles = {{{"CPU", 1}}};
    options.lifetime = troupe::Detached{};
    auto kept = troupe::CreatePlacementGroup(options);
    ASSERT_TRUE(scoped.Wait(std::chrono::seconds(10)));
    ASSERT_TRUE(kept.Wait(std::chrono::seconds(10)));
    EXPECT_FALSE(
        troupe::Get(troupe::Task(WhereAmI).SetPlacementGroup(scoped, 0).Remote(0))->empty());
  }  // the job ends: its group goes with it, the detached one stays
  double available = -1;
  EXPECT_TRUE(WaitUntil([&] { return (available = AvailableCpus(cluster)) == 1.0; },
                        absl::Seconds(10), "the finished job's group to give its CPU back",
                        absl::Milliseconds(100)))
      << available << " CPUs available";
  CommandResult listed = cli({"list", "placement-groups", "--format=json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out << listed.err;
  nlohmann::json rows = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << listed.out;
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& row : rows) by_name[row.value("name", "")] = row;
  EXPECT_EQ(by_name["scoped"].value("state", ""), "REMOVED") << listed.out;
  EXPECT_EQ(by_name["scoped"].value("is_detached", true), false) << listed.out;
  EXPECT_EQ(by_name["kept"].value("state", ""), "CREATED") << listed.out;
  EXPECT_EQ(by_name["kept"].value("is_detached", false), true) << listed.out;
  CommandResult table = cli({"list", "placement-groups"});
  EXPECT_TRUE(absl::StrContains(table.out, "IS_DETACHED")) << table.out;
  {
    Driver second(cluster);  // the next job runs on the CPU the first one's group gave back
    EXPECT_FALSE(troupe::Get(troupe::Task(WhereAmI).Remote(0), std::chrono::seconds(20))->empty());
    EXPECT_TRUE(troupe::GetPlacementGroup("kept").has_value());
  }
  CommandResult removed = cli({"remove", "placement-group", "kept"});
  EXPECT_EQ(removed.exit_code, 0) << removed.out << removed.err;
  EXPECT_TRUE(absl::StrContains(removed.out, "Removed placement group")) << removed.out;
  EXPECT_TRUE(absl::StrContains(removed.out, "(kept)")) << removed.out;
  EXPECT_TRUE(WaitUntil([&] { return (available = AvailableCpus(cluster)) == 2.0; },
                        absl::Seconds(10), "the removed detached group to give its CPU back",
                        absl::Milliseconds(100)))
      << available << " CPUs available";
  CommandResult again = cli({"remove", "placement-group", "kept"});
  EXPECT_EQ(again.exit_code, 1) << again.out << again.err;
  EXPECT_TRUE(absl::StrContains(again.err, "no placement group has the ID or name 'kept'"))
      << again.err;
  CommandResult by_id =
      cli({"remove", "placement-group",
           by_name["scoped"].value("placement_group_id", "").substr(0, 12)});  // a prefix
  EXPECT_EQ(by_id.exit_code, 0) << by_id.out << by_id.err;
  EXPECT_TRUE(absl::StrContains(by_id.out, "was already removed")) << by_id.out;
  CommandResult usage = cli({"remove", "placement-group"});
  EXPECT_EQ(usage.exit_code, 2) << usage.out << usage.err;
  EXPECT_EQ(cluster.Troupe({"remove", "bogus"}).exit_code, 2);
}

// Regression (issue 30 item 8): an actor created right after the removal of a group whose
// bundle had just run a task was often handed that bundle's worker, already being killed (the
// task's lease came back after the bundle), and died 40-80 ms later. The interleaving depends on
// timing, so several rounds, each creating actors across the ~200 ms in which it happens.
TEST(PlacementGroupsTest, ActorsCreatedRightAfterARemovalLive) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  std::vector<troupe::ActorHandle<Trainer>> actors;
  for (int round = 0; round < 4; ++round) {
    auto group = troupe::CreatePlacementGroup({"", {{{"CPU", 1}}}});
    ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));
    ASSERT_FALSE(
        troupe::Get(troupe::Task(WhereAmI).SetPlacementGroup(group, 0).Remote(0))->empty());
    troupe::RemovePlacementGroup(group);
    for (int i = 0; i < 6; ++i) {
      actors.push_back(troupe::Actor(Trainer::Create).Remote());
      std::this_thread::sleep_for(std::chrono::milliseconds(30));  // pacing, not a wait
    }
  }
  // Every bundle is back (and its workers killed); every actor answers.
  double available = -1;
  EXPECT_TRUE(WaitUntil([&] { return (available = AvailableCpus(cluster)) == 2.0; },
                        absl::Seconds(10), "every removed bundle to be returned",
                        absl::Milliseconds(100)))
      << available << " CPUs available";
  int died = 0;
  for (size_t i = 0; i < actors.size(); ++i) {
    try {
      troupe::Get(actors[i].Task(&Trainer::Node).Remote(), std::chrono::seconds(30));
    } catch (const troupe::TroupeError& e) {
      ++died;
      ADD_FAILURE() << "actor " << i << " died: " << e.what();
    }
  }
  EXPECT_EQ(died, 0) << "of " << actors.size() << " actors";
  for (auto& actor : actors) actor.Kill();
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
