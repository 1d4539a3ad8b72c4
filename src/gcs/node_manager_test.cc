#include "src/gcs/node_manager.h"

#include "gtest/gtest.h"
#include "src/gcs/in_memory_store_client.h"

namespace troupe {
namespace {

class NodeManagerTest : public ::testing::Test {
 protected:
  rpc::RegisterNodeRequest Request(const NodeId& id, double cpus) {
    rpc::RegisterNodeRequest request;
    request.mutable_node()->set_node_id(id.Binary());
    request.mutable_node()->set_node_ip("127.0.0.1");
    request.mutable_node()->set_raylet_port(5000);
    (*request.mutable_node()->mutable_resources_total())["CPU"] = cpus;
    return request;
  }
  std::vector<rpc::PubMessage> NodeMessages() {
    rpc::PollRequest poll;
    poll.set_after_seq(0);
    std::vector<rpc::PubMessage> out;
    publisher_.Poll(poll, [&](rpc::PollReply reply) {
      out.assign(reply.messages().begin(), reply.messages().end());
    });
    return out;
  }

  ClusterId cluster_ = ClusterId::FromRandom();
  FakeClock clock_;
  InMemoryStoreClient store_;
  Publisher publisher_{&clock_};
  NodeManager nodes_{cluster_, &store_, &publisher_, &clock_};
};

TEST_F(NodeManagerTest, RegisterPublishesAndReportsClusterId) {
  NodeId id = NodeId::FromRandom();
  int added = 0;
  nodes_.AddNodeAddedListener([&](const rpc::NodeInfo&) { ++added; });
  auto reply = nodes_.RegisterNode(Request(id, 4));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->cluster_id(), cluster_.Binary());
  EXPECT_EQ(added, 1);
  ASSERT_EQ(nodes_.GetAllNodes().size(), 1u);
  EXPECT_EQ(nodes_.GetAllNodes()[0].state(), rpc::NodeInfo::ALIVE);
  auto usage = nodes_.GetAllResourceUsage();
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].available().at("CPU"), 4);
  auto messages = NodeMessages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].node().state(), rpc::NodeInfo::ALIVE);
}

