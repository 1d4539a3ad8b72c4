#include "src/raylet/raylet.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/logging.h"
#include "src/common/machine_stats.h"
#include "src/common/status_macros.h"
#include "src/schema/kv_schema.h"
#include "src/tls/tls_files.h"

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

RayletOptions WithDefaults(RayletOptions options) {
  if (options.session_dir.empty())
    options.session_dir = "/tmp/troupe/raylet-" + options.node_id.Hex();
  if (options.object_store_dir.empty()) {
    options.object_store_dir = absl::StrCat("/dev/shm/troupe-", options.node_id.Hex());
  }
  if (options.spill_dir.empty()) options.spill_dir = options.session_dir + "/spill";
  if (options.executable_cache_dir.empty()) {
    options.executable_cache_dir = options.session_dir + "/executables";
  }
  return options;
}

template <typename T>
void MapFromResources(const ResourceSet& resources, T* out) {
  for (const auto& [name, amount] : resources.ToMap()) (*out)[name] = amount;
}

WorkerPoolOptions WorkerPoolOptionsOf(const RayletOptions& options) {
  WorkerPoolOptions result{options.node_id.Hex(), options.node_ip, options.gcs_address,
                           options.token,         options.session_dir + "/logs",
                           options.session_dir,   options.tls_dir,
                           options.worker_idle_timeout, options.mask_gpus};
  result.max_starting_workers = options.max_starting_workers;  // 0: the pool's default
  return result;
}

ObjectManagerOptions ObjectManagerOptionsOf(const RayletOptions& options) {
  ObjectManagerOptions result;
  if (options.object_transfer_streams > 0) {
    result.transfer.streams = options.object_transfer_streams;
  }
  if (options.object_chunk_bytes > 0) result.transfer.chunk_bytes = options.object_chunk_bytes;
  result.transfer.range_bytes = std::max(result.transfer.range_bytes, result.transfer.chunk_bytes);
  result.testing_serve_chunk_delay = options.testing_object_serve_chunk_delay;
  return result;
}

}  // namespace

Raylet::Raylet(RayletOptions options, const Clock* clock)
    : options_(WithDefaults(std::move(options))),
      clock_(clock != nullptr ? clock : &real_clock_),
      gcs_(options_.gcs_address, options_.token, absl::Seconds(5)),
      token_(*ClusterToken::Parse(options_.token)),
      object_store_({options_.object_store_dir, options_.spill_dir,
                     static_cast<int64_t>(options_.resources.Get(kObjectStoreMemory).ToDouble())}),
      object_puller_(token_.ToString()),
      data_tls_(LoadObjectDataTls(options_.tls_dir)),
      data_puller_(&object_puller_,
                   {token_.ToString(), data_tls_.ok() ? data_tls_->client : nullptr}),
      object_manager_(&object_store_,
                      options_.object_data_port_pulls ? static_cast<ObjectPuller*>(&data_puller_)
                                                      : &object_puller_,
                      ObjectManagerOptionsOf(options_)),
      executables_(options_.executable_cache_dir, &gcs_),
      worker_pool_(
          WorkerPoolOptionsOf(options_),
          [this](const rpc::JobInfo& job) -> absl::StatusOr<WorkerPool::Program> {
            TROUPE_ASSIGN_OR_RETURN(std::string executable, executables_.Resolve(job));
            TROUPE_ASSIGN_OR_RETURN(std::string working_dir, executables_.ResolveWorkingDir(job));
            return WorkerPool::Program{executable, working_dir};
          },
          [this](const Worker& worker, const std::string& how) {
            ReleasePinsOf(worker.worker_id);  // a reader killed mid-read holds pins forever
            if (worker.is_driver) {
              TROUPE_LOG(Info) << "driver of job " << worker.job_id.Hex() << " (pid " << worker.pid
                               << ") is gone; marking the job finished";
              (void)gcs_.MarkJobFinished(worker.job_id.Binary());
              // Reported like a worker's exit, so every raylet frees the objects it owned.
              absl::MutexLock lock(&mu_);
              unreported_exits_.emplace_back(worker.worker_id.Binary(), "exited");
              return;
            }
            TROUPE_LOG(Info) << "worker " << worker.worker_id.ShortHex() << " (pid " << worker.pid
                             << ") " << how;
            lease_manager_.OnWorkerExit(worker);
            // Actors live in workers: the GCS restarts or buries the one this worker held.
            // Sent by the report loop (retried until the GCS has it).
            absl::MutexLock lock(&mu_);
            std::string cause = how;
            if (auto reason = kill_reasons_.find(worker.worker_id); reason != kill_reasons_.end()) {
              cause = reason->second;  // e.g. the memory monitor's
              kill_reasons_.erase(reason);
            }
            unreported_exits_.emplace_back(worker.worker_id.Binary(), cause);
          },
          clock_, &processes_),
      lease_manager_(
          options_.node_id, options_.resources, &worker_pool_,
          [this](const JobId& job_id) { return LookupJob(job_id); }, clock_, options_.labels),
      log_monitor_(options_.node_id, &worker_pool_, &gcs_) {}

