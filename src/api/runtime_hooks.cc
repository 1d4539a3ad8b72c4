// Internal hooks declared in troupe/api.h for tests and benchmarks: runtime counters, and the
// raw gRPC round trip an actor call is measured against (bench/task_bench.cc).
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

double internal::MeasureRawRoundTripMicros(const std::string& actor_id, int calls) {
  std::shared_ptr<CoreWorkerRuntime> runtime = DriverRuntime();
  if (runtime == nullptr) ThrowNotInitialized();
  rpc::GetActorInfoRequest request;
  request.set_actor_id(actor_id);
  auto info = runtime->core().gcs().GetActorInfo(request);
  if (!info.ok()) ThrowFor(info.status());
  auto client = std::make_shared<CoreWorkerClient>(info->worker_address(), runtime->token());
  const std::string unknown = ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary();
  (void)client->GetObjectStatus(unknown, absl::ZeroDuration());  // connect
  const absl::Time start = absl::Now();
  for (int i = 0; i < calls; ++i) (void)client->GetObjectStatus(unknown, absl::ZeroDuration());
  return absl::ToDoubleMicroseconds(absl::Now() - start) / calls;
}

}  // namespace troupe
