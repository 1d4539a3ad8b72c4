// The GCS node table and cluster resource view. Raylets register, report their resources and
// unregister; the health checker reports deaths. Every state change is written to the store and
// published on the NODE channel. Dead nodes stay in the table (with why and when they died) so
// `troupe status` can show them.
// Thread-safe; listeners run on the caller's thread after the table's lock is released.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gcs.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/gcs/publisher.h"
#include "src/gcs/store_client.h"

namespace troupe {

class NodeManager {
 public:
  using NodeListener = std::function<void(const rpc::NodeInfo&)>;

  NodeManager(ClusterId cluster_id, StoreClient* store, Publisher* publisher, const Clock* clock);

  // Loads nodes saved by an earlier GCS on the same store; returns the alive ones, which the
  // caller hands to the health checker.
  absl::StatusOr<std::vector<rpc::NodeInfo>> Initialize();

  // A node joins (or re-joins after a GCS restart or a lost connection).
  // FailedPrecondition: the raylet belongs to another cluster, or was already declared dead.
  absl::StatusOr<rpc::RegisterNodeReply> RegisterNode(const rpc::RegisterNodeRequest& request);
  // Graceful leave. NotFound for an unknown node.
  absl::Status UnregisterNode(const std::string& node_id, const std::string& reason);
  // Called when the health checker gives up on a node.
  void MarkNodeDead(const NodeId& node_id, const std::string& reason);
  // NotFound: unknown node (register again). FailedPrecondition: the node was declared dead.
  absl::Status ReportResourceUsage(const rpc::ResourceUsage& usage);

  std::vector<rpc::NodeInfo> GetAllNodes() const;
  // Resource usage of alive nodes.
  std::vector<rpc::ResourceUsage> GetAllResourceUsage() const;

  void AddNodeAddedListener(NodeListener listener);
  void AddNodeRemovedListener(NodeListener listener);
  const ClusterId& cluster_id() const { return cluster_id_; }

 private:
  // Marks a node dead, saves and publishes; returns false if it was not alive.
  bool SetDeadLocked(const NodeId& node_id, const std::string& reason, rpc::NodeInfo* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveAndPublishLocked(const rpc::NodeInfo& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyRemoved(const rpc::NodeInfo& node);

  const ClusterId cluster_id_;
  StoreClient* store_;
  Publisher* publisher_;
  const Clock* clock_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<NodeId, rpc::NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NodeId, rpc::ResourceUsage> usage_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeListener> added_listeners_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeListener> removed_listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
