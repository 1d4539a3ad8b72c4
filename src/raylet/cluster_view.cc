#include "src/raylet/cluster_view.h"

namespace troupe {

void ClusterView::Apply(const rpc::ReportResourceUsageReply& reply) {
  if (reply.full_view()) nodes_.clear();
  for (const auto& usage : reply.cluster()) nodes_[usage.node_id()] = usage;
  for (const auto& removed : reply.removed_node_ids()) nodes_.erase(removed);
  version_ = reply.view_version();
}

std::vector<rpc::ResourceUsage> ClusterView::Nodes() const {
  std::vector<rpc::ResourceUsage> nodes;
  nodes.reserve(nodes_.size());
  for (const auto& [id, usage] : nodes_) nodes.push_back(usage);
  return nodes;
}

}  // namespace troupe
