// Init/Shutdown and the Runtime behind the API templates: a CoreWorker in this process, and, when
// no cluster address is given, an embedded cluster (GCS + raylet on background threads).
// In worker mode (a raylet started this executable) Init runs tasks and never returns.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "src/common/cluster_target.h"
#include "src/common/logging.h"
#include "src/common/package.h"
#include "src/common/session.h"
#include "src/common/sha256.h"
#include "src/core_worker/core_worker.h"
#include "src/gcs/gcs_server.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/raylet/executable_cache.h"
#include "src/raylet/node_resources.h"
#include "src/raylet/raylet.h"
#include "src/rpc/gcs_client.h"
#include "troupe/api.h"

namespace troupe {
namespace internal {
std::string DemangledTypeName(const std::type_info& type);
}  // namespace internal

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

[[noreturn]] void ThrowFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      throw ObjectStoreFullError(std::string(status.message()));
    case absl::StatusCode::kDeadlineExceeded:
      throw GetTimeoutError(std::string(status.message()));
    default:
      throw TroupeError(std::string(status.message()));
  }
}

[[noreturn]] void ThrowFor(const GetResult& result) {
  switch (result.error) {
    case StoredObject::Error::kApplication: {
      const rpc::ReturnObject& detail = result.error_detail;
      throw TaskError(detail.function_name(), detail.exception_type(), detail.error_message(),
                      BytesToHex(detail.node_id()), detail.pid());
    }
    case StoredObject::Error::kCancelled:
      throw TaskCancelledError(result.error_message);
    case StoredObject::Error::kLost:
      throw ObjectLostError(result.error_message);
    case StoredObject::Error::kActorDied:
      throw ActorDiedError(result.error_message);
    default:
      throw TaskFailedError(result.error_message);
  }
}

ObjectRefInfo ToCore(const internal::RefInfo& ref) {
  auto id = ObjectId::FromBinary(ref.object_id);
  if (!id.ok()) throw TroupeError("not an ObjectRef: " + std::string(id.status().message()));
  return {*id, ref.owner_address};
}

internal::RefInfo ToApi(const ObjectRefInfo& ref) { return {ref.id.Binary(), ref.owner_address}; }

absl::Time DeadlineOf(int64_t timeout_ms) {
  return timeout_ms < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(timeout_ms);
}

// The API's Runtime over this process's CoreWorker: converts Status to typed exceptions.
class CoreWorkerRuntime : public internal::Runtime {
 public:
  explicit CoreWorkerRuntime(CoreWorker* core) : core_(core) {}

  internal::RefInfo SubmitTask(const std::string& function_name,
                               std::vector<internal::TaskArgument> args,
                               const internal::TaskOptions& options) override {
    std::vector<TaskArgSpec> specs = ToArgSpecs(std::move(args));
    TaskSubmitOptions submit;
    submit.name = options.name;
    submit.resources = options.resources;
    submit.max_retries = options.max_retries;
    submit.retry_exceptions = options.retry_exceptions;
    submit.strategy = ToStrategy(options.strategy);
    submit.placement_group_id = options.placement_group_id;
    submit.bundle_index = options.bundle_index;
    return ToApi(core_->SubmitTask(function_name, std::move(specs), submit));
  }

  std::string CreatePlacementGroup(const internal::PlacementGroupSpec& spec) override {
    rpc::PlacementGroupInfo group;
    group.set_name(spec.name);
    group.set_strategy(static_cast<rpc::PlacementGroupInfo::Strategy>(spec.strategy));
    for (const auto& bundle : spec.bundles) {
      rpc::Bundle* out = group.add_bundles();
      for (const auto& [name, amount] : bundle) (*out->mutable_resources())[name] = amount;
    }
    auto id = core_->CreatePlacementGroup(std::move(group));
    if (!id.ok()) ThrowFor(id.status());
    return id->Binary();
  }
  void RemovePlacementGroup(const std::string& id) override {
    auto group = PlacementGroupId::FromBinary(id);
    if (!group.ok()) throw TroupeError("not a placement group");
    if (auto status = core_->RemovePlacementGroup(*group); !status.ok()) ThrowFor(status);
  }
  bool WaitPlacementGroup(const std::string& id, int64_t timeout_ms) override {
    auto group = PlacementGroupId::FromBinary(id);
    if (!group.ok()) throw TroupeError("not a placement group");
    auto placed = core_->WaitPlacementGroup(*group, DeadlineOf(timeout_ms));
    if (!placed.ok()) ThrowFor(placed.status());
    return *placed;
  }
  std::string GetPlacementGroup(const std::string& name) override {
    auto id = core_->GetPlacementGroup(name);
    if (!id.ok()) ThrowFor(id.status());
    return id->has_value() ? (*id)->Binary() : "";
  }

