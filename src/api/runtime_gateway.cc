#include "src/api/runtime_gateway.h"

#include "troupe/errors.h"

namespace troupe::internal {

RuntimeGateway& RuntimeGateway::Process() {
  static auto* gateway = new RuntimeGateway();  // never destroyed: stale pointers stay valid
  return *gateway;
}

void RuntimeGateway::Open(std::shared_ptr<Runtime> session) {
  {
    absl::MutexLock lock(&mu_);
    session_ = std::move(session);
  }
  SetCurrentRuntime(this);
}

std::shared_ptr<Runtime> RuntimeGateway::Close() {
  if (CurrentRuntime() == this) SetCurrentRuntime(nullptr);
  absl::MutexLock lock(&mu_);
  return std::move(session_);
}

std::shared_ptr<Runtime> RuntimeGateway::session() const {
  absl::ReaderMutexLock lock(&mu_);
  return session_;
}

std::shared_ptr<Runtime> RuntimeGateway::Require() const {
  std::shared_ptr<Runtime> session = this->session();
  if (session == nullptr) {
    throw RuntimeError("Troupe was shut down: troupe::Shutdown() ran before this call started");
  }
  return session;
}

RefInfo RuntimeGateway::SubmitTask(const std::string& function_name, std::vector<TaskArgument> args,
                                   const TaskOptions& options) {
  return Require()->SubmitTask(function_name, std::move(args), options);
}
RefInfo RuntimeGateway::Put(size_t size, const std::function<void(char*)>& write,
                            std::vector<RefInfo> contained) {
  return Require()->Put(size, write, std::move(contained));
}
std::vector<Buffer> RuntimeGateway::Get(const std::vector<RefInfo>& refs, int64_t timeout_ms) {
  return Require()->Get(refs, timeout_ms);
}
std::vector<bool> RuntimeGateway::Wait(const std::vector<RefInfo>& refs, int num_ready,
                                       int64_t timeout_ms) {
  return Require()->Wait(refs, num_ready, timeout_ms);
}
void RuntimeGateway::Cancel(const RefInfo& ref, bool force) { Require()->Cancel(ref, force); }

std::string RuntimeGateway::CreateActor(const std::string& factory_name,
                                        std::vector<TaskArgument> args,
                                        const ActorOptions& options) {
  return Require()->CreateActor(factory_name, std::move(args), options);
}
RefInfo RuntimeGateway::SubmitActorTask(const std::string& actor_id, const std::string& method_name,
                                        std::vector<TaskArgument> args) {
  return Require()->SubmitActorTask(actor_id, method_name, std::move(args));
}
void RuntimeGateway::KillActor(const std::string& actor_id, bool no_restart) {
  Require()->KillActor(actor_id, no_restart);
}
std::string RuntimeGateway::GetNamedActor(const std::string& name, const std::string& ns) {
  return Require()->GetNamedActor(name, ns);
}
void RuntimeGateway::ExitActor() { Require()->ExitActor(); }
bool RuntimeGateway::WasCurrentActorRestarted() { return Require()->WasCurrentActorRestarted(); }

std::string RuntimeGateway::CreatePlacementGroup(const PlacementGroupSpec& spec) {
  return Require()->CreatePlacementGroup(spec);
}
void RuntimeGateway::RemovePlacementGroup(const std::string& id) {
  Require()->RemovePlacementGroup(id);
}
bool RuntimeGateway::WaitPlacementGroup(const std::string& id, int64_t timeout_ms) {
  return Require()->WaitPlacementGroup(id, timeout_ms);
}
std::string RuntimeGateway::GetPlacementGroup(const std::string& name) {
  return Require()->GetPlacementGroup(name);
}

std::optional<std::string> RuntimeGateway::KvGet(const std::string& ns, const std::string& key) {
  return Require()->KvGet(ns, key);
}
bool RuntimeGateway::KvPut(const std::string& ns, const std::string& key, const std::string& value,
                           bool overwrite) {
  return Require()->KvPut(ns, key, value, overwrite);
}
int64_t RuntimeGateway::KvDelete(const std::string& ns, const std::string& key, bool by_prefix) {
  return Require()->KvDelete(ns, key, by_prefix);
}
std::string RuntimeGateway::JobNamespace() { return Require()->JobNamespace(); }
std::string RuntimeGateway::CurrentActorId() { return Require()->CurrentActorId(); }
std::string RuntimeGateway::NodeIp() { return Require()->NodeIp(); }

void RuntimeGateway::AddLocalRef(const RefInfo& ref) {
  if (auto session = this->session()) session->AddLocalRef(ref);
}
void RuntimeGateway::RemoveLocalRef(const std::string& object_id) {
  if (auto session = this->session()) session->RemoveLocalRef(object_id);
}

}  // namespace troupe::internal
