// The GCS server: the GCS's composition root. It owns the store, the managers, the health
// checker, the gRPC clients the managers reach raylets and workers with (behind the peer-client
// interfaces of src/rpc/peer_clients.h) and the gRPC services, and runs one timer thread that
// drives health checks, retries, poll expiry, the collection of unreferenced packages
// (PackageCollector) and, once a burst of RPCs is over, gives freed heap
// memory back to the OS (IdleMemoryTrimmer). Start() once, Stop() once. Flag parsing lives in
// the CLI (src/cli/gcs_command.cc), which fills GcsServerOptions.
// Thread-safety: Start/Stop from one thread; everything else runs on gRPC threads or the timer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "src/common/clock.h"
#include "src/common/idle_memory_trimmer.h"
#include "src/common/version.h"
#include "src/gcs/actor_manager.h"
#include "src/gcs/gcs_grpc_services.h"
#include "src/gcs/health_checker.h"
#include "src/gcs/job_manager.h"
#include "src/gcs/kv_manager.h"
#include "src/gcs/node_manager.h"
#include "src/gcs/package_collector.h"
#include "src/gcs/publisher.h"
#include "src/gcs/store_client.h"
#include "src/gcs/task_event_manager.h"
#include "src/rpc/auth.h"
#include "src/rpc/core_worker_client.h"
#include "src/rpc/grpc_peer_clients.h"
#include "src/rpc/raylet_client.h"
#include "src/rpc/rpc_latency.h"
#include "src/schema/kv_schema.h"  // kMetricsNamespace, kGcsRpcLatencyKey: read by /metrics

namespace grpc {
class Server;
}

namespace troupe {

// Every setting of a GCS, with its default (the CLI's flags default to these).
struct GcsServerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 6380;                  // 0: any free port
  ClusterToken token;               // also fixes the cluster ID
  HealthCheckOptions health_check;  // defaults in src/gcs/health_checker.h
  std::string version = kTroupeVersion;
  // With TLS on the head: the CA that signs joining nodes' certificates (IssueNodeCertificate).
  std::optional<KeyAndCertificate> certificate_authority;
  TaskEventManagerOptions task_events;  // how many task attempts are remembered, per job and in all
  ActorManagerOptions actors;           // how many dead actors are remembered
  KvOptions kv;                         // the KV's quota
  PackageCollectorOptions packages;     // when unreferenced packages and executables go
};

class GcsServer {
 public:
  GcsServer(GcsServerOptions options, std::unique_ptr<StoreClient> store);
  ~GcsServer();

  // Loads saved tables, listens, and starts health checks. Fails if the port cannot be bound.
  absl::Status Start();
  void Stop();
  // The port actually bound (useful with port 0).
  int port() const { return bound_port_; }

 private:
  class GrpcNodeProber;
  void TimerLoop();

  GcsServerOptions options_;
  RealClock clock_;
  std::unique_ptr<StoreClient> store_;
  // Outbound calls to raylets and core workers (one cached client per address).
  ClientPool<RayletClient> raylet_clients_;
  ClientPool<CoreWorkerClient> worker_clients_;
  GrpcLeaseClient lease_client_;
  GrpcTaskPushClient push_client_;
  TokenAuthenticator auth_;
  Publisher publisher_;
  Publisher log_publisher_;
  KvManager kv_;
  NodeManager nodes_;
  JobManager jobs_;
  ActorManager actors_;
  PlacementGroupManager placement_groups_;
  TaskEventManager task_events_;
  PackageCollector package_collector_;  // timer thread only
  std::unique_ptr<GrpcNodeProber> prober_;
  HealthChecker health_checker_;

  std::optional<CertificateAuthority> ca_;
  std::unique_ptr<ClusterInfoGrpcService> cluster_service_;
  NodeInfoGrpcService node_service_;
  JobInfoGrpcService job_service_;
  InternalKvGrpcService kv_service_;
  PubSubGrpcService pubsub_service_;
  ActorInfoGrpcService actor_service_;
  PlacementGroupGrpcService placement_group_service_;
  TaskInfoGrpcService task_service_;
  RpcLatencies rpc_latencies_;  // also the work counter memory_trimmer_ watches
  std::unique_ptr<grpc::Server> server_;
  int bound_port_ = 0;

  absl::Notification stop_timer_;
  std::thread timer_;
  // Timer thread only. Background chatter (a raylet's reports, a few polls) stays under the
  // threshold; an actor ramp or a placement-group storm is a burst.
  IdleMemoryTrimmer memory_trimmer_ = IdleMemoryTrimmer::ForMalloc();
};

}  // namespace troupe