Raylet::~Raylet() { Shutdown(); }

std::string Raylet::address() const { return absl::StrCat(options_.node_ip, ":", bound_port_); }

absl::Status Raylet::Start() {
  if (!data_tls_.ok()) {
    return absl::Status(data_tls_.status().code(),
                        absl::StrCat("the object data port's TLS: ", data_tls_.status().message()));
  }
  ObjectDataServerOptions data;
  data.bind_address = options_.bind_address;
  data.port = options_.object_data_port;
  data.token = token_;
  data.tls = data_tls_->server;
  data.testing_send_delay = options_.testing_object_serve_chunk_delay;
  auto data_server = ObjectDataServer::Start(&object_store_, std::move(data));
  if (!data_server.ok()) return data_server.status();
  data_server_ = std::move(*data_server);
  TROUPE_LOG(Info) << "object data port " << data_server_->port()
                   << (data_tls_->server ? " (TLS)" : " (plaintext)");
  if (options_.metrics_port >= 0) {
    MetricsHttpServerOptions metrics;
    metrics.bind_address = options_.bind_address;
    metrics.port = options_.metrics_port;
    metrics.token = token_.ToString();
    if (!options_.tls_dir.empty()) {
      metrics.cert_path = NodeCertPath(options_.tls_dir);
      metrics.key_path = NodeKeyPath(options_.tls_dir);
    }
    auto metrics_server = MetricsHttpServer::Start(
        std::move(metrics), [this] { return user_metrics_.RenderPrometheus(); });
    if (!metrics_server.ok()) return metrics_server.status();
    metrics_server_ = std::move(*metrics_server);
    TROUPE_LOG(Info) << "user metrics on port " << metrics_server_->port()
                     << (metrics_server_->tls() ? " (HTTPS)" : " (HTTP)");
  }
  auto server = RayletServer::Start(options_.bind_address, options_.port, token_, this,
                                    &object_manager_, data_server_->port(), &bound_port_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  worker_pool_.set_raylet_address(address());
  return absl::OkStatus();
}

void Raylet::Shutdown() {
  lease_manager_.RejectAllPending("the raylet is shutting down");
  worker_pool_.KillAll();
  if (data_server_) data_server_->Shutdown();
  metrics_server_.reset();
  object_store_.Destroy();
  if (server_) {
    // A gRPC deadline: real time, whatever clock the raylet was given.
    server_->Shutdown(absl::Now() + absl::Seconds(1));
    server_.reset();
  }
}

// ---- NodeManagerService (called by RayletServer after the token and request checks) ----

absl::Status Raylet::HandleHealthCheck(const rpc::HealthCheckRequest&,
                                       rpc::HealthCheckReply* reply) {
  reply->set_node_id(options_.node_id.Binary());
  return absl::OkStatus();
}

absl::Status Raylet::HandleGetNodeStats(const rpc::GetNodeStatsRequest&,
                                        rpc::GetNodeStatsReply* reply) {
  {
    absl::MutexLock lock(&mu_);
    *reply->mutable_node() = NodeInfoLocked();
  }
  reply->mutable_usage()->set_node_id(options_.node_id.Binary());
  MapFromResources(options_.resources, reply->mutable_usage()->mutable_total());
  MapFromResources(lease_manager_.Available(), reply->mutable_usage()->mutable_available());
  reply->set_num_workers(worker_pool_.num_workers());
  reply->set_num_leased_workers(lease_manager_.num_leased());
  reply->set_num_pending_leases(lease_manager_.num_pending());
  ObjectStoreStats stats = object_store_.Stats();
  auto* store = reply->mutable_object_store();
  store->set_capacity_bytes(stats.capacity_bytes);
  store->set_used_bytes(stats.used_bytes);
  store->set_spilled_bytes(stats.spilled_bytes);
  store->set_num_objects(stats.num_objects);
  store->set_num_spilled_total(stats.num_spilled_total);
  store->set_num_restored_total(stats.num_restored_total);
  store->set_num_evicted_total(stats.num_evicted_total);
  return absl::OkStatus();
}

absl::Status Raylet::HandleReportUserMetrics(const rpc::ReportUserMetricsRequest& request,
                                             rpc::ReportUserMetricsReply*) {
  absl::Status applied = user_metrics_.Apply(request);
  if (!applied.ok()) {
    absl::MutexLock lock(&metrics_log_mu_);
    if (applied.message() != last_metrics_problem_) {
      last_metrics_problem_ = std::string(applied.message());
      TROUPE_LOG(Warning) << "user metrics from worker "
                          << WorkerId::FromBinary(request.worker_id())->Hex() << ": "
                          << applied.message();
    }
  }
  return absl::OkStatus();
}

absl::Status Raylet::HandleRegisterWorker(const rpc::RegisterWorkerRequest& request,
                                          rpc::RegisterWorkerReply* reply) {
  auto worker_id = WorkerId::FromBinary(request.worker_id());
  auto job_id = JobId::FromBinary(request.job_id());
  if (!worker_id.ok()) return worker_id.status();
  if (!job_id.ok()) return job_id.status();
  TROUPE_RETURN_IF_ERROR(worker_pool_.RegisterWorker(*worker_id, request.pid(), request.port(),
                                                     *job_id, request.is_driver()));
  reply->set_node_id(options_.node_id.Binary());
  reply->set_object_store_dir(object_store_.shm_dir());
  return absl::OkStatus();
}

absl::Status Raylet::HandleNotifyBlocked(const rpc::NotifyBlockedRequest& request,
                                         rpc::NotifyBlockedReply*) {
  auto worker_id = WorkerId::FromBinary(request.worker_id());
  if (!worker_id.ok()) return worker_id.status();
  lease_manager_.NotifyBlocked(*worker_id, request.blocked());
  return absl::OkStatus();
}

void Raylet::HandleRequestWorkerLease(const rpc::RequestWorkerLeaseRequest& request,
                                      std::function<bool()> caller_gone,
                                      std::function<void(rpc::RequestWorkerLeaseReply)> done) {
  lease_manager_.RequestLease(request,
                              [this, caller_gone = std::move(caller_gone),
                               done = std::move(done)](rpc::RequestWorkerLeaseReply result) {
                                if (caller_gone() && !result.lease_id().empty()) {
                                  // The caller gave up waiting: nobody will use or return this
                                  // lease.
                                  (void)lease_manager_.ReturnWorker(result.lease_id(), false);
                                }
                                done(std::move(result));
                              });
}

absl::Status Raylet::HandleReturnWorker(const rpc::ReturnWorkerRequest& request,
                                        rpc::ReturnWorkerReply*) {
  if (request.reservation_ids_size() == 0) {
    return lease_manager_.ReturnWorker(request.lease_id(), request.disconnect_worker());
  }
  // A batch of bundle reservations from the GCS: an unknown one (already returned, or never
  // granted) is remembered and refused later, which is all the GCS needs, so the batch is OK.
  for (const auto& id : request.reservation_ids()) {
    (void)lease_manager_.ReturnWorker(id, /*disconnect_worker=*/false);
  }
  return absl::OkStatus();
}

absl::Status Raylet::HandleKillLeasedWorker(const rpc::KillLeasedWorkerRequest& request,
                                            rpc::KillLeasedWorkerReply*) {
  return lease_manager_.KillLeasedWorker(request.lease_id());
}

absl::Status Raylet::HandleCreateObject(const rpc::CreateObjectRequest& request,
                                        rpc::CreateObjectReply* reply) {
  auto id = ObjectId::FromBinary(request.object_id());
  if (!id.ok()) return id.status();
  ObjectOwner owner;  // both optional, and checked by the request validation
  if (!request.owner_worker_id().empty())
    owner.worker_id = *WorkerId::FromBinary(request.owner_worker_id());
  if (!request.owner_node_id().empty())
    owner.node_id = *NodeId::FromBinary(request.owner_node_id());
  auto path = object_store_.Create(*id, request.size(), request.primary(), owner);
  if (!path.ok()) return path.status();
  reply->set_path(*path);
  return absl::OkStatus();
}

absl::Status Raylet::HandleSealObject(const rpc::SealObjectRequest& request,
                                      rpc::SealObjectReply*) {
  auto id = ObjectId::FromBinary(request.object_id());
  if (!id.ok()) return id.status();
  return object_store_.Seal(*id);
}

namespace {
// The reader a GetObjects/ReleaseObjects request names (nil when it names none).
absl::StatusOr<WorkerId> ReaderOf(const std::string& worker_id) {
  if (worker_id.empty()) return WorkerId::Nil();
  return WorkerId::FromBinary(worker_id);
}
}  // namespace

absl::Status Raylet::HandleGetObjects(const rpc::GetObjectsRequest& request,
                                      rpc::GetObjectsReply* reply) {
  absl::StatusOr<WorkerId> reader = ReaderOf(request.worker_id());
  if (!reader.ok()) return reader.status();
  std::vector<ObjectId> pinned;
  for (const auto& binary : request.object_ids()) {
    rpc::LocalObject* out = reply->add_objects();
    out->set_object_id(binary);
    auto id = ObjectId::FromBinary(binary);
    if (!id.ok()) return id.status();
    auto location = object_store_.Get(*id);
    if (location.ok()) {
      out->set_found(true);
      out->set_path(location->path);
      out->set_size(location->size);
      pinned.push_back(*id);
    } else if (location.status().code() != absl::StatusCode::kNotFound) {
      return location.status();
    }
  }
  if (!reader->IsNil() && !pinned.empty()) {
    absl::MutexLock lock(&mu_);
    auto& held = pins_by_reader_[*reader];
    for (const ObjectId& id : pinned) ++held[id];
  }
  return absl::OkStatus();
}

void Raylet::ReleasePinsOf(const WorkerId& reader) {
  absl::flat_hash_map<ObjectId, int> pins;
  {
    absl::MutexLock lock(&mu_);
    auto it = pins_by_reader_.find(reader);
    if (it == pins_by_reader_.end()) return;
    pins = std::move(it->second);
    pins_by_reader_.erase(it);
  }
  for (const auto& [id, count] : pins) {
    for (int i = 0; i < count; ++i) object_store_.Release(id);
  }
}

absl::Status Raylet::HandleReleaseObjects(const rpc::ReleaseObjectsRequest& request,
                                          rpc::ReleaseObjectsReply*) {
  absl::StatusOr<WorkerId> reader = ReaderOf(request.worker_id());
  if (!reader.ok()) return reader.status();
  for (const auto& binary : request.object_ids()) {
    auto id = ObjectId::FromBinary(binary);
    if (!id.ok()) continue;
    if (!reader->IsNil()) {
      // Only what this reader still holds here: after its death released its pins (or for
      // a pin it never took) there is nothing to release.
      absl::MutexLock lock(&mu_);
      auto held = pins_by_reader_.find(*reader);
      if (held == pins_by_reader_.end()) continue;
      auto pin = held->second.find(*id);
      if (pin == held->second.end()) continue;
      if (--pin->second == 0) held->second.erase(pin);
      if (held->second.empty()) pins_by_reader_.erase(held);
    }
    object_store_.Release(*id);
  }
  return absl::OkStatus();
}

void Raylet::HandleFetchObject(const rpc::FetchObjectRequest& request,
                               std::function<void(absl::Status)> done) {
  auto id = ObjectId::FromBinary(request.object_id());
  if (!id.ok()) return done(id.status());
  // A transfer can take seconds: run it off gRPC's callback threads.
  std::vector<std::string> sources{request.from_raylet_address()};
  sources.insert(sources.end(), request.other_raylet_addresses().begin(),
                 request.other_raylet_addresses().end());
  std::thread([this, id = *id, sources = std::move(sources), done = std::move(done)] {
    done(object_manager_.Fetch(id, sources));
  }).detach();
}

rpc::NodeInfo Raylet::NodeInfoLocked() const {
  rpc::NodeInfo node;
  node.set_node_id(options_.node_id.Binary());
  node.set_node_ip(options_.node_ip);
  node.set_raylet_port(bound_port_);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  node.set_hostname(hostname);
  MapFromResources(options_.resources, node.mutable_resources_total());
  for (const auto& [key, value] : options_.labels) (*node.mutable_labels())[key] = value;
  node.set_is_head(options_.is_head);
  node.set_raylet_pid(getpid());
  if (metrics_server_) {
    node.set_metrics_port(metrics_server_->port());
    node.set_metrics_tls(metrics_server_->tls());
  }
  return node;
}

absl::StatusOr<rpc::JobInfo> Raylet::LookupJob(const JobId& job_id) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = jobs_.find(job_id); it != jobs_.end()) return it->second;
  }
  auto jobs = gcs_.GetAllJobInfo();
  if (!jobs.ok()) return jobs.status();
  absl::MutexLock lock(&mu_);
  for (const auto& job : *jobs) {
    if (job.job_id() == job_id.Binary()) {
      if (job.state() == rpc::JobInfo::FINISHED) {
        return absl::FailedPreconditionError(absl::StrCat("job ", job_id.Hex(), " has finished"));
      }
      jobs_[job_id] = job;
      return job;
    }
  }
  return absl::NotFoundError(absl::StrCat("the GCS does not know job ", job_id.Hex()));
}

