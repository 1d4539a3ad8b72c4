// ClusterView: a raylet's copy of the GCS's cluster view (every alive node's latest resource
// report), kept up to date from the deltas that answer its reports (NodeManager::
// ResourceViewSince in src/gcs/node_manager.h): a reply carries the whole view, or only what
// changed since the version this copy holds.
// Not thread-safe: owned and used by the raylet's report loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/gcs.pb.h"

namespace troupe {

class ClusterView {
 public:
  // The version to send with the next report (0: none held yet).
  int64_t version() const { return version_; }
  // Applies a report's reply: replaces the view (full_view) or updates and removes entries.
  void Apply(const rpc::ReportResourceUsageReply& reply);
  // Every node in the view (in no particular order).
  std::vector<rpc::ResourceUsage> Nodes() const;
  size_t size() const { return nodes_.size(); }

 private:
  int64_t version_ = 0;
  absl::flat_hash_map<std::string, rpc::ResourceUsage> nodes_;  // by binary node ID
};

}  // namespace troupe
