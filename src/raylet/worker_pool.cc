#include "src/raylet/worker_pool.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/gpu_devices.h"
#include "src/common/logging.h"

extern char** environ;

namespace troupe {

WorkerPool::WorkerPool(WorkerPoolOptions options, ExecutableResolver resolve_executable,
                       ExitCallback on_exit, const Clock* clock, ProcessLauncher* processes)
    : options_(std::move(options)),
      resolve_executable_(std::move(resolve_executable)),
      on_exit_(std::move(on_exit)),
      clock_(clock),
      processes_(processes),
      max_starting_(options_.max_starting_workers > 0
                        ? options_.max_starting_workers
                        : std::max(4, 2 * static_cast<int>(std::thread::hardware_concurrency()))) {}

WorkerPool::~WorkerPool() { KillAll(); }

std::string WorkerPool::LogPathOf(const WorkerId& worker_id) const {
  return absl::StrCat(options_.log_dir, "/worker-", worker_id.ShortHex(), ".log");
}

std::string WorkerPool::KeyOf(const JobId& job_id, const std::string& cuda_visible_devices) {
  return absl::StrCat(job_id.Hex(), "/", cuda_visible_devices);
}

absl::StatusOr<int> WorkerPool::StartProcess(const rpc::JobInfo& job, const WorkerId& worker_id,
                                             const Program& program,
                                             const std::string& cuda_visible_devices) {
  std::vector<std::string> args = {program.executable};
  for (const auto& arg : job.driver_argv()) args.push_back(arg);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (entry.rfind("TROUPE_", 0) == 0) continue;
    // Masking replaces the raylet's own CUDA_VISIBLE_DEVICES; otherwise workers inherit it, so
    // their device numbers are the ones the raylet detected and leases.
    if (options_.mask_gpus && entry.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    env.push_back(entry);
  }
  env.push_back("TROUPE_WORKER_MODE=1");
  {
    absl::MutexLock lock(&mu_);
    env.push_back("TROUPE_RAYLET_ADDRESS=" + raylet_address_);
  }
  env.push_back("TROUPE_GCS_ADDRESS=" + options_.gcs_address);
  env.push_back("TROUPE_TOKEN=" + options_.token);
  env.push_back("TROUPE_NODE_ID=" + options_.node_id_hex);
  env.push_back("TROUPE_NODE_IP=" + options_.node_ip);
  if (!options_.session_dir.empty()) env.push_back("TROUPE_SESSION_DIR=" + options_.session_dir);
  if (!options_.tls_dir.empty()) env.push_back("TROUPE_TLS_DIR=" + options_.tls_dir);
  env.push_back("TROUPE_JOB_ID=" + BytesToHex(job.job_id()));
  // The job's namespace: GetActor and named actors inside the job's tasks and actors use it.
  if (!job.namespace_name().empty()) env.push_back("TROUPE_NAMESPACE=" + job.namespace_name());
  env.push_back("TROUPE_WORKER_ID=" + worker_id.Hex());
  if (!cuda_visible_devices.empty()) {
    env.push_back("TROUPE_GPU_IDS=" + cuda_visible_devices);
    env.push_back(std::string("TROUPE_GPU_VISIBILITY=") +
                  (options_.mask_gpus ? "assigned" : "all"));
    if (options_.mask_gpus)
      env.push_back(
          "CUDA_VISIBLE_DEVICES=" +
          VisibleDevicesForLease(cuda_visible_devices, std::getenv("CUDA_VISIBLE_DEVICES")));
  }
  return processes_->Start(
      {std::move(args), std::move(env), program.working_dir, LogPathOf(worker_id)});
}

void WorkerPool::PopWorker(const rpc::JobInfo& job, const std::string& cuda_visible_devices,
                           PopCallback done) {
  auto job_id = JobId::FromBinary(job.job_id());
  if (!job_id.ok()) return done(job_id.status());
  const std::string key = KeyOf(*job_id, cuda_visible_devices);
  std::shared_ptr<Worker> idle;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : workers_) {
      if (entry.key == key && entry.idle) {
        entry.idle = false;
        idle = entry.worker;
        break;
      }
    }
  }
  if (idle) return done(idle);
  auto program = resolve_executable_(job);
  if (!program.ok()) return done(program.status());
  {
    // A start slot, taken before forking (released when the worker registers or exits). Real
    // time, not the injected clock: this is how long this thread blocks.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](WorkerPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
                               return pool->starting_ < pool->max_starting_;
                             },
                             this),
                         options_.startup_timeout);
    ++starting_;
  }
  const WorkerId worker_id = WorkerId::FromRandom();
  auto pid = StartProcess(job, worker_id, *program, cuda_visible_devices);
  if (!pid.ok()) {
    {
      absl::MutexLock lock(&mu_);
      --starting_;
    }
    return done(pid.status());
  }
  absl::MutexLock lock(&mu_);
  Entry& entry = workers_[worker_id];
  entry.worker = std::make_shared<Worker>();
  entry.worker->worker_id = worker_id;
  entry.worker->job_id = *job_id;
  entry.worker->pid = *pid;
  entry.worker->cuda_visible_devices = cuda_visible_devices;
  entry.worker->log_path = LogPathOf(worker_id);
  entry.key = key;
  entry.started = clock_->Now();
  entry.waiting.push_back(std::move(done));
  TROUPE_LOG(Debug) << "started worker " << worker_id.ShortHex() << " pid " << *pid << " for job "
                    << job_id->Hex();
}