void Raylet::ResyncJobsAndNodes() {
  // Worker exits missed meanwhile cannot be re-read (the GCS keeps no worker table); their
  // objects here are freed when their owners' nodes die or their jobs end.
  if (auto nodes = gcs_.GetAllNodeInfo(); nodes.ok()) {
    for (const auto& node : *nodes) {
      auto node_id = NodeId::FromBinary(node.node_id());
      if (!node_id.ok() || node.state() != rpc::NodeInfo::DEAD) continue;
      lease_manager_.MarkNodeDead(*node_id);
      if (*node_id != options_.node_id) object_store_.FreeOwnedByNode(*node_id);
    }
  }
  auto jobs = gcs_.GetAllJobInfo();
  if (!jobs.ok()) return;
  std::vector<JobId> finished;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& job : *jobs) {
      auto job_id = JobId::FromBinary(job.job_id());
      if (!job_id.ok() || job.state() != rpc::JobInfo::FINISHED || !jobs_.contains(*job_id)) {
        continue;
      }
      jobs_.erase(*job_id);
      finished.push_back(*job_id);
    }
  }
  for (const auto& job_id : finished) worker_pool_.StopJobWorkers(job_id);
}

void Raylet::FollowJobs() {
  int64_t cursor = -1;
  while (!stop_.HasBeenNotified()) {
    rpc::PollRequest poll;
    poll.set_after_seq(cursor);
    poll.add_channels(rpc::JOB_CHANNEL);
    poll.add_channels(rpc::NODE_CHANNEL);
    poll.add_channels(rpc::WORKER_CHANNEL);
    poll.set_timeout_ms(cursor < 0 ? 0 : 1000);
    auto reply = gcs_.Poll(poll);
    if (!reply.ok()) {
      stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
      continue;
    }
    cursor = reply->last_seq();
    if (reply->messages_lost()) ResyncJobsAndNodes();
    for (const auto& message : reply->messages()) {
      if (message.channel() == rpc::NODE_CHANNEL) {
        auto node_id = NodeId::FromBinary(message.node().node_id());
        if (node_id.ok() && message.node().state() == rpc::NodeInfo::DEAD) {
          if (*node_id == options_.node_id) {
            OnDeclaredDead(message.node().death_reason());
            return;
          }
          lease_manager_.MarkNodeDead(*node_id);
          // Every owner on that node died with it.
          if (*node_id != options_.node_id) object_store_.FreeOwnedByNode(*node_id);
        }
        continue;
      }
      if (message.channel() == rpc::WORKER_CHANNEL) {
        // An owner exited or died: its objects here (primary, secondary, spilled) go too.
        auto worker_id = WorkerId::FromBinary(message.worker_exit().worker_id());
        if (!worker_id.ok()) continue;
        if (int64_t freed = object_store_.FreeOwnedBy(*worker_id); freed > 0) {
          TROUPE_LOG(Info) << "freed " << freed << " objects of worker " << worker_id->ShortHex()
                           << ", which " << message.worker_exit().how();
        }
        continue;
      }
      if (message.job().state() != rpc::JobInfo::FINISHED) continue;
      auto job_id = JobId::FromBinary(message.job().job_id());
      if (!job_id.ok()) continue;
      {
        absl::MutexLock lock(&mu_);
        jobs_.erase(*job_id);
      }
      worker_pool_.StopJobWorkers(*job_id);
    }
  }
}

