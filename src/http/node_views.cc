#include "src/http/node_views.h"

#include <future>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "proto/gcs.pb.h"
#include "src/common/ids.h"
#include "src/http/state_views.h"
#include "src/rpc/raylet_client.h"

namespace troupe::http {
namespace {

using nlohmann::json;

std::string RayletAddress(const rpc::NodeInfo& node) {
  return absl::StrCat(node.node_ip(), ":", node.raylet_port());
}

// What each asked node answered, or null where it did not (then listed in `unreachable`).
template <typename Reply>
struct FanOut {
  std::vector<std::pair<rpc::NodeInfo, absl::StatusOr<Reply>>> answers;
  json unreachable = json::array();
};

// Asks `call(raylet)` of each node in `nodes`, all at once; the calls carry their own deadline.
template <typename Reply, typename Call>
FanOut<Reply> AskNodes(const std::vector<rpc::NodeInfo>& nodes, const std::string& token,
                       Call call) {
  std::vector<std::future<absl::StatusOr<Reply>>> pending;
  for (const auto& node : nodes) {
    pending.push_back(
        std::async(std::launch::async, [&token, &call, address = RayletAddress(node)] {
          auto raylet = std::make_shared<RayletClient>(address, token);
          return call(*raylet);
        }));
  }
  FanOut<Reply> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    absl::StatusOr<Reply> reply = pending[i].get();
    if (!reply.ok()) {
      out.unreachable.push_back({{"node_id", BytesToHex(nodes[i].node_id())},
                                 {"address", RayletAddress(nodes[i])},
                                 {"error", std::string(reply.status().message())}});
    }
    out.answers.emplace_back(nodes[i], std::move(reply));
  }
  return out;
}

std::string HexOrEmpty(const std::string& binary) {
  return binary.empty() ? "" : BytesToHex(binary);
}

}  // namespace

