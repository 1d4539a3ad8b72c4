#include "src/gcs/node_manager.h"

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"

namespace troupe {
namespace {
constexpr char kTable[] = "NODE";

int64_t ToMillis(absl::Time t) { return absl::ToUnixMillis(t); }

// Protobuf wire encoding, for replies assembled from serialized entries.
void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}
void AppendBytesField(int field, absl::string_view bytes, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | 2, out);  // length-delimited
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}
void AppendVarintField(int field, uint64_t value, std::string* out) {
  AppendVarint(static_cast<uint64_t>(field) << 3, out);  // varint
  AppendVarint(value, out);
}
}  // namespace

NodeManager::NodeManager(ClusterId cluster_id, StoreClient* store, Publisher* publisher,
                         const Clock* clock)
    : cluster_id_(cluster_id),
      store_(store),
      publisher_(publisher),
      clock_(clock),
      view_base_(absl::ToUnixMicros(clock->Now())),
      view_version_(view_base_) {}

absl::StatusOr<std::vector<rpc::NodeInfo>> NodeManager::Initialize() {
  auto rows = ScanTableSync(store_, kTable);
  if (!rows.ok()) return rows.status();
  std::vector<rpc::NodeInfo> alive;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, value] : *rows) {
    rpc::NodeInfo node;
    auto node_id = NodeId::FromBinary(key);
    if (!node_id.ok() || !node.ParseFromString(value)) {
      TROUPE_LOG(Error) << "skipping a corrupt row in the " << kTable << " table";
      continue;
    }
    nodes_[*node_id] = node;
    if (node.state() != rpc::NodeInfo::ALIVE) continue;
    alive.push_back(node);
    // Until its raylet's next report (within its report period), schedule on what the node
    // registered with: an empty view would make every actor and group wait out a retry delay.
    // The raylet stays the judge (it queues or spills back a lease it cannot grant), and its
    // first report (report_seq > 0) replaces this guess.
    rpc::ResourceUsage& usage = usage_[*node_id];
    usage.set_node_id(key);
    *usage.mutable_total() = node.resources_total();
    *usage.mutable_available() = node.resources_total();
    BumpViewLocked(*node_id);
  }
  return alive;
}

absl::StatusOr<rpc::RegisterNodeReply> NodeManager::RegisterNode(
    const rpc::RegisterNodeRequest& request) {
  const rpc::NodeInfo& incoming = request.node();
  auto node_id = NodeId::FromBinary(incoming.node_id());
  if (!node_id.ok()) return node_id.status();
  if (incoming.node_ip().empty() || incoming.raylet_port() <= 0) {
    return absl::InvalidArgumentError("a node must register with its IP address and raylet port");
  }
  if (!request.expected_cluster_id().empty() &&
      request.expected_cluster_id() != cluster_id_.Binary()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this raylet belongs to cluster ", BytesToHex(request.expected_cluster_id()),
        " but the head it reached runs cluster ", cluster_id_.Hex(),
        " (the head was restarted without its state, or this is another cluster's head); stop "
        "this node and join again with `troupe start --address`"));
  }
  rpc::NodeInfo node = incoming;
  std::vector<NodeListener> listeners;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(*node_id);
    if (it != nodes_.end() && it->second.state() == rpc::NodeInfo::DEAD) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node_id->Hex(), " was declared dead (", it->second.death_reason(),
                       "); a dead node cannot come back: restart it to join as a new node"));
    }
    node.set_state(rpc::NodeInfo::ALIVE);
    node.set_start_time_ms(it != nodes_.end() ? it->second.start_time_ms()
                                              : ToMillis(clock_->Now()));
    nodes_[*node_id] = node;
    rpc::ResourceUsage& usage = usage_[*node_id];
    usage.set_node_id(node.node_id());
    *usage.mutable_total() = node.resources_total();
    if (usage.available().empty()) *usage.mutable_available() = node.resources_total();
    BumpViewLocked(*node_id);
    SaveAndPublishLocked(node);
    listeners = added_listeners_;
  }
  TROUPE_LOG(Info) << "node " << node_id->ShortHex() << " registered from " << node.node_ip() << ":"
                   << node.raylet_port() << (node.is_head() ? " (head)" : "");
  for (const auto& listener : listeners) listener(node);
  rpc::RegisterNodeReply reply;
  reply.set_cluster_id(cluster_id_.Binary());
  return reply;
}

absl::Status NodeManager::UnregisterNode(const std::string& node_id_binary,
                                         const std::string& reason) {
  auto node_id = NodeId::FromBinary(node_id_binary);
  if (!node_id.ok()) return node_id.status();
  rpc::NodeInfo node;
  {
    absl::MutexLock lock(&mu_);
    if (!nodes_.contains(*node_id)) {
      return absl::NotFoundError(absl::StrCat("node ", node_id->Hex(), " is not registered"));
    }
    if (!SetDeadLocked(*node_id, absl::StrCat("unregistered: ", reason), &node)) {
      return absl::OkStatus();  // already dead
    }
  }
  TROUPE_LOG(Info) << "node " << node_id->ShortHex() << " unregistered: " << reason;
  NotifyRemoved(node);
  return absl::OkStatus();
}

void NodeManager::MarkNodeDead(const NodeId& node_id, const std::string& reason) {
  rpc::NodeInfo node;
  {
    absl::MutexLock lock(&mu_);
    if (!SetDeadLocked(node_id, reason, &node)) return;
  }
  TROUPE_LOG(Warning) << "node " << node_id.ShortHex() << " is DEAD: " << reason;
  NotifyRemoved(node);
}

