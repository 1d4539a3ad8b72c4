// The job supervisor: a detached actor, one per submitted job, placed on the head (or wherever the
// entrypoint's requested resources are). It runs the entrypoint with `sh -c` in its own process
// group, inside the unpacked working directory, with TROUPE_ADDRESS and TROUPE_TOKEN set so a
// Troupe program in it joins the cluster (and TROUPE_WORKING_DIR_DIGEST so its workers get the same
// working directory); keeps the record's status and the output's last 1 MiB in the KV; and stops
// the whole process group on Stop (SIGTERM, then SIGKILL after 3 s). Killing the entrypoint ends
// its Troupe driver, whose job's workers and non-detached actors the cluster then stops.
// Thread-safe (Run and Stop run on the actor's two executor threads).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <string>

namespace troupe::jobs {

class JobSupervisor {
 public:
  static JobSupervisor* Create(std::string submission_id);
  // Runs the job to its end (the record says how it ended); then the actor exits.
  bool Run();
  // Stops the job if it runs (or before it starts). True if it was still going.
  bool Stop();

 private:
  explicit JobSupervisor(std::string id) : id_(std::move(id)) {}
  void Finish(const std::string& status, const std::string& message, int exit_code);

  const std::string id_;
  std::mutex mu_;
  pid_t pid_ = 0;  // the entrypoint's process group, while it runs
  bool stop_requested_ = false;
  bool finished_ = false;
};

}  // namespace troupe::jobs
