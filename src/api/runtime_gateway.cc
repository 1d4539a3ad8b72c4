#include "src/api/runtime_gateway.h"

#include "troupe/errors.h"
#include "troupe/placement_group.h"
#include "troupe/runtime_context.h"

namespace troupe::internal {

RuntimeGateway& RuntimeGateway::Process() {
  static auto* gateway = new RuntimeGateway();  // never destroyed: stale pointers stay valid
  return *gateway;
}

namespace {

// This thread's reference to a gateway's session, valid while `generation` is current.
struct ThreadCache {
  const RuntimeGateway* gateway = nullptr;
  uint64_t generation = 0;
  std::shared_ptr<Runtime> session;
  int depth = 0;  // calls of this thread inside the gateway
  // References replaced while a call was inside them: dropped when the outermost call returns.
  std::vector<std::shared_ptr<Runtime>> retired;
};
thread_local ThreadCache cache;

}  // namespace

class RuntimeGateway::Call {
 public:
  // `required`: throw RuntimeError when no session is open (else session() is nullptr).
  Call(const RuntimeGateway& gateway, bool required) : gateway_(gateway) {
    const uint64_t generation = gateway.generation_.load(std::memory_order_acquire);
    if (cache.gateway != &gateway || cache.generation != generation) {
      if (cache.depth > 0 && cache.session) cache.retired.push_back(std::move(cache.session));
      absl::ReaderMutexLock lock(&gateway.mu_);
      cache.gateway = &gateway;
      cache.generation = gateway.generation_.load(std::memory_order_relaxed);
      cache.session = gateway.session_;
    }
    session_ = cache.session.get();
    if (session_ == nullptr && required) {
      throw RuntimeError("Troupe was shut down: troupe::Shutdown() ran before this call started");
    }
    ++cache.depth;
  }
  ~Call() {
    if (--cache.depth > 0) return;
    cache.retired.clear();
    // The session was closed while this call ran: the last call out lets go of it.
    if (cache.generation != gateway_.generation_.load(std::memory_order_acquire)) {
      cache.session.reset();
      cache.gateway = nullptr;
    }
  }
  Runtime* session() const { return session_; }
  Runtime* operator->() const { return session_; }

