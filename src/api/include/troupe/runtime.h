// The seam between the header-only API templates and the runtime library: templates serialize
// and deserialize; the Runtime moves bytes, tracks references and runs tasks. Implemented by
// src/api/core_worker_runtime.cc over the core worker, reached through the RuntimeGateway
// (src/api/runtime_gateway.h) that makes Shutdown safe against concurrent calls. Users do not
// call this directly.
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace troupe {
struct RuntimeContext;  // troupe/runtime_context.h
struct NodeInfo;
struct PlacementGroupInfo;  // troupe/placement_group.h
}  // namespace troupe

namespace troupe::internal {

// Where an object lives logically: its ID and the address of the process that owns it.
struct RefInfo {
  std::string object_id;      // binary ObjectId
  std::string owner_address;  // host:port of the owner's core worker
};

// Bytes of an object, kept alive by `holder` (which may be a shared-memory mapping, in which case
// `data` points into it: zero-copy).
struct Buffer {
  const char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> holder;
};

struct TaskArgument {
  bool by_reference = false;
  std::string value;               // serialized, when passed by value
  RefInfo ref;                     // when passed by reference (resolved before the task runs)
  std::vector<RefInfo> contained;  // ObjectRefs inside `value`, kept alive for the task
};

struct SchedulingStrategy {
  enum class Kind { kDefault, kSpread, kNodeAffinity };
  Kind kind = Kind::kDefault;
  std::string node_id_hex;  // for kNodeAffinity
  bool soft = false;        // kNodeAffinity: fall back to any node if that one cannot run it
};

// One condition of a troupe::LabelSelector (troupe/label_selector.h), checked when it was added.
struct LabelConstraint {
  enum class Op { kEquals, kIn, kNotIn, kExists, kDoesNotExist };  // rpc::LabelConstraint order
  Op op = Op::kEquals;
  std::string key;
  std::vector<std::string> values;
};

struct PlacementGroupSpec {
  std::string name;
  std::vector<std::map<std::string, double>> bundles;
  int strategy = 0;       // PACK, SPREAD, STRICT_PACK, STRICT_SPREAD (rpc order)
  bool detached = false;  // outlives the creating job
  // Empty, or one selector per bundle (an empty one: any node).
  std::vector<std::vector<LabelConstraint>> bundle_label_selectors;
  bool bundle_labels_soft = false;  // preferred, not required
};

struct TaskOptions {
  std::string placement_group_id;  // binary; "" for none
  int bundle_index = -1;           // -1: any bundle of the group
  std::string name;
  std::map<std::string, double> resources = {{"CPU", 1}};
  int max_retries = 3;
  bool retry_exceptions = false;
  SchedulingStrategy strategy;
  std::vector<LabelConstraint> label_selector;  // empty: any node
  bool label_selector_soft = false;             // preferred, not required
  // Objects the call returns: 1, the whole result; N > 1, one per element of the std::tuple
  // the function returns (TaskCaller::SetNumReturns).
  int num_returns = 1;
  // A streaming generator (troupe/stream.h): its items are reported as it yields them.
  bool streaming = false;
  int64_t stream_backpressure = 0;  // the most unread items; 0: no bound
};

// Options of one actor call (the task options that apply to it; see ActorTaskCaller).
struct ActorCallOptions {
  std::string name;               // "": the method's registered name
  std::string concurrency_group;  // "": the actor's default group
  int num_returns = 1;            // as TaskOptions::num_returns
  bool streaming = false;         // as TaskOptions::streaming
  int64_t stream_backpressure = 0;
};

// A running call of an async actor's method (troupe/async.h): the way back onto the actor's
// event loop thread, where the method's coroutine resumes. Thread-safe; obtained on the loop.
class AsyncCall {
 public:
  virtual ~AsyncCall() = default;
  // Runs `fn` on the actor's event loop thread, as part of this call (IsCancelled and the
  // runtime context read it as the current task). Any thread; dropped once the actor is gone.
  virtual void Post(std::function<void()> fn) = 0;
  // Runs `fn` there after `delay_us` microseconds.
  virtual void PostAfter(int64_t delay_us, std::function<void()> fn) = 0;
  // `on_cancel` runs once (any thread; at once if the call is cancelled already) when the
  // call's owner cancels it (troupe::Cancel); replaces the last one; nullptr clears it.
  virtual void OnCancel(std::function<void()> on_cancel) = 0;
};

// For static_assert in templates that must never be instantiated.
template <typename...>
inline constexpr bool kAlwaysFalse = false;

struct ActorOptions {
  std::string placement_group_id;
  int bundle_index = -1;
  std::string name;
  std::string namespace_name;
  std::map<std::string, double> resources;  // held for the actor's lifetime; default none
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;  // threads, or for an async actor calls in flight
  // Named groups with their own limits (threads, or calls in flight for an async actor).
  std::map<std::string, int> concurrency_groups;
  bool async_actor = false;  // it has coroutine methods (troupe::Async)
  bool detached = false;
  SchedulingStrategy strategy;
  std::vector<LabelConstraint> label_selector;  // empty: any node
  bool label_selector_soft = false;             // preferred, not required
  // The actor's class as the compiler names it (typeid(T).name(), mangled): the runtime shows
  // it demangled ("Store", "ns::Store") as the actor's class name. "": the factory's name.
  std::string class_type_name;
  // With a name: when a live actor already has it (in that namespace), CreateActor returns that
  // actor's ID instead of throwing (the arguments and options given are then unused).
  bool get_if_exists = false;
};

// A user metric's definition (troupe/metrics.h), as the metric object holds it.
struct MetricSpec {
  enum class Kind { kCounter, kGauge, kHistogram };
  Kind kind = Kind::kCounter;
  std::string name;
  std::string description;
  std::string unit;
  std::vector<double> boundaries;  // histograms
  std::vector<std::string> tag_keys;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // Queues a task; returns the references to its options.num_returns results (owned by this
  // process), each with one local reference held for the caller.
  virtual std::vector<RefInfo> SubmitTask(const std::string& function_name,
                                          std::vector<TaskArgument> args,
                                          const TaskOptions& options) = 0;
  // Stores a value of `size` bytes written by `write`; `contained` are the ObjectRefs inside it
  // (kept alive as long as this object is). Throws ObjectStoreFullError.
  virtual RefInfo Put(size_t size, const std::function<void(char*)>& write,
                      std::vector<RefInfo> contained) = 0;
  // Waits for every object (timeout_ms < 0: forever) and returns their bytes. Throws the
  // object's error (TaskError, ObjectLostError, ...) or GetTimeoutError.
  virtual std::vector<Buffer> Get(const std::vector<RefInfo>& refs, int64_t timeout_ms) = 0;
  // Which of `refs` are ready once `num_ready` are, or the timeout passes. `fetch_local`: a ready
  // object counts only once its value is on this node (ready ones elsewhere are pulled here).
  virtual std::vector<bool> Wait(const std::vector<RefInfo>& refs, int num_ready,
                                 int64_t timeout_ms, bool fetch_local) = 0;
  virtual void Cancel(const RefInfo& ref, bool force, bool recursive) = 0;
  // Inside a task or actor method, on the thread running it: whether it was cancelled.
  virtual bool IsCancelled() = 0;

