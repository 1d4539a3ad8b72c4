// `troupe status`: the cluster's nodes and resources, like `ray status`.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/cli/commands.h"
#include "src/cli/daemon.h"
#include "src/cli/state_format.h"
#include "src/common/cluster_target.h"
#include "src/common/flag_parser.h"
#include "src/common/ids.h"
#include "src/common/resources.h"
#include "src/common/session.h"
#include "src/http/state_views.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/transport_security.h"

namespace troupe {
namespace {

struct NodeRow {
  rpc::NodeInfo info;
  std::map<std::string, double> total;
  std::map<std::string, double> available;
  std::vector<std::string> infeasible;  // demands waiting here that no node can run
  // The object store as the raylet last reported it. object_store_memory is not a resource
  // leases take, so its "available" says nothing about use: these numbers do.
  int64_t store_used_bytes = 0;
  int64_t store_spilled_bytes = 0;
  int64_t store_num_objects = 0;
};

// How much of `name` the node uses: the object store's real use for object_store_memory, what
// leases hold for every other resource.
double UsedOf(const NodeRow& row, const std::string& name) {
  if (name == kObjectStoreMemory) return static_cast<double>(row.store_used_bytes);
  return row.total.at(name) - (row.available.count(name) ? row.available.at(name) : 0);
}

std::string UsedOfTotal(const std::string& name, double used, double total) {
  return absl::StrCat(FormatQuantity(name, used), "/", FormatQuantity(name, total), " ", name);
}

// Resource names in display order: CPU, GPU, custom ones, then memory-like ones.
std::vector<std::string> OrderedNames(const std::map<std::string, double>& totals) {
  std::vector<std::string> names;
  for (const char* first : {kCpu, kGpu}) {
    if (totals.count(first)) names.push_back(first);
  }
  for (const auto& [name, value] : totals) {
    if (name != kCpu && name != kGpu && !IsByteResource(name)) names.push_back(name);
  }
  for (const char* last : {kMemory, kObjectStoreMemory}) {
    if (totals.count(last)) names.push_back(last);
  }
  return names;
}

void PrintText(const rpc::GetClusterInfoReply& info, const std::string& address,
               const std::vector<NodeRow>& rows,
               const std::vector<rpc::PlacementGroupInfo>& groups) {
  printf("======== Troupe cluster status: %s ========\n",
         absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::Now(), absl::LocalTimeZone()).c_str());
  printf("Cluster %s, GCS at %s, version %s\n\n", BytesToHex(info.cluster_id()).c_str(),
         address.c_str(), info.version().c_str());
  std::map<std::string, double> cluster_total, cluster_used;
  int alive = 0, dead = 0;
  printf("Nodes\n");
  for (const auto& row : rows) {
    const bool is_alive = row.info.state() == rpc::NodeInfo::ALIVE;
    is_alive ? ++alive : ++dead;
    printf(" %-5s %s  %s:%d%s\n", is_alive ? "ALIVE" : "DEAD",
           NodeId::FromBinary(row.info.node_id())->Hex().c_str(), row.info.node_ip().c_str(),
           row.info.raylet_port(), row.info.is_head() ? "  (head)" : "");
    if (!is_alive) {
      printf("        died: %s\n", TerminalSafe(row.info.death_reason()).c_str());
      continue;
    }
    std::string line;
    for (const auto& name : OrderedNames(row.total)) {
      double used = UsedOf(row, name);
      cluster_total[name] += row.total.at(name);
      cluster_used[name] += used;
      absl::StrAppend(&line, line.empty() ? "" : ", ", UsedOfTotal(name, used, row.total.at(name)));
    }
    printf("        %s\n", line.c_str());
    if (row.info.metrics_port() > 0) {
      printf("        metrics: %s://%s:%d/metrics\n", row.info.metrics_tls() ? "https" : "http",
             row.info.node_ip().c_str(), row.info.metrics_port());
    }
    if (row.store_spilled_bytes > 0 || row.store_num_objects > 0) {
      printf("        object store: %lld objects, %s spilled to disk\n",
             static_cast<long long>(row.store_num_objects),
             FormatBytes(row.store_spilled_bytes).c_str());
    }
    for (const auto& [key, value] : row.info.labels()) {
      printf("        label %s=%s\n", TerminalSafe(key).c_str(), TerminalSafe(value).c_str());
    }
  }
  printf("\n%d alive, %d dead\n\nResources (used/total over alive nodes)\n", alive, dead);
  for (const auto& name : OrderedNames(cluster_total)) {
    printf(" %s\n", UsedOfTotal(name, cluster_used[name], cluster_total[name]).c_str());
  }
  std::set<std::string> infeasible;
  for (const auto& row : rows) infeasible.insert(row.infeasible.begin(), row.infeasible.end());
  if (!infeasible.empty()) {
    printf("\nPending: tasks that no node can run (they start when a node that fits joins)\n");
    for (const auto& demand : infeasible) printf(" %s\n", TerminalSafe(demand).c_str());
  }
  bool header = false;
  for (const auto& group : groups) {
    if (group.state() != rpc::PlacementGroupInfo::PENDING &&
        group.state() != rpc::PlacementGroupInfo::RESCHEDULING) {
      continue;
    }
    if (!header) printf("\nPending placement groups\n");
    header = true;
    printf(" %s %s: %s\n", BytesToHex(group.placement_group_id()).substr(0, 16).c_str(),
           TerminalSafe(group.name()).c_str(), TerminalSafe(group.pending_reason()).c_str());
  }
}

void PrintJson(const rpc::GetClusterInfoReply& info, const std::string& address,
               const std::vector<NodeRow>& rows) {
  nlohmann::json out;
  out["cluster_id"] = BytesToHex(info.cluster_id());
  out["gcs_address"] = address;
  out["version"] = info.version();
  std::map<std::string, double> total, available;
  int64_t store_used = 0, store_spilled = 0, store_objects = 0;
  out["nodes"] = nlohmann::json::array();
  for (const auto& row : rows) {
    const bool is_alive = row.info.state() == rpc::NodeInfo::ALIVE;
    nlohmann::json node = {
        {"node_id", NodeId::FromBinary(row.info.node_id())->Hex()},
        {"state", is_alive ? "ALIVE" : "DEAD"},
        {"node_ip", row.info.node_ip()},
        {"raylet_port", row.info.raylet_port()},
        {"metrics_port", row.info.metrics_port()},
        {"metrics_tls", row.info.metrics_tls()},
        {"hostname", row.info.hostname()},
        {"is_head", row.info.is_head()},
        {"raylet_pid", row.info.raylet_pid()},
        {"start_time_ms", row.info.start_time_ms()},
        {"resources_total", row.total},
        {"resources_available", row.available},
        {"labels",
         std::map<std::string, std::string>(row.info.labels().begin(), row.info.labels().end())},
    };
    if (!is_alive) {
      node["death_reason"] = row.info.death_reason();
      node["end_time_ms"] = row.info.end_time_ms();
    } else {
      for (const auto& [name, value] : row.total) total[name] += value;
      for (const auto& [name, value] : row.available) available[name] += value;
      node["object_store"] = {{"used_bytes", row.store_used_bytes},
                              {"spilled_bytes", row.store_spilled_bytes},
                              {"num_objects", row.store_num_objects}};
      if (row.total.count(kObjectStoreMemory)) {
        node["object_store"]["capacity_bytes"] =
            static_cast<int64_t>(row.total.at(kObjectStoreMemory));
      }
      store_used += row.store_used_bytes;
      store_spilled += row.store_spilled_bytes;
      store_objects += row.store_num_objects;
    }
    out["nodes"].push_back(node);
  }
  out["resources_total"] = total;
  out["resources_available"] = available;
  out["object_store"] = {
      {"used_bytes", store_used}, {"spilled_bytes", store_spilled}, {"num_objects", store_objects}};
  if (total.count(kObjectStoreMemory)) {
    out["object_store"]["capacity_bytes"] = static_cast<int64_t>(total.at(kObjectStoreMemory));
  }
  std::set<std::string> infeasible;
  for (const auto& row : rows) infeasible.insert(row.infeasible.begin(), row.infeasible.end());
  out["infeasible_demands"] = infeasible;
  printf("%s\n", out.dump(2).c_str());
}

int PrintActors(GcsClient* gcs, const std::string& format, bool all) {
  auto actors = gcs->GetAllActorInfo();
  if (!actors.ok()) {
    fprintf(stderr, "troupe status: %s\n", std::string(actors.status().message()).c_str());
    return 1;
  }
  // Troupe's own actors (job supervisors) only with --all.
  if (!all) {
    actors->erase(std::remove_if(actors->begin(), actors->end(), http::IsSystemActor),
                  actors->end());
  }
  if (format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& actor : *actors) {
      out.push_back({{"actor_id", BytesToHex(actor.actor_id())},
                     {"state", rpc::ActorInfo::State_Name(actor.state())},
                     {"class", actor.class_name()},
                     {"name", actor.name()},
                     {"namespace", actor.namespace_name()},
                     {"node_id", BytesToHex(actor.node_id())},
                     {"pid", actor.pid()},
                     {"num_restarts", actor.num_restarts()},
                     {"death_cause", actor.death_cause()},
                     {"pending_reason", actor.pending_reason()},
                     {"job_id", BytesToHex(actor.job_id())}});
    }
    printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  printf("%-16s %-17s %-24s %-16s %-9s %-7s %s\n", "ACTOR", "STATE", "CLASS", "NAME", "NODE", "PID",
         "RESTARTS / CAUSE");
  for (const auto& actor : *actors) {
    std::string detail = std::to_string(actor.num_restarts());
    if (!actor.death_cause().empty()) detail += "  " + actor.death_cause();
    if (!actor.pending_reason().empty()) detail += "  pending: " + actor.pending_reason();
    printf("%-16s %-17s %-24s %-16s %-9s %-7d %s\n",
           BytesToHex(actor.actor_id()).substr(0, 16).c_str(),
           rpc::ActorInfo::State_Name(actor.state()).c_str(),
           TerminalSafe(actor.class_name()).c_str(), TerminalSafe(actor.name()).c_str(),
           BytesToHex(actor.node_id()).substr(0, 8).c_str(), actor.pid(),
           TerminalSafe(detail).c_str());
  }
  if (actors->empty()) printf("(no actors)\n");
  return 0;
}

// What this machine knows about the head at `address` when its GCS does not answer: a local
// head session with Redis, and whether its supervisor (which restarts the GCS) runs.
struct LocalHead {
  std::string redis_address;  // "" if the head has no Redis (or is not local)
  int supervisor_pid = 0;     // 0 if none runs
};

LocalHead FindLocalHead(const std::string& root, const std::string& address) {
  LocalHead head;
  for (const auto& session : Session::All(root)) {
    auto session_address = session.ReadFile("address");
    auto redis = session.ReadFile("redis_address");
    if (!session_address.ok() || *session_address != address || !redis.ok()) continue;
    head.redis_address = *redis;
    head.supervisor_pid = 0;
    for (const auto& daemon : session.LiveDaemons()) {
      if (daemon.name == "head-supervisor") head.supervisor_pid = daemon.pid;
    }
    if (head.supervisor_pid != 0) break;  // the running head, else the newest session's
  }
  return head;
}

}  // namespace

