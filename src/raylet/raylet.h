// The raylet: one per node. It registers the node with the GCS, reports the node's resources
// periodically, answers health checks, and keeps the node in the cluster across GCS hiccups:
// when the GCS forgets the node (it restarted) the raylet registers again; when the GCS stays
// unreachable longer than `gcs_reconnect_timeout` the raylet exits with a clear log line. Worker
// leases and the object store join it in later layers.
// Thread-safety: Run() on one thread (the main loop); RequestStop() from any thread; gRPC
// handlers on gRPC threads read state under mu_.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/raylet.grpc.pb.h"
#include "src/common/ids.h"
#include "src/common/resources.h"
#include "src/rpc/auth.h"
#include "src/rpc/gcs_client.h"

namespace troupe {

struct RayletOptions {
  std::string gcs_address;  // host:port of the head's GCS
  std::string token;        // cluster token text
  NodeId node_id = NodeId::FromRandom();
  std::string node_ip = "127.0.0.1";  // advertised to the cluster
  std::string bind_address = "127.0.0.1";
  int port = 0;           // 0: any free port
  ResourceSet resources;  // totals this node offers
  std::map<std::string, std::string> labels;
  bool is_head = false;
  absl::Duration report_period = absl::Milliseconds(500);
  absl::Duration gcs_reconnect_timeout = absl::Seconds(60);
};

class Raylet {
 public:
  explicit Raylet(RayletOptions options);
  ~Raylet();

  // Starts the raylet's gRPC server. Fails if the port cannot be bound.
  absl::Status Start();
  // Registers and reports until RequestStop() (returns OK after unregistering gracefully) or
  // until the node cannot stay in the cluster (returns why: head gone, declared dead, refused).
  absl::Status Run();
  void RequestStop(const std::string& reason);
  int port() const { return bound_port_; }

 private:
  class GrpcService;
  rpc::NodeInfo NodeInfoLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers, retrying until success, a fatal refusal, a stop request or the reconnect timeout.
  absl::Status RegisterWithRetry(bool re_register);
  absl::Status ReportLoop();

  RayletOptions options_;
  GcsClient gcs_;
  TokenAuthenticator auth_;
  std::unique_ptr<GrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  int bound_port_ = 0;

  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  std::string cluster_id_ ABSL_GUARDED_BY(mu_);  // set by the first registration
  int64_t report_seq_ ABSL_GUARDED_BY(mu_) = 0;
  ResourceSet available_ ABSL_GUARDED_BY(mu_);
};

// `troupe raylet ...`: runs a raylet in the foreground until SIGTERM/SIGINT. Returns the exit code.
int RayletMain(const std::vector<std::string>& args);

}  // namespace troupe