  // Actors. CreateActor returns the actor's ID (binary); throws TroupeError when the name is
  // taken (unless options.get_if_exists).
  virtual std::string CreateActor(const std::string& factory_name, std::vector<TaskArgument> args,
                                  const ActorOptions& options) = 0;
  // As SubmitTask: options.num_returns references, each with one local reference held.
  virtual std::vector<RefInfo> SubmitActorTask(const std::string& actor_id,
                                               const std::string& method_name,
                                               std::vector<TaskArgument> args,
                                               const ActorCallOptions& options) = 0;
  virtual void KillActor(const std::string& actor_id, bool no_restart) = 0;
  // The ID of the live actor with that name, or "".
  virtual std::string GetNamedActor(const std::string& name, const std::string& namespace_name) = 0;
  // Inside an actor: leave after the current call (no restart).
  virtual void ExitActor() = 0;
  virtual bool WasCurrentActorRestarted() = 0;

  // Placement groups. CreatePlacementGroup returns the group's ID; throws on bad input or a
  // taken name. WaitPlacementGroup: true once placed (false after timeout_ms, or if removed).
  virtual std::string CreatePlacementGroup(const PlacementGroupSpec& spec) = 0;
  virtual void RemovePlacementGroup(const std::string& id) = 0;
  virtual bool WaitPlacementGroup(const std::string& id, int64_t timeout_ms) = 0;
  virtual std::string GetPlacementGroup(const std::string& name) = 0;  // "" if none
  // Every group the GCS knows (removed ones too, until it forgets them); one by binary ID
  // (nullopt if unknown).
  virtual std::vector<PlacementGroupInfo> ListPlacementGroups() = 0;
  virtual std::optional<PlacementGroupInfo> GetPlacementGroupInfo(const std::string& id) = 0;

