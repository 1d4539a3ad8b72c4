// Init, Shutdown and IsInitialized for a driver: connect to a cluster (or start an embedded one
// through the //src/local_cluster seam, embedded_cluster.h), register the job, start this
// process's CoreWorker and open it to the API through the RuntimeGateway. In worker mode (a
// raylet started this executable) Init hands over to RunWorker and never returns.
//
// Lifecycle: Init and Shutdown serialize on one mutex. Calls from other threads never touch it:
// they go through the gateway, which Shutdown closes first (see runtime_gateway.h and the
// threading contract in troupe/api.h).
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/api/core_worker_runtime.h"
#include "src/api/driver_session.h"
#include "src/api/embedded_cluster.h"
#include "src/api/job_registration.h"
#include "src/api/log_printer.h"
#include "src/api/runtime_gateway.h"
#include "src/api/worker_main.h"
#include "src/common/cluster_target.h"
#include "src/common/mutex_settings.h"
#include "src/common/session.h"
#include "src/core_worker/core_worker.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/transport_security.h"
#include "troupe/api.h"

namespace troupe {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Everything Init built for a driver; Shutdown tears it down in reverse order.
struct DriverSession {
  std::unique_ptr<internal::EmbeddedCluster> cluster;  // an embedded cluster, or null
  std::unique_ptr<GcsClient> gcs;
  std::shared_ptr<CoreWorker> core;
  std::shared_ptr<internal::CoreWorkerRuntime> runtime;
  JobId job_id;
  std::unique_ptr<internal::WorkerLogPrinter> log_printer;
};

absl::Mutex lifecycle_mu;
DriverSession* driver ABSL_GUARDED_BY(lifecycle_mu) = nullptr;
std::vector<std::string>* saved_argv = nullptr;  // set by Init(argc, argv) before Init(config)

std::unique_ptr<internal::EmbeddedCluster> StartEmbeddedCluster(const Config& config) {
  internal::EmbeddedClusterStarter start = internal::RegisteredEmbeddedClusterStarter();
  if (start == nullptr) {
    throw RuntimeError(
        "no cluster runs on this machine and none was named: set TROUPE_ADDRESS (or "
        "Config::address) to a running cluster's GCS host:port, start one here with `troupe "
        "start --head`, or link //src/local_cluster into this program to start an embedded local "
        "cluster");
  }
  auto cluster = start(config);
  if (!cluster.ok()) throw RuntimeError(std::string(cluster.status().message()));
  return std::move(*cluster);
}

// The driver's reconnect limit: Config::gcs_reconnect_timeout_s, else
// $TROUPE_GCS_RECONNECT_TIMEOUT_S, else 60 s. Zero: never give up.
absl::Duration ReconnectTimeout(const Config& config) {
  double seconds = config.gcs_reconnect_timeout_s;
  if (seconds < 0) {
    const std::string text = Env("TROUPE_GCS_RECONNECT_TIMEOUT_S");
    seconds = 60;
    if (!text.empty() && (!absl::SimpleAtod(text, &seconds) || seconds < 0)) {
      throw RuntimeError("TROUPE_GCS_RECONNECT_TIMEOUT_S=" + text +
                         " is not a number of seconds >= 0 (0: never give up on the cluster)");
    }
  }
  return absl::Seconds(seconds);
}

// Whether something accepts TCP connections at ip:port. A raylet that died stays ALIVE in the
// GCS's node table until its health checks fail (seconds): after a whole-head restart the old
// head node is listed beside the new one, and a driver (the head's HTTP server) must not pick
// it. Local addresses answer at once; an address that cannot be resolved is not ruled out.
bool AcceptsConnections(const std::string& ip, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(ip.c_str(), std::to_string(port).c_str(), &hints, &result) != 0 ||
      result == nullptr) {
    return true;
  }
  const int fd = socket(result->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool accepted = fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  return accepted;
}

// The raylet on this machine the driver should use: an ALIVE node on this machine's address
// whose raylet accepts connections, the head's first.
std::string FindLocalRaylet(GcsClient* gcs, const std::string& gcs_address) {
  const std::string here = LocalAddressToward(gcs_address.substr(0, gcs_address.rfind(':')));
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto nodes = gcs->GetAllNodeInfo();
    if (!nodes.ok()) throw RuntimeError(std::string(nodes.status().message()));
    const rpc::NodeInfo* best = nullptr;
    for (const auto& node : *nodes) {
      if (node.state() != rpc::NodeInfo::ALIVE || node.node_ip() != here) continue;
      if (best != nullptr && !(node.is_head() && !best->is_head())) continue;
      if (!AcceptsConnections(node.node_ip(), node.raylet_port())) continue;
      best = &node;
    }
    if (best != nullptr) return absl::StrCat(best->node_ip(), ":", best->raylet_port());
    absl::SleepFor(absl::Milliseconds(50));  // an embedded raylet may still be registering
  }
  throw RuntimeError("no Troupe node runs on this machine (" + here +
                     "): start one with `troupe start --address=" + gcs_address +
                     "` before running a driver here");
}

}  // namespace