  std::string CreateActor(const std::string& factory_name, std::vector<internal::TaskArgument> args,
                          const internal::ActorOptions& options) override {
    TaskSubmitOptions submit;
    submit.resources = options.resources;
    submit.strategy = ToStrategy(options.strategy);
    rpc::ActorInfo info;
    info.set_name(options.name);
    info.set_namespace_name(options.namespace_name);
    info.set_max_restarts(options.max_restarts);
    info.set_max_task_retries(options.max_task_retries);
    info.set_max_concurrency(options.max_concurrency);
    info.set_detached(options.detached);
    info.set_placement_group_id(options.placement_group_id);
    info.set_bundle_index(options.bundle_index);
    auto id = core_->CreateActor(factory_name, ToArgSpecs(std::move(args)), submit, info);
    if (!id.ok()) ThrowFor(id.status());
    return id->Binary();
  }

  internal::RefInfo SubmitActorTask(const std::string& actor_id, const std::string& method_name,
                                    std::vector<internal::TaskArgument> args) override {
    auto id = ActorId::FromBinary(actor_id);
    if (!id.ok()) throw TroupeError("not an actor handle: " + std::string(id.status().message()));
    return ToApi(core_->SubmitActorTask(*id, method_name, ToArgSpecs(std::move(args))));
  }

  void KillActor(const std::string& actor_id, bool no_restart) override {
    auto id = ActorId::FromBinary(actor_id);
    if (!id.ok()) throw TroupeError("not an actor handle");
    if (auto status = core_->KillActor(*id, no_restart); !status.ok()) ThrowFor(status);
  }

  std::string GetNamedActor(const std::string& name, const std::string& ns) override {
    auto id = core_->GetNamedActor(name, ns);
    if (!id.ok()) ThrowFor(id.status());
    return id->has_value() ? (*id)->Binary() : "";
  }

  void ExitActor() override { core_->ExitActorAfterCurrentTask(); }
  bool WasCurrentActorRestarted() override;

  std::optional<std::string> KvGet(const std::string& ns, const std::string& key) override {
    auto value = core_->gcs().KVGet(ns, key);
    if (!value.ok()) ThrowFor(value.status());
    return *value;
  }
  bool KvPut(const std::string& ns, const std::string& key, const std::string& value,
             bool overwrite) override {
    auto added = core_->gcs().KVPut(ns, key, value, overwrite);
    if (!added.ok()) ThrowFor(added.status());
    return *added;
  }
  int64_t KvDelete(const std::string& ns, const std::string& key, bool by_prefix) override {
    auto deleted = core_->gcs().KVDel(ns, key, by_prefix);
    if (!deleted.ok()) ThrowFor(deleted.status());
    return *deleted;
  }
  std::string JobNamespace() override { return JobKvNamespace(core_->job_id()); }
  std::string CurrentActorId() override {
    const ActorId& id = core_->current_actor_id();
    return id.IsNil() ? "" : id.Binary();
  }
  std::string NodeIp() override { return core_->node_ip(); }

