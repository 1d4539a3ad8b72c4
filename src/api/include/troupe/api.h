// Troupe's C++ API: the one header users include.
//
//   #include "troupe/api.h"
//   int Plus(int a, int b) { return a + b; }
//   TROUPE_REMOTE(Plus);
//   int main(int argc, char** argv) {
//     troupe::Init(argc, argv);  // TROUPE_ADDRESS, this machine's cluster, or an embedded one
//     auto sum = troupe::Task(Plus).Remote(1, 2);
//     int three = *troupe::Get(sum);
//     troupe::Shutdown();
//   }
//
// The executable is also the worker program: raylets start it in worker mode, where Init() runs
// tasks and never returns. Code before Init() therefore runs in every worker too — keep it to
// argument parsing and setup that is safe to repeat. Errors are thrown as troupe::TroupeError
// subclasses (troupe/errors.h).
//
// Which cluster: Config::address, else $TROUPE_ADDRESS, else the cluster running on this machine
// (the latest session under $TROUPE_TEMP_DIR or /tmp/troupe whose daemons are alive, as `troupe
// status` finds it), else an embedded local cluster; TROUPE_ADDRESS=local, or a Config that sizes
// the node (num_cpus, num_gpus, resources, object_store_memory), forces the embedded one.
// Init says on stderr, in one line, which it did. The embedded cluster exists only in programs
// that also link //src/local_cluster; elsewhere Init throws RuntimeError saying so.
//
// Errors: Init(argc, argv) prints a failure to connect (no cluster, wrong token, unreachable)
// on stderr and exits with status 1; Init() and Init(config) throw RuntimeError instead.
//
// Threading contract:
//   - After Init returns, every call here (Task/Actor ... Remote, Put, Get, GetView, Wait,
//     Cancel, actor handles, placement groups, ObjectRef copies and destructors) may be made from
//     any number of threads at once.
//   - Init and Shutdown serialize with each other; Init while initialized throws RuntimeError,
//     Shutdown when not initialized does nothing.
//   - Shutdown may race calls on other threads. A call that starts after Shutdown began throws
//     RuntimeError ("not initialized" or "shut down"); a call already running finishes on the
//     stopping runtime: it returns, or throws a TroupeError (a Get/Wait blocked on an object
//     returns once the object resolves, fails, or its timeout passes). Shutdown does not wait for
//     such calls, and never frees what they use.
//   - After Shutdown every call throws RuntimeError until Init is called again; ObjectRefs and
//     actor handles may still be copied and destroyed (it does nothing), but not used.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/actor.h"
#include "troupe/errors.h"
#include "troupe/function_registry.h"
#include "troupe/kv.h"
#include "troupe/label_selector.h"
#include "troupe/metrics.h"
#include "troupe/object_ref.h"
#include "troupe/placement_group.h"
#include "troupe/runtime.h"
#include "troupe/runtime_context.h"
#include "troupe/serialization.h"
#include "troupe/stream.h"
#include "troupe/task.h"

namespace troupe {

struct Config {
  // host:port of a running cluster's GCS. Empty: $TROUPE_ADDRESS, else the cluster running on
  // this machine, else an embedded local cluster (a GCS and one raylet inside this process,
  // stopped by Shutdown; needs //src/local_cluster linked in). "local": always the embedded one.
  std::string address;
  // Cluster token. Empty: $TROUPE_TOKEN, else the token of a local session with that address.
  std::string token;
  // Embedded cluster only: what the local node offers (-1: detect).
  double num_cpus = -1;
  double num_gpus = -1;
  std::map<std::string, double> resources;
  int64_t object_store_memory = -1;
  // Namespace for named actors and KV.
  std::string namespace_name = "default";
  // Print workers' stdout/stderr here, prefixed with the worker's pid and node.
  bool log_to_driver = true;
  // Results up to this size return inline to their owner instead of going to the object store.
  int64_t max_inline_bytes = 100 * 1024;
  // A directory (at most 100 MiB) copied to every node through the GCS; workers start inside
  // their node's copy, so relative paths resolve as in the driver's working directory.
  std::string working_dir;
  // How long (seconds) the driver keeps trying to reach a GCS or local raylet that stopped
  // answering before it gives up: then every pending and later call throws
  // ClusterUnreachableError. Negative: $TROUPE_GCS_RECONNECT_TIMEOUT_S, else 60; 0: never.
  double gcs_reconnect_timeout_s = -1;
};

// Connects this driver to a cluster (see "Which cluster" above) and registers its job. In worker
// mode runs tasks and never returns. Init() and Init(config) throw RuntimeError; Init(argc, argv)
// prints the error and exits 1.
void Init();
void Init(int argc, char** argv);
void Init(const Config& config);
// True between Init and Shutdown (false in worker mode).
bool IsInitialized();
// Ends the job: stops this process's runtime (and the embedded cluster, if Init started one).
// Safe to call while other threads make calls (see the threading contract above).
void Shutdown();

template <typename T>
ObjectRef<T> Put(const T& value) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  internal::SerializedValue serialized = internal::Serialize(value);
  internal::RefInfo ref = runtime->Put(
      serialized.size(), [&](char* out) { serialized.CopyTo(out); },
      std::move(serialized.contained_refs));
  ObjectRef<T> result(ref);
  runtime->RemoveLocalRef(ref.object_id);
  return result;
}

