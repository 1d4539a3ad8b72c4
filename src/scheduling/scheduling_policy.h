// Where a task's lease should go, decided by the raylet that receives the request. Pure
// function of the demand, the strategy and the cluster view, so it is tested without processes.
//   DEFAULT: the local node first, then others: the first node that has the resources free and
//            stays at or under `spread_threshold` utilisation after placing the task; else the
//            least utilised node that has them free; else queue where it is feasible (local
//            preferred).
//   SPREAD:  round-robin over nodes that have the resources free.
//   NODE_AFFINITY: that node (queued there if busy). Otherwise DEFAULT when soft; when hard, a
//            node that can never fit the task fails it, and a node not in the view is
//            infeasible (it may still be joining; the lease manager fails it if it is dead).
// A demand no node can ever satisfy is infeasible, with a reason naming the missing resources.
// A label selector in the strategy (label_selector.h) narrows any kind to the nodes it matches:
//   hard:    only matching nodes; when no node in the view matches, or none that matches can
//            ever fit the demand, the decision is kFailed with a reason naming the selector and
//            listing the nodes' labels;
//   soft:    a matching node with the resources free now, else as if there were no selector.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/common.pb.h"
#include "src/common/ids.h"
#include "src/common/resources.h"

namespace troupe {

struct NodeView {
  NodeId node_id;
  std::string raylet_address;
  ResourceSet total;
  ResourceSet available;
  std::map<std::string, std::string> labels;  // `troupe start --labels`
};

// The cluster view as the GCS reports it (alive nodes' latest ResourceUsage), as NodeViews.
std::vector<NodeView> NodeViewsFromUsage(const std::vector<rpc::ResourceUsage>& usages);

struct SchedulingDecision {
  enum class Kind { kLocal, kRemote, kInfeasible, kFailed };
  Kind kind = Kind::kInfeasible;
  NodeId node_id;
  std::string raylet_address;
  std::string reason;  // for kInfeasible and kFailed
};

SchedulingDecision ChooseNode(const ResourceSet& demand, const rpc::SchedulingStrategy& strategy,
                              const NodeId& local_node, const std::vector<NodeView>& nodes,
                              uint64_t* spread_counter, double spread_threshold = 0.5);

// Placement-group bundles onto nodes (by index into `nodes`), using what the nodes have free:
//   STRICT_PACK   all on one node;
//   PACK          all on one node if possible, else first fit;
//   STRICT_SPREAD each on a different node (never one in `excluded`);
//   SPREAD        different nodes where possible, else any with room.
// `selectors` (empty, or one per bundle) restrict each bundle to the nodes its selector matches;
// soft ones are tried as hard first, then dropped if the group does not fit that way.
struct BundleAssignment {
  bool ok = false;
  std::vector<int> node_of_bundle;
  std::string reason;  // when !ok: why the group waits
};
BundleAssignment AssignBundles(const std::vector<ResourceSet>& bundles,
                               rpc::PlacementGroupInfo::Strategy strategy,
                               const std::vector<NodeView>& nodes,
                               const std::vector<NodeId>& excluded = {},
                               const std::vector<rpc::LabelSelector>& selectors = {});

// "no node has GPU: 8 (largest: 4)" — what makes `demand` infeasible in `nodes`.
std::string DescribeInfeasible(const ResourceSet& demand, const std::vector<NodeView>& nodes);

// "node 1a2b3c4d {zone=a}, node 5e6f7a8b {}" — every node's labels, for messages about
// selectors that match nothing (at most 16 nodes, then how many more).
std::string DescribeNodeLabels(const std::vector<NodeView>& nodes);

}  // namespace troupe
