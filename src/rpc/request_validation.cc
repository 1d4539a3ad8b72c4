#include "src/rpc/request_validation.h"

#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/common/ids.h"
#include "src/common/resources.h"
#include "src/scheduling/label_selector.h"
#include "src/common/status_macros.h"

namespace troupe {
namespace {

using L = RequestLimits;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

// `bytes` must be exactly an Id (empty too, unless `optional`).
template <typename Id>
absl::Status CheckId(absl::string_view field, const std::string& bytes, bool optional = false) {
  if (optional && bytes.empty()) return absl::OkStatus();
  if (bytes.size() == Id::Size()) return absl::OkStatus();
  return Invalid(field, absl::StrCat("must be ", Id::Size(), " bytes (a ", Id::kName, "), got ",
                                     bytes.size(), optional ? " (or leave it empty)" : ""));
}
template <typename Id>
absl::Status CheckOptionalId(absl::string_view field, const std::string& bytes) {
  return CheckId<Id>(field, bytes, /*optional=*/true);
}

absl::Status CheckText(absl::string_view field, const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::OkStatus();
  return Invalid(field, absl::StrCat("is ", text.size(), " bytes long; at most ", max_bytes,
                                     " bytes are allowed"));
}
absl::Status CheckName(absl::string_view field, const std::string& name) {
  return CheckText(field, name, L::kMaxNameBytes);
}
absl::Status CheckNonEmptyName(absl::string_view field, const std::string& name) {
  if (name.empty()) return Invalid(field, "must not be empty");
  return CheckName(field, name);
}

// A name people read in `troupe status` and `troupe list`: bounded, and no control characters
// (C0, DEL, or C1 in UTF-8), which a terminal would act on.
absl::Status CheckPrintableName(absl::string_view field, const std::string& name) {
  TROUPE_RETURN_IF_ERROR(CheckName(field, name));
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const bool c1 = c == 0xC2 && i + 1 < name.size() &&
                    static_cast<unsigned char>(name[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(name[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      return Invalid(field, absl::StrCat("contains the control character 0x",
                                         absl::Hex(c1 ? static_cast<unsigned char>(name[i + 1]) : c,
                                                   absl::kZeroPad2),
                                         " at byte ", i,
                                         "; names are printed by `troupe status` and `troupe "
                                         "list`: use printable characters"));
    }
  }
  return absl::OkStatus();
}

// A field only the GCS fills in (where and how an actor or placement group runs): a caller that
// sets it reports state it does not own.
absl::Status CheckUnset(absl::string_view field, bool set) {
  if (!set) return absl::OkStatus();
  return Invalid(field,
                 "is set by the caller, but only the GCS records where and how actors and "
                 "placement groups run: leave it empty");
}

absl::Status CheckCount(absl::string_view field, int count, int max) {
  if (count <= max) return absl::OkStatus();
  return Invalid(field, absl::StrCat("has ", count, " entries; at most ", max, " are allowed"));
}

// A resource map as resources.h accepts it, plus bounds on names, counts and quantities.
template <typename Map>
absl::Status CheckResources(absl::string_view field, const Map& resources) {
  TROUPE_RETURN_IF_ERROR(CheckCount(field, static_cast<int>(resources.size()),
                                    static_cast<int>(L::kMaxResourcesPerMap)));
  std::map<std::string, double> amounts;
  for (const auto& [name, quantity] : resources) {
    if (name.empty()) return Invalid(field, "has a resource with an empty name");
    if (name.size() > L::kMaxResourceNameBytes) {
      return Invalid(field, absl::StrCat("has a resource name of ", name.size(), " bytes; at most ",
                                         L::kMaxResourceNameBytes, " bytes are allowed"));
    }
    if (!std::isfinite(quantity) || quantity < 0 || quantity > L::kMaxResourceQuantity) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "['", name, "'] is ", quantity,
          "; resource quantities must be finite, >= 0 and <= ", L::kMaxResourceQuantity,
          " (fractions such as 0.5 GPU are fine)"));
    }
    amounts[name] = quantity;
  }
  if (auto set = ResourceSet::FromMap(amounts); !set.ok()) {
    return Invalid(field, set.status().message());
  }
  return absl::OkStatus();
}

template <typename Map>
absl::Status CheckStringMap(absl::string_view field, const Map& map) {
  TROUPE_RETURN_IF_ERROR(CheckCount(field, static_cast<int>(map.size()), L::kMaxRepeated));
  for (const auto& [key, value] : map) {
    TROUPE_RETURN_IF_ERROR(CheckName(absl::StrCat(field, " key"), key));
    TROUPE_RETURN_IF_ERROR(
        CheckText(absl::StrCat(field, "['", key.substr(0, 64), "']"), value, L::kMaxTextBytes));
  }
  return absl::OkStatus();
}

template <typename Repeated>
absl::Status CheckTexts(absl::string_view field, const Repeated& texts, size_t max_bytes) {
  TROUPE_RETURN_IF_ERROR(CheckCount(field, texts.size(), L::kMaxRepeated));
  for (int i = 0; i < texts.size(); ++i) {
    TROUPE_RETURN_IF_ERROR(CheckText(absl::StrCat(field, "[", i, "]"), texts.Get(i), max_bytes));
  }
  return absl::OkStatus();
}

template <typename Id, typename Repeated>
absl::Status CheckIds(absl::string_view field, const Repeated& ids) {
  TROUPE_RETURN_IF_ERROR(CheckCount(field, ids.size(), L::kMaxRepeated));
  for (int i = 0; i < ids.size(); ++i) {
    TROUPE_RETURN_IF_ERROR(CheckId<Id>(absl::StrCat(field, "[", i, "]"), ids.Get(i)));
  }
  return absl::OkStatus();
}

absl::Status CheckPort(absl::string_view field, int port, bool allow_zero) {
  if (port >= (allow_zero ? 0 : 1) && port <= 65535) return absl::OkStatus();
  return Invalid(field, absl::StrCat("is ", port, "; a port is ", allow_zero ? 0 : 1, "..65535"));
}

absl::Status CheckStrategy(absl::string_view field, const rpc::SchedulingStrategy& strategy) {
  if (!rpc::SchedulingStrategy::Kind_IsValid(strategy.kind())) {
    return Invalid(field, absl::StrCat("kind is ", strategy.kind(),
                                       "; allowed: DEFAULT, SPREAD, NODE_AFFINITY"));
  }
  TROUPE_RETURN_IF_ERROR(
      CheckOptionalId<NodeId>(absl::StrCat(field, ".node_id"), strategy.node_id()));
  return ValidateLabelSelector(absl::StrCat(field, ".label_selector"), strategy.label_selector());
}

// The fields of a TaskSpec the receiving daemon looks at (the GCS for actor creation, the raylet
// for leases); the arguments travel on to workers as opaque bytes, bounded in number and size.
absl::Status CheckTaskSpec(absl::string_view field, const rpc::TaskSpec& spec) {
  const std::string f(field);
  if (!rpc::TaskSpec::Type_IsValid(spec.type())) {
    return Invalid(f + ".type", absl::StrCat("is ", spec.type(),
                                             "; allowed: NORMAL_TASK, ACTOR_CREATION_TASK, "
                                             "ACTOR_TASK"));
  }
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<TaskId>(f + ".task_id", spec.task_id()));
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<JobId>(f + ".job_id", spec.job_id()));
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<ActorId>(f + ".actor_id", spec.actor_id()));
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<NodeId>(f + ".caller_node_id", spec.caller_node_id()));
  TROUPE_RETURN_IF_ERROR(
      CheckOptionalId<WorkerId>(f + ".caller_worker_id", spec.caller_worker_id()));
  TROUPE_RETURN_IF_ERROR(
      CheckOptionalId<PlacementGroupId>(f + ".placement_group_id", spec.placement_group_id()));
  TROUPE_RETURN_IF_ERROR(CheckName(f + ".function_name", spec.function_name()));
  TROUPE_RETURN_IF_ERROR(CheckName(f + ".name", spec.name()));
  TROUPE_RETURN_IF_ERROR(CheckName(f + ".caller_address", spec.caller_address()));
  TROUPE_RETURN_IF_ERROR(CheckResources(f + ".required_resources", spec.required_resources()));
  TROUPE_RETURN_IF_ERROR(CheckStrategy(f + ".strategy", spec.strategy()));
  TROUPE_RETURN_IF_ERROR(CheckCount(f + ".args", spec.args_size(), L::kMaxRepeated));
  if (spec.num_returns() < 0 || spec.num_returns() > L::kMaxRepeated) {
    return Invalid(f + ".num_returns",
                   absl::StrCat("is ", spec.num_returns(), "; allowed: 0..", L::kMaxRepeated));
  }
  if (spec.stream_backpressure() < 0) {
    return Invalid(f + ".stream_backpressure", absl::StrCat("is ", spec.stream_backpressure(),
                                                            "; allowed: 0 (no bound) or more"));
  }
  if (spec.bundle_index() < -1) {
    return Invalid(f + ".bundle_index",
                   absl::StrCat("is ", spec.bundle_index(), "; allowed: -1 (any) or >= 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckKvNamespaceAndKey(const std::string& ns, const std::string& key,
                                    absl::string_view key_field = "key") {
  TROUPE_RETURN_IF_ERROR(CheckName("namespace_name", ns));
  return CheckText(key_field, key, L::kMaxKvKeyBytes);
}

}  // namespace

// ---- GCS ----

absl::Status ValidateRequest(const rpc::GetClusterInfoRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::IssueNodeCertificateRequest& request) {
  if (request.csr_pem().empty() || request.csr_pem().size() > 16 * 1024) {
    return absl::InvalidArgumentError("csr_pem must hold one PEM certificate request (< 16 KiB)");
  }
  if (request.addresses().empty() || request.addresses_size() > 16) {
    return absl::InvalidArgumentError("addresses must name 1 to 16 addresses of the node");
  }
  for (const std::string& address : request.addresses()) {
    if (address.empty() || address.size() > 253 ||
        address.find_first_of(",: \t\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("addresses: '", address, "' is not an IP address or host name"));
    }
  }
  if (request.node_name().size() > 64) {
    return absl::InvalidArgumentError("node_name is longer than 64 characters");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::RegisterNodeRequest& request) {
  const rpc::NodeInfo& node = request.node();
  TROUPE_RETURN_IF_ERROR(CheckId<NodeId>("node.node_id", node.node_id()));
  TROUPE_RETURN_IF_ERROR(CheckNonEmptyName("node.node_ip", node.node_ip()));
  TROUPE_RETURN_IF_ERROR(CheckPort("node.raylet_port", node.raylet_port(), false));
  TROUPE_RETURN_IF_ERROR(CheckName("node.hostname", node.hostname()));
  TROUPE_RETURN_IF_ERROR(CheckResources("node.resources_total", node.resources_total()));
  TROUPE_RETURN_IF_ERROR(CheckStringMap("node.labels", node.labels()));
  TROUPE_RETURN_IF_ERROR(CheckText("node.death_reason", node.death_reason(), L::kMaxTextBytes));
  return CheckOptionalId<ClusterId>("expected_cluster_id", request.expected_cluster_id());
}

absl::Status ValidateRequest(const rpc::UnregisterNodeRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<NodeId>("node_id", request.node_id()));
  return CheckText("reason", request.reason(), L::kMaxTextBytes);
}

absl::Status ValidateRequest(const rpc::GetAllNodeInfoRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::ReportResourceUsageRequest& request) {
  const rpc::ResourceUsage& usage = request.usage();
  TROUPE_RETURN_IF_ERROR(CheckId<NodeId>("usage.node_id", usage.node_id()));
  TROUPE_RETURN_IF_ERROR(CheckResources("usage.total", usage.total()));
  TROUPE_RETURN_IF_ERROR(CheckResources("usage.available", usage.available()));
  TROUPE_RETURN_IF_ERROR(CheckName("usage.raylet_address", usage.raylet_address()));
  return CheckTexts("usage.infeasible_demands", usage.infeasible_demands(), L::kMaxTextBytes);
}

absl::Status ValidateRequest(const rpc::GetAllResourceUsageRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::AddJobRequest& request) {
  const rpc::JobInfo& job = request.job();
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<JobId>("job.job_id", job.job_id()));
  TROUPE_RETURN_IF_ERROR(CheckText("job.entrypoint", job.entrypoint(), L::kMaxTextBytes));
  TROUPE_RETURN_IF_ERROR(CheckName("job.driver_address", job.driver_address()));
  TROUPE_RETURN_IF_ERROR(CheckStringMap("job.metadata", job.metadata()));
  TROUPE_RETURN_IF_ERROR(CheckName("job.namespace_name", job.namespace_name()));
  TROUPE_RETURN_IF_ERROR(CheckName("job.executable_path", job.executable_path()));
  TROUPE_RETURN_IF_ERROR(CheckName("job.executable_digest", job.executable_digest()));
  TROUPE_RETURN_IF_ERROR(CheckTexts("job.driver_argv", job.driver_argv(), L::kMaxTextBytes));
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<NodeId>("job.driver_node_id", job.driver_node_id()));
  return CheckName("job.working_dir_digest", job.working_dir_digest());
}

