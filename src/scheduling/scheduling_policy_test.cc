#include "src/scheduling/scheduling_policy.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/scheduling/label_selector.h"

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

rpc::LabelConstraint Constraint(const std::string& key, rpc::LabelConstraint::Operator op,
                                std::vector<std::string> values = {}) {
  rpc::LabelConstraint constraint;
  constraint.set_key(key);
  constraint.set_op(op);
  for (auto& value : values) constraint.add_values(value);
  return constraint;
}

rpc::LabelSelector Selector(std::vector<rpc::LabelConstraint> constraints, bool soft = false) {
  rpc::LabelSelector selector;
  for (auto& constraint : constraints) *selector.add_constraints() = constraint;
  selector.set_soft(soft);
  return selector;
}

rpc::SchedulingStrategy WithLabels(
    rpc::LabelSelector selector,
    rpc::SchedulingStrategy::Kind kind = rpc::SchedulingStrategy::DEFAULT) {
  rpc::SchedulingStrategy strategy;
  strategy.set_kind(kind);
  *strategy.mutable_label_selector() = std::move(selector);
  return strategy;
}

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

TEST(LabelSelectorTest, EachOperator) {
  const std::map<std::string, std::string> a100 = {{"zone", "a"}, {"gpu", "a100"}};
  const std::map<std::string, std::string> h100 = {{"zone", "b"}, {"gpu", "h100"}};
  const std::map<std::string, std::string> bare = {};
  using C = rpc::LabelConstraint;
  auto equals = Selector({Constraint("zone", C::EQUALS, {"a"})});
  EXPECT_TRUE(MatchesLabels(equals, a100));
  EXPECT_FALSE(MatchesLabels(equals, h100));
  EXPECT_FALSE(MatchesLabels(equals, bare));
  auto in = Selector({Constraint("gpu", C::IN, {"h100", "h200"})});
  EXPECT_FALSE(MatchesLabels(in, a100));
  EXPECT_TRUE(MatchesLabels(in, h100));
  EXPECT_FALSE(MatchesLabels(in, bare));
  // NOT_IN and DOES_NOT_EXIST hold for a node without the key (Kubernetes', Ray's meaning).
  auto not_in = Selector({Constraint("gpu", C::NOT_IN, {"h100", "h200"})});
  EXPECT_TRUE(MatchesLabels(not_in, a100));
  EXPECT_FALSE(MatchesLabels(not_in, h100));
  EXPECT_TRUE(MatchesLabels(not_in, bare));
  auto exists = Selector({Constraint("gpu", C::EXISTS)});
  EXPECT_TRUE(MatchesLabels(exists, a100));
  EXPECT_FALSE(MatchesLabels(exists, bare));
  auto absent = Selector({Constraint("gpu", C::DOES_NOT_EXIST)});
  EXPECT_FALSE(MatchesLabels(absent, h100));
  EXPECT_TRUE(MatchesLabels(absent, bare));
  // Every constraint must hold; the empty selector matches any node.
  auto both = Selector({Constraint("zone", C::EQUALS, {"b"}), Constraint("gpu", C::EXISTS)});
  EXPECT_FALSE(MatchesLabels(both, a100));
  EXPECT_TRUE(MatchesLabels(both, h100));
  EXPECT_TRUE(MatchesLabels(rpc::LabelSelector(), bare));
  EXPECT_EQ(FormatLabelSelector(Selector(
                {Constraint("zone", C::EQUALS, {"a"}), Constraint("gpu", C::IN, {"h100", "h200"}),
                 Constraint("r", C::NOT_IN, {"x"}), Constraint("ssd", C::EXISTS),
                 Constraint("spot", C::DOES_NOT_EXIST)},
                /*soft=*/true)),
            "{zone=a, gpu in (h100,h200), r notin (x), ssd, !spot} (soft)");
}

TEST(LabelSelectorTest, ValidationNamesTheBadConstraint) {
  using C = rpc::LabelConstraint;
  EXPECT_TRUE(ValidateLabelSelector("s", Selector({Constraint("zone", C::IN, {"a"})})).ok());
  absl::Status empty_in = ValidateLabelSelector("s", Selector({Constraint("zone", C::IN)}));
  EXPECT_TRUE(absl::IsInvalidArgument(empty_in));
  EXPECT_TRUE(absl::StrContains(empty_in.message(), "s.constraints[0] (zone in ()) has 0 values"))
      << empty_in.message();
  EXPECT_FALSE(ValidateLabelSelector("s", Selector({Constraint("", C::EXISTS)})).ok());
  EXPECT_FALSE(ValidateLabelSelector("s", Selector({Constraint("k", C::EXISTS, {"v"})})).ok());
  rpc::LabelSelector unknown = Selector({Constraint("k", C::EXISTS)});
  unknown.mutable_constraints(0)->set_op(static_cast<C::Operator>(42));
  EXPECT_FALSE(ValidateLabelSelector("s", unknown).ok());
  EXPECT_FALSE(MatchesLabels(unknown, std::map<std::string, std::string>{{"k", "v"}}));
}

