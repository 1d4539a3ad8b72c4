// Blocking client for the GCS services (proto/gcs.proto), used by raylets, the CLI, drivers and
// tests. Every call carries the cluster token and a deadline. Thread-safe: gRPC stubs may be used
// from several threads at once (SetRetry must be called before the first call).
//
// Retries: by default a call makes one attempt. SetRetry(retry_for) makes calls that fail with
// kUnavailable (the GCS is down or restarting) or kDeadlineExceeded (it accepts connections but
// does not answer: hung, until its supervisor restarts it) try again, 20 ms apart doubling to
// 250 ms, for up to `retry_for` in all (each attempt's deadline is cut to what is left of it), so
// a GCS restarted under Redis (docs/fault_tolerance.md) is waited out instead of failing the
// caller. Drivers use it for their user-facing calls (actor and placement
// group creation, KV, named actors); raylets, health checks and probes do not: they have their
// own reconnect logic. Poll never retries (its callers loop themselves). A retried write whose
// first attempt reached the GCS before the connection broke may be applied twice; the GCS's
// writes are idempotent or answer AlreadyExists, which callers already handle.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/gcs.grpc.pb.h"
#include "src/common/ids.h"

namespace troupe {

class GcsClient {
 public:
  // `address` is host:port of the GCS; `token` the cluster token text.
  GcsClient(std::string address, std::string token, absl::Duration timeout = absl::Seconds(10));

  const std::string& address() const { return address_; }

  // Retry calls that fail with kUnavailable or kDeadlineExceeded for up to `retry_for` (zero:
  // never). `give_up`, if set, is asked before each retry and once more when `retry_for` has
  // passed; a non-OK answer ends the retries with that status (the core worker passes its
  // ClusterUnreachable status). `exhausted`, if set, turns the last error of a call whose retries
  // ran out into the status returned (the core worker: ClusterUnreachable). Call before the first
  // call; not thread-safe.
  void SetRetry(absl::Duration retry_for, std::function<absl::Status()> give_up = nullptr,
                std::function<absl::Status(const absl::Status&)> exhausted = nullptr);

  absl::StatusOr<rpc::GetClusterInfoReply> GetClusterInfo();
  // A joining node's certificate: the head's CA signs `request.csr_pem` (TLS clusters only).
  absl::StatusOr<rpc::IssueNodeCertificateReply> IssueNodeCertificate(
      const rpc::IssueNodeCertificateRequest& request);

  // Nodes and resources.
  absl::StatusOr<rpc::RegisterNodeReply> RegisterNode(const rpc::RegisterNodeRequest& request);
  absl::Status UnregisterNode(const std::string& node_id, const std::string& reason);
  // Returns the cluster view the reporter lacks: the whole view when `known_view_version` is 0
  // (or unknown to this GCS), else what changed since (see ReportResourceUsageReply).
  absl::StatusOr<rpc::ReportResourceUsageReply> ReportResourceUsage(
      const rpc::ResourceUsage& usage, int64_t known_view_version = 0);
  absl::StatusOr<std::vector<rpc::NodeInfo>> GetAllNodeInfo();
  absl::StatusOr<std::vector<rpc::ResourceUsage>> GetAllResourceUsage();

  // Jobs.
  absl::StatusOr<std::string> AddJob(const rpc::JobInfo& job);
  absl::Status MarkJobFinished(const std::string& job_id);
  absl::StatusOr<std::vector<rpc::JobInfo>> GetAllJobInfo();

  // Namespaced KV.
  absl::StatusOr<std::optional<std::string>> KVGet(const std::string& ns, const std::string& key);
  absl::StatusOr<bool> KVPut(const std::string& ns, const std::string& key,
                             const std::string& value, bool overwrite);
  absl::StatusOr<int64_t> KVDel(const std::string& ns, const std::string& key, bool by_prefix);
  absl::StatusOr<bool> KVExists(const std::string& ns, const std::string& key);
  absl::StatusOr<std::vector<std::string>> KVKeys(const std::string& ns, const std::string& prefix);

  // Actors.
  absl::Status RegisterActor(const rpc::RegisterActorRequest& request);
  absl::StatusOr<rpc::ActorInfo> GetActorInfo(const rpc::GetActorInfoRequest& request);
  absl::StatusOr<std::vector<rpc::ActorInfo>> GetAllActorInfo();
  // The actors among `ids` the GCS knows (unknown ones are left out), in one call.
  absl::StatusOr<std::vector<rpc::ActorInfo>> GetActorInfos(const std::vector<ActorId>& ids);
  absl::Status KillActor(const std::string& actor_id, bool no_restart);
  absl::Status ReportWorkerExit(const std::string& worker_id, const std::string& node_id,
                                const std::string& how);
  // `worker_id`: the caller's, the worker running the actor (the GCS refuses anyone else).
  absl::Status ReportActorExit(const std::string& actor_id, const std::string& worker_id);

  // Placement groups.
  absl::Status CreatePlacementGroup(const rpc::PlacementGroupInfo& group);
  absl::Status RemovePlacementGroup(const std::string& id);
  absl::StatusOr<rpc::PlacementGroupInfo> GetPlacementGroup(
      const rpc::GetPlacementGroupRequest& request);
  absl::StatusOr<std::vector<rpc::PlacementGroupInfo>> GetAllPlacementGroups();
  // Waits (long polls) until the group is CREATED (true), REMOVED (false) or `deadline` passes
  // (false). NotFound for an unknown group.
  absl::StatusOr<bool> WaitPlacementGroupUntilReady(const std::string& id, absl::Time deadline);

  // Task events (src/gcs/task_event_manager.h).
  absl::Status AddTaskEventData(const rpc::AddTaskEventDataRequest& request);
  absl::StatusOr<rpc::GetTaskEventsReply> GetTaskEvents(const rpc::GetTaskEventsRequest& request);

  // Pubsub: waits up to request.timeout_ms (plus the usual call timeout) for new messages.
  absl::StatusOr<rpc::PollReply> Poll(const rpc::PollRequest& request);
  // The same, without blocking: `done` runs once on a gRPC thread; the returned function
  // cancels the call (`done` then gets CANCELLED). Never retries.
  std::function<void()> PollAsync(const rpc::PollRequest& request,
                                  std::function<void(absl::StatusOr<rpc::PollReply>)> done);
  absl::Status PublishLogs(const rpc::PublishLogsRequest& request);

 private:
  template <typename Stub, typename Request, typename Reply>
  absl::StatusOr<Reply> Call(
      Stub* stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Reply*),
      const Request& request, absl::Duration extra_time = absl::ZeroDuration(),
      bool may_retry = true);

  std::string address_;
  std::string token_;
  absl::Duration timeout_;
  absl::Duration retry_for_ = absl::ZeroDuration();
  std::function<absl::Status()> give_up_;
  std::function<absl::Status(const absl::Status&)> exhausted_;
  std::string peer_name_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rpc::ClusterInfoService::Stub> cluster_stub_;
  std::unique_ptr<rpc::NodeInfoService::Stub> node_stub_;
  std::unique_ptr<rpc::JobInfoService::Stub> job_stub_;
  std::unique_ptr<rpc::InternalKVService::Stub> kv_stub_;
  std::unique_ptr<rpc::PubSubService::Stub> pubsub_stub_;
  std::unique_ptr<rpc::ActorInfoService::Stub> actor_stub_;
  std::unique_ptr<rpc::PlacementGroupService::Stub> placement_group_stub_;
  std::unique_ptr<rpc::TaskInfoService::Stub> task_stub_;
};

}  // namespace troupe