 private:
  static rpc::SchedulingStrategy ToStrategy(const internal::SchedulingStrategy& strategy) {
    rpc::SchedulingStrategy out;
    switch (strategy.kind) {
      case internal::SchedulingStrategy::Kind::kDefault:
        break;
      case internal::SchedulingStrategy::Kind::kSpread:
        out.set_kind(rpc::SchedulingStrategy::SPREAD);
        break;
      case internal::SchedulingStrategy::Kind::kNodeAffinity: {
        auto node = NodeId::FromHex(strategy.node_id_hex);
        if (!node.ok()) throw TroupeError("NodeAffinity: " + std::string(node.status().message()));
        out.set_kind(rpc::SchedulingStrategy::NODE_AFFINITY);
        out.set_node_id(node->Binary());
        out.set_soft(strategy.soft);
        break;
      }
    }
    return out;
  }
  static std::vector<TaskArgSpec> ToArgSpecs(std::vector<internal::TaskArgument> args) {
    std::vector<TaskArgSpec> specs;
    specs.reserve(args.size());
    for (auto& arg : args) {
      TaskArgSpec spec;
      spec.by_reference = arg.by_reference;
      if (arg.by_reference) {
        spec.ref = ToCore(arg.ref);
      } else {
        spec.value = std::move(arg.value);
      }
      for (const auto& inner : arg.contained) spec.contained.push_back(ToCore(inner));
      specs.push_back(std::move(spec));
    }
    return specs;
  }

 public:
  internal::RefInfo Put(size_t size, const std::function<void(char*)>& write,
                        std::vector<internal::RefInfo> contained) override {
    std::vector<ObjectRefInfo> inner;
    for (const auto& ref : contained) inner.push_back(ToCore(ref));
    auto ref = core_->Put(size, write, std::move(inner));
    if (!ref.ok()) ThrowFor(ref.status());
    return ToApi(*ref);
  }

  std::vector<internal::Buffer> Get(const std::vector<internal::RefInfo>& refs,
                                    int64_t timeout_ms) override {
    std::vector<ObjectRefInfo> core_refs;
    core_refs.reserve(refs.size());
    for (const auto& ref : refs) core_refs.push_back(ToCore(ref));
    auto results = core_->Get(core_refs, DeadlineOf(timeout_ms));
    if (!results.ok()) ThrowFor(results.status());
    std::vector<internal::Buffer> buffers;
    buffers.reserve(results->size());
    for (auto& result : *results) {
      if (result.error != StoredObject::Error::kNone) ThrowFor(result);
      buffers.push_back({result.buffer.data, result.buffer.size, std::move(result.buffer.holder)});
    }
    return buffers;
  }

  std::vector<bool> Wait(const std::vector<internal::RefInfo>& refs, int num_ready,
                         int64_t timeout_ms) override {
    std::vector<ObjectRefInfo> core_refs;
    for (const auto& ref : refs) core_refs.push_back(ToCore(ref));
    return core_->Wait(core_refs, num_ready, DeadlineOf(timeout_ms));
  }

  void Cancel(const internal::RefInfo& ref, bool force) override {
    core_->Cancel(ToCore(ref), force);
  }
  void AddLocalRef(const internal::RefInfo& ref) override { core_->AddLocalRef(ToCore(ref)); }
  void RemoveLocalRef(const std::string& object_id) override {
    if (auto id = ObjectId::FromBinary(object_id); id.ok()) core_->RemoveLocalRef(*id);
  }

 private:
  CoreWorker* core_;
};

// Worker mode: the actor this process holds (if any), created by its creation task.
std::shared_ptr<void> actor_instance;
bool actor_restarted = false;