bool NodeManager::SetDeadLocked(const NodeId& node_id, const std::string& reason,
                                rpc::NodeInfo* out) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.state() == rpc::NodeInfo::DEAD) return false;
  it->second.set_state(rpc::NodeInfo::DEAD);
  it->second.set_death_reason(reason);
  it->second.set_end_time_ms(ToMillis(clock_->Now()));
  usage_.erase(node_id);
  BumpViewLocked(node_id);
  SaveAndPublishLocked(it->second);
  *out = it->second;
  return true;
}

void NodeManager::SaveAndPublishLocked(const rpc::NodeInfo& node) {
  PutBestEffort(store_, kTable, node.node_id(), node.SerializeAsString());
  rpc::PubMessage message;
  message.set_channel(rpc::NODE_CHANNEL);
  message.set_key(node.node_id());
  *message.mutable_node() = node;
  // Published under the table lock so subscribers see changes in the order they happened.
  publisher_->Publish(std::move(message));
}

void NodeManager::NotifyRemoved(const rpc::NodeInfo& node) {
  std::vector<NodeListener> listeners;
  {
    absl::MutexLock lock(&mu_);
    listeners = removed_listeners_;
  }
  for (const auto& listener : listeners) listener(node);
}

absl::Status NodeManager::ReportResourceUsage(const rpc::ResourceUsage& report) {
  auto node_id = NodeId::FromBinary(report.node_id());
  if (!node_id.ok()) return node_id.status();
  TROUPE_RETURN_IF_ERROR(UpdateUsage(*node_id, report));
  if (report_listener_) report_listener_(*node_id);
  return absl::OkStatus();
}

absl::Status NodeManager::UpdateUsage(const NodeId& node_id, const rpc::ResourceUsage& report) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node ", node_id.Hex(), " is not registered with this GCS; register again"));
  }
  if (it->second.state() == rpc::NodeInfo::DEAD) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node_id.Hex(), " was declared dead (", it->second.death_reason(), ")"));
  }
  rpc::ResourceUsage& usage = usage_[node_id];
  if (report.report_seq() != 0 && report.report_seq() <= usage.report_seq()) {
    return absl::OkStatus();  // stale: a newer report already arrived
  }
  rpc::ResourceUsage previous = std::move(usage);
  usage = report;
  previous.set_report_seq(report.report_seq());
  // Most reports repeat the last one: only a change takes a new version (and reaches others).
  if (!google::protobuf::util::MessageDifferencer::Equals(previous, usage)) {
    BumpViewLocked(node_id);
  }
  return absl::OkStatus();
}

void NodeManager::BumpViewLocked(const NodeId& node_id) {
  auto [it, inserted] = view_version_of_.try_emplace(node_id, 0);
  if (!inserted) view_changes_.erase(it->second);
  it->second = ++view_version_;
  view_changes_.emplace(it->second, node_id);
  if (auto usage = usage_.find(node_id); usage != usage_.end()) {
    view_wire_[node_id] = ViewEntryLocked(node_id, usage->second).SerializeAsString();
  } else {
    view_wire_.erase(node_id);
  }
}

rpc::ResourceUsage NodeManager::ViewEntryLocked(const NodeId& node_id,
                                                const rpc::ResourceUsage& usage) const {
  rpc::ResourceUsage entry = usage;
  const rpc::NodeInfo& node = nodes_.at(node_id);
  entry.set_raylet_address(absl::StrCat(node.node_ip(), ":", node.raylet_port()));
  *entry.mutable_labels() = node.labels();
  return entry;
}

std::string NodeManager::ResourceViewSinceWire(int64_t known_version) const {
  using Reply = rpc::ReportResourceUsageReply;
  std::string wire;
  absl::MutexLock lock(&mu_);
  if (known_version <= view_base_ || known_version > view_version_) {
    for (const auto& [id, entry] : view_wire_) {
      AppendBytesField(Reply::kClusterFieldNumber, entry, &wire);
    }
    AppendVarintField(Reply::kFullViewFieldNumber, 1, &wire);
  } else {
    for (auto it = view_changes_.upper_bound(known_version); it != view_changes_.end(); ++it) {
      auto entry = view_wire_.find(it->second);
      if (entry == view_wire_.end()) {
        AppendBytesField(Reply::kRemovedNodeIdsFieldNumber, it->second.Binary(), &wire);
      } else {
        AppendBytesField(Reply::kClusterFieldNumber, entry->second, &wire);
      }
    }
  }
  AppendVarintField(Reply::kViewVersionFieldNumber, static_cast<uint64_t>(view_version_), &wire);
  return wire;
}

void NodeManager::ResourceViewSince(int64_t known_version,
                                    rpc::ReportResourceUsageReply* reply) const {
  TROUPE_CHECK(reply->ParseFromString(ResourceViewSinceWire(known_version)))
      << "the view's wire form does not parse";
}

std::vector<rpc::NodeInfo> NodeManager::GetAllNodes() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::NodeInfo> nodes;
  nodes.reserve(nodes_.size());
  for (const auto& [id, node] : nodes_) nodes.push_back(node);
  return nodes;
}

std::vector<rpc::ResourceUsage> NodeManager::GetAllResourceUsage() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::ResourceUsage> usages;
  usages.reserve(usage_.size());
  for (const auto& [id, usage] : usage_) usages.push_back(ViewEntryLocked(id, usage));
  return usages;
}

void NodeManager::AddNodeAddedListener(NodeListener listener) {
  absl::MutexLock lock(&mu_);
  added_listeners_.push_back(std::move(listener));
}

void NodeManager::AddNodeRemovedListener(NodeListener listener) {
  absl::MutexLock lock(&mu_);
  removed_listeners_.push_back(std::move(listener));
}

}  // namespace troupe