absl::Status WorkerPool::RegisterWorker(const WorkerId& worker_id, int pid, int port,
                                        const JobId& job_id, bool is_driver) {
  std::vector<PopCallback> waiting;
  std::shared_ptr<Worker> worker;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) {
      if (!is_driver) {
        return absl::NotFoundError(
            absl::StrCat("worker ", worker_id.Hex(), " was not started by this raylet"));
      }
      Entry& entry = workers_[worker_id];
      entry.worker = std::make_shared<Worker>();
      entry.worker->worker_id = worker_id;
      entry.worker->job_id = job_id;
      entry.worker->pid = pid;
      entry.worker->is_driver = true;
      entry.registered = true;
      entry.key = "driver";
      entry.worker->address = absl::StrCat(options_.node_ip, ":", port);
      return absl::OkStatus();
    }
    Entry& entry = it->second;
    if (!entry.registered) --starting_;
    entry.registered = true;
    entry.worker->address = absl::StrCat(options_.node_ip, ":", port);
    waiting = std::move(entry.waiting);
    entry.waiting.clear();
    worker = entry.worker;
  }
  // The first pop waiting gets the worker; a worker serves one lease at a time.
  if (!waiting.empty()) {
    waiting[0](worker);
    for (size_t i = 1; i < waiting.size(); ++i) waiting[i](absl::InternalError("worker taken"));
  } else {
    PushWorker(worker);
  }
  return absl::OkStatus();
}

void WorkerPool::PushWorker(const std::shared_ptr<Worker>& worker) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker->worker_id);
  // A worker being killed or stopped is never handed out again.
  if (it == workers_.end() || it->second.killed || it->second.stopped) return;
  it->second.idle = true;
  it->second.idle_since = clock_->Now();
}

void WorkerPool::KillWorker(const WorkerId& worker_id) {
  int pid = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second.worker->is_driver) return;
    it->second.killed = true;
    it->second.idle = false;
    pid = it->second.worker->pid;
  }
  // Forgotten when the reaper sees it exit, so its lease is released exactly once.
  processes_->Kill(pid);
}

bool WorkerPool::StopLocked(Entry& entry) {
  if (entry.worker->is_driver || entry.stopped) return false;
  entry.stopped = true;
  entry.idle = false;  // never handed out again
  entry.kill_at = clock_->Now() + options_.stop_grace;
  return true;
}