absl::Status Raylet::RegisterWithRetry(bool re_register) {
  const absl::Time start = clock_->Now();
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
    if (clock_->Now() - start > options_.gcs_reconnect_timeout) {
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
  absl::Status status = RegisterWithRetry(/*re_register=*/false);
  if (status.ok()) {
    job_follower_ = std::thread([this] { FollowJobs(); });
    log_thread_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) log_monitor_.Tick();
      log_monitor_.Tick();  // what the workers wrote last
    });
    status = ReportLoop();
  }
  {
    absl::MutexLock lock(&mu_);  // RequestStop and OnDeclaredDead notify under it too
    if (!stop_.HasBeenNotified()) stop_.Notify();
  }
  if (job_follower_.joinable()) job_follower_.join();
  if (log_thread_.joinable()) log_thread_.join();
  Shutdown();
  return status;
}

absl::Status Raylet::ReportLoop() {
  absl::Time last_contact = clock_->Now();
  bool connected = true;
  std::optional<CpuTimes> cpu_times;  // the machine's CPU counters at cpu_read_at
  absl::Time cpu_read_at = absl::InfinitePast();
  double cpu_percent = 0;
  // While the GCS is away, report every 50 ms: a GCS restarted under Redis then sees this node
  // (and its resources, which the actor and lease scheduling wait for) within ~50 ms of listening.
  constexpr absl::Duration kReconnectPeriod = absl::Milliseconds(50);
  while (!stop_.WaitForNotificationWithTimeout(
      connected ? options_.report_period : std::min(options_.report_period, kReconnectPeriod))) {
    CheckMemory();
    worker_pool_.Tick();
    std::vector<std::pair<std::string, std::string>> exits;
    {
      absl::MutexLock lock(&mu_);
      exits.swap(unreported_exits_);
    }
    for (size_t i = 0; i < exits.size(); ++i) {
      absl::Status reported =
          gcs_.ReportWorkerExit(exits[i].first, options_.node_id.Binary(), exits[i].second);
      if (reported.code() == absl::StatusCode::kUnavailable ||
          reported.code() == absl::StatusCode::kDeadlineExceeded) {
        absl::MutexLock lock(&mu_);  // keep the rest for the next round
        unreported_exits_.insert(unreported_exits_.begin(), exits.begin() + i, exits.end());
        break;
      }
      if (!reported.ok()) {  // refused: sending it again would be refused again
        TROUPE_LOG(Warning) << "the GCS refused the exit report of worker "
                            << BytesToHex(exits[i].first).substr(0, 8) << ": "
                            << reported.message();
      }
    }
    rpc::ResourceUsage usage;
    usage.set_node_id(options_.node_id.Binary());
    MapFromResources(options_.resources, usage.mutable_total());
    MapFromResources(lease_manager_.Available(), usage.mutable_available());
    const ObjectStoreStats store = object_store_.Stats();
    usage.set_object_store_used_bytes(store.used_bytes);
    usage.set_object_store_spilled_bytes(store.spilled_bytes);
    usage.set_object_store_num_objects(store.num_objects);
    // The machine's CPU use over the last second or more (a report period is too short a
    // window: 100 ms is 10 jiffies).
    if (clock_->Now() - cpu_read_at >= absl::Seconds(1)) {
      if (auto cpu = ReadCpuTimes()) {
        if (cpu_times) cpu_percent = CpuPercent(*cpu_times, *cpu);
        cpu_times = cpu;
        cpu_read_at = clock_->Now();
      }
    }
    usage.set_cpu_percent(cpu_percent);
    if (auto memory = ReadMemoryUse()) {
      usage.set_memory_used_bytes(memory->used_bytes);
      usage.set_memory_total_bytes(memory->total_bytes);
    }
    for (const auto& demand : lease_manager_.InfeasibleDemands())
      usage.add_infeasible_demands(demand);
    {
      absl::MutexLock lock(&mu_);
      usage.set_report_seq(++report_seq_);
    }
    auto cluster = gcs_.ReportResourceUsage(usage, cluster_view_.version());
    if (cluster.ok()) {
      if (!connected) TROUPE_LOG(Info) << "reconnected to the GCS at " << options_.gcs_address;
      connected = true;
      last_contact = clock_->Now();
      cluster_view_.Apply(*cluster);
      lease_manager_.UpdateClusterView(cluster_view_.Nodes());
      continue;
    }
    const absl::Status& status = cluster.status();
    if (status.code() == absl::StatusCode::kFailedPrecondition) {
      OnDeclaredDead(std::string(status.message()));
      break;
    }
    if (status.code() == absl::StatusCode::kNotFound) {
      TROUPE_LOG(Warning) << "the GCS no longer knows this node (it restarted?); registering again";
      TROUPE_RETURN_IF_ERROR(RegisterWithRetry(/*re_register=*/true));
      cluster_view_ = ClusterView();  // the next reply brings the whole view again
      connected = true;
      last_contact = clock_->Now();
      continue;
    }
    if (IsFatal(status)) return status;
    if (connected) {
      TROUPE_LOG(Warning) << "lost contact with the GCS: " << status.message()
                          << "; retrying for up to "
                          << absl::FormatDuration(options_.gcs_reconnect_timeout);
      connected = false;
    }
    if (clock_->Now() - last_contact > options_.gcs_reconnect_timeout) {
      return absl::UnavailableError(
          absl::StrCat("the head (GCS at ", options_.gcs_address, ") has been unreachable for ",
                       absl::FormatDuration(options_.gcs_reconnect_timeout),
                       "; last error: ", status.message()));
    }
  }
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    if (declared_dead_.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the GCS declared node ", options_.node_id.Hex(), " dead (", *declared_dead_,
                       "); its workers were killed and its work was re-placed. Start the node "
                       "again (`troupe start --address=...`) to rejoin as a new node"));
    }
    reason = stop_reason_;
  }
  if (auto status = gcs_.UnregisterNode(options_.node_id.Binary(), reason); !status.ok()) {
    TROUPE_LOG(Warning) << "could not unregister from the GCS: " << status.message();
  } else {
    TROUPE_LOG(Info) << "unregistered from the GCS: " << reason;
  }
  return absl::OkStatus();
}

