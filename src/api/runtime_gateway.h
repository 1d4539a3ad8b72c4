// RuntimeGateway: the Runtime the API templates reach through CurrentRuntime() while Troupe is
// initialized. It forwards every call to the current session (the CoreWorkerRuntime that Init or
// the worker entry built), holding a shared reference to it for the call's duration. That is what
// makes Shutdown safe against calls on other threads:
//   - Close() (from Shutdown) uninstalls the session at once: CurrentRuntime() returns nullptr,
//     and a call that had already read the gateway's pointer throws RuntimeError.
//   - a call already inside the session finishes on it (Shutdown stops its core worker, so such a
//     call returns or fails with a TroupeError); the session is destroyed when the last such call
//     returns, never under it.
//   - reference counting (ObjectRef copies and destructors) becomes a no-op after Close, so
//     ObjectRefs may outlive Shutdown.
// The process-wide gateway (Process()) is never destroyed, so pointers read from CurrentRuntime()
// stay valid forever. Thread-safety: every method may run on any thread, concurrently with
// Open/Close.
// Cost: the calls on the fast path (Put/Get of small values, ObjectRef copies) are a few hundred
// nanoseconds, so a call takes no lock and touches no shared reference count: each thread keeps
// its own reference to the session, checked against a generation number that Open/Close bump.
// A thread lets go of a closed session when its call in flight returns, at its next call, or
// when it exits.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "troupe/runtime.h"

namespace troupe::internal {

class RuntimeGateway final : public Runtime {
 public:
  // The gateway Init and the worker entry use; lives until the process exits.
  static RuntimeGateway& Process();

  // Installs `session` and points CurrentRuntime() at this gateway.
  void Open(std::shared_ptr<Runtime> session);
  // Uninstalls the session (CurrentRuntime() becomes nullptr) and returns it; calls in flight
  // keep their reference. No-op (nullptr) when none is open.
  std::shared_ptr<Runtime> Close();
  // The open session, or nullptr.
  std::shared_ptr<Runtime> session() const;

  std::vector<RefInfo> SubmitTask(const std::string& function_name, std::vector<TaskArgument> args,
                                  const TaskOptions& options) override;
  RefInfo Put(size_t size, const std::function<void(char*)>& write,
              std::vector<RefInfo> contained) override;
  std::vector<Buffer> Get(const std::vector<RefInfo>& refs, int64_t timeout_ms) override;
  std::vector<bool> Wait(const std::vector<RefInfo>& refs, int num_ready, int64_t timeout_ms,
                         bool fetch_local) override;
  void Cancel(const RefInfo& ref, bool force, bool recursive) override;
  bool IsCancelled() override;

  std::string CreateActor(const std::string& factory_name, std::vector<TaskArgument> args,
                          const ActorOptions& options) override;
  std::vector<RefInfo> SubmitActorTask(const std::string& actor_id, const std::string& method_name,
                                       std::vector<TaskArgument> args,
                                       const ActorCallOptions& options) override;
  void ReportStreamItem(size_t size, const std::function<void(char*)>& write,
                        std::vector<RefInfo> contained) override;
  std::optional<RefInfo> NextStreamItem(const RefInfo& stream, int64_t timeout_ms) override;
  int64_t NumUnreadStreamItems(const RefInfo& stream) override;
  void KillActor(const std::string& actor_id, bool no_restart) override;
  std::string GetNamedActor(const std::string& name, const std::string& ns) override;
  void ExitActor() override;
  bool WasCurrentActorRestarted() override;

  std::string CreatePlacementGroup(const PlacementGroupSpec& spec) override;
  void RemovePlacementGroup(const std::string& id) override;
  bool WaitPlacementGroup(const std::string& id, int64_t timeout_ms) override;
  std::string GetPlacementGroup(const std::string& name) override;
  std::vector<PlacementGroupInfo> ListPlacementGroups() override;
  std::optional<PlacementGroupInfo> GetPlacementGroupInfo(const std::string& id) override;

  std::optional<std::string> KvGet(const std::string& ns, const std::string& key) override;
  bool KvPut(const std::string& ns, const std::string& key, const std::string& value,
             bool overwrite) override;
  int64_t KvDelete(const std::string& ns, const std::string& key, bool by_prefix) override;
  bool KvExists(const std::string& ns, const std::string& key) override;
  std::vector<std::string> KvKeys(const std::string& ns, const std::string& prefix) override;
  std::string JobNamespace() override;
  std::string CurrentActorId() override;
  std::string NodeIp() override;
  RuntimeContext GetRuntimeContext() override;
  std::vector<NodeInfo> Nodes() override;
  void RecordMetric(const MetricSpec& metric, double value,
                    const std::map<std::string, std::string>& tags) override;

  std::shared_ptr<AsyncCall> CurrentAsyncCall() override;
  void NotifyWhenReady(const RefInfo& ref, std::function<void()> ready) override;

  // No-ops once closed: ObjectRefs may be copied and destroyed after Shutdown.
  void AddLocalRef(const RefInfo& ref) override;
  void RemoveLocalRef(const std::string& object_id) override;

 private:
  // Holds this thread's reference to the session for one call (calls nest: an ObjectRef copied
  // inside a Get re-enters the gateway).
  class Call;

  mutable absl::Mutex mu_;
  std::shared_ptr<Runtime> session_ ABSL_GUARDED_BY(mu_);
  // Bumped (under mu_) by Open and Close; threads compare their cached reference against it.
  std::atomic<uint64_t> generation_{1};
};

}  // namespace troupe::internal