// Runs the function, actor factory or actor method a task names; throws what it throws.
std::shared_ptr<internal::InvokeResult> Invoke(const rpc::TaskSpec& spec,
                                               const std::vector<internal::Buffer>& args) {
  const auto& registry = internal::FunctionRegistry::Instance();
  const std::string& name = spec.function_name();
  switch (spec.type()) {
    case rpc::TaskSpec::ACTOR_CREATION_TASK: {
      const auto* creator = registry.FindCreator(name);
      if (creator == nullptr)
        throw TroupeError("actor factory " + name + " is not registered (TROUPE_REMOTE)");
      actor_restarted = spec.actor_num_restarts() > 0;
      actor_instance = (*creator)(args);
      auto result = std::make_shared<internal::InvokeResult>();
      result->value = internal::Serialize(msgpack::type::nil_t());
      return result;
    }
    case rpc::TaskSpec::ACTOR_TASK: {
      const auto* method = registry.FindMethod(name);
      if (method == nullptr)
        throw TroupeError("actor method " + name + " is not registered (TROUPE_REMOTE)");
      if (!actor_instance) throw TroupeError("this worker holds no actor");
      return std::make_shared<internal::InvokeResult>((*method)(actor_instance.get(), args));
    }
    default: {
      const auto* invoker = registry.FindFunction(name);
      if (invoker == nullptr) {
        throw TroupeError("function " + name +
                          " is not registered in this executable (TROUPE_REMOTE)");
      }
      return std::make_shared<internal::InvokeResult>((*invoker)(args));
    }
  }
}

// Runs a pushed task (worker mode) and reports its result or the exception it threw.
TaskOutcome ExecuteRegistered(const rpc::TaskSpec& spec, const std::vector<ObjectBuffer>& args) {
  std::vector<internal::Buffer> buffers;
  buffers.reserve(args.size());
  for (const auto& arg : args) buffers.push_back({arg.data, arg.size, arg.holder});
  TaskOutcome outcome;
  try {
    std::shared_ptr<internal::InvokeResult> result = Invoke(spec, buffers);
    outcome.size = result->value.size();
    outcome.write = [result](char* out) { result->value.CopyTo(out); };
    outcome.keep_alive = result;
    // References inside the result stay alive with this worker (see docs/api.md).
    for (const auto& inner : result->value.contained_refs) {
      internal::CurrentRuntime()->AddLocalRef(inner);
    }
  } catch (const std::exception& e) {
    outcome.threw = true;
    outcome.exception_type = internal::DemangledTypeName(typeid(e));
    outcome.exception_message = e.what();
  } catch (...) {
    outcome.threw = true;
    outcome.exception_type = "unknown exception";
    outcome.exception_message = "a non-std::exception was thrown";
  }
  return outcome;
}

std::vector<std::string> SelfArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  std::vector<std::string> args;
  for (size_t start = 0, end; start < all.size(); start = end + 1) {
    end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
  }
  return args;
}

std::string SelfExecutable() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  path[n] = '\0';
  return path;
}

// Everything Init created, destroyed by Shutdown in reverse order.
struct ProcessRuntime {
  std::vector<std::string> argv;
  std::unique_ptr<GcsServer> embedded_gcs;
  std::unique_ptr<Raylet> embedded_raylet;
  std::thread raylet_thread;
  std::unique_ptr<GcsClient> gcs;
  std::unique_ptr<CoreWorker> core;
  std::unique_ptr<CoreWorkerRuntime> runtime;
  JobId job_id;
  std::string token;
  absl::Notification stop_logs;
  std::thread log_printer;
};

// Prints this job's worker output as the raylets publish it, prefixed like Ray does.
void PrintWorkerLogs(GcsClient* gcs, JobId job_id, absl::Notification* stop) {
  int64_t cursor = -1;
  while (true) {
    const bool stopping = stop->HasBeenNotified();
    rpc::PollRequest poll;
    poll.add_channels(rpc::LOG_CHANNEL);
    poll.set_after_seq(cursor);
    poll.set_timeout_ms(cursor < 0 || stopping ? 0 : 200);
    auto reply = gcs->Poll(poll);
    if (reply.ok()) {
      cursor = reply->last_seq();
      for (const auto& message : reply->messages()) {
        const rpc::LogBatch& batch = message.log();
        if (batch.job_id() != job_id.Binary()) continue;
        const std::string prefix = absl::StrCat(
            "(pid=", batch.pid(), ", node=", BytesToHex(batch.node_id()).substr(0, 8), ") ");
        std::string text;
        for (const auto& line : batch.lines()) absl::StrAppend(&text, prefix, line, "\n");
        fwrite(text.data(), 1, text.size(), stdout);
      }
      fflush(stdout);
    }
    if (stopping) return;
    if (!reply.ok()) stop->WaitForNotificationWithTimeout(absl::Milliseconds(500));
  }
}