std::shared_ptr<internal::CoreWorkerRuntime> internal::DriverRuntime() {
  absl::MutexLock lock(&lifecycle_mu);
  return driver != nullptr ? driver->runtime : nullptr;
}

void Init() { Init(Config()); }

void Init(int argc, char** argv) {
  static std::vector<std::string> args;
  args.assign(argv, argv + argc);
  saved_argv = &args;
  try {
    Init(Config());
  } catch (const TroupeError& e) {
    // A program's first line should not end in "terminate called after throwing".
    std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "troupe", e.what());
    std::exit(1);
  }
}

void Init(const Config& config) {
  UseProductionMutexSettings();  // drivers and workers alike
  if (Env("TROUPE_WORKER_MODE") == "1") internal::RunWorker();
  absl::MutexLock lock(&lifecycle_mu);
  if (driver != nullptr) throw RuntimeError("troupe::Init was already called");
  const absl::Duration reconnect_timeout = ReconnectTimeout(config);  // may throw: check first
  auto session = std::make_unique<DriverSession>();
  const std::vector<std::string> argv = saved_argv ? *saved_argv : internal::SelfArgv();

  std::string address = !config.address.empty() ? config.address : Env("TROUPE_ADDRESS");
  std::string token = config.token;
  // No address: this machine's running cluster if there is one (like ray.init()), else an
  // embedded one. "local" forces an embedded one.
  std::optional<absl::StatusOr<ClusterTarget>> target;
  // Sizing the node is for an embedded cluster only: a program that does wants one.
  const bool sizes_node = config.num_cpus >= 0 || config.num_gpus >= 0 ||
                          !config.resources.empty() || config.object_store_memory >= 0;
  if (address.empty() && !sizes_node) {
    target = ResolveClusterTarget("", token, ResolveTempRoot(""));
    if (target->ok()) {
      std::fprintf(stderr, "troupe: connecting to the cluster running on this machine at %s "
                           "(TROUPE_ADDRESS=local starts an embedded one instead)\n",
                   (*target)->address.c_str());
    }
  } else if (!address.empty() && address != "local") {
    target = ResolveClusterTarget(address, token, ResolveTempRoot(""));
    if (!target->ok()) throw RuntimeError(std::string(target->status().message()));
  }
  const bool embedded = !target.has_value() || !target->ok();
  if (embedded) {
    const char* why = target.has_value() ? "no cluster runs on this machine"
                      : address.empty()  ? "the Config sizes its node"
                                         : "TROUPE_ADDRESS=local";
    SetTransportSecurity(std::nullopt);  // an embedded cluster listens on loopback only
    session->cluster = StartEmbeddedCluster(config);
    address = session->cluster->gcs_address();
    token = session->cluster->token();
    std::fprintf(stderr, "troupe: started an embedded single-node cluster in this process (%s)\n",
                 why);
  } else {
    address = (*target)->address;
    token = (*target)->token;
    // The cluster's TLS files, if it uses TLS: $TROUPE_TLS_DIR or this node's session.
    if (auto status = UseTlsDir((*target)->tls_dir); !status.ok()) {
      throw RuntimeError("cannot use the cluster's TLS files: " + std::string(status.message()));
    }
  }
  session->gcs = std::make_unique<GcsClient>(address, token);
  auto info = session->gcs->GetClusterInfo();
  if (!info.ok() && info.status().code() == absl::StatusCode::kUnauthenticated) {
    throw RuntimeError("the cluster at " + address + " refused this driver's token: " +
                       std::string(info.status().message()));
  }
  if (!info.ok()) {
    throw RuntimeError("cannot reach the cluster at " + address + ": " +
                       std::string(info.status().message()) +
                       " (is it running? `troupe status` on its head; TROUPE_ADDRESS or "
                       "Config::address names it)");
  }
  const std::string raylet_address = FindLocalRaylet(session->gcs.get(), address);

  // The job: workers run this same executable, fetched by digest on other machines.
  internal::JobRegistration job;
  job.argv = argv;
  job.executable_path = internal::SelfExecutable();
  job.upload_executable = !embedded;
  job.namespace_name = config.namespace_name;
  job.working_dir = config.working_dir;
  auto job_id = internal::RegisterJob(*session->gcs, job);
  if (!job_id.ok()) throw RuntimeError(std::string(job_id.status().message()));
  session->job_id = *job_id;

  CoreWorkerOptions options;
  options.is_driver = true;
  options.raylet_address = raylet_address;
  options.gcs_address = address;
  options.token = token;
  options.node_ip = raylet_address.substr(0, raylet_address.rfind(':'));
  options.job_id = session->job_id;
  options.max_inline_bytes = config.max_inline_bytes;
  options.testing_drop_actor_replies = Env("TROUPE_TESTING_DROP_ACTOR_REPLIES");
  options.record_task_events = Env("TROUPE_TASK_EVENTS") != "0";
  options.cluster_reconnect_timeout = reconnect_timeout;
  session->core = std::make_shared<CoreWorker>(options);
  if (auto status = session->core->Start(); !status.ok()) {
    throw RuntimeError("cannot start the driver's runtime: " + std::string(status.message()));
  }
  session->core->set_namespace_name(config.namespace_name);
  session->runtime = std::make_shared<internal::CoreWorkerRuntime>(session->core, token);
  internal::RuntimeGateway::Process().Open(session->runtime);
  if (config.log_to_driver) {
    session->log_printer =
        std::make_unique<internal::WorkerLogPrinter>(session->gcs.get(), session->job_id);
  }
  driver = session.release();
}

bool IsInitialized() {
  absl::MutexLock lock(&lifecycle_mu);
  return driver != nullptr;
}

void Shutdown() {
  absl::MutexLock lock(&lifecycle_mu);
  if (driver == nullptr) return;
  std::unique_ptr<DriverSession> session(driver);
  driver = nullptr;
  // From here on new calls throw; calls already inside the runtime hold it until they return.
  internal::RuntimeGateway::Process().Close();
  if (session->log_printer) session->log_printer->Stop();
  const bool cluster_gone = !session->core->cluster_status().ok();
  session->core->Shutdown();
  // The driver owns its objects: reporting its exit now makes every raylet free them at once
  // (its raylet reports it again when the process ends; the second report changes nothing).
  // A cluster the driver gave up on is not waited for.
  if (!cluster_gone) {
    (void)session->gcs->ReportWorkerExit(session->core->worker_id().Binary(),
                                         session->core->node_id().Binary(), "shut down");
    (void)session->gcs->MarkJobFinished(session->job_id.Binary());
  }
  if (session->cluster) session->cluster->Stop();
}

}  // namespace troupe