TEST_F(NodeManagerTest, AliveToDeadIsFinal) {
  NodeId id = NodeId::FromRandom();
  ASSERT_TRUE(nodes_.RegisterNode(Request(id, 1)).ok());
  std::string removed_reason;
  nodes_.AddNodeRemovedListener(
      [&](const rpc::NodeInfo& node) { removed_reason = node.death_reason(); });
  clock_.Advance(absl::Seconds(3));
  nodes_.MarkNodeDead(id, "health check failed");
  EXPECT_EQ(removed_reason, "health check failed");
  auto node = nodes_.GetAllNodes()[0];
  EXPECT_EQ(node.state(), rpc::NodeInfo::DEAD);
  EXPECT_EQ(node.end_time_ms() - node.start_time_ms(), 3000);
  EXPECT_TRUE(nodes_.GetAllResourceUsage().empty());
  // A dead node can neither report nor come back under the same ID.
  rpc::ResourceUsage usage;
  usage.set_node_id(id.Binary());
  EXPECT_EQ(nodes_.ReportResourceUsage(usage).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nodes_.RegisterNode(Request(id, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Marking it dead again changes nothing and publishes nothing.
  size_t before = NodeMessages().size();
  nodes_.MarkNodeDead(id, "again");
  EXPECT_EQ(NodeMessages().size(), before);
}

TEST_F(NodeManagerTest, UnregisterRecordsTheReason) {
  NodeId id = NodeId::FromRandom();
  ASSERT_TRUE(nodes_.RegisterNode(Request(id, 1)).ok());
  ASSERT_TRUE(nodes_.UnregisterNode(id.Binary(), "troupe stop").ok());
  EXPECT_EQ(nodes_.GetAllNodes()[0].death_reason(), "unregistered: troupe stop");
  EXPECT_EQ(nodes_.UnregisterNode(NodeId::FromRandom().Binary(), "x").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(NodeManagerTest, UnknownNodeReportIsNotFoundSoTheRayletReRegisters) {
  rpc::ResourceUsage usage;
  usage.set_node_id(NodeId::FromRandom().Binary());
  EXPECT_EQ(nodes_.ReportResourceUsage(usage).code(), absl::StatusCode::kNotFound);
}

TEST_F(NodeManagerTest, ReportsUpdateTheViewAndStaleOnesAreDropped) {
  NodeId id = NodeId::FromRandom();
  ASSERT_TRUE(nodes_.RegisterNode(Request(id, 4)).ok());
  rpc::ResourceUsage usage;
  usage.set_node_id(id.Binary());
  (*usage.mutable_total())["CPU"] = 4;
  (*usage.mutable_available())["CPU"] = 1.5;
  usage.set_report_seq(2);
  ASSERT_TRUE(nodes_.ReportResourceUsage(usage).ok());
  (*usage.mutable_available())["CPU"] = 4;
  usage.set_report_seq(1);
  ASSERT_TRUE(nodes_.ReportResourceUsage(usage).ok());
  EXPECT_EQ(nodes_.GetAllResourceUsage()[0].available().at("CPU"), 1.5);
}

TEST_F(NodeManagerTest, NodeFromAnotherClusterIsRefused) {
  auto request = Request(NodeId::FromRandom(), 1);
  request.set_expected_cluster_id(ClusterId::FromRandom().Binary());
  auto reply = nodes_.RegisterNode(request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(reply.status().message().find("belongs to cluster"), std::string::npos);
}

TEST_F(NodeManagerTest, ANewGcsOnTheSameStoreRecoversTheTable) {
  NodeId alive = NodeId::FromRandom();
  NodeId dead = NodeId::FromRandom();
  ASSERT_TRUE(nodes_.RegisterNode(Request(alive, 1)).ok());
  ASSERT_TRUE(nodes_.RegisterNode(Request(dead, 1)).ok());
  nodes_.MarkNodeDead(dead, "gone");
  NodeManager restarted(cluster_, &store_, &publisher_, &clock_);
  auto recovered = restarted.Initialize();
  ASSERT_TRUE(recovered.ok());
  ASSERT_EQ(recovered->size(), 1u);
  EXPECT_EQ((*recovered)[0].node_id(), alive.Binary());
  EXPECT_EQ(restarted.GetAllNodes().size(), 2u);
}

rpc::ResourceUsage Usage(const NodeId& id, double available, int64_t seq) {
  rpc::ResourceUsage usage;
  usage.set_node_id(id.Binary());
  (*usage.mutable_total())["CPU"] = 4;
  (*usage.mutable_available())["CPU"] = available;
  usage.set_report_seq(seq);
  return usage;
}

TEST_F(NodeManagerTest, AReportRepliesWithWhatChangedSinceTheReportersVersion) {
  NodeId a = NodeId::FromRandom(), b = NodeId::FromRandom(), c = NodeId::FromRandom();
  for (const NodeId& id : {a, b, c}) ASSERT_TRUE(nodes_.RegisterNode(Request(id, 4)).ok());
  // No version held: the whole view.
  rpc::ReportResourceUsageReply full;
  nodes_.ResourceViewSince(0, &full);
  EXPECT_TRUE(full.full_view());
  EXPECT_EQ(full.cluster_size(), 3);
  EXPECT_EQ(full.cluster(0).raylet_address(), "127.0.0.1:5000");
  // Reports that repeat the last one change nothing: an empty delta.
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(a, 4, 1)).ok());
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(a, 4, 2)).ok());
  rpc::ReportResourceUsageReply quiet;
  nodes_.ResourceViewSince(full.view_version(), &quiet);
  EXPECT_FALSE(quiet.full_view());
  EXPECT_EQ(quiet.cluster_size(), 0);
  EXPECT_EQ(quiet.view_version(), full.view_version());
  // One node's availability changed and another died: exactly those two.
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(b, 1.5, 1)).ok());
  nodes_.MarkNodeDead(c, "gone");
  rpc::ReportResourceUsageReply delta;
  nodes_.ResourceViewSince(full.view_version(), &delta);
  EXPECT_FALSE(delta.full_view());
  ASSERT_EQ(delta.cluster_size(), 1);
  EXPECT_EQ(delta.cluster(0).node_id(), b.Binary());
  EXPECT_EQ(delta.cluster(0).available().at("CPU"), 1.5);
  ASSERT_EQ(delta.removed_node_ids_size(), 1);
  EXPECT_EQ(delta.removed_node_ids(0), c.Binary());
  EXPECT_GT(delta.view_version(), full.view_version());
  // A version this GCS never handed out (an earlier incarnation's, or garbage): the whole view.
  rpc::ReportResourceUsageReply unknown;
  nodes_.ResourceViewSince(delta.view_version() + 1000, &unknown);
  EXPECT_TRUE(unknown.full_view());
  EXPECT_EQ(unknown.cluster_size(), 2);
  rpc::ReportResourceUsageReply ancient;
  nodes_.ResourceViewSince(1, &ancient);
  EXPECT_TRUE(ancient.full_view());
}