void WorkerPool::StopWorker(const WorkerId& worker_id) {
  int pid = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || !StopLocked(it->second)) return;
    pid = it->second.worker->pid;
  }
  processes_->Terminate(pid);
}

void WorkerPool::StopJobWorkers(const JobId& job_id) {
  std::vector<int> pids;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : workers_) {
      if (entry.worker->job_id == job_id && !entry.worker->detached && StopLocked(entry)) {
        pids.push_back(entry.worker->pid);
      }
    }
  }
  for (int pid : pids) processes_->Terminate(pid);
}

void WorkerPool::Tick() {
  struct Exited {
    std::shared_ptr<Worker> worker;
    std::string how;
    std::vector<PopCallback> waiting;
  };
  std::vector<Exited> exited;
  std::vector<int> to_kill;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto it = workers_.begin(); it != workers_.end();) {
      Entry& entry = it->second;
      if (entry.worker->is_driver) {
        if (!processes_->Exists(
                entry.worker->pid)) {  // not our child: all we see is that it is gone
          exited.push_back({entry.worker, "exited", std::move(entry.waiting)});
          workers_.erase(it++);
        } else {
          ++it;
        }
        continue;
      }
      if (std::optional<std::string> how = processes_->CheckExited(entry.worker->pid)) {
        if (!entry.registered) --starting_;
        // A stopped worker's end is expected: say so, whatever signal ended it.
        if (entry.stopped) *how = absl::StrCat("was stopped (", *how, ")");
        exited.push_back({entry.worker, *how, std::move(entry.waiting)});
        workers_.erase(it++);
        continue;
      }
      if (now >= entry.kill_at) {
        entry.kill_at = absl::InfiniteFuture();  // once
        to_kill.push_back(entry.worker->pid);
      } else if (entry.stopped) {
        // waiting for it to exit, or for its grace to end
      } else if (!entry.registered && now - entry.started > options_.startup_timeout) {
        to_kill.push_back(entry.worker->pid);
      } else if (entry.idle && now - entry.idle_since > options_.idle_timeout) {
        entry.idle = false;  // not handed out again; reaped when it exits
        entry.killed = true;
        to_kill.push_back(entry.worker->pid);
      }
      ++it;
    }
  }
  for (int pid : to_kill) processes_->Kill(pid);
  for (auto& e : exited) {
    for (auto& done : e.waiting) {
      done(absl::UnavailableError(absl::StrCat("worker process ", e.worker->pid, " ", e.how,
                                               " before it registered; see ",
                                               LogPathOf(e.worker->worker_id))));
    }
    on_exit_(*e.worker, e.how);
  }
}

void WorkerPool::KillAll() {
  std::vector<int> pids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : workers_) {
      if (!entry.worker->is_driver) pids.push_back(entry.worker->pid);
    }
  }
  for (int pid : pids) processes_->Terminate(pid);
  // Real time: the processes end in it, whatever clock the pool was given.
  const absl::Time deadline = absl::Now() + options_.stop_grace;
  std::vector<int> running = pids;
  while (!running.empty() && absl::Now() < deadline) {
    std::vector<int> still;
    for (int pid : running) {
      if (!processes_->CheckExited(pid)) still.push_back(pid);
    }
    running.swap(still);
    if (!running.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  for (int pid : running) processes_->KillAndWait(pid);
  absl::MutexLock lock(&mu_);
  workers_.clear();
  starting_ = 0;
}

std::vector<std::shared_ptr<Worker>> WorkerPool::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Worker>> workers;
  for (const auto& [id, entry] : workers_) {
    if (!entry.worker->is_driver) workers.push_back(entry.worker);
  }
  return workers;
}

std::vector<WorkerPool::WorkerState> WorkerPool::Describe() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerState> out;
  for (const auto& [id, entry] : workers_) {
    if (!entry.worker->is_driver) out.push_back({entry.worker, entry.registered, entry.idle});
  }
  return out;
}

int WorkerPool::num_workers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

}  // namespace troupe