TEST_F(SchedulingPolicyTest, HardSelectorUsesOnlyMatchingNodes) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("gpu-b", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("gpu-c", {{"CPU", 4}}, {})};
  nodes[1].labels = {{"zone", "b"}};
  nodes[2].labels = {{"zone", "c"}};
  using C = rpc::LabelConstraint;
  auto decision = Choose(Res({{"CPU", 1}}), nodes,
                         WithLabels(Selector({Constraint("zone", C::EQUALS, {"b"})})));
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kRemote);
  EXPECT_EQ(decision.raylet_address, "gpu-b");
  // Busy there: it waits there, never on the free unlabelled local node.
  decision = Choose(Res({{"CPU", 1}}), nodes,
                    WithLabels(Selector({Constraint("zone", C::IN, {"c", "d"})})));
  EXPECT_EQ(decision.raylet_address, "gpu-c");
  // not-in: the unlabelled local node qualifies.
  decision = Choose(Res({{"CPU", 1}}), nodes,
                    WithLabels(Selector({Constraint("zone", C::NOT_IN, {"b", "c"})})));
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kLocal);
  decision =
      Choose(Res({{"CPU", 1}}), nodes, WithLabels(Selector({Constraint("zone", C::EXISTS)})));
  EXPECT_EQ(decision.raylet_address, "gpu-b");  // the one with room
  decision = Choose(Res({{"CPU", 1}}), nodes,
                    WithLabels(Selector({Constraint("zone", C::DOES_NOT_EXIST)})));
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kLocal);
}

TEST_F(SchedulingPolicyTest, HardSelectorMatchingNoNodeFailsNamingSelectorAndLabels) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}, {"GPU", 1}}, {{"CPU", 4}, {"GPU", 1}})};
  nodes[1].labels = {{"zone", "b"}};
  using C = rpc::LabelConstraint;
  auto decision = Choose(Res({{"CPU", 1}}), nodes,
                         WithLabels(Selector({Constraint("zone", C::EQUALS, {"x"})})));
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kFailed);
  EXPECT_TRUE(absl::StrContains(decision.reason, "no node matches the label selector {zone=x}"))
      << decision.reason;
  EXPECT_TRUE(absl::StrContains(decision.reason,
                                absl::StrCat("node ", nodes[1].node_id.ShortHex(), " {zone=b}")))
      << decision.reason;
  EXPECT_TRUE(
      absl::StrContains(decision.reason, absl::StrCat("node ", nodes[0].node_id.ShortHex(), " {}")))
      << decision.reason;
  // Labels combined with resources: the matching node can never fit 2 GPUs.
  decision = Choose(Res({{"GPU", 2}}), nodes,
                    WithLabels(Selector({Constraint("zone", C::EQUALS, {"b"})})));
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kFailed);
  EXPECT_TRUE(absl::StrContains(decision.reason, "no node matching the label selector {zone=b}"))
      << decision.reason;
  EXPECT_TRUE(absl::StrContains(decision.reason, "GPU: 2 (largest node has 1)")) << decision.reason;
  // Resources only the unlabelled node has, under a selector that excludes it: failed too.
  nodes[0].total = Res({{"CPU", 4}, {"tpu", 1}});
  nodes[0].available = nodes[0].total;
  decision =
      Choose(Res({{"tpu", 1}}), nodes, WithLabels(Selector({Constraint("zone", C::EXISTS)})));
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kFailed);
}

TEST_F(SchedulingPolicyTest, HardAffinityToANodeTheSelectorExcludesFails) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {{"CPU", 4}})};
  nodes[1].labels = {{"zone", "b"}};
  auto strategy = WithLabels(Selector({Constraint("zone", rpc::LabelConstraint::EQUALS, {"b"})}),
                             rpc::SchedulingStrategy::NODE_AFFINITY);
  strategy.set_node_id(nodes[1].node_id.Binary());
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, strategy).raylet_address, "b");
  strategy.set_node_id(nodes[0].node_id.Binary());
  auto decision = Choose(Res({{"CPU", 1}}), nodes, strategy);
  EXPECT_EQ(decision.kind, SchedulingDecision::Kind::kFailed);
  EXPECT_TRUE(absl::StrContains(decision.reason, "does not match the label selector {zone=b}"))
      << decision.reason;
}