TEST_F(NodeManagerTest, EveryReplyCarriesEachNodesLatestEntry) {
  NodeId a = NodeId::FromRandom(), b = NodeId::FromRandom();
  for (const NodeId& id : {a, b}) ASSERT_TRUE(nodes_.RegisterNode(Request(id, 4)).ok());
  rpc::ReportResourceUsageReply start;
  nodes_.ResourceViewSince(0, &start);
  // b changes twice, a once and then dies: a delta and a full view both show b's latest entry
  // (once), and a only as removed (delta) or not at all (full view).
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(b, 1.5, 1)).ok());
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(a, 2, 1)).ok());
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(b, 3, 2)).ok());
  nodes_.MarkNodeDead(a, "gone");
  rpc::ReportResourceUsageReply delta, full;
  nodes_.ResourceViewSince(start.view_version(), &delta);
  nodes_.ResourceViewSince(0, &full);
  for (const auto* reply : {&delta, &full}) {
    ASSERT_EQ(reply->cluster_size(), 1) << reply->DebugString();
    EXPECT_EQ(reply->cluster(0).node_id(), b.Binary());
    EXPECT_EQ(reply->cluster(0).available().at("CPU"), 3);
    EXPECT_EQ(reply->cluster(0).raylet_address(), "127.0.0.1:5000");
    EXPECT_EQ(reply->view_version(), delta.view_version());
  }
  EXPECT_EQ(delta.removed_node_ids_size(), 1);
  EXPECT_FALSE(delta.full_view());
  EXPECT_TRUE(full.full_view());
  EXPECT_EQ(full.removed_node_ids_size(), 0);
  // The serialized form is what the GCS sends: it parses to the same message.
  rpc::ReportResourceUsageReply parsed;
  ASSERT_TRUE(parsed.ParseFromString(nodes_.ResourceViewSinceWire(start.view_version())));
  EXPECT_EQ(parsed.SerializeAsString(), delta.SerializeAsString());
}

TEST_F(NodeManagerTest, AcceptedReportsReachTheReportListener) {
  std::vector<NodeId> heard;
  nodes_.set_report_listener([&](const NodeId& id) { heard.push_back(id); });
  NodeId id = NodeId::FromRandom();
  ASSERT_TRUE(nodes_.RegisterNode(Request(id, 4)).ok());
  ASSERT_TRUE(nodes_.ReportResourceUsage(Usage(id, 4, 1)).ok());
  EXPECT_EQ(heard, std::vector<NodeId>{id});
  // Refused reports (unknown or dead node) are not proof of a live member.
  EXPECT_FALSE(nodes_.ReportResourceUsage(Usage(NodeId::FromRandom(), 4, 1)).ok());
  nodes_.MarkNodeDead(id, "gone");
  EXPECT_FALSE(nodes_.ReportResourceUsage(Usage(id, 4, 2)).ok());
  EXPECT_EQ(heard.size(), 1u);
}

}  // namespace
}  // namespace troupe