int StatusCommand(const std::vector<std::string>& args) {
  std::string address, token, temp_dir, format = "text";
  bool show_actors = false, all = false;
  FlagParser flags("troupe status", "Shows the cluster's nodes and resources.");
  flags.AddString("address", &address,
                  "host:port of the head (default: $TROUPE_ADDRESS, or this machine's latest "
                  "session).");
  flags.AddString("token", &token, "Cluster token (default: $TROUPE_TOKEN, or a local session's).");
  flags.AddString("temp-dir", &temp_dir,
                  "Root of session directories (default: $TROUPE_TEMP_DIR or /tmp/troupe).");
  flags.AddString("format", &format, "Output format: text or json.");
  flags.AddBool("actors", &show_actors,
                "List actors instead: state, class, node, pid, restarts and death cause.");
  flags.AddBool("all", &all, "With --actors: also Troupe's own (job supervisors).");
  auto fail = [](const std::string& message, int code) {
    fprintf(stderr, "troupe status: %s\n", message.c_str());
    return code;
  };
  if (auto status = flags.Parse(args); !status.ok()) return fail(std::string(status.message()), 2);
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (format != "text" && format != "json") {
    return fail(absl::StrCat("flag --format expects text or json, got '", format, "'"), 2);
  }
  auto target = ResolveClusterTarget(address, token, ResolveTempRoot(temp_dir));
  if (!target.ok()) return fail(std::string(target.status().message()), 1);
  if (auto status = UseTlsDir(target->tls_dir); !status.ok()) {
    return fail(std::string(status.message()), 1);
  }
  auto gcs = std::make_unique<GcsClient>(target->address, target->token, absl::Seconds(5));
  auto info = gcs->GetClusterInfo();
  // Refused (kUnavailable): no GCS listens. No answer in time (kDeadlineExceeded): one accepts
  // connections but does not answer: hung (SIGSTOPped, deadlocked) or overloaded.
  auto unanswered = [](const absl::Status& status) {
    return status.code() == absl::StatusCode::kUnavailable ||
           status.code() == absl::StatusCode::kDeadlineExceeded;
  };
  if (!info.ok() && unanswered(info.status())) {
    const std::string root = ResolveTempRoot(temp_dir);
    LocalHead head = FindLocalHead(root, target->address);
    if (head.supervisor_pid != 0) {
      // The head supervisor restarts a dead GCS within about a second: wait for it a little.
      const absl::Time deadline = absl::Now() + absl::Seconds(3);
      auto retrying = std::make_unique<GcsClient>(target->address, target->token, absl::Seconds(1));
      retrying->SetRetry(absl::Seconds(3));
      while (!info.ok() && unanswered(info.status()) && absl::Now() < deadline) {
        info = retrying->GetClusterInfo();
      }
      // The restarted GCS answered: go on with a fresh client (the first one's channel saw
      // the old GCS fail and may still be backing off).
      if (info.ok()) {
        gcs = std::make_unique<GcsClient>(target->address, target->token, absl::Seconds(5));
      }
      if (!info.ok() && unanswered(info.status())) head = FindLocalHead(root, target->address);
    }
    // What the user is told is what was seen: a port that accepts connections while a call on
    // it goes unanswered is a hung (or overloaded) GCS; a refused one is a GCS that is not
    // running. (A GCS restarted just now accepts connections and answers: asked once more.)
    bool hung = false;
    if (!info.ok() && TcpConnectable(target->address).ok()) {
      auto fresh = std::make_unique<GcsClient>(target->address, target->token, absl::Seconds(2));
      info = fresh->GetClusterInfo();
      if (info.ok()) {
        gcs = std::move(fresh);
      } else {
        hung = true;
      }
    }
    if (!info.ok() && !head.redis_address.empty()) {
      const std::string port = target->address.substr(target->address.rfind(':') + 1);
      const std::string logs =
          "see logs/head-supervisor.log and logs/gcs.log in the head's session.";
      if (head.supervisor_pid == 0) {
        return fail(
            absl::StrCat("the GCS at ", target->address,
                         hung ? " accepts connections but does not answer (" : " is unreachable (",
                         info.status().message(),
                         ") and no head supervisor runs here "
                         "to restart it; its state is in Redis at ",
                         head.redis_address,
                         ". Restart the head with `troupe stop` and `troupe start --head "
                         "--redis-address=",
                         head.redis_address, " --port=", port, "`."),
            1);
      }
      if (hung) {
        return fail(absl::StrCat("the GCS at ", target->address,
                                 " accepts connections but does "
                                 "not answer (",
                                 info.status().message(),
                                 "): it is hung or "
                                 "overloaded. The head supervisor (pid ",
                                 head.supervisor_pid,
                                 ") kills and restarts a GCS that misses 3 health checks in a "
                                 "row; its state is in Redis at ",
                                 head.redis_address, ". Try again in a few seconds; ", logs),
                    1);
      }
      return fail(
          absl::StrCat("the GCS at ", target->address, " is unreachable (", info.status().message(),
                       ") and is being restarted by the head "
                       "supervisor (pid ",
                       head.supervisor_pid,
                       "); its state is in Redis "
                       "at ",
                       head.redis_address, ". Try again in a moment; ", logs),
          1);
    }
    if (hung) {
      return fail(absl::StrCat("the GCS at ", target->address,
                               " accepts connections but does not "
                               "answer (",
                               info.status().message(),
                               "): it is hung or "
                               "overloaded. Check its process and logs/gcs.log on the head (a "
                               "head started with --redis-address restarts a hung GCS by itself; "
                               "one without Redis does not: `troupe stop` and `troupe start "
                               "--head` there start a new cluster)."),
                  1);
    }
  }
  if (!info.ok()) {
    std::string hint = info.status().code() == absl::StatusCode::kUnauthenticated
                           ? ""
                           : "\nNo cluster answers there. Start one with `troupe start --head`, or "
                             "point --address at a running head.";
    return fail(absl::StrCat(info.status().message(), hint), 1);
  }
  if (show_actors) return PrintActors(gcs.get(), format, all);
  auto nodes = gcs->GetAllNodeInfo();
  auto usages = gcs->GetAllResourceUsage();
  if (!nodes.ok()) return fail(std::string(nodes.status().message()), 1);
  if (!usages.ok()) return fail(std::string(usages.status().message()), 1);
  std::map<std::string, rpc::ResourceUsage> usage_by_node;
  for (const auto& usage : *usages) usage_by_node[usage.node_id()] = usage;
  std::vector<NodeRow> rows;
  for (const auto& node : *nodes) {
    NodeRow row{node, {node.resources_total().begin(), node.resources_total().end()}, {}};
    if (auto it = usage_by_node.find(node.node_id()); it != usage_by_node.end()) {
      row.available = {it->second.available().begin(), it->second.available().end()};
      row.infeasible = {it->second.infeasible_demands().begin(),
                        it->second.infeasible_demands().end()};
      row.store_used_bytes = it->second.object_store_used_bytes();
      row.store_spilled_bytes = it->second.object_store_spilled_bytes();
      row.store_num_objects = it->second.object_store_num_objects();
    }
    rows.push_back(std::move(row));
  }
  // Head first, then alive before dead, then by start time.
  std::sort(rows.begin(), rows.end(), [](const NodeRow& a, const NodeRow& b) {
    return std::make_tuple(!a.info.is_head(), a.info.state(), a.info.start_time_ms()) <
           std::make_tuple(!b.info.is_head(), b.info.state(), b.info.start_time_ms());
  });
  if (format == "json") {
    PrintJson(*info, target->address, rows);
  } else {
    auto groups = gcs->GetAllPlacementGroups();
    PrintText(*info, target->address, rows,
              groups.ok() ? *groups : std::vector<rpc::PlacementGroupInfo>());
  }
  return 0;
}

}  // namespace troupe
