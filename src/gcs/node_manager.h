// The GCS node table and cluster resource view. Raylets register, report their resources and
// unregister; the health checker reports deaths. Every state change is written to the store and
// published on the NODE channel. Dead nodes stay in the table (with why and when they died) so
// `troupe status` can show them.
// The cluster view (every alive node's latest report) is versioned so that a report's reply
// costs what changed, not the cluster's size: every change of a node's entry (registration, a
// report that differs from the last, death) takes the next view version, and a reporter that
// holds version v gets only the entries changed after v (ResourceViewSince). A quiet cluster of
// N nodes thus costs O(N) per report period in all instead of O(N^2).
// Thread-safe; listeners run on the caller's thread after the table's lock is released.
#pragma once

#include <functional>
#include <map>
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
  // The view a reporter holding `known_version` lacks, as a serialized ReportResourceUsageReply:
  // the whole view when it holds none (0), or a version this GCS did not hand out (an earlier
  // incarnation's, since versions start from the clock as the publisher's sequence numbers do);
  // else only the entries changed since (and the nodes removed since). O(changes) for a delta,
  // each entry a copy of bytes serialized once when it changed: under churn every report's reply
  // carries about one entry per node, and building them from protos for every reader cost the
  // GCS ~2.5 us an entry (at 1,000 churning nodes ~3 ms a report, too much for 2,000 reports a
  // second). A view entry carries the report_seq of its node's last change.
  std::string ResourceViewSinceWire(int64_t known_version) const;
  // The same, parsed (for tests and callers that want the message).
  void ResourceViewSince(int64_t known_version, rpc::ReportResourceUsageReply* reply) const;

  std::vector<rpc::NodeInfo> GetAllNodes() const;
  // Resource usage of alive nodes.
  std::vector<rpc::ResourceUsage> GetAllResourceUsage() const;

  void AddNodeAddedListener(NodeListener listener);
  void AddNodeRemovedListener(NodeListener listener);
  // Called (without locks held) for every report accepted from an alive node. Set before the
  // GCS serves; not thread-safe.
  void set_report_listener(std::function<void(const NodeId&)> listener) {
    report_listener_ = std::move(listener);
  }
  const ClusterId& cluster_id() const { return cluster_id_; }

 private:
  // Marks a node dead, saves and publishes; returns false if it was not alive.
  bool SetDeadLocked(const NodeId& node_id, const std::string& reason, rpc::NodeInfo* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveAndPublishLocked(const rpc::NodeInfo& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyRemoved(const rpc::NodeInfo& node);
  absl::Status UpdateUsage(const NodeId& node_id, const rpc::ResourceUsage& report)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The node's view entry changed (or left the view): it takes the next view version, and its
  // serialized entry is made again (or dropped).
  void BumpViewLocked(const NodeId& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The node's usage as the view shows it (with its raylet address).
  rpc::ResourceUsage ViewEntryLocked(const NodeId& node_id, const rpc::ResourceUsage& usage) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ClusterId cluster_id_;
  StoreClient* store_;
  Publisher* publisher_;
  const Clock* clock_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<NodeId, rpc::NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NodeId, rpc::ResourceUsage> usage_ ABSL_GUARDED_BY(mu_);
  // View versions: the first this incarnation hands out is view_base_ + 1.
  const int64_t view_base_;
  int64_t view_version_ ABSL_GUARDED_BY(mu_);
  // Each node's last change (alive or removed), ordered by version, and the reverse index.
  std::map<int64_t, NodeId> view_changes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NodeId, int64_t> view_version_of_ ABSL_GUARDED_BY(mu_);
  // Each alive node's view entry (ViewEntryLocked), serialized when it last changed.
  absl::flat_hash_map<NodeId, std::string> view_wire_ ABSL_GUARDED_BY(mu_);
  std::function<void(const NodeId&)> report_listener_;
  std::vector<NodeListener> added_listeners_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeListener> removed_listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