absl::Mutex process_mu;
ProcessRuntime* process ABSL_GUARDED_BY(process_mu) = nullptr;
std::vector<std::string>* saved_argv = nullptr;

[[noreturn]] void RunWorker() {
  // Output goes to the worker's log file; line buffering lets the driver show it promptly.
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CoreWorkerOptions options;
  options.is_driver = false;
  options.raylet_address = Env("TROUPE_RAYLET_ADDRESS");
  options.gcs_address = Env("TROUPE_GCS_ADDRESS");
  options.token = Env("TROUPE_TOKEN");
  options.node_ip = Env("TROUPE_NODE_IP").empty() ? "127.0.0.1" : Env("TROUPE_NODE_IP");
  auto job_id = JobId::FromHex(Env("TROUPE_JOB_ID"));
  auto worker_id = WorkerId::FromHex(Env("TROUPE_WORKER_ID"));
  if (!job_id.ok() || !worker_id.ok()) {
    fprintf(stderr, "troupe worker: bad TROUPE_JOB_ID/TROUPE_WORKER_ID in the environment\n");
    _exit(2);
  }
  options.job_id = *job_id;
  options.worker_id = *worker_id;
  options.execute = ExecuteRegistered;
  auto core = std::make_unique<CoreWorker>(options);
  if (auto status = core->Start(); !status.ok()) {
    fprintf(stderr, "troupe worker: cannot start: %s\n", std::string(status.message()).c_str());
    _exit(1);
  }
  CoreWorkerRuntime runtime(core.get());
  internal::SetCurrentRuntime(&runtime);
  core->RunTaskLoop();
  internal::SetCurrentRuntime(nullptr);
  actor_instance.reset();
  core->Shutdown();
  fflush(stdout);
  fflush(stderr);
  _exit(0);
}

// Starts a GCS and a raylet inside this process; fills in address and token.
void StartEmbeddedCluster(const Config& config, ProcessRuntime* p, std::string* address,
                          std::string* token) {
  auto session = Session::Create(ResolveTempRoot(""));
  if (!session.ok()) throw RuntimeError(std::string(session.status().message()));
  const ClusterToken cluster_token = ClusterToken::Generate(ClusterId::FromRandom());
  *token = cluster_token.ToString();
  GcsServerOptions gcs_options;
  gcs_options.port = 0;
  gcs_options.token = cluster_token;
  p->embedded_gcs =
      std::make_unique<GcsServer>(gcs_options, std::make_unique<InMemoryStoreClient>());
  if (auto status = p->embedded_gcs->Start(); !status.ok()) {
    throw RuntimeError("cannot start the embedded GCS: " + std::string(status.message()));
  }
  *address = absl::StrCat("127.0.0.1:", p->embedded_gcs->port());

  RayletOptions raylet_options;
  raylet_options.gcs_address = *address;
  raylet_options.token = *token;
  raylet_options.is_head = true;
  raylet_options.session_dir = session->dir();
  raylet_options.report_period = RayletOptions::kEmbeddedReportPeriod;
  ResourceSet resources = *ResourceSet::FromMap(config.resources);
  resources.Set(kCpu, FixedPoint(config.num_cpus >= 0 ? config.num_cpus : DetectNumCpus()));
  resources.Set(kGpu, FixedPoint(config.num_gpus >= 0 ? config.num_gpus : DetectNumGpus()));
  resources.Set(kMemory, FixedPoint(static_cast<double>(DefaultMemoryBytes())));
  resources.Set(
      kObjectStoreMemory,
      FixedPoint(static_cast<double>(config.object_store_memory >= 0 ? config.object_store_memory
                                                                     : DefaultObjectStoreBytes())));
  raylet_options.resources = resources;
  p->embedded_raylet = std::make_unique<Raylet>(raylet_options);
  if (auto status = p->embedded_raylet->Start(); !status.ok()) {
    throw RuntimeError("cannot start the embedded raylet: " + std::string(status.message()));
  }
  Raylet* raylet = p->embedded_raylet.get();
  p->raylet_thread = std::thread([raylet] {
    absl::Status status = raylet->Run();
    if (!status.ok()) TROUPE_LOG(Error) << "embedded raylet stopped: " << status.message();
  });
}

