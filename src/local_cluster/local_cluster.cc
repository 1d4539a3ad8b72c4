#include "src/local_cluster/local_cluster.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/session.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/raylet/node_resources.h"
#include "src/rpc/cluster_token.h"

namespace troupe {

absl::StatusOr<std::unique_ptr<internal::EmbeddedCluster>> LocalCluster::Start(
    const Config& config) {
  // The embedded GCS and raylet share this process's stderr: keep it to warnings.
  if (MinLogSeverity() < LogSeverity::kWarning) SetMinLogSeverity(LogSeverity::kWarning);
  auto session = Session::Create(ResolveTempRoot(""));
  if (!session.ok()) return session.status();
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  const ClusterToken cluster_token = ClusterToken::Generate(ClusterId::FromRandom());
  cluster->token_ = cluster_token.ToString();

  GcsServerOptions gcs_options;
  gcs_options.port = 0;
  gcs_options.token = cluster_token;
  // The raylet lives in this process and cannot die alone: a late answer means a loaded process
  // (a busy machine, a program under valgrind), not a dead node; declaring it dead would end the
  // program. Only a long silence counts.
  gcs_options.health_check.timeout = absl::Seconds(30);
  cluster->gcs_ = std::make_unique<GcsServer>(gcs_options, std::make_unique<InMemoryStoreClient>());
  if (auto status = cluster->gcs_->Start(); !status.ok()) {
    cluster->gcs_.reset();  // never started: nothing to stop
    return absl::Status(status.code(),
                        absl::StrCat("cannot start the embedded GCS: ", status.message()));
  }
  cluster->gcs_address_ = absl::StrCat("127.0.0.1:", cluster->gcs_->port());

  RayletOptions raylet_options;
  raylet_options.gcs_address = cluster->gcs_address_;
  raylet_options.token = cluster->token_;
  raylet_options.is_head = true;
  raylet_options.session_dir = session->dir();
  cluster->session_dir_ = session->dir();
  // One node in one process: reports are cheap, and worker exits show sooner.
  raylet_options.report_period = RayletOptions::kEmbeddedReportPeriod;
  auto custom = ResourceSet::FromMap(config.resources);
  if (!custom.ok()) return custom.status();
  ResourceSet resources = *custom;
  resources.Set(kCpu, FixedPoint(config.num_cpus >= 0 ? config.num_cpus : DetectNumCpus()));
  resources.Set(kGpu, FixedPoint(config.num_gpus >= 0 ? config.num_gpus : DetectNumGpus()));
  resources.Set(kMemory, FixedPoint(static_cast<double>(DefaultMemoryBytes())));
  resources.Set(
      kObjectStoreMemory,
      FixedPoint(static_cast<double>(config.object_store_memory >= 0 ? config.object_store_memory
                                                                     : DefaultObjectStoreBytes())));
  raylet_options.resources = resources;
  cluster->raylet_ = std::make_unique<Raylet>(raylet_options);
  if (auto status = cluster->raylet_->Start(); !status.ok()) {
    cluster->raylet_.reset();  // never started; the destructor stops the GCS
    return absl::Status(status.code(),
                        absl::StrCat("cannot start the embedded raylet: ", status.message()));
  }
  Raylet* raylet = cluster->raylet_.get();
  cluster->raylet_thread_ = std::thread([raylet] {
    absl::Status status = raylet->Run();
    if (!status.ok()) TROUPE_LOG(Error) << "embedded raylet stopped: " << status.message();
  });
  return std::unique_ptr<internal::EmbeddedCluster>(std::move(cluster));
}

void LocalCluster::Stop() {
  if (raylet_) {
    raylet_->RequestStop("the driver shut down");
    if (raylet_thread_.joinable()) raylet_thread_.join();
    raylet_.reset();
  }
  if (gcs_) {
    gcs_->Stop();
    gcs_.reset();
  }
  if (!session_dir_.empty()) {
    // Its workers' logs went to the driver's stderr already; leave no directory per run.
    std::error_code ignored;
    std::filesystem::remove_all(session_dir_, ignored);
    session_dir_.clear();
  }
}

namespace {
// Init() without an address starts this cluster (see src/api/embedded_cluster.h).
const bool registered = internal::RegisterEmbeddedClusterStarter(&LocalCluster::Start);
}  // namespace

}  // namespace troupe
