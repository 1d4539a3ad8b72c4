#include "src/gcs/gcs_grpc_services.h"

#include "src/common/status_macros.h"
#include "src/rpc/request_validation.h"
#include "src/rpc/server.h"

namespace troupe {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

namespace {
// Respond / RespondAsync (src/rpc/server.h) with the request checked after the token: a
// malformed request is answered INVALID_ARGUMENT before any manager sees it.
template <typename Request, typename Handler>
ServerUnaryReactor* RespondChecked(CallbackServerContext* context, const TokenAuthenticator& auth,
                                   const Request& request, Handler&& handler) {
  return Respond(context, auth, [&]() -> absl::Status {
    TROUPE_RETURN_IF_ERROR(ValidateRequest(request));
    return handler();
  });
}
template <typename Request, typename Handler>
ServerUnaryReactor* RespondCheckedAsync(CallbackServerContext* context,
                                        const TokenAuthenticator& auth, const Request& request,
                                        Handler&& handler) {
  return RespondAsync(context, auth, [&](auto done) {
    if (absl::Status status = ValidateRequest(request); !status.ok()) return done(status);
    handler(std::move(done));
  });
}
}  // namespace

ServerUnaryReactor* ClusterInfoGrpcService::GetClusterInfo(
    CallbackServerContext* context, const rpc::GetClusterInfoRequest* request,
    rpc::GetClusterInfoReply* reply) {
  return RespondChecked(context, *auth_, *request, [&] {
    *reply = info_;
    return absl::OkStatus();
  });
}

ServerUnaryReactor* ClusterInfoGrpcService::IssueNodeCertificate(
    CallbackServerContext* context, const rpc::IssueNodeCertificateRequest* request,
    rpc::IssueNodeCertificateReply* reply) {
  return RespondChecked(context, *auth_, *request, [&]() -> absl::Status {
    if (ca_ == nullptr) {
      return absl::FailedPreconditionError(
          "this cluster runs without TLS (its head was started with --tls=off or on loopback): "
          "join without --ca-cert-hash");
    }
    CertificateRequest names;
    names.common_name = request->node_name().empty() ? "troupe-node" : request->node_name();
    names.subject_alt_names.assign(request->addresses().begin(), request->addresses().end());
    auto cert = ca_->SignCsr(request->csr_pem(), names);
    if (!cert.ok()) return cert.status();
    reply->set_cert_pem(*cert);
    reply->set_ca_pem(ca_->cert_pem());
    return absl::OkStatus();
  });
}

// ---- Nodes ----

ServerUnaryReactor* NodeInfoGrpcService::RegisterNode(CallbackServerContext* context,
                                                      const rpc::RegisterNodeRequest* request,
                                                      rpc::RegisterNodeReply* reply) {
  return RespondChecked(context, *auth_, *request, [&]() -> absl::Status {
    auto result = nodes_->RegisterNode(*request);
    if (!result.ok()) return result.status();
    *reply = *result;
    reply->set_health_check_period_ms(health_check_period_ms_);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* NodeInfoGrpcService::UnregisterNode(CallbackServerContext* context,
                                                        const rpc::UnregisterNodeRequest* request,
                                                        rpc::UnregisterNodeReply*) {
  return RespondChecked(context, *auth_, *request, [&] {
    return nodes_->UnregisterNode(request->node_id(), request->reason());
  });
}

ServerUnaryReactor* NodeInfoGrpcService::GetAllNodeInfo(CallbackServerContext* context,
                                                        const rpc::GetAllNodeInfoRequest* request,
                                                        rpc::GetAllNodeInfoReply* reply) {
  return RespondChecked(context, *auth_, *request, [&] {
    for (auto& node : nodes_->GetAllNodes()) *reply->add_nodes() = std::move(node);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* NodeInfoGrpcService::ReportResourceUsage(CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* reply) {
  return Respond(context, *auth_, [&]() -> absl::Status {
    rpc::ReportResourceUsageRequest parsed;
    grpc::ByteBuffer bytes(*request);  // Deserialize consumes its buffer; this shares the slices
    if (!grpc::SerializationTraits<rpc::ReportResourceUsageRequest>::Deserialize(&bytes, &parsed)
             .ok()) {
      return absl::InvalidArgumentError(
          "the ReportResourceUsage request does not parse as a ReportResourceUsageRequest");
    }
    TROUPE_RETURN_IF_ERROR(ValidateRequest(parsed));
    TROUPE_RETURN_IF_ERROR(nodes_->ReportResourceUsage(parsed.usage()));
    grpc::Slice wire(nodes_->ResourceViewSinceWire(parsed.known_view_version()));
    *reply = grpc::ByteBuffer(&wire, 1);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* NodeInfoGrpcService::GetAllResourceUsage(
    CallbackServerContext* context, const rpc::GetAllResourceUsageRequest* request,
    rpc::GetAllResourceUsageReply* reply) {
  return RespondChecked(context, *auth_, *request, [&] {
    for (auto& usage : nodes_->GetAllResourceUsage()) *reply->add_usages() = std::move(usage);
    return absl::OkStatus();
  });
}

// ---- Jobs ----

ServerUnaryReactor* JobInfoGrpcService::AddJob(CallbackServerContext* context,
                                               const rpc::AddJobRequest* request,
                                               rpc::AddJobReply* reply) {
  return RespondChecked(context, *auth_, *request, [&]() -> absl::Status {
    auto job_id = jobs_->AddJob(request->job());
    if (!job_id.ok()) return job_id.status();
    reply->set_job_id(job_id->Binary());
    return absl::OkStatus();
  });
}

ServerUnaryReactor* JobInfoGrpcService::MarkJobFinished(CallbackServerContext* context,
                                                        const rpc::MarkJobFinishedRequest* request,
                                                        rpc::MarkJobFinishedReply*) {
  return RespondChecked(context, *auth_, *request,
                        [&] { return jobs_->MarkJobFinished(request->job_id()); });
}

ServerUnaryReactor* JobInfoGrpcService::GetAllJobInfo(CallbackServerContext* context,
                                                      const rpc::GetAllJobInfoRequest* request,
                                                      rpc::GetAllJobInfoReply* reply) {
  return RespondChecked(context, *auth_, *request, [&] {
    for (auto& job : jobs_->GetAllJobs()) *reply->add_jobs() = std::move(job);
    return absl::OkStatus();
  });
}

// ---- Task events ----

ServerUnaryReactor* TaskInfoGrpcService::AddTaskEventData(
    CallbackServerContext* context, const rpc::AddTaskEventDataRequest* request,
    rpc::AddTaskEventDataReply*) {
  return RespondChecked(context, *auth_, *request, [&] {
    tasks_->AddEvents(*request);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* TaskInfoGrpcService::GetTaskEvents(CallbackServerContext* context,
                                                       const rpc::GetTaskEventsRequest* request,
                                                       rpc::GetTaskEventsReply* reply) {
  return RespondChecked(context, *auth_, *request, [&]() -> absl::Status {
    auto found = tasks_->GetTaskEvents(*request);
    if (!found.ok()) return found.status();
    *reply = std::move(*found);
    return absl::OkStatus();
  });
}

// ---- KV ----

ServerUnaryReactor* InternalKvGrpcService::KVGet(CallbackServerContext* context,
                                                 const rpc::KVGetRequest* request,
                                                 rpc::KVGetReply* reply) {
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    kv_->Get(request->namespace_name(), request->key(),
             [reply, done](absl::StatusOr<std::optional<std::string>> value) {
               if (value.ok() && value->has_value()) {
                 reply->set_found(true);
                 reply->set_value(std::move(**value));
               }
               done(value.status());
             });
  });
}

ServerUnaryReactor* InternalKvGrpcService::KVPut(CallbackServerContext* context,
                                                 const rpc::KVPutRequest* request,
                                                 rpc::KVPutReply* reply) {
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    kv_->Put(request->namespace_name(), request->key(), request->value(), request->overwrite(),
             [reply, done](absl::StatusOr<bool> added) {
               if (added.ok()) reply->set_added(*added);
               done(added.status());
             });
  });
}

ServerUnaryReactor* InternalKvGrpcService::KVDel(CallbackServerContext* context,
                                                 const rpc::KVDelRequest* request,
                                                 rpc::KVDelReply* reply) {
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    kv_->Del(request->namespace_name(), request->key(), request->del_by_prefix(),
             [reply, done](absl::StatusOr<int64_t> deleted) {
               if (deleted.ok()) reply->set_deleted_num(*deleted);
               done(deleted.status());
             });
  });
}

ServerUnaryReactor* InternalKvGrpcService::KVExists(CallbackServerContext* context,
                                                    const rpc::KVExistsRequest* request,
                                                    rpc::KVExistsReply* reply) {
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    kv_->Exists(request->namespace_name(), request->key(),
                [reply, done](absl::StatusOr<bool> exists) {
                  if (exists.ok()) reply->set_exists(*exists);
                  done(exists.status());
                });
  });
}

ServerUnaryReactor* InternalKvGrpcService::KVKeys(CallbackServerContext* context,
                                                  const rpc::KVKeysRequest* request,
                                                  rpc::KVKeysReply* reply) {
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    kv_->Keys(request->namespace_name(), request->prefix(),
              [reply, done](absl::StatusOr<std::vector<std::string>> keys) {
                if (keys.ok()) {
                  for (auto& key : *keys) reply->add_keys(std::move(key));
                }
                done(keys.status());
              });
  });
}

// ---- Pubsub ----

ServerUnaryReactor* PubSubGrpcService::Poll(CallbackServerContext* context,
                                            const rpc::PollRequest* request,
                                            rpc::PollReply* reply) {
  const bool logs = request->channels_size() == 1 && request->channels(0) == rpc::LOG_CHANNEL;
  Publisher* publisher = logs ? log_publisher_ : publisher_;
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    publisher->Poll(*request, [reply, done](rpc::PollReply result) {
      *reply = std::move(result);
      done(absl::OkStatus());
    });
  });
}

grpc::ServerUnaryReactor* PubSubGrpcService::PublishLogs(grpc::CallbackServerContext* context,
                                                         const rpc::PublishLogsRequest* request,
                                                         rpc::PublishLogsReply*) {
  return RespondChecked(context, *auth_, *request, [&] {
    for (const auto& batch : request->batches()) {
      rpc::PubMessage message;
      message.set_channel(rpc::LOG_CHANNEL);
      message.set_key(batch.job_id());
      *message.mutable_log() = batch;
      log_publisher_->Publish(std::move(message));
    }
    return absl::OkStatus();
  });
}

// ---- Actors ----

ServerUnaryReactor* ActorInfoGrpcService::RegisterActor(CallbackServerContext* context,
                                                        const rpc::RegisterActorRequest* request,
                                                        rpc::RegisterActorReply*) {
  // Scheduling starts inside; it may send RPCs but never blocks on them.
  return RespondChecked(context, *auth_, *request,
                        [&] { return actors_->RegisterActor(*request); });
}

ServerUnaryReactor* ActorInfoGrpcService::GetActorInfo(CallbackServerContext* context,
                                                       const rpc::GetActorInfoRequest* request,
                                                       rpc::GetActorInfoReply* reply) {
  return RespondChecked(context, *auth_, *request, [&]() -> absl::Status {
    auto actor = actors_->GetActor(*request);
    if (!actor.ok()) return actor.status();
    *reply->mutable_actor() = std::move(*actor);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* ActorInfoGrpcService::GetAllActorInfo(
    CallbackServerContext* context, const rpc::GetAllActorInfoRequest* request,
    rpc::GetAllActorInfoReply* reply) {
  return RespondChecked(context, *auth_, *request, [&] {
    auto actors = request->actor_ids().empty() ? actors_->GetAllActors()
                                               : actors_->GetActors(request->actor_ids());
    for (auto& actor : actors) *reply->add_actors() = std::move(actor);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* ActorInfoGrpcService::KillActor(CallbackServerContext* context,
                                                    const rpc::KillActorRequest* request,
                                                    rpc::KillActorReply*) {
  return RespondChecked(context, *auth_, *request, [&] {
    return actors_->KillActor(request->actor_id(), request->no_restart());
  });
}

ServerUnaryReactor* ActorInfoGrpcService::ReportWorkerExit(
    CallbackServerContext* context, const rpc::ReportWorkerExitRequest* request,
    rpc::ReportWorkerExitReply*) {
  return RespondChecked(context, *auth_, *request, [&] {
    return actors_->ReportWorkerExit(request->worker_id(), request->how(), request->node_id());
  });
}

ServerUnaryReactor* ActorInfoGrpcService::ReportActorExit(
    CallbackServerContext* context, const rpc::ReportActorExitRequest* request,
    rpc::ReportActorExitReply*) {
  return RespondChecked(context, *auth_, *request, [&] {
    return actors_->OnActorExit(request->actor_id(), request->worker_id());
  });
}

// ---- Placement groups ----

ServerUnaryReactor* PlacementGroupGrpcService::CreatePlacementGroup(
    CallbackServerContext* context, const rpc::CreatePlacementGroupRequest* request,
    rpc::CreatePlacementGroupReply*) {
  return RespondChecked(context, *auth_, *request,
                        [&] { return groups_->Create(request->placement_group()); });
}

ServerUnaryReactor* PlacementGroupGrpcService::RemovePlacementGroup(
    CallbackServerContext* context, const rpc::RemovePlacementGroupRequest* request,
    rpc::RemovePlacementGroupReply*) {
  return RespondChecked(context, *auth_, *request,
                        [&] { return groups_->Remove(request->placement_group_id()); });
}

ServerUnaryReactor* PlacementGroupGrpcService::GetPlacementGroup(
    CallbackServerContext* context, const rpc::GetPlacementGroupRequest* request,
    rpc::GetPlacementGroupReply* reply) {
  return RespondChecked(context, *auth_, *request, [&]() -> absl::Status {
    auto group = groups_->Get(*request);
    if (!group.ok()) return group.status();
    *reply->mutable_placement_group() = std::move(*group);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* PlacementGroupGrpcService::GetAllPlacementGroup(
    CallbackServerContext* context, const rpc::GetAllPlacementGroupRequest* request,
    rpc::GetAllPlacementGroupReply* reply) {
  return RespondChecked(context, *auth_, *request, [&] {
    for (auto& group : groups_->GetAll()) *reply->add_placement_groups() = std::move(group);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* PlacementGroupGrpcService::WaitPlacementGroupUntilReady(
    CallbackServerContext* context, const rpc::WaitPlacementGroupUntilReadyRequest* request,
    rpc::WaitPlacementGroupUntilReadyReply* reply) {
  return RespondCheckedAsync(context, *auth_, *request, [&](auto done) {
    groups_->WaitUntilReady(request->placement_group_id(),
                            clock_->Now() + absl::Milliseconds(request->timeout_ms()),
                            [reply, done](absl::StatusOr<rpc::PlacementGroupInfo::State> state) {
                              if (state.ok()) {
                                reply->set_state(*state);
                                reply->set_ready(*state == rpc::PlacementGroupInfo::CREATED);
                              }
                              done(state.status());
                            });
  });
}

}  // namespace troupe
