// CoreWorkerRuntime: the API's Runtime (troupe/runtime.h) over this process's CoreWorker, for a
// driver (built by Init) or a worker (built by RunWorker). Converts API types to core types and
// errors to typed exceptions (status_exceptions.h). Shares ownership of the CoreWorker, so a call
// still running when Shutdown drops the session keeps the (shut down) core alive until it returns.
// Thread-safety: thread-safe, as CoreWorker is.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/core_worker/core_worker.h"
#include "troupe/runtime.h"

namespace troupe::internal {

// A metric's definition as the core worker takes it (src/metrics/user_metric.h).
rpc::UserMetricDefinition ToMetricDefinition(const MetricSpec& spec);

class CoreWorkerRuntime final : public Runtime {
 public:
  // Worker mode: fills in what `context` says about the task running on the calling thread
  // (task ID, resources, placement group and bundle, restarted or not); a no-op outside one.
  using DescribeCurrentTask = void (*)(RuntimeContext* context);

  // `actor_restarted` answers WasCurrentActorRestarted and `describe_task` completes
  // GetRuntimeContext (worker mode; nullptr: a driver, never in a task).
  CoreWorkerRuntime(std::shared_ptr<CoreWorker> core, std::string token,
                    bool (*actor_restarted)() = nullptr,
                    DescribeCurrentTask describe_task = nullptr)
      : core_(std::move(core)),
        token_(std::move(token)),
        actor_restarted_(actor_restarted),
        describe_task_(describe_task) {}

  CoreWorker& core() { return *core_; }
  // The cluster token text (for the benchmark hook's direct connections).
  const std::string& token() const { return token_; }

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

  void AddLocalRef(const RefInfo& ref) override;
  void RemoveLocalRef(const std::string& object_id) override;

 private:
  const std::shared_ptr<CoreWorker> core_;
  const std::string token_;
  bool (*const actor_restarted_)();
  const DescribeCurrentTask describe_task_;
};

}  // namespace troupe::internal