std::optional<double> Raylet::ReadMemoryUsage() const {
  if (!options_.testing_memory_usage_file.empty()) {
    std::ifstream file(options_.testing_memory_usage_file);
    double usage = 0;
    if (!(file >> usage)) return std::nullopt;  // not written yet, or not a number: no reading
    return usage;
  }
  std::ifstream meminfo("/proc/meminfo");
  double total = 0, available = 0;
  for (std::string key; meminfo >> key;) {
    double kb = 0;
    meminfo >> kb;
    if (key == "MemTotal:") total = kb;
    if (key == "MemAvailable:") available = kb;
    meminfo.ignore(64, '\n');
  }
  if (total <= 0) return std::nullopt;
  return 1 - available / total;
}

void Raylet::CheckMemory() {
  if (options_.memory_usage_threshold >= 1) return;
  const std::optional<double> reading = ReadMemoryUsage();
  if (!reading.has_value()) return;
  const double usage = *reading;
  if (usage <= options_.memory_usage_threshold) return;
  std::shared_ptr<Worker> victim;
  {
    absl::MutexLock lock(&mu_);
    if (clock_->Now() - last_memory_kill_ < absl::Seconds(1)) return;
    victim = lease_manager_.NewestLeasedWorker();
    if (!victim) return;
    last_memory_kill_ = clock_->Now();
    kill_reasons_[victim->worker_id] = absl::StrFormat(
        "was killed because its node ran out of memory (%.0f%% in use, over the %.0f%% "
        "threshold; the newest worker goes first)",
        usage * 100, options_.memory_usage_threshold * 100);
  }
  // Before the kill, so the task's submitter finds it as soon as its push fails.
  (void)gcs_.KVPut(
      kWorkerKillsNamespace, victim->address,
      absl::StrFormat("node %s ran out of memory (%.0f%% in use, over the %.0f%% "
                      "threshold) and its memory monitor killed the worker",
                      options_.node_id.Hex(), usage * 100, options_.memory_usage_threshold * 100),
      /*overwrite=*/true);
  TROUPE_LOG(Warning) << "node memory at " << usage * 100 << "%: killing worker "
                      << victim->worker_id.ShortHex() << " (pid " << victim->pid << ")";
  worker_pool_.KillWorker(victim->worker_id);
}

void Raylet::OnDeclaredDead(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (declared_dead_.has_value()) return;
    if (stop_.HasBeenNotified()) {
      // This raylet is stopping and unregistered itself (a node's `troupe stop`, an embedded
      // cluster's shutdown): the GCS only answers that; its workers are stopped by Shutdown.
      TROUPE_LOG(Debug) << "the GCS marked this node dead after it unregistered: " << why;
      return;
    }
    declared_dead_ = why;
    stop_reason_ = "declared dead";
  }
  TROUPE_LOG(Error) << "the GCS declared this node (" << options_.node_id.Hex() << ") dead: " << why
                    << ". Killing its workers and exiting: their tasks and actors were re-placed "
                       "and their results would be refused. Start the node again to rejoin.";
  lease_manager_.RejectAllPending("this node was declared dead by the GCS");
  worker_pool_.KillAll();
  absl::MutexLock lock(&mu_);
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

void Raylet::RequestStop(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (stop_.HasBeenNotified()) return;
  stop_reason_ = reason;
  stop_.Notify();
}

}  // namespace troupe