// The raylet on this machine the driver should use.
std::string FindLocalRaylet(GcsClient* gcs, const std::string& gcs_address) {
  const std::string here = LocalAddressToward(gcs_address.substr(0, gcs_address.rfind(':')));
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto nodes = gcs->GetAllNodeInfo();
    if (!nodes.ok()) throw RuntimeError(std::string(nodes.status().message()));
    const rpc::NodeInfo* best = nullptr;
    for (const auto& node : *nodes) {
      if (node.state() != rpc::NodeInfo::ALIVE || node.node_ip() != here) continue;
      if (best == nullptr || (node.is_head() && !best->is_head())) best = &node;
    }
    if (best != nullptr) return absl::StrCat(best->node_ip(), ":", best->raylet_port());
    absl::SleepFor(absl::Milliseconds(50));  // an embedded raylet may still be registering
  }
  throw RuntimeError("no Troupe node runs on this machine (" + here +
                     "): start one with `troupe start --address=" + gcs_address +
                     "` before running a driver here");
}

}  // namespace

void Init() { Init(Config()); }

void Init(int argc, char** argv) {
  static std::vector<std::string> args;
  args.assign(argv, argv + argc);
  saved_argv = &args;
  Init(Config());
}

void Init(const Config& config) {
  if (Env("TROUPE_WORKER_MODE") == "1") RunWorker();
  absl::MutexLock lock(&process_mu);
  if (process != nullptr) throw RuntimeError("troupe::Init was already called");
  auto p = std::make_unique<ProcessRuntime>();
  p->argv = saved_argv ? *saved_argv : SelfArgv();

  std::string address = !config.address.empty() ? config.address : Env("TROUPE_ADDRESS");
  std::string token = config.token;
  const bool embedded = address.empty();
  if (embedded) {
    // The embedded GCS and raylet share this process's stderr: keep it to warnings.
    if (MinLogSeverity() < LogSeverity::kWarning) SetMinLogSeverity(LogSeverity::kWarning);
    StartEmbeddedCluster(config, p.get(), &address, &token);
  } else {
    auto target = ResolveClusterTarget(address, token, ResolveTempRoot(""));
    if (!target.ok()) throw RuntimeError(std::string(target.status().message()));
    address = target->address;
    token = target->token;
  }
  p->gcs = std::make_unique<GcsClient>(address, token);
  p->token = token;
  auto info = p->gcs->GetClusterInfo();
  if (!info.ok())
    throw RuntimeError("cannot reach the cluster: " + std::string(info.status().message()));
  const std::string raylet_address = FindLocalRaylet(p->gcs.get(), address);

  // The job: workers run this same executable, fetched by digest on other machines.
  rpc::JobInfo job;
  job.set_entrypoint(absl::StrJoin(p->argv, " "));
  job.set_driver_pid(getpid());
  job.set_namespace_name(config.namespace_name);
  job.set_executable_path(SelfExecutable());
  for (size_t i = 1; i < p->argv.size(); ++i) job.add_driver_argv(p->argv[i]);
  if (!embedded) {
    std::ifstream exe(job.executable_path(), std::ios::binary);
    std::stringstream bytes;
    bytes << exe.rdbuf();
    const std::string binary = bytes.str();
    job.set_executable_digest(Sha256Hex(binary));
    job.set_executable_size(static_cast<int64_t>(binary.size()));
    auto exists = p->gcs->KVExists(kExecutablesNamespace, job.executable_digest());
    if (exists.ok() && !*exists) {
      auto put = p->gcs->KVPut(kExecutablesNamespace, job.executable_digest(), binary, false);
      if (!put.ok())
        throw RuntimeError("cannot upload this executable to the GCS: " +
                           std::string(put.status().message()));
    }
  }
  if (!config.working_dir.empty()) {
    auto package = PackDirectory(config.working_dir);
    if (!package.ok()) throw RuntimeError(std::string(package.status().message()));
    job.set_working_dir_digest(Sha256Hex(*package));
    auto exists = p->gcs->KVExists(kPackagesNamespace, job.working_dir_digest());
    if (exists.ok() && !*exists) {
      auto put = p->gcs->KVPut(kPackagesNamespace, job.working_dir_digest(), *package, false);
      if (!put.ok())
        throw RuntimeError("cannot upload the working directory: " +
                           std::string(put.status().message()));
    }
  } else if (!Env("TROUPE_WORKING_DIR_DIGEST").empty()) {
    // A submitted job (src/jobs): its working directory is already in the GCS; this driver's
    // workers start in it too.
    job.set_working_dir_digest(Env("TROUPE_WORKING_DIR_DIGEST"));
  }
  auto job_id = p->gcs->AddJob(job);
  if (!job_id.ok())
    throw RuntimeError("cannot register the job: " + std::string(job_id.status().message()));
  p->job_id = *JobId::FromBinary(*job_id);

  CoreWorkerOptions options;
  options.is_driver = true;
  options.raylet_address = raylet_address;
  options.gcs_address = address;
  options.token = token;
  options.node_ip = raylet_address.substr(0, raylet_address.rfind(':'));
  options.job_id = p->job_id;
  options.max_inline_bytes = config.max_inline_bytes;
  p->core = std::make_unique<CoreWorker>(options);
  if (auto status = p->core->Start(); !status.ok()) {
    throw RuntimeError("cannot start the driver's runtime: " + std::string(status.message()));
  }
  p->core->set_namespace_name(config.namespace_name);
  p->runtime = std::make_unique<CoreWorkerRuntime>(p->core.get());
  internal::SetCurrentRuntime(p->runtime.get());
  if (config.log_to_driver) {
    p->log_printer = std::thread(PrintWorkerLogs, p->gcs.get(), p->job_id, &p->stop_logs);
  }
  process = p.release();
}

