#include "src/rpc/gcs_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status_macros.h"
#include "src/rpc/async_call.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/server.h"

namespace troupe {

GcsClient::GcsClient(std::string address, std::string token, absl::Duration timeout)
    : address_(std::move(address)),
      token_(std::move(token)),
      timeout_(timeout),
      peer_name_(absl::StrCat("GCS at ", address_)) {
  channel_ = MakeChannel(address_);
  const auto& channel = channel_;
  cluster_stub_ = rpc::ClusterInfoService::NewStub(channel);
  node_stub_ = rpc::NodeInfoService::NewStub(channel);
  job_stub_ = rpc::JobInfoService::NewStub(channel);
  kv_stub_ = rpc::InternalKVService::NewStub(channel);
  pubsub_stub_ = rpc::PubSubService::NewStub(channel);
  actor_stub_ = rpc::ActorInfoService::NewStub(channel);
  placement_group_stub_ = rpc::PlacementGroupService::NewStub(channel);
  task_stub_ = rpc::TaskInfoService::NewStub(channel);
}

void GcsClient::SetRetry(absl::Duration retry_for, std::function<absl::Status()> give_up,
                         std::function<absl::Status(const absl::Status&)> exhausted) {
  retry_for_ = retry_for;
  give_up_ = std::move(give_up);
  exhausted_ = std::move(exhausted);
}

template <typename Stub, typename Request, typename Reply>
absl::StatusOr<Reply> GcsClient::Call(Stub* stub,
                                      grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                   const Request&, Reply*),
                                      const Request& request, absl::Duration extra_time,
                                      bool may_retry) {
  const bool retrying = may_retry && retry_for_ > absl::ZeroDuration();
  const absl::Time retry_until = absl::Now() + retry_for_;
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    grpc::ClientContext context;
    AttachToken(&context, token_);
    absl::Time deadline = absl::Now() + timeout_ + extra_time;
    // A retried call ends with its window (a hung GCS must not hold it a whole timeout past it);
    // a long poll (extra_time) keeps its own deadline.
    if (retrying && extra_time == absl::ZeroDuration()) {
      deadline = std::min(deadline, std::max(retry_until, absl::Now() + absl::Milliseconds(50)));
    }
    context.set_deadline(absl::ToChronoTime(deadline));
    Reply reply;
    grpc::Status status = (stub->*method)(&context, request, &reply);
    if (status.ok()) return reply;
    absl::Status error = FromGrpcStatus(status, peer_name_);
    const bool unanswered = error.code() == absl::StatusCode::kUnavailable ||
                            error.code() == absl::StatusCode::kDeadlineExceeded;
    if (unanswered) {
      // The GCS is down, restarting or hung: let the next call (or retry) connect at once rather
      // than wait out gRPC's reconnect backoff (up to 1 s), so a GCS restarted in ~50 ms is found
      // in about that time. Callers pace their own retries.
      grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
    }
    if (!retrying || !unanswered) return error;
    if (give_up_) {
      if (absl::Status stop = give_up_(); !stop.ok()) return stop;
    }
    if (absl::Now() + backoff > retry_until) return exhausted_ ? exhausted_(error) : error;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(250));
  }
}

absl::StatusOr<rpc::GetClusterInfoReply> GcsClient::GetClusterInfo() {
  return Call(cluster_stub_.get(), &rpc::ClusterInfoService::Stub::GetClusterInfo,
              rpc::GetClusterInfoRequest());
}

absl::StatusOr<rpc::IssueNodeCertificateReply> GcsClient::IssueNodeCertificate(
    const rpc::IssueNodeCertificateRequest& request) {
  return Call(cluster_stub_.get(), &rpc::ClusterInfoService::Stub::IssueNodeCertificate, request);
}

absl::StatusOr<rpc::RegisterNodeReply> GcsClient::RegisterNode(
    const rpc::RegisterNodeRequest& request) {
  return Call(node_stub_.get(), &rpc::NodeInfoService::Stub::RegisterNode, request);
}

absl::Status GcsClient::UnregisterNode(const std::string& node_id, const std::string& reason) {
  rpc::UnregisterNodeRequest request;
  request.set_node_id(node_id);
  request.set_reason(reason);
  return Call(node_stub_.get(), &rpc::NodeInfoService::Stub::UnregisterNode, request).status();
}

absl::StatusOr<rpc::ReportResourceUsageReply> GcsClient::ReportResourceUsage(
    const rpc::ResourceUsage& usage, int64_t known_view_version) {
  rpc::ReportResourceUsageRequest request;
  *request.mutable_usage() = usage;
  request.set_known_view_version(known_view_version);
  return Call(node_stub_.get(), &rpc::NodeInfoService::Stub::ReportResourceUsage, request);
}

absl::StatusOr<std::vector<rpc::NodeInfo>> GcsClient::GetAllNodeInfo() {
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(node_stub_.get(), &rpc::NodeInfoService::Stub::GetAllNodeInfo,
                               rpc::GetAllNodeInfoRequest()));
  return std::vector<rpc::NodeInfo>(reply.nodes().begin(), reply.nodes().end());
}

