#include "src/gcs/gcs_server.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/rpc/server.h"

namespace troupe {

// Health probes over gRPC, through the server's raylet clients.
class GcsServer::GrpcNodeProber : public NodeProber {
 public:
  explicit GrpcNodeProber(ClientPool<RayletClient>* raylets) : raylets_(raylets) {}
  void Probe(const NodeId& node_id, const std::string& address, absl::Duration timeout,
             std::function<void(absl::Status)> done) override {
    raylets_->Get(address)->HealthCheckAsync(timeout, std::move(done));
  }

 private:
  ClientPool<RayletClient>* raylets_;
};

namespace {
rpc::GetClusterInfoReply MakeClusterInfo(const GcsServerOptions& options) {
  rpc::GetClusterInfoReply info;
  info.set_cluster_id(options.token.cluster_id().Binary());
  info.set_version(options.version);
  info.set_start_time_ms(absl::ToUnixMillis(absl::Now()));
  return info;
}
}  // namespace

GcsServer::GcsServer(GcsServerOptions options, std::unique_ptr<StoreClient> store)
    : options_(std::move(options)),
      store_(std::move(store)),
      raylet_clients_(options_.token.ToString()),
      worker_clients_(options_.token.ToString()),
      lease_client_(&raylet_clients_),
      push_client_(&worker_clients_),
      auth_(options_.token),
      // Numbered from the clock so cursors of a previous incarnation read as lost (publisher.h).
      publisher_(&clock_, /*max_buffered=*/10000, absl::Seconds(60),
                 Publisher::SeqBaseFromClock(clock_)),
      log_publisher_(&clock_, /*max_buffered=*/20000, absl::Seconds(60),
                     Publisher::SeqBaseFromClock(clock_)),
      kv_(store_.get(), options_.kv),
      nodes_(options_.token.cluster_id(), store_.get(), &publisher_, &clock_),
      jobs_(store_.get(), &publisher_, &clock_),
      actors_({store_.get(), &publisher_, &nodes_, &clock_, &lease_client_, &push_client_},
              options_.actors),
      placement_groups_(
          {store_.get(), &publisher_, &nodes_, &clock_, &lease_client_,
           [this](const std::string& group) { actors_.KillActorsInPlacementGroup(group); },
           [this](const std::string& job_id) { return jobs_.IsJobFinished(job_id); }}),
      task_events_(options_.task_events),
      package_collector_(&kv_, &jobs_, &clock_, options_.packages),
      prober_(std::make_unique<GrpcNodeProber>(&raylet_clients_)),
      health_checker_(
          options_.health_check, &clock_, prober_.get(),
          [this](const NodeId& id, const std::string& reason) { nodes_.MarkNodeDead(id, reason); }),
      node_service_(&auth_, &nodes_, absl::ToInt64Milliseconds(options_.health_check.period)),
      job_service_(&auth_, &jobs_),
      kv_service_(&auth_, &kv_),
      pubsub_service_(&auth_, &publisher_, &log_publisher_),
      actor_service_(&auth_, &actors_),
      placement_group_service_(&auth_, &placement_groups_, &clock_),
      task_service_(&auth_, &task_events_) {
  actors_.set_bundle_locator([this](const std::string& group_id,
                                    int index) -> absl::StatusOr<std::pair<std::string, int>> {
    rpc::GetPlacementGroupRequest request;
    request.set_placement_group_id(group_id);
    auto group = placement_groups_.Get(request);
    if (!group.ok()) return group.status();
    if (group->state() == rpc::PlacementGroupInfo::REMOVED) {
      return absl::NotFoundError("its placement group was removed");
    }
    if (group->state() != rpc::PlacementGroupInfo::CREATED) {
      return absl::UnavailableError("waiting for its placement group to be placed");
    }
    if (index >= group->bundles_size()) {
      return absl::NotFoundError(absl::StrCat("the placement group has no bundle ", index));
    }
    const int chosen = index >= 0 ? index : 0;
    return std::make_pair(group->bundles(chosen).raylet_address(), index);
  });
  // A dead actor's worker: its client (a gRPC channel) would otherwise stay in the pool for good.
  actors_.set_worker_gone_listener(
      [this](const std::string& address) { worker_clients_.Forget(address); });
  nodes_.AddNodeAddedListener([this](const rpc::NodeInfo& node) {
    health_checker_.AddNode(*NodeId::FromBinary(node.node_id()),
                            absl::StrCat(node.node_ip(), ":", node.raylet_port()));
  });
  // A report is proof of life: its node's probes are mostly skipped (health_checker.h).
  nodes_.set_report_listener([this](const NodeId& id) { health_checker_.OnNodeHeard(id); });
  nodes_.AddNodeRemovedListener([this](const rpc::NodeInfo& node) {
    health_checker_.RemoveNode(*NodeId::FromBinary(node.node_id()));
    placement_groups_.OnNodeDead(node);  // first: restarting actors need their bundles' new homes
    actors_.OnNodeDead(node);
  });
  jobs_.AddJobFinishedListener([this](const std::string& job_id) {
    actors_.OnJobFinished(job_id);
    placement_groups_.OnJobFinished(job_id);  // its groups that are not detached
    auto id = JobId::FromBinary(job_id);
    if (id.ok()) kv_.Del(JobKvNamespace(*id), "", /*by_prefix=*/true, [](auto) {});
    // Its tasks without an end say they were abandoned (until a late report says otherwise).
    if (id.ok()) task_events_.OnJobFinished(*id, absl::ToUnixMicros(absl::Now()));
  });
}

GcsServer::~GcsServer() { Stop(); }

absl::Status GcsServer::Start() {
  auto alive = nodes_.Initialize();
  if (!alive.ok()) return alive.status();
  for (const auto& node : *alive) {
    health_checker_.AddNode(*NodeId::FromBinary(node.node_id()),
                            absl::StrCat(node.node_ip(), ":", node.raylet_port()));
  }
  if (auto status = jobs_.Initialize(); !status.ok()) return status;
  if (auto status = kv_.Initialize(); !status.ok()) return status;
  // Groups before actors: actors in a group are placed on its bundles.
  auto groups = placement_groups_.Initialize();
  if (!groups.ok()) return groups.status();
  auto actors = actors_.Initialize();
  if (!actors.ok()) return actors.status();
  const size_t num_nodes = nodes_.GetAllNodes().size();
  const size_t num_jobs = jobs_.GetAllJobs().size();
  if (num_nodes + num_jobs + *actors + *groups > 0) {
    TROUPE_LOG(Info) << "GCS restarted: reloaded " << num_nodes << " nodes, " << num_jobs
                     << " jobs, " << *actors << " actors, " << *groups
                     << " placement groups from the store";
  }

  rpc::GetClusterInfoReply info = MakeClusterInfo(options_);
  info.set_gcs_address(absl::StrCat(options_.bind_address, ":", options_.port));
  if (options_.certificate_authority) {
    auto ca = CertificateAuthority::Load(*options_.certificate_authority);
    if (!ca.ok()) return ca.status();
    ca_ = std::move(*ca);
  }
  cluster_service_ = std::make_unique<ClusterInfoGrpcService>(&auth_, info, ca_ ? &*ca_ : nullptr);
  auto server =
      StartGrpcServer(options_.bind_address, options_.port,
                      {cluster_service_.get(), &node_service_, &job_service_, &kv_service_,
                       &pubsub_service_, &actor_service_, &placement_group_service_,
                       &task_service_},
                      &bound_port_, &rpc_latencies_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  timer_ = std::thread([this] { TimerLoop(); });
  TROUPE_LOG(Info) << "GCS of cluster " << options_.token.cluster_id().Hex() << " listening on "
                   << options_.bind_address << ":" << bound_port_;
  return absl::OkStatus();
}

void GcsServer::TimerLoop() {
  int ticks = 0;
  while (!stop_timer_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    if (++ticks % 50 == 0) {  // every 5 s: this server's RPC latencies, for the head's /metrics
      kv_.Put(kMetricsNamespace, kGcsRpcLatencyKey,
              rpc_latencies_.RenderPrometheus("troupe_gcs_server_rpc_duration_seconds",
                                              "Time the GCS takes to answer each RPC method."),
              /*overwrite=*/true, [](auto) {});
    }
    health_checker_.Tick();
    actors_.Tick();
    placement_groups_.Tick();
    package_collector_.Tick();
    publisher_.ExpirePolls();
    log_publisher_.ExpirePolls();
    memory_trimmer_.Tick(absl::Now(), rpc_latencies_.calls());
  }
}

void GcsServer::Stop() {
  if (!server_) return;
  stop_timer_.Notify();
  if (timer_.joinable()) timer_.join();
  placement_groups_.Shutdown();
  publisher_.Shutdown();
  log_publisher_.Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  server_.reset();
}

}  // namespace troupe
