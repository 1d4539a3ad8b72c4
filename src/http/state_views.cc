#include "src/http/state_views.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "proto/gcs.pb.h"
#include "src/common/ids.h"
#include "src/scheduling/label_selector.h"

namespace troupe::http {
namespace {

using nlohmann::json;

json MapToJson(const google::protobuf::Map<std::string, double>& map) {
  json out = json::object();
  for (const auto& [k, v] : map) out[k] = v;
  return out;
}

}  // namespace

bool IsSystemActor(const rpc::ActorInfo& actor) {
  return absl::StartsWith(actor.namespace_name(), "troupe_") ||
         absl::StartsWith(actor.class_name(), "troupe::");
}

bool IsSystemJob(const rpc::JobInfo& job) {
  return absl::StartsWith(job.namespace_name(), "troupe_");
}

json PrometheusTargets(const std::vector<rpc::NodeInfo>& nodes) {
  json groups = json::array();
  for (const auto& node : nodes) {
    if (node.state() != rpc::NodeInfo::ALIVE || node.metrics_port() <= 0) continue;
    json labels = {{"node_id", BytesToHex(node.node_id())},
                   {"node_ip", node.node_ip()},
                   {"is_head", node.is_head() ? "true" : "false"}};
    if (node.metrics_tls()) labels["__scheme__"] = "https";
    groups.push_back({{"targets", {absl::StrCat(node.node_ip(), ":", node.metrics_port())}},
                      {"labels", labels}});
  }
  return groups;
}

jobs::Reply StateViews::PrometheusTargets() {
  auto nodes = metrics_->Timed("GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
  if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
  return {200, http::PrometheusTargets(*nodes)};
}

jobs::Reply StateViews::Nodes() {
  auto nodes = metrics_->Timed("GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
  auto usage = metrics_->Timed("GetAllResourceUsage", [&] { return gcs_->GetAllResourceUsage(); });
  if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
  std::map<std::string, rpc::ResourceUsage> by_node;
  if (usage.ok()) {
    for (auto& u : *usage) by_node[u.node_id()] = u;
  }
  json out = json::array();
  for (const auto& node : *nodes) {
    json entry = {{"node_id", BytesToHex(node.node_id())},
                  {"node_ip", node.node_ip()},
                  {"state", node.state() == rpc::NodeInfo::ALIVE ? "ALIVE" : "DEAD"},
                  {"is_head_node", node.is_head()},
                  {"metrics_port", node.metrics_port()},
                  {"resources_total", MapToJson(node.resources_total())},
                  {"death_reason", node.death_reason()}};
    json labels = json::object();
    for (const auto& [k, v] : node.labels()) labels[k] = v;
    entry["labels"] = labels;
    if (auto it = by_node.find(node.node_id()); it != by_node.end()) {
      entry["resources_available"] = MapToJson(it->second.available());
      entry["object_store_used_bytes"] = it->second.object_store_used_bytes();
      entry["object_store_spilled_bytes"] = it->second.object_store_spilled_bytes();
    }
    out.push_back(entry);
  }
  return {200, out};
}

jobs::Reply StateViews::Actors() {
  auto actors = metrics_->Timed("GetAllActorInfo", [&] { return gcs_->GetAllActorInfo(); });
  if (!actors.ok()) return jobs::Error(503, std::string(actors.status().message()));
  json out = json::array();
  for (const auto& a : *actors) {
    out.push_back({{"actor_id", BytesToHex(a.actor_id())},
                   {"class_name", a.class_name()},
                   {"name", a.name()},
                   {"namespace", a.namespace_name()},
                   {"state", rpc::ActorInfo::State_Name(a.state())},
                   {"node_id", BytesToHex(a.node_id())},
                   {"pid", a.pid()},
                   {"worker_id", BytesToHex(a.worker_id())},
                   {"num_restarts", a.num_restarts()},
                   {"job_id", BytesToHex(a.job_id())},
                   {"detached", a.detached()},
                   {"required_resources", MapToJson(a.required_resources())},
                   // "{zone=a, gpu in (h100,h200)}" (" (soft)" when preferred); "" for none.
                   {"label_selector", FormatLabelSelector(a.label_selector())},
                   {"death_cause", a.death_cause()},
                   {"is_system", IsSystemActor(a)}});
  }
  return {200, out};
}

jobs::Reply StateViews::PlacementGroups() {
  auto groups =
      metrics_->Timed("GetAllPlacementGroups", [&] { return gcs_->GetAllPlacementGroups(); });
  if (!groups.ok()) return jobs::Error(503, std::string(groups.status().message()));
  json out = json::array();
  for (const auto& g : *groups) {
    json bundles = json::array(), bundle_nodes = json::array(), selectors = json::array();
    for (const auto& b : g.bundles()) {
      bundles.push_back(MapToJson(b.resources()));
      bundle_nodes.push_back(BytesToHex(b.node_id()));  // "" while pending
      selectors.push_back(FormatLabelSelector(b.label_selector()));
    }
    out.push_back({{"placement_group_id", BytesToHex(g.placement_group_id())},
                   {"name", g.name()},
                   {"state", rpc::PlacementGroupInfo::State_Name(g.state())},
                   {"strategy", rpc::PlacementGroupInfo::Strategy_Name(g.strategy())},
                   {"bundles", bundles},
                   {"bundle_nodes", bundle_nodes},
                   {"bundle_label_selectors", selectors},
                   {"pending_reason", g.pending_reason()},
                   {"creator_job_id", BytesToHex(g.creator_job_id())},
                   {"is_detached", g.detached()}});
  }
  return {200, out};
}

jobs::Reply StateViews::RemovePlacementGroup(const std::string& key) {
  if (key.empty()) return jobs::Error(400, "name the placement group: its ID or its name");
  auto groups =
      metrics_->Timed("GetAllPlacementGroups", [&] { return gcs_->GetAllPlacementGroups(); });
  if (!groups.ok()) return jobs::Error(503, std::string(groups.status().message()));
  const rpc::PlacementGroupInfo* chosen = nullptr;
  const rpc::PlacementGroupInfo* by_name = nullptr;
  std::vector<const rpc::PlacementGroupInfo*> by_prefix, removed_by_prefix;
  for (const auto& g : *groups) {
    const std::string hex = BytesToHex(g.placement_group_id());
    const bool live = g.state() != rpc::PlacementGroupInfo::REMOVED;
    if (hex == key) chosen = &g;  // a removed one too: removing it again is fine
    if (live && !g.name().empty() && g.name() == key) by_name = &g;
    if (absl::StartsWith(hex, key)) (live ? by_prefix : removed_by_prefix).push_back(&g);
  }
  if (chosen == nullptr) chosen = by_name;
  // A prefix of only removed groups: say it was removed already, if it names one.
  if (chosen == nullptr && by_prefix.empty() && removed_by_prefix.size() == 1) {
    chosen = removed_by_prefix[0];
  }
  if (chosen == nullptr && by_prefix.size() > 1) {
    return jobs::Error(
        400, absl::StrCat(by_prefix.size(), " placement groups have IDs starting with '", key,
                          "': give more of the ID"));
  }
  if (chosen == nullptr && by_prefix.size() == 1) chosen = by_prefix[0];
  if (chosen == nullptr) {
    return jobs::Error(404, absl::StrCat("no placement group has the ID or name '", key,
                                         "' (`troupe list placement-groups` lists them)"));
  }
  const bool already = chosen->state() == rpc::PlacementGroupInfo::REMOVED;
  absl::Status removed = metrics_->Timed("RemovePlacementGroup", [&] {
    return gcs_->RemovePlacementGroup(chosen->placement_group_id());
  });
  if (absl::IsNotFound(removed)) return jobs::Error(404, std::string(removed.message()));
  if (absl::IsInvalidArgument(removed)) return jobs::Error(400, std::string(removed.message()));
  if (!removed.ok()) return jobs::Error(503, std::string(removed.message()));
  return {200, json{{"placement_group_id", BytesToHex(chosen->placement_group_id())},
                    {"name", chosen->name()},
                    {"removed", true},
                    {"already_removed", already}}};
}

jobs::Reply StateViews::Jobs() {
  auto drivers = metrics_->Timed("GetAllJobInfo", [&] { return gcs_->GetAllJobInfo(); });
  if (!drivers.ok()) return jobs::Error(503, std::string(drivers.status().message()));
  json out = json::array();
  std::map<std::string, std::string> job_of_submission;  // the drivers the jobs API started
  for (const auto& j : *drivers) {
    auto submission = j.metadata().find("job_submission_id");
    if (submission != j.metadata().end()) {
      job_of_submission[submission->second] = BytesToHex(j.job_id());
    }
    out.push_back({{"job_id", BytesToHex(j.job_id())},
                   {"submission_id", submission != j.metadata().end() ? json(submission->second)
                                                                      : json(nullptr)},
                   {"type", "DRIVER"},
                   {"status", j.state() == rpc::JobInfo::RUNNING ? "RUNNING" : "FINISHED"},
                   {"entrypoint", j.entrypoint()},
                   {"start_time", j.start_time_ms()},
                   {"end_time", j.end_time_ms()},
                   {"driver_pid", j.driver_pid()},
                   {"namespace", j.namespace_name()},
                   {"is_system", IsSystemJob(j)}});
  }
  auto submitted = jobs_->List();
  if (submitted.status == 200) {
    for (auto& s : submitted.body) {
      s["is_system"] = false;
      // Its driver's job ID, once the driver registered.
      auto driver = job_of_submission.find(s.value("submission_id", std::string()));
      if (driver != job_of_submission.end()) s["job_id"] = driver->second;
      out.push_back(s);
    }
  }
  return {200, out};
}

jobs::Reply StateViews::ClusterStatus() {
  auto nodes = Nodes();
  if (nodes.status != 200) return nodes;
  json total = json::object(), available = json::object();
  int alive = 0, dead = 0;
  for (const auto& node : nodes.body) {
    if (node["state"] != "ALIVE") {
      ++dead;
      continue;
    }
    ++alive;
    for (const auto& [k, v] : node["resources_total"].items())
      total[k] = total.value(k, 0.0) + v.get<double>();
    if (node.contains("resources_available")) {
      for (const auto& [k, v] : node["resources_available"].items()) {
        available[k] = available.value(k, 0.0) + v.get<double>();
      }
    }
  }
  return {200, json{{"alive_nodes", alive},
                    {"dead_nodes", dead},
                    {"resources_total", total},
                    {"resources_available", available}}};
}

}  // namespace troupe::http