absl::StatusOr<std::vector<rpc::ResourceUsage>> GcsClient::GetAllResourceUsage() {
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(node_stub_.get(), &rpc::NodeInfoService::Stub::GetAllResourceUsage,
                               rpc::GetAllResourceUsageRequest()));
  return std::vector<rpc::ResourceUsage>(reply.usages().begin(), reply.usages().end());
}

absl::StatusOr<std::string> GcsClient::AddJob(const rpc::JobInfo& job) {
  rpc::AddJobRequest request;
  *request.mutable_job() = job;
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(job_stub_.get(), &rpc::JobInfoService::Stub::AddJob, request));
  return reply.job_id();
}

absl::Status GcsClient::MarkJobFinished(const std::string& job_id) {
  rpc::MarkJobFinishedRequest request;
  request.set_job_id(job_id);
  return Call(job_stub_.get(), &rpc::JobInfoService::Stub::MarkJobFinished, request).status();
}

absl::StatusOr<std::vector<rpc::JobInfo>> GcsClient::GetAllJobInfo() {
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(job_stub_.get(), &rpc::JobInfoService::Stub::GetAllJobInfo,
                               rpc::GetAllJobInfoRequest()));
  return std::vector<rpc::JobInfo>(reply.jobs().begin(), reply.jobs().end());
}

absl::StatusOr<std::optional<std::string>> GcsClient::KVGet(const std::string& ns,
                                                            const std::string& key) {
  rpc::KVGetRequest request;
  request.set_namespace_name(ns);
  request.set_key(key);
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(kv_stub_.get(), &rpc::InternalKVService::Stub::KVGet, request));
  if (!reply.found()) return std::optional<std::string>();
  return std::optional<std::string>(reply.value());
}

absl::StatusOr<bool> GcsClient::KVPut(const std::string& ns, const std::string& key,
                                      const std::string& value, bool overwrite) {
  rpc::KVPutRequest request;
  request.set_namespace_name(ns);
  request.set_key(key);
  request.set_value(value);
  request.set_overwrite(overwrite);
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(kv_stub_.get(), &rpc::InternalKVService::Stub::KVPut, request));
  return reply.added();
}

absl::StatusOr<int64_t> GcsClient::KVDel(const std::string& ns, const std::string& key,
                                         bool by_prefix) {
  rpc::KVDelRequest request;
  request.set_namespace_name(ns);
  request.set_key(key);
  request.set_del_by_prefix(by_prefix);
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(kv_stub_.get(), &rpc::InternalKVService::Stub::KVDel, request));
  return reply.deleted_num();
}

absl::StatusOr<bool> GcsClient::KVExists(const std::string& ns, const std::string& key) {
  rpc::KVExistsRequest request;
  request.set_namespace_name(ns);
  request.set_key(key);
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(kv_stub_.get(), &rpc::InternalKVService::Stub::KVExists, request));
  return reply.exists();
}

absl::StatusOr<std::vector<std::string>> GcsClient::KVKeys(const std::string& ns,
                                                           const std::string& prefix) {
  rpc::KVKeysRequest request;
  request.set_namespace_name(ns);
  request.set_prefix(prefix);
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(kv_stub_.get(), &rpc::InternalKVService::Stub::KVKeys, request));
  return std::vector<std::string>(reply.keys().begin(), reply.keys().end());
}

absl::StatusOr<rpc::PollReply> GcsClient::Poll(const rpc::PollRequest& request) {
  return Call(pubsub_stub_.get(), &rpc::PubSubService::Stub::Poll, request,
              absl::Milliseconds(request.timeout_ms()), /*may_retry=*/false);
}

std::function<void()> GcsClient::PollAsync(
    const rpc::PollRequest& request, std::function<void(absl::StatusOr<rpc::PollReply>)> done) {
  auto call = std::make_shared<AsyncCall<rpc::PollRequest, rpc::PollReply>>();
  AttachToken(&call->context, token_);
  call->context.set_deadline(
      absl::ToChronoTime(absl::Now() + timeout_ + absl::Milliseconds(request.timeout_ms())));
  call->request = request;
  pubsub_stub_->async()->Poll(&call->context, &call->request, &call->reply,
                              [call, done = std::move(done), peer = peer_name_](grpc::Status s) {
                                if (!s.ok()) return done(FromGrpcStatus(s, peer));
                                done(std::move(call->reply));
                              });
  std::weak_ptr<AsyncCall<rpc::PollRequest, rpc::PollReply>> weak = call;
  return [weak] {
    if (auto live = weak.lock()) live->context.TryCancel();
  };
}

absl::Status GcsClient::RegisterActor(const rpc::RegisterActorRequest& request) {
  return Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::RegisterActor, request).status();
}

absl::StatusOr<rpc::ActorInfo> GcsClient::GetActorInfo(const rpc::GetActorInfoRequest& request) {
  TROUPE_ASSIGN_OR_RETURN(
      auto reply, Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::GetActorInfo, request));
  return reply.actor();
}

