#include "src/raylet/raylet.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

// Refusals that retrying cannot fix.
bool IsFatal(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kInvalidArgument:
      return true;
    default:
      return false;
  }
}

}  // namespace

// gRPC glue for NodeManagerService; lease and bundle methods arrive with the worker pool.
class Raylet::GrpcService : public rpc::NodeManagerService::CallbackService {
 public:
  explicit GrpcService(Raylet* raylet) : raylet_(raylet) {}

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* context,
                                        const rpc::HealthCheckRequest*,
                                        rpc::HealthCheckReply* reply) override {
    return Respond(context, raylet_->auth_, [&] {
      reply->set_node_id(raylet_->options_.node_id.Binary());
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* GetNodeStats(grpc::CallbackServerContext* context,
                                         const rpc::GetNodeStatsRequest*,
                                         rpc::GetNodeStatsReply* reply) override {
    return Respond(context, raylet_->auth_, [&] {
      absl::MutexLock lock(&raylet_->mu_);
      *reply->mutable_node() = raylet_->NodeInfoLocked();
      reply->mutable_usage()->set_node_id(raylet_->options_.node_id.Binary());
      for (const auto& [name, amount] : raylet_->options_.resources.ToMap()) {
        (*reply->mutable_usage()->mutable_total())[name] = amount;
      }
      for (const auto& [name, amount] : raylet_->available_.ToMap()) {
        (*reply->mutable_usage()->mutable_available())[name] = amount;
      }
      return absl::OkStatus();
    });
  }

 private:
  Raylet* raylet_;
};

Raylet::Raylet(RayletOptions options)
    : options_(std::move(options)),
      gcs_(options_.gcs_address, options_.token, absl::Seconds(5)),
      auth_(*ClusterToken::Parse(options_.token)),
      available_(options_.resources) {}

Raylet::~Raylet() {
  if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

absl::Status Raylet::Start() {
  service_ = std::make_unique<GrpcService>(this);
  auto server =
      StartGrpcServer(options_.bind_address, options_.port, {service_.get()}, &bound_port_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return absl::OkStatus();
}

rpc::NodeInfo Raylet::NodeInfoLocked() const {
  rpc::NodeInfo node;
  node.set_node_id(options_.node_id.Binary());
  node.set_node_ip(options_.node_ip);
  node.set_raylet_port(bound_port_);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  node.set_hostname(hostname);
  for (const auto& [name, amount] : options_.resources.ToMap()) {
    (*node.mutable_resources_total())[name] = amount;
  }
  for (const auto& [key, value] : options_.labels) (*node.mutable_labels())[key] = value;
  node.set_is_head(options_.is_head);
  node.set_raylet_pid(getpid());
  return node;
}

absl::Status Raylet::RegisterWithRetry(bool re_register) {
  const absl::Time start = absl::Now();
  while (!stop_.HasBeenNotified()) {
    rpc::RegisterNodeRequest request;
    {
      absl::MutexLock lock(&mu_);
      *request.mutable_node() = NodeInfoLocked();
      if (re_register) request.set_expected_cluster_id(cluster_id_);
    }
    auto reply = gcs_.RegisterNode(request);
    if (reply.ok()) {
      absl::MutexLock lock(&mu_);
      cluster_id_ = reply->cluster_id();
      TROUPE_LOG(Info) << (re_register ? "re-registered" : "registered") << " node "
                       << options_.node_id.Hex() << " with the GCS at " << options_.gcs_address
                       << " (cluster " << BytesToHex(cluster_id_) << "); raylet on "
                       << options_.node_ip << ":" << bound_port_ << ", resources "
                       << options_.resources.ToString();
      return absl::OkStatus();
    }
    if (IsFatal(reply.status())) return reply.status();
    if (absl::Now() - start > options_.gcs_reconnect_timeout) {
      return absl::UnavailableError(
          absl::StrCat("could not register with the GCS at ", options_.gcs_address, " for ",
                       absl::FormatDuration(options_.gcs_reconnect_timeout),
                       "; last error: ", reply.status().message()));
    }
    stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500));
  }
  return absl::OkStatus();
}

absl::Status Raylet::Run() {
  if (auto status = RegisterWithRetry(/*re_register=*/false); !status.ok()) return status;
  return ReportLoop();
}

absl::Status Raylet::ReportLoop() {
  absl::Time last_contact = absl::Now();
  bool connected = true;
  while (!stop_.WaitForNotificationWithTimeout(options_.report_period)) {
    rpc::ResourceUsage usage;
    {
      absl::MutexLock lock(&mu_);
      usage.set_node_id(options_.node_id.Binary());
      for (const auto& [name, amount] : options_.resources.ToMap())
        (*usage.mutable_total())[name] = amount;
      for (const auto& [name, amount] : available_.ToMap())
        (*usage.mutable_available())[name] = amount;
      usage.set_report_seq(++report_seq_);
    }
    absl::Status status = gcs_.ReportResourceUsage(usage);
    if (status.ok()) {
      if (!connected) TROUPE_LOG(Info) << "reconnected to the GCS at " << options_.gcs_address;
      connected = true;
      last_contact = absl::Now();
      continue;
    }
    if (status.code() == absl::StatusCode::kNotFound) {
      TROUPE_LOG(Warning) << "the GCS no longer knows this node (it restarted?); registering again";
      if (auto registered = RegisterWithRetry(/*re_register=*/true); !registered.ok()) {
        return registered;
      }
      connected = true;
      last_contact = absl::Now();
      continue;
    }
    if (IsFatal(status)) return status;
    if (connected) {
      TROUPE_LOG(Warning) << "lost contact with the GCS: " << status.message()
                          << "; retrying for up to "
                          << absl::FormatDuration(options_.gcs_reconnect_timeout);
      connected = false;
    }
    if (absl::Now() - last_contact > options_.gcs_reconnect_timeout) {
      return absl::UnavailableError(
          absl::StrCat("the head (GCS at ", options_.gcs_address, ") has been unreachable for ",
                       absl::FormatDuration(options_.gcs_reconnect_timeout),
                       "; last error: ", status.message()));
    }
  }
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    reason = stop_reason_;
  }
  if (auto status = gcs_.UnregisterNode(options_.node_id.Binary(), reason); !status.ok()) {
    TROUPE_LOG(Warning) << "could not unregister from the GCS: " << status.message();
  } else {
    TROUPE_LOG(Info) << "unregistered from the GCS: " << reason;
  }
  return absl::OkStatus();
}

void Raylet::RequestStop(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (stop_.HasBeenNotified()) return;
  stop_reason_ = reason;
  stop_.Notify();
}

}  // namespace troupe
