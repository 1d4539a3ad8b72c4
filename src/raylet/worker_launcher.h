// The seam between lease scheduling (LeaseManager) and worker processes. A WorkerLauncher hands
// over a worker able to run a job's tasks with given devices, takes it back when its lease ends,
// and kills it. WorkerPool is the real one (it forks the job's executable, src/raylet/
// worker_pool.h); FakeWorkerLauncher (fake_worker_launcher.h) records requests for tests to
// answer by hand.
// Implementations are thread-safe; callbacks run without the launcher's locks held.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "src/common/ids.h"

namespace troupe {

// A worker process (or a registered driver) of this node. Shared between the launcher and the
// lease holding it; `address` is set once it registers, `detached` by the lease manager.
struct Worker {
  WorkerId worker_id;
  JobId job_id;
  int pid = 0;
  std::string address;  // host:port once registered
  std::string cuda_visible_devices;
  bool is_driver = false;
  std::string log_path;   // the worker's stdout and stderr
  bool detached = false;  // holds a detached actor: survives the end of its job
};

class WorkerLauncher {
 public:
  using PopCallback = std::function<void(absl::StatusOr<std::shared_ptr<Worker>>)>;

  virtual ~WorkerLauncher() = default;

  // Hands over a worker of `job` whose devices are `cuda_visible_devices` (node GPU ids joined
  // by ","; "" for none): an idle one at once, or a fresh one once it registers, possibly on
  // another thread. An error says why none could be started; the caller may try again. `done`
  // is called exactly once. Real launchers fork here, so callers call from a thread that lives
  // as long as the workers it starts (see LeaseManager).
  virtual void PopWorker(const rpc::JobInfo& job, const std::string& cuda_visible_devices,
                         PopCallback done) = 0;
  // The worker finished its lease and may be handed out again.
  virtual void PushWorker(const std::shared_ptr<Worker>& worker) = 0;
  // Kills the worker if it still runs. Its exit is reported later, through whatever exit
  // callback the launcher was built with (the raylet then calls LeaseManager::OnWorkerExit).
  virtual void KillWorker(const WorkerId& worker_id) = 0;
  // Stops the worker gracefully: it is asked to exit (it reports the task events it buffered
  // first) and killed if it still runs after a short grace. For ends that are no failure (its
  // job or lease is over); its exit is reported as KillWorker's.
  virtual void StopWorker(const WorkerId& worker_id) = 0;
};

}  // namespace troupe
