#include "src/raylet/cluster_view.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace troupe {
namespace {

rpc::ResourceUsage Node(const std::string& id, double cpus) {
  rpc::ResourceUsage usage;
  usage.set_node_id(id);
  (*usage.mutable_available())["CPU"] = cpus;
  return usage;
}

double CpusOf(const ClusterView& view, const std::string& id) {
  for (const auto& node : view.Nodes()) {
    if (node.node_id() == id) return node.available().at("CPU");
  }
  return -1;
}

TEST(ClusterViewTest, AppliesFullViewsAndDeltas) {
  ClusterView view;
  EXPECT_EQ(view.version(), 0);
  rpc::ReportResourceUsageReply full;
  full.set_full_view(true);
  full.set_view_version(10);
  *full.add_cluster() = Node("a", 1);
  *full.add_cluster() = Node("b", 2);
  view.Apply(full);
  EXPECT_EQ(view.version(), 10);
  EXPECT_EQ(view.size(), 2u);
  // A delta updates one node, adds one and removes one; the rest stays.
  rpc::ReportResourceUsageReply delta;
  delta.set_view_version(12);
  *delta.add_cluster() = Node("a", 0.5);
  *delta.add_cluster() = Node("c", 3);
  delta.add_removed_node_ids("b");
  view.Apply(delta);
  EXPECT_EQ(view.version(), 12);
  EXPECT_EQ(view.size(), 2u);
  EXPECT_EQ(CpusOf(view, "a"), 0.5);
  EXPECT_EQ(CpusOf(view, "c"), 3);
  EXPECT_EQ(CpusOf(view, "b"), -1);
  // A full view replaces everything (e.g. after the GCS restarted).
  rpc::ReportResourceUsageReply again;
  again.set_full_view(true);
  again.set_view_version(3);
  *again.add_cluster() = Node("d", 1);
  view.Apply(again);
  EXPECT_EQ(view.size(), 1u);
  EXPECT_EQ(CpusOf(view, "d"), 1);
  EXPECT_EQ(view.version(), 3);
}

}  // namespace
}  // namespace troupe