 private:
  const RuntimeGateway& gateway_;
  Runtime* session_;
};

void RuntimeGateway::Open(std::shared_ptr<Runtime> session) {
  {
    absl::MutexLock lock(&mu_);
    session_ = std::move(session);
    generation_.fetch_add(1, std::memory_order_release);
  }
  SetCurrentRuntime(this);
}

std::shared_ptr<Runtime> RuntimeGateway::Close() {
  if (CurrentRuntime() == this) SetCurrentRuntime(nullptr);
  std::shared_ptr<Runtime> closed;
  {
    absl::MutexLock lock(&mu_);
    closed = std::move(session_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  // The closing thread lets go at once (unless it is itself inside a call).
  if (cache.gateway == this && cache.depth == 0) {
    cache.session.reset();
    cache.gateway = nullptr;
  }
  return closed;
}

std::shared_ptr<Runtime> RuntimeGateway::session() const {
  absl::ReaderMutexLock lock(&mu_);
  return session_;
}

std::vector<RefInfo> RuntimeGateway::SubmitTask(const std::string& function_name,
                                                std::vector<TaskArgument> args,
                                                const TaskOptions& options) {
  return Call(*this, true)->SubmitTask(function_name, std::move(args), options);
}
RefInfo RuntimeGateway::Put(size_t size, const std::function<void(char*)>& write,
                            std::vector<RefInfo> contained) {
  return Call(*this, true)->Put(size, write, std::move(contained));
}
std::vector<Buffer> RuntimeGateway::Get(const std::vector<RefInfo>& refs, int64_t timeout_ms) {
  return Call(*this, true)->Get(refs, timeout_ms);
}
std::vector<bool> RuntimeGateway::Wait(const std::vector<RefInfo>& refs, int num_ready,
                                       int64_t timeout_ms, bool fetch_local) {
  return Call(*this, true)->Wait(refs, num_ready, timeout_ms, fetch_local);
}
bool RuntimeGateway::IsCancelled() { return Call(*this, true)->IsCancelled(); }
void RuntimeGateway::Cancel(const RefInfo& ref, bool force, bool recursive) {
  Call(*this, true)->Cancel(ref, force, recursive);
}

std::string RuntimeGateway::CreateActor(const std::string& factory_name,
                                        std::vector<TaskArgument> args,
                                        const ActorOptions& options) {
  return Call(*this, true)->CreateActor(factory_name, std::move(args), options);
}
std::vector<RefInfo> RuntimeGateway::SubmitActorTask(const std::string& actor_id,
                                                     const std::string& method_name,
                                                     std::vector<TaskArgument> args,
                                                     const ActorCallOptions& options) {
  return Call(*this, true)->SubmitActorTask(actor_id, method_name, std::move(args), options);
}
void RuntimeGateway::ReportStreamItem(size_t size, const std::function<void(char*)>& write,
                                      std::vector<RefInfo> contained) {
  Call(*this, true)->ReportStreamItem(size, write, std::move(contained));
}
std::optional<RefInfo> RuntimeGateway::NextStreamItem(const RefInfo& stream, int64_t timeout_ms) {
  return Call(*this, true)->NextStreamItem(stream, timeout_ms);
}
int64_t RuntimeGateway::NumUnreadStreamItems(const RefInfo& stream) {
  return Call(*this, true)->NumUnreadStreamItems(stream);
}
void RuntimeGateway::KillActor(const std::string& actor_id, bool no_restart) {
  Call(*this, true)->KillActor(actor_id, no_restart);
}
std::string RuntimeGateway::GetNamedActor(const std::string& name, const std::string& ns) {
  return Call(*this, true)->GetNamedActor(name, ns);
}
void RuntimeGateway::ExitActor() { Call(*this, true)->ExitActor(); }
bool RuntimeGateway::WasCurrentActorRestarted() {
  return Call(*this, true)->WasCurrentActorRestarted();
}

std::string RuntimeGateway::CreatePlacementGroup(const PlacementGroupSpec& spec) {
  return Call(*this, true)->CreatePlacementGroup(spec);
}
void RuntimeGateway::RemovePlacementGroup(const std::string& id) {
  Call(*this, true)->RemovePlacementGroup(id);
}
bool RuntimeGateway::WaitPlacementGroup(const std::string& id, int64_t timeout_ms) {
  return Call(*this, true)->WaitPlacementGroup(id, timeout_ms);
}
std::string RuntimeGateway::GetPlacementGroup(const std::string& name) {
  return Call(*this, true)->GetPlacementGroup(name);
}
std::vector<PlacementGroupInfo> RuntimeGateway::ListPlacementGroups() {
  return Call(*this, true)->ListPlacementGroups();
}
std::optional<PlacementGroupInfo> RuntimeGateway::GetPlacementGroupInfo(const std::string& id) {
  return Call(*this, true)->GetPlacementGroupInfo(id);
}

std::optional<std::string> RuntimeGateway::KvGet(const std::string& ns, const std::string& key) {
  return Call(*this, true)->KvGet(ns, key);
}
bool RuntimeGateway::KvPut(const std::string& ns, const std::string& key, const std::string& value,
                           bool overwrite) {
  return Call(*this, true)->KvPut(ns, key, value, overwrite);
}
int64_t RuntimeGateway::KvDelete(const std::string& ns, const std::string& key, bool by_prefix) {
  return Call(*this, true)->KvDelete(ns, key, by_prefix);
}
bool RuntimeGateway::KvExists(const std::string& ns, const std::string& key) {
  return Call(*this, true)->KvExists(ns, key);
}
std::vector<std::string> RuntimeGateway::KvKeys(const std::string& ns, const std::string& prefix) {
  return Call(*this, true)->KvKeys(ns, prefix);
}
std::string RuntimeGateway::JobNamespace() { return Call(*this, true)->JobNamespace(); }
std::string RuntimeGateway::CurrentActorId() { return Call(*this, true)->CurrentActorId(); }
std::string RuntimeGateway::NodeIp() { return Call(*this, true)->NodeIp(); }
RuntimeContext RuntimeGateway::GetRuntimeContext() {
  return Call(*this, true)->GetRuntimeContext();
}
std::vector<NodeInfo> RuntimeGateway::Nodes() { return Call(*this, true)->Nodes(); }
void RuntimeGateway::RecordMetric(const MetricSpec& metric, double value,
                                  const std::map<std::string, std::string>& tags) {
  Call(*this, true)->RecordMetric(metric, value, tags);
}

std::shared_ptr<AsyncCall> RuntimeGateway::CurrentAsyncCall() {
  return Call(*this, true)->CurrentAsyncCall();
}
void RuntimeGateway::NotifyWhenReady(const RefInfo& ref, std::function<void()> ready) {
  Call(*this, true)->NotifyWhenReady(ref, std::move(ready));
}

void RuntimeGateway::AddLocalRef(const RefInfo& ref) {
  Call call(*this, /*required=*/false);
  if (call.session() != nullptr) call->AddLocalRef(ref);
}
void RuntimeGateway::RemoveLocalRef(const std::string& object_id) {
  Call call(*this, /*required=*/false);
  if (call.session() != nullptr) call->RemoveLocalRef(object_id);
}

}  // namespace troupe::internal
