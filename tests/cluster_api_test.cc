// Cluster calls of the C++ API on a real cluster: placement groups listed, looked up by ID and by
// name, their state read; the public KV (troupe::kv) shared between jobs of one namespace and
// kept apart from other namespaces and from Troupe's own entries, with its limits.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

// Reads a key from inside a task: workers see the KV as the driver does.
std::string ReadInTask(std::string key) { return troupe::kv::Get(key).value_or("<none>"); }

TROUPE_REMOTE(ReadInTask);

using troupe::testing::Driver;
using troupe::testing::TestCluster;

const troupe::PlacementGroupInfo* Find(const std::vector<troupe::PlacementGroupInfo>& groups,
                                       const std::string& id) {
  for (const auto& group : groups) {
    if (group.id == id) return &group;
  }
  return nullptr;
}

TEST(ClusterApiTest, PlacementGroupsListedLookedUpAndTheirStateRead) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto placed = troupe::CreatePlacementGroup(
      {"placed", {{{"CPU", 1}}, {{"CPU", 1}}}, troupe::PlacementStrategy::kPack});
  auto too_big = troupe::CreatePlacementGroup(
      {"too-big", {{{"CPU", 8}}}, troupe::PlacementStrategy::kPack});
  ASSERT_TRUE(placed.Wait(std::chrono::seconds(20)));

  troupe::PlacementGroupInfo info = placed.Info();
  EXPECT_EQ(info.id, placed.ID());
  EXPECT_EQ(info.name, "placed");
  EXPECT_EQ(info.state, troupe::PlacementGroupState::kCreated);
  EXPECT_EQ(info.strategy, troupe::PlacementStrategy::kPack);
  ASSERT_EQ(info.bundles.size(), 2u);
  EXPECT_EQ(info.bundles[1].at("CPU"), 1);
  ASSERT_EQ(info.bundle_node_ids.size(), 2u);
  EXPECT_EQ(info.bundle_node_ids[0], troupe::Nodes().at(0).node_id);
  EXPECT_EQ(info.creator_job_id, troupe::GetRuntimeContext().job_id);
  EXPECT_FALSE(info.detached);
  EXPECT_EQ(too_big.State(), troupe::PlacementGroupState::kPending);
  EXPECT_TRUE(absl::StrContains(too_big.Info().pending_reason, "CPU")) << too_big.Info().pending_reason;

  std::vector<troupe::PlacementGroupInfo> all = troupe::ListPlacementGroups();
  ASSERT_NE(Find(all, placed.ID()), nullptr);
  ASSERT_NE(Find(all, too_big.ID()), nullptr);
  EXPECT_EQ(Find(all, too_big.ID())->state, troupe::PlacementGroupState::kPending);

  // By ID (hex) and by name.
  auto by_id = troupe::GetPlacementGroupById(placed.ID());
  ASSERT_TRUE(by_id.has_value());
  EXPECT_EQ(by_id->binary_id(), placed.binary_id());
  auto by_name = troupe::GetPlacementGroup("too-big");
  ASSERT_TRUE(by_name.has_value());
  EXPECT_EQ(by_name->ID(), too_big.ID());
  EXPECT_FALSE(troupe::GetPlacementGroup("no-such-group").has_value());
  // An ID of the right shape that the cluster never had; and a string that is no ID.
  std::string unknown = placed.ID();
  unknown[0] = unknown[0] == '0' ? '1' : '0';
  EXPECT_FALSE(troupe::GetPlacementGroupById(unknown).has_value());
  EXPECT_THROW(troupe::GetPlacementGroupById("not-hex"), troupe::InvalidArgumentError);

  // Removed: still listed and looked up by ID, in state kRemoved; no longer found by name.
  troupe::RemovePlacementGroup(placed);
  troupe::RemovePlacementGroup(too_big);
  EXPECT_EQ(placed.State(), troupe::PlacementGroupState::kRemoved);
  EXPECT_EQ(Find(troupe::ListPlacementGroups(), too_big.ID())->state,
            troupe::PlacementGroupState::kRemoved);
  EXPECT_FALSE(troupe::GetPlacementGroup("placed").has_value());
}

