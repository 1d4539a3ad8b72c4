// The raylet: one per node. It keeps the node in the cluster (registers with the GCS, reports
// resources every `report_period` and receives the cluster view back, answers health checks,
// re-registers when the GCS forgets the node, exits when the GCS stays unreachable past
// `gcs_reconnect_timeout`), and runs the node: worker processes (WorkerPool), worker leases
// (LeaseManager), the shared-memory object store and node-to-node object transfer
// (ObjectManager).
// The Raylet is the composition root of these components: it builds them from RayletOptions
// and hands each the one clock (a RealClock of its own unless the caller passes one).
// Its RPC face is RayletServer (raylet_server.h): the gRPC glue checks the token and the request,
// then calls the Handle* methods below, plain C++ on protobuf messages; no gRPC type is seen here.
// Thread-safety: Run() on one thread (the main loop); RequestStop() from any thread; Handle*
// on gRPC threads; a second thread follows job changes from the GCS.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/raylet.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/common/resources.h"
#include "src/metrics/metrics_aggregator.h"
#include "src/object_store/object_store.h"
#include "src/raylet/cluster_view.h"
#include "src/raylet/data_connection.h"
#include "src/raylet/data_object_puller.h"
#include "src/raylet/executable_cache.h"
#include "src/raylet/grpc_object_puller.h"
#include "src/raylet/lease_manager.h"
#include "src/raylet/log_monitor.h"
#include "src/raylet/metrics_http_server.h"
#include "src/raylet/object_data_server.h"
#include "src/raylet/object_manager.h"
#include "src/raylet/process_launcher.h"
#include "src/raylet/raylet_options.h"
#include "src/raylet/raylet_server.h"
#include "src/raylet/worker_pool.h"
#include "src/rpc/cluster_token.h"
#include "src/rpc/gcs_client.h"

namespace troupe {

class Raylet {
 public:
  // `clock` (borrowed; must outlive the raylet) is what every component reads time from;
  // nullptr: the raylet's own RealClock.
  explicit Raylet(RayletOptions options, const Clock* clock = nullptr);
  ~Raylet();

  // Starts the raylet's gRPC server. Fails if the port cannot be bound.
  absl::Status Start();
  // Registers and reports until RequestStop() (returns OK after unregistering gracefully) or
  // until the node cannot stay in the cluster (returns why: head gone, declared dead, refused).
  // Kills the node's workers and removes its object store on the way out.
  absl::Status Run();
  void RequestStop(const std::string& reason);
  int port() const { return bound_port_; }
  std::string address() const;
  const NodeId& node_id() const { return options_.node_id; }

  // NodeManagerService, in plain C++. RayletServer calls these after the token check and
  // request validation, and turns the returned Status into the call's (the reply is sent only
  // with OK).
  absl::Status HandleHealthCheck(const rpc::HealthCheckRequest& request,
                                 rpc::HealthCheckReply* reply);
  absl::Status HandleGetNodeStats(const rpc::GetNodeStatsRequest& request,
                                  rpc::GetNodeStatsReply* reply);
  absl::Status HandleRegisterWorker(const rpc::RegisterWorkerRequest& request,
                                    rpc::RegisterWorkerReply* reply);
  absl::Status HandleNotifyBlocked(const rpc::NotifyBlockedRequest& request,
                                   rpc::NotifyBlockedReply* reply);
  // Answers through `done` (once, from any thread) when a worker is leased, or the lease is
  // refused or spilled back. `caller_gone()` is asked then: a lease granted to a caller that
  // stopped waiting is returned at once, since nobody would use or return it.
  void HandleRequestWorkerLease(const rpc::RequestWorkerLeaseRequest& request,
                                std::function<bool()> caller_gone,
                                std::function<void(rpc::RequestWorkerLeaseReply)> done);
  absl::Status HandleReturnWorker(const rpc::ReturnWorkerRequest& request,
                                  rpc::ReturnWorkerReply* reply);
  absl::Status HandleKillLeasedWorker(const rpc::KillLeasedWorkerRequest& request,
                                      rpc::KillLeasedWorkerReply* reply);
  absl::Status HandleCreateObject(const rpc::CreateObjectRequest& request,
                                  rpc::CreateObjectReply* reply);
  absl::Status HandleSealObject(const rpc::SealObjectRequest& request, rpc::SealObjectReply* reply);
  absl::Status HandleGetObjects(const rpc::GetObjectsRequest& request, rpc::GetObjectsReply* reply);
  // Releases every store pin `reader` still holds (it exited or died).
  void ReleasePinsOf(const WorkerId& reader);
  absl::Status HandleReleaseObjects(const rpc::ReleaseObjectsRequest& request,
                                    rpc::ReleaseObjectsReply* reply);
  // Copies the object from the named raylet into this node's store on a thread of its own (a
  // transfer can take seconds), then calls `done` (once, from that thread).
  void HandleFetchObject(const rpc::FetchObjectRequest& request,
                         std::function<void(absl::Status)> done);
  // Introspection for the head's state API (raylet_introspection.cc): this node's store contents
  // with the pins each reader holds, its workers, and its log files (src/raylet/node_logs.h).
  absl::Status HandleListStoreObjects(const rpc::ListStoreObjectsRequest& request,
                                      rpc::ListStoreObjectsReply* reply);
  absl::Status HandleListNodeWorkers(const rpc::ListNodeWorkersRequest& request,
                                     rpc::ListNodeWorkersReply* reply);
  absl::Status HandleListLogFiles(const rpc::ListLogFilesRequest& request,
                                  rpc::ListLogFilesReply* reply);
  absl::Status HandleReadLogFile(const rpc::ReadLogFileRequest& request,
                                 rpc::ReadLogFileReply* reply);
  // A worker's or driver's user metrics recorded since its last push: added to the node's sums
  // that /metrics serves. Always OK (the sender must not retry a batch): what cannot be applied
  // (a metric another program on this node defines differently) is skipped and logged.
  absl::Status HandleReportUserMetrics(const rpc::ReportUserMetricsRequest& request,
                                       rpc::ReportUserMetricsReply* reply);
  // The port /metrics is served on (0 before Start or when not served).
  int metrics_port() const { return metrics_server_ ? metrics_server_->port() : 0; }
  const metrics::MetricsAggregator& user_metrics() const { return user_metrics_; }

