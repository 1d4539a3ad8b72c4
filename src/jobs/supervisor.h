// The job supervisor: a detached actor, one per submitted job, placed on the head (or wherever the
// entrypoint's requested resources are). It runs the entrypoint with `sh -c` in its own process
// group, inside the job's working directory (<session>/jobs/<id>-XXXXXX on its node, created
// with mkdtemp; the package, if any, unpacked into it), with TROUPE_ADDRESS and TROUPE_TOKEN set so
// a Troupe program in it joins the cluster (and TROUPE_WORKING_DIR_DIGEST so its workers get the
// same working directory); keeps the record's status and the whole output (up to
// kMaxJobLogBytes, then a truncation marker: job_record.h) in the KV, in chunks; answers
// log-tail long polls from the output it holds (WaitForOutput, woken by a condition variable as
// output arrives); and stops the whole process group on Stop: SIGTERM, then SIGKILL from a timer
// this object owns if anything of the group is left after 3 s. Killing the entrypoint ends its
// Troupe driver, whose job's workers and non-detached actors the cluster then stops.
// Thread-safety: thread-safe; Run, Stop and WaitForOutput run on the actor's executor threads
// (kSupervisorConcurrency of them) at the same time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "troupe/api.h"

namespace troupe::jobs {

// Log-tail long polls one supervisor holds at once; more return at once with `busy` set.
inline constexpr int kMaxWaitingTails = 8;
// The supervisor actor's executor threads: Run, Stop, and the waiting tails.
inline constexpr int kSupervisorConcurrency = 2 + kMaxWaitingTails;

// A piece of a job's log: bytes [begin, end) of it (at most kMaxTailStepBytes).
struct OutputChunk {
  int64_t begin = 0;
  int64_t end = 0;
  std::string text;
  bool finished = false;  // the job has ended: no more output will come
  bool busy = false;      // too many tails waiting: this one did not wait
  MSGPACK_DEFINE(begin, end, text, finished, busy);
};

// A task run on the node that ran a job (DELETE /api/jobs/<id>): removes its working directory
// <session>/jobs/<name> there, however deep. `name` must be one path component (else
// TroupeError). "" once it is gone (also if it was not there); else what could not be removed.
std::string RemoveJobWorkingDir(std::string name);

class JobSupervisor {
 public:
  static JobSupervisor* Create(std::string submission_id);
  ~JobSupervisor();
  // Runs the job to its end (the record says how it ended); then the actor exits.
  bool Run();
  // Stops the job if it runs (or before it starts). True if it was still going.
  bool Stop();
  // The log from byte `offset` on (at most kMaxTailStepBytes of it), once there is any, the job
  // has ended, or `wait_ms` passed (then with empty text).
  OutputChunk WaitForOutput(int64_t offset, int64_t wait_ms);

 private:
  explicit JobSupervisor(std::string id) : id_(std::move(id)) {}
  void Finish(const std::string& status, const std::string& message, int exit_code);
  void Append(const char* data, size_t size);
  // Writes the log's chunks from byte `from` on, then its size, to the KV; returns the size.
  int64_t Flush(int64_t from);
  // The stop timer's body: SIGKILL the group unless it is gone within the grace period.
  void KillAfterGrace(pid_t group);

  const std::string id_;
  absl::Mutex mu_;
  absl::CondVar output_changed_;        // output appended, or the job finished
  absl::CondVar group_gone_cv_;         // the process group has no process left
  pid_t pid_ ABSL_GUARDED_BY(mu_) = 0;  // the entrypoint's process group, while it runs
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool group_gone_ ABSL_GUARDED_BY(mu_) = false;
  // The log: the output up to kMaxJobLogBytes, then kLogTruncatedMarker if it went past.
  std::string output_ ABSL_GUARDED_BY(mu_);
  bool truncated_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_tails_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread kill_timer_ ABSL_GUARDED_BY(mu_);  // started by the first Stop of a running job
};

}  // namespace troupe::jobs