absl::Status ValidateRequest(const rpc::MarkJobFinishedRequest& request) {
  return CheckId<JobId>("job_id", request.job_id());
}

absl::Status ValidateRequest(const rpc::GetAllJobInfoRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::KVGetRequest& request) {
  return CheckKvNamespaceAndKey(request.namespace_name(), request.key());
}

absl::Status ValidateRequest(const rpc::KVPutRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckKvNamespaceAndKey(request.namespace_name(), request.key()));
  return CheckText("value", request.value(), L::kMaxKvValueBytes);
}

absl::Status ValidateRequest(const rpc::KVDelRequest& request) {
  return CheckKvNamespaceAndKey(request.namespace_name(), request.key());
}

absl::Status ValidateRequest(const rpc::KVExistsRequest& request) {
  return CheckKvNamespaceAndKey(request.namespace_name(), request.key());
}

absl::Status ValidateRequest(const rpc::KVKeysRequest& request) {
  return CheckKvNamespaceAndKey(request.namespace_name(), request.prefix(), "prefix");
}

absl::Status ValidateRequest(const rpc::PollRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckCount("channels", request.channels_size(), 16));
  for (int i = 0; i < request.channels_size(); ++i) {
    if (!rpc::Channel_IsValid(request.channels(i))) {
      return Invalid(absl::StrCat("channels[", i, "]"),
                     absl::StrCat("is ", request.channels(i),
                                  "; allowed: NODE, ACTOR, JOB, PLACEMENT_GROUP, LOG channels"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::PublishLogsRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckCount("batches", request.batches_size(), L::kMaxRepeated));
  for (int i = 0; i < request.batches_size(); ++i) {
    const rpc::LogBatch& batch = request.batches(i);
    const std::string f = absl::StrCat("batches[", i, "]");
    TROUPE_RETURN_IF_ERROR(CheckOptionalId<JobId>(f + ".job_id", batch.job_id()));
    TROUPE_RETURN_IF_ERROR(CheckOptionalId<NodeId>(f + ".node_id", batch.node_id()));
    TROUPE_RETURN_IF_ERROR(CheckOptionalId<WorkerId>(f + ".worker_id", batch.worker_id()));
    TROUPE_RETURN_IF_ERROR(CheckTexts(f + ".lines", batch.lines(), L::kMaxTextBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::RegisterActorRequest& request) {
  const rpc::ActorInfo& actor = request.actor();
  TROUPE_RETURN_IF_ERROR(CheckId<ActorId>("actor.actor_id", actor.actor_id()));
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<JobId>("actor.job_id", actor.job_id()));
  TROUPE_RETURN_IF_ERROR(CheckPrintableName("actor.name", actor.name()));
  TROUPE_RETURN_IF_ERROR(CheckPrintableName("actor.namespace_name", actor.namespace_name()));
  for (const auto& [field, set] : std::initializer_list<std::pair<const char*, bool>>{
           {"actor.state", actor.state() != rpc::ActorInfo::DEPENDENCIES_UNREADY},
           {"actor.node_id", !actor.node_id().empty()},
           {"actor.worker_id", !actor.worker_id().empty()},
           {"actor.worker_address", !actor.worker_address().empty()},
           {"actor.pid", actor.pid() != 0},
           {"actor.num_restarts", actor.num_restarts() != 0},
           {"actor.death_cause", !actor.death_cause().empty()},
           {"actor.raylet_address", !actor.raylet_address().empty()},
           {"actor.lease_id", !actor.lease_id().empty()},
           {"actor.pending_reason", !actor.pending_reason().empty()},
           {"actor.start_time_ms", actor.start_time_ms() != 0},
           {"actor.end_time_ms", actor.end_time_ms() != 0}}) {
    TROUPE_RETURN_IF_ERROR(CheckUnset(field, set));
  }
  TROUPE_RETURN_IF_ERROR(CheckName("actor.class_name", actor.class_name()));
  TROUPE_RETURN_IF_ERROR(CheckResources("actor.required_resources", actor.required_resources()));
  TROUPE_RETURN_IF_ERROR(
      CheckOptionalId<PlacementGroupId>("actor.placement_group_id", actor.placement_group_id()));
  if (actor.bundle_index() < -1) {
    return Invalid("actor.bundle_index",
                   absl::StrCat("is ", actor.bundle_index(), "; allowed: -1 (any) or >= 0"));
  }
  TROUPE_RETURN_IF_ERROR(CheckName("actor.owner_address", actor.owner_address()));
  return CheckTaskSpec("creation_task", request.creation_task());
}

absl::Status ValidateRequest(const rpc::GetActorInfoRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<ActorId>("actor_id", request.actor_id()));
  TROUPE_RETURN_IF_ERROR(CheckName("name", request.name()));
  return CheckName("namespace_name", request.namespace_name());
}

absl::Status ValidateRequest(const rpc::GetAllActorInfoRequest& request) {
  return CheckIds<ActorId>("actor_ids", request.actor_ids());
}

absl::Status ValidateRequest(const rpc::KillActorRequest& request) {
  return CheckId<ActorId>("actor_id", request.actor_id());
}

absl::Status ValidateRequest(const rpc::ReportWorkerExitRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<WorkerId>("worker_id", request.worker_id()));
  TROUPE_RETURN_IF_ERROR(CheckOptionalId<NodeId>("node_id", request.node_id()));
  return CheckText("how", request.how(), L::kMaxTextBytes);
}

absl::Status ValidateRequest(const rpc::ReportActorExitRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<ActorId>("actor_id", request.actor_id()));
  return CheckId<WorkerId>("worker_id", request.worker_id());
}

absl::Status ValidateRequest(const rpc::CreatePlacementGroupRequest& request) {
  const rpc::PlacementGroupInfo& group = request.placement_group();
  TROUPE_RETURN_IF_ERROR(
      CheckId<PlacementGroupId>("placement_group.placement_group_id", group.placement_group_id()));
  TROUPE_RETURN_IF_ERROR(CheckPrintableName("placement_group.name", group.name()));
  TROUPE_RETURN_IF_ERROR(
      CheckUnset("placement_group.state", group.state() != rpc::PlacementGroupInfo::PENDING));
  TROUPE_RETURN_IF_ERROR(
      CheckUnset("placement_group.pending_reason", !group.pending_reason().empty()));
  if (!rpc::PlacementGroupInfo::Strategy_IsValid(group.strategy())) {
    return Invalid("placement_group.strategy",
                   absl::StrCat("is ", group.strategy(),
                                "; allowed: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"));
  }
  if (group.bundles_size() == 0) {
    return Invalid("placement_group.bundles", "is empty; a placement group needs a bundle");
  }
  TROUPE_RETURN_IF_ERROR(
      CheckCount("placement_group.bundles", group.bundles_size(), L::kMaxBundles));
  for (int i = 0; i < group.bundles_size(); ++i) {
    const rpc::Bundle& bundle = group.bundles(i);
    const std::string f = absl::StrCat("placement_group.bundles[", i, "]");
    TROUPE_RETURN_IF_ERROR(CheckResources(f + ".resources", bundle.resources()));
    TROUPE_RETURN_IF_ERROR(CheckUnset(f + ".node_id", !bundle.node_id().empty()));
    TROUPE_RETURN_IF_ERROR(CheckUnset(f + ".raylet_address", !bundle.raylet_address().empty()));
    TROUPE_RETURN_IF_ERROR(CheckUnset(f + ".reservation_id", !bundle.reservation_id().empty()));
    TROUPE_RETURN_IF_ERROR(
        CheckUnset(f + ".pending_reservation_id", !bundle.pending_reservation_id().empty()));
    TROUPE_RETURN_IF_ERROR(ValidateLabelSelector(f + ".label_selector", bundle.label_selector()));
  }
  return CheckOptionalId<JobId>("placement_group.creator_job_id", group.creator_job_id());
}

absl::Status ValidateRequest(const rpc::RemovePlacementGroupRequest& request) {
  return CheckId<PlacementGroupId>("placement_group_id", request.placement_group_id());
}

absl::Status ValidateRequest(const rpc::GetPlacementGroupRequest& request) {
  TROUPE_RETURN_IF_ERROR(
      CheckOptionalId<PlacementGroupId>("placement_group_id", request.placement_group_id()));
  return CheckName("name", request.name());
}

absl::Status ValidateRequest(const rpc::GetAllPlacementGroupRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::AddTaskEventDataRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckCount("events", request.events_size(), L::kMaxRepeated));
  for (int i = 0; i < request.events_size(); ++i) {
    const rpc::TaskEvent& event = request.events(i);
    TROUPE_RETURN_IF_ERROR(CheckId<TaskId>(absl::StrCat("events[", i, "].task_id"), event.task_id()));
    TROUPE_RETURN_IF_ERROR(CheckId<JobId>(absl::StrCat("events[", i, "].job_id"), event.job_id()));
    if (event.attempt() < 0) return Invalid(absl::StrCat("events[", i, "].attempt"), "must be >= 0");
    TROUPE_RETURN_IF_ERROR(CheckText(absl::StrCat("events[", i, "].error_message"),
                                     event.error_message(), L::kMaxTextBytes));
  }
  return CheckCount("dropped", request.dropped_size(), L::kMaxRepeated);
}