 private:
  rpc::NodeInfo NodeInfoLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers, retrying until success, a fatal refusal, a stop request or the reconnect timeout.
  absl::Status RegisterWithRetry(bool re_register);
  absl::Status ReportLoop();
  // The GCS declared this node dead (a report was refused, or its death was published): a dead
  // node never comes back as it was, since its work was re-placed. Logs why, kills the node's
  // workers at once (so none of them keeps acting on old work) and stops the raylet; Run()
  // then returns FailedPrecondition without unregistering. Idempotent; any thread.
  void OnDeclaredDead(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Follows job and node changes: when a job finishes, its workers here are killed; dead nodes
  // are remembered so tasks bound to them fail instead of waiting.
  void FollowJobs();
  // After a poll answered messages_lost (the GCS restarted, or this raylet fell behind): applies
  // what the missed JOB and NODE messages would have from the GCS's tables.
  void ResyncJobsAndNodes();
  // The job's info from this raylet's cache, else from the GCS.
  absl::StatusOr<rpc::JobInfo> LookupJob(const JobId& job_id);
  void Shutdown();
  // Kills the newest leased worker when the node is out of memory (at most once a second).
  // The fraction of the machine's memory in use (or of options_.testing_memory_usage_file);
  // nullopt when it cannot be read.
  std::optional<double> ReadMemoryUsage() const;
  void CheckMemory();

  RayletOptions options_;
  RealClock real_clock_;
  const Clock* const clock_;
  GcsClient gcs_;
  const ClusterToken token_;
  ObjectStore object_store_;
  GrpcObjectPuller object_puller_;
  // The object data port's TLS contexts (both null without TLS), or why they could not be made
  // (then Start fails).
  absl::StatusOr<ObjectDataTls> data_tls_;
  DataObjectPuller data_puller_;  // over object_puller_
  ObjectManager object_manager_;
  ExecutableCache executables_;
  PosixProcessLauncher processes_;
  WorkerPool worker_pool_;
  LeaseManager lease_manager_;
  LogMonitor log_monitor_;
  std::thread log_thread_;
  std::unique_ptr<ObjectDataServer> data_server_;
  std::unique_ptr<RayletServer> server_;
  metrics::MetricsAggregator user_metrics_;
  std::unique_ptr<MetricsHttpServer> metrics_server_;  // set by Start unless metrics_port is -1
  absl::Mutex metrics_log_mu_;
  std::string last_metrics_problem_ ABSL_GUARDED_BY(metrics_log_mu_);  // logged once in a row
  int bound_port_ = 0;
  std::thread job_follower_;

  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> declared_dead_ ABSL_GUARDED_BY(mu_);  // why, once declared
  std::string cluster_id_ ABSL_GUARDED_BY(mu_);  // set by the first registration
  int64_t report_seq_ ABSL_GUARDED_BY(mu_) = 0;
  ClusterView cluster_view_;  // the report loop's
  absl::flat_hash_map<JobId, rpc::JobInfo> jobs_ ABSL_GUARDED_BY(mu_);
  // Worker exits not yet acknowledged by the GCS (it decides actors' fates on them): resent by
  // the report loop until they get through.
  std::vector<std::pair<std::string, std::string>> unreported_exits_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, std::string> kill_reasons_ ABSL_GUARDED_BY(mu_);
  // Store pins taken by each reader process (GetObjects with its worker ID) and not released
  // yet; released by ReleasePinsOf when that process exits or dies.
  absl::flat_hash_map<WorkerId, absl::flat_hash_map<ObjectId, int>> pins_by_reader_
      ABSL_GUARDED_BY(mu_);
  absl::Time last_memory_kill_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace troupe