TEST_F(SchedulingPolicyTest, SoftSelectorPrefersMatchingNodesAndFallsBack) {
  std::vector<NodeView> nodes = {Node("local", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {{"CPU", 4}})};
  nodes[1].labels = {{"zone", "b"}};
  using C = rpc::LabelConstraint;
  auto soft = WithLabels(Selector({Constraint("zone", C::EQUALS, {"b"})}, /*soft=*/true));
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, soft).raylet_address, "b");
  nodes[1].available = Res({});  // the matching node is busy: any node with room
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, soft).kind, SchedulingDecision::Kind::kLocal);
  nodes[1].available = nodes[1].total;
  auto nowhere = WithLabels(Selector({Constraint("zone", C::EQUALS, {"x"})}, /*soft=*/true));
  EXPECT_EQ(Choose(Res({{"CPU", 1}}), nodes, nowhere).kind, SchedulingDecision::Kind::kLocal);
  // The matching node can never fit it: fall back as well.
  EXPECT_EQ(Choose(Res({{"CPU", 1}, {"GPU", 1}}), nodes, soft).kind,
            SchedulingDecision::Kind::kInfeasible);  // (no node has a GPU: as without labels)
}

TEST_F(SchedulingPolicyTest, SelectorNarrowsSpread) {
  std::vector<NodeView> nodes = {Node("a", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("c", {{"CPU", 4}}, {{"CPU", 4}})};
  nodes[1].labels = {{"pool", "x"}};
  nodes[2].labels = {{"pool", "x"}};
  auto strategy = WithLabels(Selector({Constraint("pool", rpc::LabelConstraint::EQUALS, {"x"})}),
                             rpc::SchedulingStrategy::SPREAD);
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i)
    seen.insert(Choose(Res({{"CPU", 1}}), nodes, strategy).raylet_address);
  EXPECT_EQ(seen, (std::set<std::string>{"b", "c"}));
}

TEST_F(SchedulingPolicyTest, BundleSelectorsPlaceBundlesOnMatchingNodes) {
  std::vector<NodeView> nodes = {Node("a", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("b", {{"CPU", 4}}, {{"CPU", 4}}),
                                 Node("c", {{"CPU", 4}}, {{"CPU", 4}})};
  nodes[1].labels = {{"zone", "b"}};
  nodes[2].labels = {{"zone", "c"}};
  using C = rpc::LabelConstraint;
  std::vector<ResourceSet> two = {Res({{"CPU", 1}}), Res({{"CPU", 1}})};
  std::vector<rpc::LabelSelector> selectors = {Selector({Constraint("zone", C::EQUALS, {"c"})}),
                                               Selector({Constraint("zone", C::EXISTS)})};
  auto pack = AssignBundles(two, rpc::PlacementGroupInfo::PACK, nodes, {}, selectors);
  ASSERT_TRUE(pack.ok) << pack.reason;
  EXPECT_EQ(pack.node_of_bundle, (std::vector<int>{2, 2}));
  auto spread = AssignBundles(two, rpc::PlacementGroupInfo::STRICT_SPREAD, nodes, {}, selectors);
  ASSERT_TRUE(spread.ok) << spread.reason;
  EXPECT_EQ(spread.node_of_bundle, (std::vector<int>{2, 1}));
  // Only one matching node for both under STRICT_SPREAD: it waits.
  selectors[1] = selectors[0];
  EXPECT_FALSE(AssignBundles(two, rpc::PlacementGroupInfo::STRICT_SPREAD, nodes, {}, selectors).ok);
  // A selector no node matches says so, with the nodes' labels.
  selectors[1] = Selector({Constraint("zone", C::EQUALS, {"x"})});
  auto none = AssignBundles(two, rpc::PlacementGroupInfo::PACK, nodes, {}, selectors);
  EXPECT_FALSE(none.ok);
  EXPECT_TRUE(absl::StrContains(none.reason, "bundle 1's label selector {zone=x} matches no node"))
      << none.reason;
  EXPECT_TRUE(absl::StrContains(none.reason, "{zone=c}")) << none.reason;
  // Soft: preferred when it fits, dropped when it does not.
  selectors = {Selector({Constraint("zone", C::EQUALS, {"b"})}, /*soft=*/true),
               rpc::LabelSelector()};
  auto soft = AssignBundles(two, rpc::PlacementGroupInfo::STRICT_PACK, nodes, {}, selectors);
  ASSERT_TRUE(soft.ok);
  EXPECT_EQ(soft.node_of_bundle, (std::vector<int>{1, 1}));
  selectors[0] = Selector({Constraint("zone", C::EQUALS, {"x"})}, /*soft=*/true);
  soft = AssignBundles(two, rpc::PlacementGroupInfo::STRICT_PACK, nodes, {}, selectors);
  ASSERT_TRUE(soft.ok);
  EXPECT_EQ(soft.node_of_bundle, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace troupe
