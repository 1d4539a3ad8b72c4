// The raylet's worker processes. A worker is the job's own executable started in worker mode
// (TROUPE_WORKER_MODE=1 and the connection details in its environment); it registers back
// over RegisterWorker and then takes tasks pushed by whoever leases it. Workers are kept per
// (job, CUDA_VISIBLE_DEVICES): an idle one is reused by the next lease with the same key, and
// reaped after `idle_timeout`. Every worker dies with the thread that forked it
// (PR_SET_PDEATHSIG): PopWorker must be called from a thread that lives as long as the raylet
// (LeaseManager's lookup thread). Output goes to <log_dir>/worker-<id>.log. Timeouts are read
// from the injected clock, which must outlive the pool.
// Processes are started, killed and reaped through a ProcessLauncher (process_launcher.h).
// Thread-safe. Callbacks run without the pool's lock, on the thread that caused them (a gRPC
// thread for registrations, the reaper for exits).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/raylet/process_launcher.h"
#include "src/raylet/worker_launcher.h"

namespace troupe {

struct WorkerPoolOptions {
  std::string node_id_hex;
  std::string node_ip;
  std::string gcs_address;
  std::string token;
  std::string log_dir;
  // The node's session directory, given to workers as TROUPE_SESSION_DIR (job supervisors make
  // job working directories in <session_dir>/jobs).
  std::string session_dir;
  // The node's TLS files (src/tls/tls_files.h), given to workers as TROUPE_TLS_DIR; empty:
  // the cluster runs without TLS.
  std::string tls_dir;
  // The raylet passes RayletOptions::worker_idle_timeout (where the default is declared).
  absl::Duration idle_timeout = absl::InfiniteDuration();
  bool mask_gpus = false;  // CUDA_VISIBLE_DEVICES = the worker's GPUs (else all stay visible)
  absl::Duration startup_timeout = absl::Seconds(60);
  // Worker processes starting (forked, not registered yet) at once; PopWorker waits for a slot
  // beyond that (Ray's maximum_startup_concurrency). Unbounded, a thousand actors created at once
  // forked a thousand processes whose start-up starved the raylet itself: it answered no health
  // check for 3 s and the GCS declared the node dead. 0: twice the machine's cores (at least 4):
  // a start is partly waiting (exec, loading, registering), so a few more than the cores keep
  // them busy.
  int max_starting_workers = 0;
  // A worker stopped gracefully (StopWorker: its job ended; KillAll: the raylet stops) gets
  // SIGTERM, reports the task events it buffered and exits; one still running after this grace
  // (a task that does not return) is killed (SIGKILL).
  absl::Duration stop_grace = absl::Seconds(3);
};

class WorkerPool : public WorkerLauncher {
 public:
  using ExitCallback = std::function<void(const Worker&, const std::string& how)>;
  // Where `job`'s workers come from on this node: the executable, and the directory they start
  // in ("" for the raylet's own).
  struct Program {
    std::string executable;
    std::string working_dir;
  };
  using ExecutableResolver = std::function<absl::StatusOr<Program>(const rpc::JobInfo&)>;

  // `clock` and `processes` are borrowed and must outlive the pool.
  WorkerPool(WorkerPoolOptions options, ExecutableResolver resolve_executable, ExitCallback on_exit,
             const Clock* clock, ProcessLauncher* processes);
  ~WorkerPool() override;

  // WorkerLauncher. PopWorker hands over an idle worker of `job` with that
  // CUDA_VISIBLE_DEVICES, or forks one and calls `done` once it registers (or fails to start).
  // Before forking it blocks while max_starting_workers are starting (until one registers or
  // exits, or for startup_timeout at most, then it forks anyway).
  void PopWorker(const rpc::JobInfo& job, const std::string& cuda_visible_devices,
                 PopCallback done) override;
  // The worker finished its lease and may be reused.
  void PushWorker(const std::shared_ptr<Worker>& worker) override;
  // A started worker (or a driver) says hello. NotFound for unknown worker IDs that are not
  // drivers.
  absl::Status RegisterWorker(const WorkerId& worker_id, int pid, int port, const JobId& job_id,
                              bool is_driver);
  // Kills the worker (if still running); it is forgotten when Tick sees it exit.
  void KillWorker(const WorkerId& worker_id) override;
  // SIGTERM now, SIGKILL from the first Tick after stop_grace if it still runs; never handed
  // out again. Its exit is reported as "was stopped (exited with code 0)" and the like.
  void StopWorker(const WorkerId& worker_id) override;
  // Stops (StopWorker) the job's workers, except those holding detached actors.
  void StopJobWorkers(const JobId& job_id);
  // Checks for exited processes, idle workers past their timeout and stopped workers past their
  // grace. Called periodically.
  void Tick();
  // Stops every worker and waits for them: SIGTERM, up to stop_grace (real time: these are real
  // processes ending) for them to exit, then SIGKILL. For the raylet's own shutdown.
  void KillAll();

  int num_workers() const;
  // Every worker process currently known (not drivers).
  std::vector<std::shared_ptr<Worker>> Snapshot() const;
  // Every worker process (not drivers) and where it stands, for the state API.
  struct WorkerState {
    std::shared_ptr<Worker> worker;
    bool registered = false;  // false: starting
    bool idle = false;        // registered and not leased
  };
  std::vector<WorkerState> Describe() const;
  // Where workers reach the raylet (known once its server is up).
  void set_raylet_address(const std::string& address) {
    absl::MutexLock lock(&mu_);
    raylet_address_ = address;
  }

 private:
  struct Entry {
    std::shared_ptr<Worker> worker;
    std::string key;  // job + devices
    bool registered = false;
    bool idle = false;
    // Told to die (KillWorker, KillJobWorkers, the idle timeout): never idle again, so a lease
    // returned while the kill lands cannot hand the dying process to someone else.
    bool killed = false;
    absl::Time idle_since;
    absl::Time started;
    std::vector<PopCallback> waiting;  // pops waiting for this worker to register
    // Set by StopWorker: SIGKILL once the clock passes it (then InfiniteFuture again).
    absl::Time kill_at = absl::InfiniteFuture();
    bool stopped = false;  // StopWorker was called: its exit is no failure
  };
  // SIGTERM to the entry's process, SIGKILL after the grace; false if it is not ours to stop.
  bool StopLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int> StartProcess(const rpc::JobInfo& job, const WorkerId& worker_id,
                                   const Program& program, const std::string& cuda_visible_devices);
  std::string LogPathOf(const WorkerId& worker_id) const;
  static std::string KeyOf(const JobId& job_id, const std::string& cuda_visible_devices);

  const WorkerPoolOptions options_;
  ExecutableResolver resolve_executable_;
  ExitCallback on_exit_;
  const Clock* const clock_;
  ProcessLauncher* const processes_;
  mutable absl::Mutex mu_;
  std::string raylet_address_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, Entry> workers_ ABSL_GUARDED_BY(mu_);
  const int max_starting_;                  // options_.max_starting_workers, resolved
  int starting_ ABSL_GUARDED_BY(mu_) = 0;  // entries not registered yet
};

}  // namespace troupe
