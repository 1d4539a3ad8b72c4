#include "src/gcs/gcs_server.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/common/flag_parser.h"
#include "src/common/logging.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/rpc/server.h"

namespace troupe {

// Health probes over gRPC, one cached client per raylet address.
class GcsServer::GrpcNodeProber : public NodeProber {
 public:
  explicit GrpcNodeProber(std::string token) : token_(std::move(token)) {}
  void Probe(const NodeId& node_id, const std::string& address, absl::Duration timeout,
             std::function<void(absl::Status)> done) override {
    std::shared_ptr<RayletClient> client;
    {
      absl::MutexLock lock(&mu_);
      auto& slot = clients_[address];
      if (!slot) slot = std::make_shared<RayletClient>(address, token_);
      client = slot;
    }
    client->HealthCheckAsync(timeout, std::move(done));
  }

 private:
  const std::string token_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<RayletClient>> clients_ ABSL_GUARDED_BY(mu_);
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
      auth_(options_.token),
      publisher_(&clock_),
      log_publisher_(&clock_, /*max_buffered=*/20000),
      kv_(store_.get()),
      nodes_(options_.token.cluster_id(), store_.get(), &publisher_, &clock_),
      jobs_(store_.get(), &publisher_, &clock_),
      actors_(store_.get(), &publisher_, &nodes_, &clock_, options_.token.ToString()),
      placement_groups_(
          store_.get(), &publisher_, &nodes_, &clock_, options_.token.ToString(),
          [this](const std::string& group) { actors_.KillActorsInPlacementGroup(group); }),
      prober_(std::make_unique<GrpcNodeProber>(options_.token.ToString())),
      health_checker_(
          options_.health_check, &clock_, prober_.get(),
          [this](const NodeId& id, const std::string& reason) { nodes_.MarkNodeDead(id, reason); }),
      node_service_(&auth_, &nodes_, absl::ToInt64Milliseconds(options_.health_check.period)),
      job_service_(&auth_, &jobs_),
      kv_service_(&auth_, &kv_),
      pubsub_service_(&auth_, &publisher_, &log_publisher_),
      actor_service_(&auth_, &actors_),
      placement_group_service_(&auth_, &placement_groups_) {
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
  nodes_.AddNodeAddedListener([this](const rpc::NodeInfo& node) {
    health_checker_.AddNode(*NodeId::FromBinary(node.node_id()),
                            absl::StrCat(node.node_ip(), ":", node.raylet_port()));
  });
  nodes_.AddNodeRemovedListener([this](const rpc::NodeInfo& node) {
    health_checker_.RemoveNode(*NodeId::FromBinary(node.node_id()));
    placement_groups_.OnNodeDead(node);  // first: restarting actors need their bundles' new homes
    actors_.OnNodeDead(node);
  });
  jobs_.AddJobFinishedListener([this](const std::string& job_id) {
    actors_.OnJobFinished(job_id);
    auto id = JobId::FromBinary(job_id);
    if (id.ok()) kv_.Del(JobKvNamespace(*id), "", /*by_prefix=*/true, [](auto) {});
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

  rpc::GetClusterInfoReply info = MakeClusterInfo(options_);
  info.set_gcs_address(absl::StrCat(options_.bind_address, ":", options_.port));
  cluster_service_ = std::make_unique<ClusterInfoGrpcService>(&auth_, info);
  auto server =
      StartGrpcServer(options_.bind_address, options_.port,
                      {cluster_service_.get(), &node_service_, &job_service_, &kv_service_,
                       &pubsub_service_, &actor_service_, &placement_group_service_},
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
    publisher_.ExpirePolls();
    log_publisher_.ExpirePolls();
  }
}

void GcsServer::Stop() {
  if (!server_) return;
  stop_timer_.Notify();
  if (timer_.joinable()) timer_.join();
  publisher_.Shutdown();
  log_publisher_.Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  server_.reset();
}

int GcsServerMain(const std::vector<std::string>& args) {
  GcsServerOptions options;
  std::string token_file;
  int64_t port = options.port;
  int64_t period_ms = 1000, timeout_ms = 1000, threshold = 3;
  FlagParser flags("troupe gcs-server",
                   "Runs the global control store in the foreground (`troupe start --head` runs "
                   "it for you).");
  flags.AddInt("port", &port, "Port to listen on (0: any free port).");
  flags.AddString("bind", &options.bind_address, "Address to listen on.");
  flags.AddString("token-file", &token_file, "File holding the cluster token (required).");
  flags.AddInt("health-check-period-ms", &period_ms, "How often each raylet is probed.");
  flags.AddInt("health-check-timeout-ms", &timeout_ms, "How long a probe may take.");
  flags.AddInt("health-check-failure-threshold", &threshold,
               "Failed probes in a row before a node is declared dead.");
  if (auto status = flags.Parse(args); !status.ok()) {
    fprintf(stderr, "troupe gcs-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (period_ms <= 0 || timeout_ms <= 0 || threshold <= 0) {
    fprintf(stderr, "troupe gcs-server: health check period, timeout and threshold must be > 0\n");
    return 2;
  }
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) {
    fprintf(stderr, "troupe gcs-server: %s (pass --token-file)\n",
            std::string(token.status().message()).c_str());
    return 2;
  }
  options.token = *token;
  options.port = static_cast<int>(port);
  options.health_check = {absl::Milliseconds(period_ms), absl::Milliseconds(timeout_ms),
                          static_cast<int>(threshold)};

  // Block termination signals before gRPC starts threads, then wait for them here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  GcsServer server(options, std::make_unique<InMemoryStoreClient>());
  if (auto status = server.Start(); !status.ok()) {
    TROUPE_LOG(Error) << "GCS failed to start: " << status.message();
    return 1;
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  TROUPE_LOG(Info) << "GCS stopping on signal " << signal_number;
  server.Stop();
  return 0;
}

}  // namespace troupe