absl::StatusOr<std::vector<rpc::ActorInfo>> GcsClient::GetAllActorInfo() {
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::GetAllActorInfo,
                               rpc::GetAllActorInfoRequest()));
  return std::vector<rpc::ActorInfo>(reply.actors().begin(), reply.actors().end());
}

absl::StatusOr<std::vector<rpc::ActorInfo>> GcsClient::GetActorInfos(
    const std::vector<ActorId>& ids) {
  rpc::GetAllActorInfoRequest request;
  for (const ActorId& id : ids) request.add_actor_ids(id.Binary());
  TROUPE_ASSIGN_OR_RETURN(
      auto reply, Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::GetAllActorInfo, request));
  return std::vector<rpc::ActorInfo>(reply.actors().begin(), reply.actors().end());
}

absl::Status GcsClient::KillActor(const std::string& actor_id, bool no_restart) {
  rpc::KillActorRequest request;
  request.set_actor_id(actor_id);
  request.set_no_restart(no_restart);
  return Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::KillActor, request).status();
}

absl::Status GcsClient::ReportWorkerExit(const std::string& worker_id, const std::string& node_id,
                                         const std::string& how) {
  rpc::ReportWorkerExitRequest request;
  request.set_worker_id(worker_id);
  request.set_node_id(node_id);
  request.set_how(how);
  return Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::ReportWorkerExit, request).status();
}

absl::Status GcsClient::ReportActorExit(const std::string& actor_id, const std::string& worker_id) {
  rpc::ReportActorExitRequest request;
  request.set_actor_id(actor_id);
  request.set_worker_id(worker_id);
  return Call(actor_stub_.get(), &rpc::ActorInfoService::Stub::ReportActorExit, request).status();
}

absl::Status GcsClient::CreatePlacementGroup(const rpc::PlacementGroupInfo& group) {
  rpc::CreatePlacementGroupRequest request;
  *request.mutable_placement_group() = group;
  return Call(placement_group_stub_.get(), &rpc::PlacementGroupService::Stub::CreatePlacementGroup,
              request)
      .status();
}

absl::Status GcsClient::RemovePlacementGroup(const std::string& id) {
  rpc::RemovePlacementGroupRequest request;
  request.set_placement_group_id(id);
  return Call(placement_group_stub_.get(), &rpc::PlacementGroupService::Stub::RemovePlacementGroup,
              request)
      .status();
}

absl::StatusOr<rpc::PlacementGroupInfo> GcsClient::GetPlacementGroup(
    const rpc::GetPlacementGroupRequest& request) {
  TROUPE_ASSIGN_OR_RETURN(auto reply,
                          Call(placement_group_stub_.get(),
                               &rpc::PlacementGroupService::Stub::GetPlacementGroup, request));
  return reply.placement_group();
}

absl::StatusOr<std::vector<rpc::PlacementGroupInfo>> GcsClient::GetAllPlacementGroups() {
  TROUPE_ASSIGN_OR_RETURN(auto reply, Call(placement_group_stub_.get(),
                                           &rpc::PlacementGroupService::Stub::GetAllPlacementGroup,
                                           rpc::GetAllPlacementGroupRequest()));
  return std::vector<rpc::PlacementGroupInfo>(reply.placement_groups().begin(),
                                              reply.placement_groups().end());
}

absl::StatusOr<bool> GcsClient::WaitPlacementGroupUntilReady(const std::string& id,
                                                             absl::Time deadline) {
  rpc::WaitPlacementGroupUntilReadyRequest request;
  request.set_placement_group_id(id);
  while (true) {
    // The GCS holds one wait for at most a minute: ask in rounds of up to 30 s.
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration wait = left > absl::Seconds(30) ? absl::Seconds(30)
                                : left > absl::ZeroDuration()
                                    ? absl::Ceil(left, absl::Milliseconds(1))
                                    : absl::ZeroDuration();
    request.set_timeout_ms(absl::ToInt64Milliseconds(wait));
    TROUPE_ASSIGN_OR_RETURN(
        auto reply,
        Call(placement_group_stub_.get(),
             &rpc::PlacementGroupService::Stub::WaitPlacementGroupUntilReady, request, wait));
    if (reply.ready()) return true;
    if (reply.state() == rpc::PlacementGroupInfo::REMOVED || absl::Now() >= deadline) return false;
  }
}

absl::Status GcsClient::PublishLogs(const rpc::PublishLogsRequest& request) {
  return Call(pubsub_stub_.get(), &rpc::PubSubService::Stub::PublishLogs, request).status();
}

absl::Status GcsClient::AddTaskEventData(const rpc::AddTaskEventDataRequest& request) {
  return Call(task_stub_.get(), &rpc::TaskInfoService::Stub::AddTaskEventData, request).status();
}

absl::StatusOr<rpc::GetTaskEventsReply> GcsClient::GetTaskEvents(
    const rpc::GetTaskEventsRequest& request) {
  return Call(task_stub_.get(), &rpc::TaskInfoService::Stub::GetTaskEvents, request);
}

}  // namespace troupe