absl::Status ValidateRequest(const rpc::GetTaskEventsRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckCount("filters", request.filters_size(), 64));
  if (request.limit() < 0) return Invalid("limit", "must be >= 0 (0: no limit)");
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::WaitPlacementGroupUntilReadyRequest& request) {
  TROUPE_RETURN_IF_ERROR(
      CheckId<PlacementGroupId>("placement_group_id", request.placement_group_id()));
  if (request.timeout_ms() < 0) {
    return Invalid("timeout_ms", absl::StrCat("is ", request.timeout_ms(), "; it must be >= 0"));
  }
  return absl::OkStatus();
}

// ---- Raylet ----

absl::Status ValidateRequest(const rpc::HealthCheckRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::GetNodeStatsRequest&) { return absl::OkStatus(); }

absl::Status ValidateRequest(const rpc::RegisterWorkerRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<WorkerId>("worker_id", request.worker_id()));
  TROUPE_RETURN_IF_ERROR(CheckId<JobId>("job_id", request.job_id()));
  if (request.pid() <= 0) {
    return Invalid("pid", absl::StrCat("is ", request.pid(), "; it must be a process ID > 0"));
  }
  return CheckPort("port", request.port(), /*allow_zero=*/true);
}

absl::Status ValidateRequest(const rpc::ReportUserMetricsRequest& request) {
  // The metrics themselves are checked as they are applied (src/metrics/user_metric.h).
  return CheckId<WorkerId>("worker_id", request.worker_id());
}

