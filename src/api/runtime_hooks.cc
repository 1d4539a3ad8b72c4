// Internal hooks declared in troupe/api.h for tests and benchmarks: runtime counters, and the
// raw gRPC round trip an actor call is measured against (bench/task_bench.cc).
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/api/driver_session.h"
#include "src/api/status_exceptions.h"
#include "src/rpc/core_worker_client.h"
#include "troupe/api.h"

namespace troupe {

internal::RuntimeStats internal::GetRuntimeStats() {
  std::shared_ptr<CoreWorkerRuntime> runtime = DriverRuntime();
  if (runtime == nullptr) return {};
  return {runtime->core().num_tracked_references(), runtime->core().num_stored_objects()};
}

namespace internal {
namespace {

// A fresh client (its own channel) to the process hosting the actor, connected.
std::shared_ptr<CoreWorkerClient> ConnectToActorProcess(const std::string& actor_id,
                                                        const std::string& probe_object) {
  std::shared_ptr<CoreWorkerRuntime> runtime = DriverRuntime();
  if (runtime == nullptr) ThrowNotInitialized();
  rpc::GetActorInfoRequest request;
  request.set_actor_id(actor_id);
  auto info = runtime->core().gcs().GetActorInfo(request);
  if (!info.ok()) ThrowFor(info.status());
  auto client = std::make_shared<CoreWorkerClient>(info->worker_address(), runtime->token());
  (void)client->GetObjectStatus(probe_object, absl::ZeroDuration());  // connect
  return client;
}

// Keeps `window` asynchronous owner queries in flight until `calls` have been answered; each
// answer (on a gRPC thread) starts the next call.
class AsyncProbe : public std::enable_shared_from_this<AsyncProbe> {
 public:
  AsyncProbe(std::shared_ptr<CoreWorkerClient> client, std::string object, int calls)
      : client_(std::move(client)), object_(std::move(object)), to_start_(calls), left_(calls) {}

  void Start(int window) {
    for (int i = 0; i < window; ++i) Next();
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* left) { return *left == 0; }, &left_));
  }

 private:
  void Next() {
    {
      absl::MutexLock lock(&mu_);
      if (to_start_ == 0) return;
      --to_start_;
    }
    client_->GetObjectStatusAsync(object_, absl::ZeroDuration(), [self = shared_from_this()](auto) {
      {
        absl::MutexLock lock(&self->mu_);
        --self->left_;
      }
      self->Next();
    });
  }

  const std::shared_ptr<CoreWorkerClient> client_;
  const std::string object_;
  absl::Mutex mu_;
  int to_start_ ABSL_GUARDED_BY(mu_);
  int left_ ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace internal

double internal::MeasureRawAsyncCallsPerSecond(const std::string& actor_id, int calls, int window) {
  const std::string unknown = ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary();
  auto probe =
      std::make_shared<AsyncProbe>(ConnectToActorProcess(actor_id, unknown), unknown, calls);
  const absl::Time start = absl::Now();
  probe->Start(window);
  probe->Wait();
  return calls / absl::ToDoubleSeconds(absl::Now() - start);
}

double internal::MeasureRawRoundTripMicros(const std::string& actor_id, int calls) {
  const std::string unknown = ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary();
  auto client = ConnectToActorProcess(actor_id, unknown);
  const absl::Time start = absl::Now();
  for (int i = 0; i < calls; ++i) (void)client->GetObjectStatus(unknown, absl::ZeroDuration());
  return absl::ToDoubleMicroseconds(absl::Now() - start) / calls;
}

}  // namespace troupe
