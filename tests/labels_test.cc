// Label scheduling on a real cluster: a head without labels and two workers labelled
// zone=a (gpu=h100) and zone=b. Tasks, actors and placement-group bundles go to the nodes their
// selectors match; a not-in sends them elsewhere; a preferred selector falls back; a required one
// that no node matches fails the task or actor with the selector and every node's labels, and
// leaves a group pending with the same; `troupe list actors` shows the selector.
#include <cstdlib>
#include <set>
#include <string>
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

class Pinned {
 public:
  static Pinned* Create() { return new Pinned(); }
  std::string Node() { return std::getenv("TROUPE_NODE_ID"); }
};

TROUPE_REMOTE(WhereAmI, Pinned::Create, &Pinned::Node);

using troupe::LabelMatch;
using troupe::LabelSelector;
using troupe::testing::CommandResult;
using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;

std::string RunWith(const LabelSelector& selector, LabelMatch match = LabelMatch::kRequired) {
  return *troupe::Get(troupe::Task(WhereAmI).SetLabelSelector(selector, match).Remote(0));
}

// What a failed Get says ("<no error>" if it did not fail).
template <typename Ref>
std::string FailureOf(const Ref& ref) {
  try {
    troupe::Get(ref, std::chrono::seconds(60));
  } catch (const troupe::TroupeError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(LabelsTest, TasksActorsAndBundlesFollowTheirSelectors) {
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start(
          {"--num-cpus=2", absl::StrCat("--http-port=", troupe::testing::PickFreePort())}));
  ASSERT_OK_AND_ASSIGN(std::string zone_a,
                       cluster.AddWorker({"--num-cpus=2", R"(--labels={"zone": "a", "gpu": "h100"})"}));
  ASSERT_OK_AND_ASSIGN(std::string zone_b,
                       cluster.AddWorker({"--num-cpus=2", R"(--labels={"zone": "b"})"}));
  Driver driver(cluster);
  const std::string head = troupe::Nodes().at(0).node_id;

  // A preferred selector lands on its node once this node's raylet has heard of it (a node joins
  // the scheduler's view within a report or two); until then it falls back to any node.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return RunWith(LabelSelector().Equals("zone", "b"), LabelMatch::kPreferred) == zone_b &&
               RunWith(LabelSelector().Equals("zone", "a"), LabelMatch::kPreferred) == zone_a;
      },
      absl::Seconds(20), "preferred tasks to reach the labelled nodes"));

  // Required: only the matching node, every time, though the head has room.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunWith(LabelSelector().Equals("zone", "a")), zone_a);
    EXPECT_EQ(RunWith(LabelSelector().In("gpu", {"h100", "h200"})), zone_a);
    EXPECT_EQ(RunWith(LabelSelector().Exists("zone").NotIn("zone", {"a"})), zone_b);
  }
  // not-in holds for a node without the key: the head.
  EXPECT_EQ(RunWith(LabelSelector().NotIn("zone", {"a", "b"})), head);
  EXPECT_EQ(RunWith(LabelSelector().DoesNotExist("zone")), head);
  // Preferred with no node matching: runs anyway.
  EXPECT_FALSE(RunWith(LabelSelector().Equals("zone", "x"), LabelMatch::kPreferred).empty());

  // Actors, placed by the GCS.
  auto in_b = troupe::Actor(Pinned::Create).SetLabelSelector(LabelSelector().Equals("zone", "b")).Remote();
  EXPECT_EQ(*troupe::Get(in_b.Task(&Pinned::Node).Remote()), zone_b);
  auto not_a = troupe::Actor(Pinned::Create)
                   .SetLabelSelector(LabelSelector().NotIn("zone", {"a"}).Exists("zone"))
                   .Remote();
  EXPECT_EQ(*troupe::Get(not_a.Task(&Pinned::Node).Remote()), zone_b);
  auto anywhere = troupe::Actor(Pinned::Create)
                      .SetLabelSelector(LabelSelector().Equals("zone", "x"), LabelMatch::kPreferred)
                      .Remote();
  EXPECT_FALSE(troupe::Get(anywhere.Task(&Pinned::Node).Remote())->empty());

  // Required and matching no node: the task fails, naming the selector and the nodes' labels.
  std::string task_error =
      FailureOf(troupe::Task(WhereAmI).SetLabelSelector(LabelSelector().Equals("zone", "x")).Remote(0));
  EXPECT_TRUE(absl::StrContains(task_error, "no node matches the label selector {zone=x}"))
      << task_error;
  EXPECT_TRUE(absl::StrContains(task_error, "{gpu=h100, zone=a}")) << task_error;
  EXPECT_TRUE(absl::StrContains(task_error, "{zone=b}")) << task_error;
  // Labels and resources together: the only zone=a node has 2 CPUs.
  task_error = FailureOf(troupe::Task(WhereAmI)
                             .SetResources({{"CPU", 4}})
                             .SetLabelSelector(LabelSelector().Equals("zone", "a"))
                             .Remote(0));
  EXPECT_TRUE(absl::StrContains(task_error, "no node matching the label selector {zone=a} can fit"))
      << task_error;
  // The actor dies with the same explanation.
  auto nowhere =
      troupe::Actor(Pinned::Create).SetLabelSelector(LabelSelector().In("zone", {"x", "y"})).Remote();
  std::string actor_error = FailureOf(nowhere.Task(&Pinned::Node).Remote());
  EXPECT_TRUE(absl::StrContains(actor_error, "no node matches the label selector {zone in (x,y)}"))
      << actor_error;
  EXPECT_TRUE(absl::StrContains(actor_error, "{zone=b}")) << actor_error;

  // `troupe list actors` (the state API) shows the selector beside the resources.
  CommandResult listed =
      cluster.Troupe({"list", "actors", "--format", "json", "--address=" + cluster.HttpAddress(),
                      "--token=" + cluster.token()});
  nlohmann::json rows = nlohmann::json::parse(listed.out, nullptr, false);
  std::set<std::string> selectors;
  if (rows.is_array()) {
    for (const auto& row : rows) selectors.insert(row.value("label_selector", "<missing>"));
  }
  EXPECT_TRUE(selectors.count("{zone=b}")) << listed.out << listed.err;
  EXPECT_TRUE(selectors.count("{zone=x} (soft)")) << listed.out << listed.err;

  // Bundles: one per zone, STRICT_SPREAD; tasks in each bundle run on its node.
  troupe::PlacementGroupOptions options;
  options.name = "zoned";
  options.bundles = {{{"CPU", 1}}, {{"CPU", 1}}};
  options.strategy = troupe::PlacementStrategy::kStrictSpread;
  options.bundle_label_selectors = {LabelSelector().Equals("zone", "b"),
                                    LabelSelector().Equals("zone", "a")};
  auto group = troupe::CreatePlacementGroup(options);
  ASSERT_TRUE(group.Wait(std::chrono::seconds(30)));
  EXPECT_EQ(*troupe::Get(troupe::Task(WhereAmI).SetPlacementGroup(group, 0).Remote(0)), zone_b);
  EXPECT_EQ(*troupe::Get(troupe::Task(WhereAmI).SetPlacementGroup(group, 1).Remote(0)), zone_a);
  troupe::RemovePlacementGroup(group);
  // A bundle no node matches: the group waits, saying why.
  options.name = "unplaceable";
  options.bundle_label_selectors = {LabelSelector(), LabelSelector().Equals("zone", "x")};
  auto waiting = troupe::CreatePlacementGroup(options);
  std::string reason;
  EXPECT_TRUE(WaitUntil(
      [&] {
        reason = waiting.Info().pending_reason;
        return absl::StrContains(reason, "bundle 1's label selector {zone=x} matches no node");
      },
      absl::Seconds(20), "the group's pending reason to name the selector"))
      << reason;
  EXPECT_TRUE(absl::StrContains(reason, "{zone=b}")) << reason;
  EXPECT_EQ(waiting.State(), troupe::PlacementGroupState::kPending);
  troupe::RemovePlacementGroup(waiting);
  // A selector together with a placement group is refused (the bundle decides).
  EXPECT_THROW(troupe::Task(WhereAmI)
                   .SetPlacementGroup(group)
                   .SetLabelSelector(LabelSelector().Equals("zone", "a"))
                   .Remote(0),
               troupe::InvalidArgumentError);
  in_b.Kill();
  not_a.Kill();
  anywhere.Kill();
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