TEST(ClusterApiTest, KvIsSharedWithinANamespaceAcrossJobs) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  {
    Driver job(cluster, "team-a");
    EXPECT_TRUE(troupe::kv::Put("model/best", "ckpt-7"));
    EXPECT_TRUE(troupe::kv::Put("model/last", "ckpt-9"));
    troupe::kv::PutOptions shared;
    shared.ns = "shared";
    EXPECT_TRUE(troupe::kv::Put("epoch", "3", shared));
    // A task of the job reads it too.
    EXPECT_EQ(*troupe::Get(troupe::Task(ReadInTask).Remote(std::string("model/best"))), "ckpt-7");
  }
  {
    // Another job in the same namespace: the values outlived the job that wrote them.
    Driver job(cluster, "team-a");
    EXPECT_EQ(troupe::kv::Get("model/best").value_or("<none>"), "ckpt-7");
    EXPECT_EQ(troupe::kv::List("model/"), (std::vector<std::string>{"model/best", "model/last"}));
    EXPECT_TRUE(troupe::kv::Exists("model/last"));
    EXPECT_TRUE(troupe::kv::Delete("model/last"));
    EXPECT_FALSE(troupe::kv::Exists("model/last"));
    troupe::kv::PutOptions keep;
    keep.overwrite = false;
    EXPECT_FALSE(troupe::kv::Put("model/best", "other", keep));
    EXPECT_EQ(*troupe::kv::Get("model/best"), "ckpt-7");
  }
  {
    // Another namespace sees none of it, unless it names the namespace.
    Driver job(cluster, "team-b");
    EXPECT_FALSE(troupe::kv::Get("model/best").has_value());
    EXPECT_TRUE(troupe::kv::List("").empty());
    EXPECT_EQ(troupe::kv::Get("model/best", "team-a").value_or("<none>"), "ckpt-7");
    EXPECT_EQ(troupe::kv::Get("epoch", "shared").value_or("<none>"), "3");
    EXPECT_EQ(*troupe::Get(troupe::Task(ReadInTask).Remote(std::string("model/best"))), "<none>");
    // Troupe's own namespaces are out of reach: the same names are user namespaces here.
    EXPECT_TRUE(troupe::kv::List("", "troupe_executables").empty());
    EXPECT_TRUE(troupe::kv::List("", "troupe_task_counters").empty());
    EXPECT_TRUE(troupe::kv::List("", "troupe_metrics").empty());
    EXPECT_TRUE(troupe::kv::Put("gcs_rpc_latency", "mine", {true, "troupe_metrics"}));
    // Bad keys and values: refused with what was wrong, nothing written.
    try {
      troupe::kv::Put("", "v");
      ADD_FAILURE() << "an empty key was accepted";
    } catch (const troupe::InvalidArgumentError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "the key is empty")) << e.what();
    }
    try {
      troupe::kv::Put("big", std::string(troupe::kv::kMaxValueBytes + 1, 'x'));
      ADD_FAILURE() << "an oversized value was accepted";
    } catch (const troupe::InvalidArgumentError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "at most 16777216")) << e.what();
    }
    EXPECT_THROW(troupe::kv::Get(std::string(troupe::kv::kMaxKeyBytes + 1, 'k')),
                 troupe::InvalidArgumentError);
    EXPECT_FALSE(troupe::kv::Exists("big"));
    // The largest value allowed goes through.
    EXPECT_TRUE(troupe::kv::Put("largest", std::string(troupe::kv::kMaxValueBytes, 'x')));
    EXPECT_EQ(troupe::kv::Get("largest")->size(), troupe::kv::kMaxValueBytes);
  }
  // The user's entry lives under "user/"; the internal entry of the same name (the GCS's latency
  // histograms) is untouched.
  auto mine = cluster.gcs().KVGet("user/troupe_metrics", "gcs_rpc_latency");
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->value_or("<none>"), "mine");
  auto internal = cluster.gcs().KVGet("troupe_metrics", "gcs_rpc_latency");
  ASSERT_TRUE(internal.ok()) << internal.status();
  EXPECT_NE(internal->value_or(""), "mine");
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