absl::Status ValidateRequest(const rpc::NotifyBlockedRequest& request) {
  return CheckId<WorkerId>("worker_id", request.worker_id());
}

absl::Status ValidateRequest(const rpc::RequestWorkerLeaseRequest& request) {
  return CheckTaskSpec("resource_spec", request.resource_spec());
}

absl::Status ValidateRequest(const rpc::ReturnWorkerRequest& request) {
  if (request.reservation_ids_size() == 0) return CheckId<LeaseId>("lease_id", request.lease_id());
  TROUPE_RETURN_IF_ERROR(CheckId<LeaseId>("lease_id", request.lease_id(), /*optional=*/true));
  for (const auto& id : request.reservation_ids()) {
    TROUPE_RETURN_IF_ERROR(CheckId<LeaseId>("reservation_ids", id));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::KillLeasedWorkerRequest& request) {
  return CheckId<LeaseId>("lease_id", request.lease_id());
}

absl::Status ValidateRequest(const rpc::CreateObjectRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>("object_id", request.object_id()));
  TROUPE_RETURN_IF_ERROR(
      CheckId<WorkerId>("owner_worker_id", request.owner_worker_id(), /*optional=*/true));
  TROUPE_RETURN_IF_ERROR(
      CheckId<NodeId>("owner_node_id", request.owner_node_id(), /*optional=*/true));
  if (request.size() < 0) {
    return Invalid("size", absl::StrCat("is ", request.size(), "; it must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::SealObjectRequest& request) {
  return CheckId<ObjectId>("object_id", request.object_id());
}

absl::Status ValidateRequest(const rpc::GetObjectsRequest& request) {
  return CheckIds<ObjectId>("object_ids", request.object_ids());
}

absl::Status ValidateRequest(const rpc::ReleaseObjectsRequest& request) {
  return CheckIds<ObjectId>("object_ids", request.object_ids());
}

absl::Status ValidateRequest(const rpc::FetchObjectRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>("object_id", request.object_id()));
  TROUPE_RETURN_IF_ERROR(CheckNonEmptyName("from_raylet_address", request.from_raylet_address()));
  if (request.other_raylet_addresses_size() + 1 > L::kMaxFetchSources) {
    return absl::InvalidArgumentError(absl::StrCat(
        "other_raylet_addresses: the request names ", request.other_raylet_addresses_size() + 1,
        " copies to fetch from; at most ", L::kMaxFetchSources,
        " are allowed (from_raylet_address and other_raylet_addresses together): name the "
        "copies to try first"));
  }
  for (const std::string& address : request.other_raylet_addresses()) {
    TROUPE_RETURN_IF_ERROR(CheckNonEmptyName("other_raylet_addresses", address));
  }
  return absl::OkStatus();
}

// ---- Raylet: ObjectManagerService ----

absl::Status ValidateRequest(const rpc::PullObjectRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>("object_id", request.object_id()));
  if (request.chunk_size() < 0 || request.chunk_size() > L::kMaxChunkBytes) {
    return Invalid("chunk_size", absl::StrCat("is ", request.chunk_size(),
                                              "; allowed: 0 (default) to ", L::kMaxChunkBytes));
  }
  if (request.offset() < 0) {
    return Invalid("offset", absl::StrCat("is ", request.offset(), "; must be 0 or more"));
  }
  if (request.length() < 0) {
    return Invalid("length", absl::StrCat("is ", request.length(), "; must be 0 (to the end) or more"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::FreeObjectsRequest& request) {
  return CheckIds<ObjectId>("object_ids", request.object_ids());
}

// ---- Core worker: CoreWorkerService ----

absl::Status ValidateRequest(const rpc::PushTaskRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckTaskSpec("task", request.task()));
  if (request.task().task_id().empty()) return Invalid("task.task_id", "is empty");
  // Arguments by reference are looked up by the worker: their IDs must be well formed.
  for (int i = 0; i < request.task().args_size(); ++i) {
    const rpc::TaskArg& arg = request.task().args(i);
    if (arg.object_id().empty()) continue;
    const std::string field = absl::StrCat("task.args[", i, "]");
    TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>(field + ".object_id", arg.object_id()));
    TROUPE_RETURN_IF_ERROR(CheckNonEmptyName(field + ".owner_address", arg.owner_address()));
  }
  // A place in the lease's order (the worker keeps it in order; far from overflowing).
  if (request.lease_sequence() < 0 || request.lease_sequence() > (int64_t{1} << 62)) {
    return Invalid("lease_sequence", "must be from 0 to 2^62");
  }
  return CheckCount("gpu_ids", request.gpu_ids_size(), L::kMaxRepeated);
}

absl::Status ValidateRequest(const rpc::PushTasksRequest& request) {
  if (request.pushes_size() == 0) return Invalid("pushes", "is empty");
  TROUPE_RETURN_IF_ERROR(CheckCount("pushes", request.pushes_size(), L::kMaxRepeated));
  // One leased worker's tasks, or one caller's calls to one actor.
  const rpc::TaskSpec::Type type = request.pushes(0).task().type();
  if (type != rpc::TaskSpec::NORMAL_TASK && type != rpc::TaskSpec::ACTOR_TASK) {
    return Invalid("pushes[0].task.type", "is neither NORMAL_TASK nor ACTOR_TASK");
  }
  for (int i = 0; i < request.pushes_size(); ++i) {
    if (request.pushes(i).task().type() != type) {
      return Invalid(absl::StrCat("pushes[", i, "].task.type"), "differs from pushes[0]'s");
    }
    if (absl::Status valid = ValidateRequest(request.pushes(i)); !valid.ok()) {
      return absl::Status(valid.code(), absl::StrCat("pushes[", i, "]: ", valid.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::GetObjectStatusRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckTexts("lost_copy_raylet_addresses",
                                    request.lost_copy_raylet_addresses(), L::kMaxNameBytes));
  return CheckId<ObjectId>("object_id", request.object_id());
}

absl::Status ValidateRequest(const rpc::AddObjectLocationRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>("object_id", request.object_id()));
  TROUPE_RETURN_IF_ERROR(CheckNonEmptyName("raylet_address", request.raylet_address()));
  return CheckOptionalId<NodeId>("node_id", request.node_id());
}

absl::Status ValidateRequest(const rpc::AddBorrowersRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckIds<ObjectId>("object_ids", request.object_ids()));
  return CheckNonEmptyName("borrower_address", request.borrower_address());
}

absl::Status ValidateRequest(const rpc::CancelTaskRequest& request) {
  return CheckId<TaskId>("task_id", request.task_id());
}

absl::Status ValidateRequest(const rpc::ReportStreamItemRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckId<TaskId>("task_id", request.task_id()));
  if (request.index() < 1) {
    return Invalid("index", absl::StrCat("is ", request.index(), "; items are numbered from 1"));
  }
  TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>("item.object_id", request.item().object_id()));
  for (const auto& ref : request.contained_refs()) {
    TROUPE_RETURN_IF_ERROR(CheckId<ObjectId>("contained_refs.object_id", ref.object_id()));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const rpc::RemoveBorrowersRequest& request) {
  TROUPE_RETURN_IF_ERROR(CheckIds<ObjectId>("object_ids", request.object_ids()));
  return CheckNonEmptyName("borrower_address", request.borrower_address());
}

}  // namespace troupe
