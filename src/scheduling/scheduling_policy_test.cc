#include "src/scheduling/scheduling_policy.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

ResourceSet Res(std::map<std::string, double> amounts) { return *ResourceSet::FromMap(amounts); }

class SchedulingPolicyTest : public ::testing::Test {
 protected:
  NodeView Node(const std::string& address, std::map<std::string, double> total,
                std::map<std::string, double> available) {
    return {NodeId::FromRandom(), address, Res(total), Res(available)};
  }
  SchedulingDecision Choose(const ResourceSet& demand, const std::vector<NodeView>& nodes,
                            rpc::SchedulingStrategy strategy = {}) {
    return ChooseNode(demand, strategy, nodes[0].node_id, nodes, &counter_);
  }
  uint64_t counter_ = 0;
};

TEST_F(SchedulingPolicyTest, PacksLocallyUpToHalfThenSpreads) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("remote", {{"CPU", 4}}, {{"CPU", 4}})};
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes).kind, SchedulingDecision::Kind::kLocal);
  nodes[0].available = Res({{"CPU", 2}});  // half used: one more would pass 50%
  auto decision = Choose(Res({{"CPU", 1}}), nodes);
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kRemote);
  EXPECT_EQ(decision.raylet_address, "remote");
}

TEST_F(SchedulingPolicyTest, BusyEverywhereQueuesLocally) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 2}}, {}), Node("remote", {{"CPU", 2}}, {})};
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes).kind, SchedulingDecision::Kind::kLocal);
}

TEST_F(SchedulingPolicyTest, ResourcesOnlyElsewhereGoThere) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 2}}, {{"CPU", 2}}),
                                 Node("gpu", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 2}})};
  auto decision = Choose(Res({{"GPU", 1}}), nodes);  // busy there: queue there
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kRemote);
  EXPECT_EQ(decision.raylet_address, "gpu");
}

TEST_F(SchedulingPolicyTest, InfeasibleNamesTheMissingResource) {
  std::vector<NodeView> nodes = {Node("a", {{"CPU", 2}, {"GPU", 4}}, {}),
                                 Node("b", {{"CPU", 8}}, {})};
  auto decision = Choose(Res({{"CPU", 1}, {"GPU", 8}, {"tpu", 1}}), nodes);
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kInfeasible);
  EXPECT_TRUE(absl::StrContains(decision.reason, "GPU: 8 (largest node has 4)")) << decision.reason;
  EXPECT_TRUE(absl::StrContains(decision.reason, "tpu: 1 (largest node has 0)")) << decision.reason;
  EXPECT_FALSE(absl::StrContains(decision.reason, "CPU")) << decision.reason;
}

TEST_F(SchedulingPolicyTest, SpreadRoundRobins) {
  std::vector<NodeView> nodes = {Node("a", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("c", {{"CPU", 4}}, {{"CPU", 4}})};
  rpc::SchedulingStrategy spread;
  spread.set_kind(rpc::SchedulingStrategy::SPREAD);
  std::set<std::string> seen;
  for (int i = 0; i < 3; ++i) seen.insert(Choose(Res({{"CPU", 1}}), nodes, spread).raylet_address);
  EXPECT_EQ(seen.size(), 3u);
}

TEST_F(SchedulingPolicyTest, NodeAffinityHardAndSoft) {
  std::vector<NodeView> nodes = {Node("a", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {})};
  rpc::SchedulingStrategy affinity;
  affinity.set_kind(rpc::SchedulingStrategy::NODE_AFFINITY);
  affinity.set_node_id(nodes[1].node_id.Binary());
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, affinity).raylet_address, "b");  // even if busy
  affinity.set_node_id(NodeId::FromRandom().Binary());  // not (yet) in the cluster
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, affinity).kind, SchedulingDecision::Kind::kInfeasible);
  affinity.set_node_id(nodes[1].node_id.Binary());
  EXPECT_EQ(Choose(Res({{"CPU", 8}}), nodes, affinity).kind, SchedulingDecision::Kind::kFailed);
  affinity.set_node_id(NodeId::FromRandom().Binary());
  affinity.set_soft(true);
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, affinity).kind, SchedulingDecision::Kind::kLocal);
}

TEST_F(SchedulingPolicyTest, BundleAssignmentFollowsTheStrategy) {
  std::vector<NodeView> nodes = {Node("a", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {{"CPU", 4}})};
  std::vector<ResourceSet> three = {Res({{"CPU", 1}}), Res({{"CPU", 1}}), Res({{"CPU", 1}})};
  auto pack = AssignBundles(three, rpc::PlacementGroupInfo::PACK, nodes);
  ASSERT_TRUE(pack.ok);
  EXPECT_EQ(pack.node_of_bundle, (std::vector<int>{0, 0, 0}));
  auto spread = AssignBundles(three, rpc::PlacementGroupInfo::SPREAD, nodes);
  ASSERT_TRUE(spread.ok);
  EXPECT_EQ(spread.node_of_bundle, (std::vector<int>{0, 1, 0}));
  auto strict = AssignBundles(three, rpc::PlacementGroupInfo::STRICT_SPREAD, nodes);
  EXPECT_FALSE(strict.ok);
  EXPECT_TRUE(absl::StrContains(strict.reason, "STRICT_SPREAD needs 3 different nodes"))
      << strict.reason;
  nodes.push_back(Node("c", {{"CPU", 1}}, {{"CPU", 1}}));
  EXPECT_TRUE(AssignBundles(three, rpc::PlacementGroupInfo::STRICT_SPREAD, nodes).ok);
  std::vector<ResourceSet> big = {Res({{"CPU", 3}}), Res({{"CPU", 3}})};
  EXPECT_FALSE(AssignBundles(big, rpc::PlacementGroupInfo::STRICT_PACK, nodes).ok);
  auto packed = AssignBundles(big, rpc::PlacementGroupInfo::PACK, nodes);  // falls back
  ASSERT_TRUE(packed.ok);
  EXPECT_EQ(packed.node_of_bundle, (std::vector<int>{0, 1}));
  EXPECT_FALSE(
      AssignBundles(three, rpc::PlacementGroupInfo::STRICT_SPREAD, nodes, {nodes[2].node_id}).ok);
}

}  // namespace
}  // namespace troupe