  // The cluster's key-value store (GCS KV). Namespaces named by JobNamespace() are deleted when
  // the job finishes. KvPut returns false when the key exists and `overwrite` is false.
  virtual std::optional<std::string> KvGet(const std::string& ns, const std::string& key) = 0;
  virtual bool KvPut(const std::string& ns, const std::string& key, const std::string& value,
                     bool overwrite) = 0;
  virtual int64_t KvDelete(const std::string& ns, const std::string& key, bool by_prefix) = 0;
  virtual bool KvExists(const std::string& ns, const std::string& key) = 0;
  // Keys of `ns` starting with `prefix`, sorted.
  virtual std::vector<std::string> KvKeys(const std::string& ns, const std::string& prefix) = 0;
  // "job-<job id hex>": a KV namespace that lives as long as this process's job.
  virtual std::string JobNamespace() = 0;
  // Inside an actor: its ID (binary); "" elsewhere.
  virtual std::string CurrentActorId() = 0;
  // The address peers on other nodes reach this process at (the node's IP).
  virtual std::string NodeIp() = 0;
  // troupe::GetRuntimeContext(): this process, and the task running on the calling thread.
  virtual RuntimeContext GetRuntimeContext() = 0;
  // troupe::Nodes(): the GCS's node table with each node's last reported free resources.
  virtual std::vector<NodeInfo> Nodes() = 0;

  // User metrics: adds `value` to the metric's series `tags` in this process's batch (pushed to
  // the node's raylet every second). Throws InvalidArgumentError for bad tags or values.
  virtual void RecordMetric(const MetricSpec& metric, double value,
                            const std::map<std::string, std::string>& tags) = 0;
  // Async actors (troupe/async.h). Inside an async actor's method, on its event loop: the call
  // (nullptr elsewhere, e.g. in a method of an actor that is not async).
  virtual std::shared_ptr<AsyncCall> CurrentAsyncCall() { return nullptr; }
  // Runs `ready` once `ref` can be read without waiting (its value or its error), on any thread
  // (on this one at once if it can be now). Never blocks.
  virtual void NotifyWhenReady(const RefInfo& ref, std::function<void()> ready) { ready(); }
  // Streaming generators (troupe/stream.h). Inside a generator: sends the next item (`size`
  // bytes written by `write`); blocks while the reader lags by the bound; throws
  // TaskCancelledError once the stream was cancelled or dropped. The reader: the next item of
  // the stream whose end object is `stream` (one local reference held for the caller), or
  // nullopt once the generator ended; GetTimeoutError after timeout_ms (< 0: wait forever).
  virtual void ReportStreamItem(size_t size, const std::function<void(char*)>& write,
                                std::vector<RefInfo> contained) = 0;
  virtual std::optional<RefInfo> NextStreamItem(const RefInfo& stream, int64_t timeout_ms) = 0;
  virtual int64_t NumUnreadStreamItems(const RefInfo& stream) = 0;

  // Reference counting: every live ObjectRef in this process holds one local reference.
  virtual void AddLocalRef(const RefInfo& ref) = 0;
  virtual void RemoveLocalRef(const std::string& object_id) = 0;
};

// The process's runtime, or nullptr before Init / after Shutdown. A pointer read here stays valid
// after Shutdown (calls through it then throw RuntimeError).
Runtime* CurrentRuntime();
void SetCurrentRuntime(Runtime* runtime);

}  // namespace troupe::internal