namespace internal {
inline int64_t ToMillis(std::optional<std::chrono::milliseconds> timeout) {
  return timeout ? timeout->count() : -1;
}
inline Runtime& RequireRuntime() {
  Runtime* runtime = CurrentRuntime();
  if (runtime == nullptr) ThrowNotInitialized();
  return *runtime;
}
}  // namespace internal

// Waits for the value (forever, or up to `timeout`: then GetTimeoutError). Throws the task's
// error (TaskError, TaskFailedError, ObjectLostError, TaskCancelledError).
template <typename T>
std::shared_ptr<T> Get(const ObjectRef<T>& ref,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  auto buffers = internal::RequireRuntime().Get({ref.info()}, internal::ToMillis(timeout));
  if constexpr (std::is_void_v<T>) {
    return nullptr;
  } else {
    return internal::DecodeObject<T>(buffers[0]);
  }
}

template <typename T>
std::vector<std::shared_ptr<T>> Get(
    const std::vector<ObjectRef<T>>& refs,
    std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  std::vector<internal::RefInfo> infos;
  infos.reserve(refs.size());
  for (const auto& ref : refs) infos.push_back(ref.info());
  auto buffers = internal::RequireRuntime().Get(infos, internal::ToMillis(timeout));
  std::vector<std::shared_ptr<T>> values;
  values.reserve(buffers.size());
  for (const auto& buffer : buffers) values.push_back(internal::DecodeObject<T>(buffer));
  return values;
}

// Zero-copy read of a numeric array: the view points into the object store's shared memory
// when the object is on this node.
template <typename T>
std::shared_ptr<ArrayView<T>> GetView(
    const ObjectRef<std::vector<T>>& ref,
    std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  auto buffers = internal::RequireRuntime().Get({ref.info()}, internal::ToMillis(timeout));
  return internal::DeserializeView<ArrayView<T>>(buffers[0]);
}

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> unready;
};

// Returns once `num_ready` of `refs` are ready (or `timeout` passes), keeping their order.
// `fetch_local` (Ray's fetch_local=True): an object counts as ready once its value is on this
// node: ready objects stored on other nodes are pulled here, so a Get after Wait does not wait on
// the network; one not here when the timeout passes is in `unready`. false (the default, unlike
// Ray's): ready wherever it is, nothing is moved. A failed task's result is ready either way (Get
// throws its error).
template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_ready,
                   std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                   bool fetch_local = false) {
  std::vector<internal::RefInfo> infos;
  infos.reserve(refs.size());
  for (const auto& ref : refs) infos.push_back(ref.info());
  std::vector<bool> ready =
      internal::RequireRuntime().Wait(infos, num_ready, internal::ToMillis(timeout), fetch_local);
  WaitResult<T> result;
  for (size_t i = 0; i < refs.size(); ++i)
    (ready[i] ? result.ready : result.unready).push_back(refs[i]);
  return result;
}

// Cancels the task or actor call behind `ref` (docs/api.md, "Cancellation"); Get then throws
// TaskCancelledError. One that has not started never runs (later calls on the same actor still
// run, in order). One that runs sees IsCancelled() turn true (C++ code cannot be interrupted
// safely), and its result is TaskCancelledError whatever it returns; with `force` its worker is
// killed instead (for an actor call: the actor, as Kill does, and it restarts if max_restarts
// allows). `recursive`: the tasks and actor calls it submitted that have not finished are
// cancelled too (not forced). A ref that is finished, not owned by this process, or unknown:
// nothing happens.
template <typename T>
void Cancel(const ObjectRef<T>& ref, bool force = false, bool recursive = true) {
  internal::RequireRuntime().Cancel(ref.info(), force, recursive);
}

// Inside a task or actor method (on the thread that runs it): true once troupe::Cancel reached
// it, so it can stop early. False anywhere else (the driver, threads the task started).
inline bool IsCancelled() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  return runtime != nullptr && runtime->IsCancelled();
}

namespace internal {
// Counters of this process's runtime, for tests and debugging.
struct RuntimeStats {
  size_t tracked_references = 0;  // objects this process holds or owns references to
  size_t stored_objects = 0;      // values kept in this process's memory store
};
RuntimeStats GetRuntimeStats();
// Benchmarks only: the mean time (microseconds) of `calls` bare gRPC unary round trips to the
// process that hosts the actor (an owner query for an unknown object): the physical floor of an
// actor call.
double MeasureRawRoundTripMicros(const std::string& actor_id, int calls);
// Benchmarks only: bare gRPC unary calls per second (the same owner query) to the process that
// hosts the actor, with `window` calls in flight at all times until `calls` were answered: the
// physical floor of pipelined task pushes to one worker.
double MeasureRawAsyncCallsPerSecond(const std::string& actor_id, int calls, int window);
}  // namespace internal

}  // namespace troupe