jobs::Reply NodeViews::Objects() {
  auto nodes = metrics_->Timed("GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
  if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
  std::vector<rpc::NodeInfo> alive;
  for (const auto& node : *nodes) {
    if (node.state() == rpc::NodeInfo::ALIVE) alive.push_back(node);
  }
  auto fan = AskNodes<rpc::ListStoreObjectsReply>(
      alive, token_, [](RayletClient& raylet) { return raylet.ListStoreObjects(kPerNodeTimeout); });
  json rows = json::array();
  for (const auto& [node, reply] : fan.answers) {
    if (!reply.ok()) continue;
    for (const auto& object : reply->objects()) {
      json pinned_by = json::array();
      for (const auto& pin : object.reader_pins()) {
        pinned_by.push_back({{"worker_id", HexOrEmpty(pin.worker_id())}, {"count", pin.count()}});
      }
      rows.push_back({{"object_id", BytesToHex(object.object_id())},
                      {"node_id", BytesToHex(node.node_id())},
                      {"node_ip", node.node_ip()},
                      {"size", object.size()},
                      {"owner_worker_id", HexOrEmpty(object.owner_worker_id())},
                      {"owner_node_id", HexOrEmpty(object.owner_node_id())},
                      {"copy", object.primary() ? "PRIMARY" : "SECONDARY"},
                      {"spilled", object.spilled()},
                      {"sealed", object.sealed()},
                      {"pins", object.pins()},
                      {"pinned_by", pinned_by}});
    }
  }
  return {200, json{{"result", rows}, {"unreachable_nodes", fan.unreachable}}};
}

jobs::Reply NodeViews::Workers() {
  auto nodes = metrics_->Timed("GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
  if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
  auto actors = metrics_->Timed("GetAllActorInfo", [&] { return gcs_->GetAllActorInfo(); });
  std::map<std::string, const rpc::ActorInfo*> actor_of;  // by worker ID (binary), live actors
  if (actors.ok()) {
    for (const auto& actor : *actors) {
      if (actor.state() == rpc::ActorInfo::ALIVE && !actor.worker_id().empty()) {
        actor_of[actor.worker_id()] = &actor;
      }
    }
  }
  std::vector<rpc::NodeInfo> alive;
  for (const auto& node : *nodes) {
    if (node.state() == rpc::NodeInfo::ALIVE) alive.push_back(node);
  }
  auto fan = AskNodes<rpc::ListNodeWorkersReply>(
      alive, token_, [](RayletClient& raylet) { return raylet.ListNodeWorkers(kPerNodeTimeout); });
  json rows = json::array();
  for (const auto& [node, reply] : fan.answers) {
    if (!reply.ok()) continue;
    for (const auto& worker : reply->workers()) {
      json row = {{"worker_id", BytesToHex(worker.worker_id())},
                  {"node_id", BytesToHex(node.node_id())},
                  {"node_ip", node.node_ip()},
                  {"pid", worker.pid()},
                  {"state", worker.state()},
                  {"job_id", HexOrEmpty(worker.job_id())},
                  {"actor_id", ""},
                  {"actor_class", ""},
                  {"log_file", worker.log_file()},
                  {"cuda_visible_devices", worker.cuda_visible_devices()},
                  {"is_system", false}};
      if (auto it = actor_of.find(worker.worker_id()); it != actor_of.end()) {
        row["state"] = "ACTOR";
        row["actor_id"] = BytesToHex(it->second->actor_id());
        row["actor_class"] = it->second->class_name();
        row["is_system"] = IsSystemActor(*it->second);
      }
      rows.push_back(row);
    }
  }
  return {200, json{{"result", rows}, {"unreachable_nodes", fan.unreachable}}};
}

jobs::Reply NodeViews::LogFiles(const std::string& node_id) {
  auto nodes = metrics_->Timed("GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
  if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
  std::vector<rpc::NodeInfo> chosen;
  for (const auto& node : *nodes) {
    if (node.state() == rpc::NodeInfo::ALIVE &&
        absl::StartsWith(BytesToHex(node.node_id()), node_id)) {
      chosen.push_back(node);
    }
  }
  if (chosen.empty() && !node_id.empty()) {
    return jobs::Error(
        404, "no alive node has an ID starting with '" + node_id + "' (see `troupe list nodes`)");
  }
  auto fan = AskNodes<rpc::ListLogFilesReply>(
      chosen, token_, [](RayletClient& raylet) { return raylet.ListLogFiles(kPerNodeTimeout); });
  json out = json::array();
  for (const auto& [node, reply] : fan.answers) {
    if (!reply.ok()) continue;
    json files = json::array();
    for (const auto& file : reply->files()) {
      files.push_back(
          {{"name", file.name()}, {"size", file.size()}, {"mtime_ms", file.mtime_ms()}});
    }
    out.push_back({{"node_id", BytesToHex(node.node_id())},
                   {"node_ip", node.node_ip()},
                   {"is_head_node", node.is_head()},
                   {"files", files}});
  }
  return {200, json{{"nodes", out}, {"unreachable_nodes", fan.unreachable}}};
}

jobs::Reply NodeViews::LogFile(const std::string& node_id, const std::string& filename, int lines,
                               int64_t offset, int64_t max_bytes) {
  if (filename.empty()) return jobs::Error(400, "filename is required");
  auto nodes = metrics_->Timed("GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
  if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
  std::vector<const rpc::NodeInfo*> matches;
  for (const auto& node : *nodes) {
    if (node.state() != rpc::NodeInfo::ALIVE) continue;
    const bool wanted =
        node_id.empty() ? node.is_head() : absl::StartsWith(BytesToHex(node.node_id()), node_id);
    if (wanted) matches.push_back(&node);
  }
  if (matches.empty()) {
    return jobs::Error(
        404, "no alive node has an ID starting with '" + node_id + "' (see `troupe list nodes`)");
  }
  if (matches.size() > 1) {
    return jobs::Error(400, "node_id '" + node_id + "' matches " + std::to_string(matches.size()) +
                                " nodes: give more of it");
  }
  rpc::ReadLogFileRequest request;
  request.set_name(filename);
  request.set_lines(lines);
  request.set_offset(offset);
  request.set_max_bytes(max_bytes);
  auto raylet = std::make_shared<RayletClient>(RayletAddress(*matches[0]), token_);
  auto reply = raylet->ReadLogFile(request, kPerNodeTimeout);
  if (!reply.ok()) {
    const int status = reply.status().code() == absl::StatusCode::kInvalidArgument ? 400
                       : reply.status().code() == absl::StatusCode::kNotFound      ? 404
                                                                                   : 503;
    return jobs::Error(status, std::string(reply.status().message()));
  }
  return {200, json{{"node_id", BytesToHex(matches[0]->node_id())},
                    {"filename", filename},
                    {"data", reply->data()},
                    {"offset", reply->offset()},
                    {"next_offset", reply->next_offset()},
                    {"size", reply->size()}}};
}

}  // namespace troupe::http
