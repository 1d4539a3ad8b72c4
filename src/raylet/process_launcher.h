// The operating-system seam under WorkerPool: start a worker process, kill it, see whether it
// exited. PosixProcessLauncher is the real one (fork/exec; the child gets its own process group
// and dies with the thread that forked it, PR_SET_PDEATHSIG). Tests use a hand-written fake
// (worker_pool_test.cc), so the pool's reuse and reaping logic runs without processes.
// PosixProcessLauncher is stateless and thread-safe; errno is turned into Status here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is the executable's path
  std::vector<std::string> env;   // NAME=value, the whole environment
  std::string working_dir;        // "" for the raylet's own
  std::string log_path;           // stdout and stderr are appended here
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process in a process group of its own; returns its pid.
  virtual absl::StatusOr<int> Start(const ProcessSpec& spec) = 0;
  // SIGKILL to the process group of `pid` (the process and whatever it started).
  virtual void Kill(int pid) = 0;
  // SIGTERM to the process group of `pid`: asks it to finish (a worker reports what it buffered
  // and exits).
  virtual void Terminate(int pid) = 0;
  // For a child started here: how it ended ("exited with code 1", "was killed by signal 9"),
  // once, after which it is reaped; nullopt while it runs.
  virtual std::optional<std::string> CheckExited(int pid) = 0;
  // For a process that is not our child (a driver): whether it still exists.
  virtual bool Exists(int pid) = 0;
  // Kills a child started here and waits for it to end.
  virtual void KillAndWait(int pid) = 0;
};

class PosixProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<int> Start(const ProcessSpec& spec) override;
  void Kill(int pid) override;
  void Terminate(int pid) override;
  std::optional<std::string> CheckExited(int pid) override;
  bool Exists(int pid) override;
  void KillAndWait(int pid) override;
};

}  // namespace troupe