bool CoreWorkerRuntime::WasCurrentActorRestarted() { return actor_restarted; }

internal::RuntimeStats internal::GetRuntimeStats() {
  absl::MutexLock lock(&process_mu);
  if (process == nullptr) return {};
  return {process->core->num_tracked_references(), process->core->num_stored_objects()};
}

double internal::MeasureRawRoundTripMicros(const std::string& actor_id, int calls) {
  std::string address, token;
  {
    absl::MutexLock lock(&process_mu);
    if (process == nullptr) ThrowNotInitialized();
    rpc::GetActorInfoRequest request;
    request.set_actor_id(actor_id);
    auto info = process->gcs->GetActorInfo(request);
    if (!info.ok()) ThrowFor(info.status());
    address = info->worker_address();
    token = process->token;
  }
  auto client = std::make_shared<CoreWorkerClient>(address, token);
  const std::string unknown = ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary();
  (void)client->GetObjectStatus(unknown, absl::ZeroDuration());  // connect
  const absl::Time start = absl::Now();
  for (int i = 0; i < calls; ++i) (void)client->GetObjectStatus(unknown, absl::ZeroDuration());
  return absl::ToDoubleMicroseconds(absl::Now() - start) / calls;
}

bool IsInitialized() {
  absl::MutexLock lock(&process_mu);
  return process != nullptr;
}

void Shutdown() {
  std::unique_ptr<ProcessRuntime> p;
  {
    absl::MutexLock lock(&process_mu);
    if (process == nullptr) return;
    p.reset(process);
    process = nullptr;
  }
  internal::SetCurrentRuntime(nullptr);
  p->stop_logs.Notify();
  if (p->log_printer.joinable()) p->log_printer.join();
  p->core->Shutdown();
  (void)p->gcs->MarkJobFinished(p->job_id.Binary());
  if (p->embedded_raylet) {
    p->embedded_raylet->RequestStop("the driver shut down");
    if (p->raylet_thread.joinable()) p->raylet_thread.join();
    p->embedded_raylet.reset();
  }
  if (p->embedded_gcs) p->embedded_gcs->Stop();
}

}  // namespace troupe
