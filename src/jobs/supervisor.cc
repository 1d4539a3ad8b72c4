#include "src/jobs/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/package.h"
#include "src/common/remove_tree.h"
#include "src/common/sha256.h"
#include "src/jobs/job_record.h"
#include "src/jobs/packages.h"
#include "troupe/api.h"

namespace troupe::jobs {
namespace {

internal::Runtime& Runtime() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) throw TroupeError("the job supervisor runs without a runtime");
  return *runtime;
}

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

JobRecord Load(const std::string& id) {
  auto value = Runtime().KvGet(kJobsNamespace, RecordKey(id));
  if (!value) throw TroupeError("job " + id + " has no record");
  return JobRecord::parse(*value);
}

void Save(const std::string& id, const JobRecord& record) {
  Runtime().KvPut(kJobsNamespace, RecordKey(id), record.dump(), /*overwrite=*/true);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// <session>/jobs of this node (mode 0700), checked to be a real directory, not a link.
std::string JobsDir() {
  const std::string session = Env("TROUPE_SESSION_DIR");
  if (session.empty()) {
    throw TroupeError(
        "the supervisor's raylet did not say its session directory "
        "(TROUPE_SESSION_DIR); is the node running an older troupe?");
  }
  const std::string jobs = session + "/jobs";
  if (mkdir(jobs.c_str(), 0700) != 0 && errno != EEXIST) {
    throw TroupeError("cannot create " + jobs + ": " + std::strerror(errno));
  }
  struct stat st;
  if (lstat(jobs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    throw TroupeError(jobs + " is not a directory of this user (a symlink?); remove it");
  }
  return jobs;
}

// Creates the job's working directory, <session>/jobs/<id>-XXXXXX (mkdtemp: a new, private
// directory, never an existing path or link), records where it is (WorkingDirKey) so DELETE
// can remove it, and unpacks the working-directory package (if any) into it.
std::string PrepareWorkingDir(const std::string& id, const JobRecord& record, std::string* digest) {
  const std::string uri = record.value("runtime_env", JobRecord::object()).value("working_dir", "");
  std::string dir = JobsDir() + "/" + id + "-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    throw TroupeError("cannot create the job's working directory " + dir + ": " +
                      std::strerror(errno));
  }
  Runtime().KvPut(kJobsNamespace, WorkingDirKey(id),
                  Env("TROUPE_NODE_ID") + " " + dir.substr(dir.rfind('/') + 1),
                  /*overwrite=*/true);
  if (uri.empty()) return dir;
  auto parsed = ParsePackageUri(uri);
  if (!parsed.ok()) throw TroupeError(std::string(parsed.status().message()));
  *digest = *parsed;
  auto package = Runtime().KvGet(kPackagesNamespace, *digest);
  if (!package) throw TroupeError("working_dir " + uri + " was not uploaded to the cluster");
  if (auto status = UnpackDirectory(*package, dir); !status.ok()) {
    throw TroupeError("cannot unpack working_dir: " + std::string(status.message()));
  }
  return dir;
}

}  // namespace

std::string RemoveJobWorkingDir(std::string name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    throw TroupeError("'" + name + "' is not the name of a job working directory");
  }
  const std::string session = Env("TROUPE_SESSION_DIR");
  if (session.empty()) {
    return "the worker does not know its node's session directory (TROUPE_SESSION_DIR)";
  }
  // Any depth (remove_all gave up past PATH_MAX, silently); symlinks removed, never followed.
  const absl::Status removed = RemoveTree(session + "/jobs/" + name);
  return removed.ok() ? "" : std::string(removed.message());
}

JobSupervisor* JobSupervisor::Create(std::string submission_id) {
  return new JobSupervisor(std::move(submission_id));
}

JobSupervisor::~JobSupervisor() {
  std::thread timer;
  {
    absl::MutexLock lock(&mu_);
    group_gone_ = true;  // nothing left to kill once the supervisor goes
    group_gone_cv_.SignalAll();
    timer.swap(kill_timer_);
  }
  if (timer.joinable()) timer.join();
}

void JobSupervisor::Finish(const std::string& status, const std::string& message, int exit_code) {
  JobRecord record = Load(id_);
  record["status"] = status;
  record["message"] = message;
  record["end_time"] = NowMillis();
  if (exit_code >= 0) record["driver_exit_code"] = exit_code;
  if (status == kFailed) record["error_type"] = "JOB_ENTRYPOINT_COMMAND_ERROR";
  Save(id_, record);
}

bool JobSupervisor::Run() {
  JobRecord record = Load(id_);
  std::string digest, dir;
  try {
    dir = PrepareWorkingDir(id_, record, &digest);
  } catch (const TroupeError& e) {
    Finish(kFailed, std::string("could not prepare the job: ") + e.what(), -1);
    ExitActor();
    return false;
  }
  // The entrypoint's environment: ours without the worker-mode variables, plus how to reach the
  // cluster.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "TROUPE_", 7) != 0) env.push_back(*e);
  }
  env.push_back("TROUPE_ADDRESS=" + Env("TROUPE_GCS_ADDRESS"));
  env.push_back("TROUPE_TOKEN=" + Env("TROUPE_TOKEN"));
  if (!Env("TROUPE_TLS_DIR").empty()) env.push_back("TROUPE_TLS_DIR=" + Env("TROUPE_TLS_DIR"));
  env.push_back("TROUPE_JOB_SUBMISSION_ID=" + id_);
  if (!digest.empty()) env.push_back("TROUPE_WORKING_DIR_DIGEST=" + digest);
  std::vector<char*> envp;
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string entrypoint = record.value("entrypoint", "");

  int out[2];
  if (pipe(out) != 0) {
    Finish(kFailed, std::string("pipe: ") + std::strerror(errno), -1);
    ExitActor();
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) {
      finished_ = true;
      output_changed_.SignalAll();
      Finish(kStopped, "stopped before it started", -1);
      ExitActor();
      return false;
    }
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      setsid();  // its own process group: Stop signals everything it started
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(137);
      if (chdir(dir.c_str()) != 0) _exit(126);
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      execle("/bin/sh", "sh", "-c", entrypoint.c_str(), static_cast<char*>(nullptr), envp.data());
      _exit(127);
    }
    pid_ = pid;
  }
  close(out[1]);
  record["status"] = kRunning;
  record["message"] = "the entrypoint is running";
  record["start_time"] = NowMillis();
  record["driver_node_id"] = Env("TROUPE_NODE_ID");
  Save(id_, record);

  // Collect output: tails waiting in WaitForOutput get it at once; the KV copy (for GET .../logs
  // and for tails after the supervisor is gone) is brought up to date at most every 300 ms while
  // it changes, batching writes of chatty jobs (only the chunks that changed are written).
  bool dirty = false;
  int64_t flushed = 0;
  auto last_flush = std::chrono::steady_clock::now();
  char chunk[8192];
  while (true) {
    pollfd entry{out[0], POLLIN, 0};
    if (poll(&entry, 1, 300) > 0) {
      ssize_t n = read(out[0], chunk, sizeof(chunk));
      if (n <= 0) break;
      Append(chunk, static_cast<size_t>(n));
      dirty = true;
    }
    if (dirty && std::chrono::steady_clock::now() - last_flush > std::chrono::milliseconds(300)) {
      flushed = Flush(flushed);
      dirty = false;
      last_flush = std::chrono::steady_clock::now();
    }
  }
  close(out[0]);
  pid_t group;
  {
    absl::MutexLock lock(&mu_);
    group = pid_;
  }
  int status = 0;
  waitpid(group, &status, 0);
  Flush(flushed);
  std::thread timer;
  {
    absl::MutexLock lock(&mu_);
    // The stop timer still kills what is left of the group (children that ignored SIGTERM);
    // once nothing is, it has nothing to wait for.
    if (kill(-group, 0) != 0 && errno == ESRCH) {
      group_gone_ = true;
      group_gone_cv_.SignalAll();
    }
    timer.swap(kill_timer_);
  }
  if (timer.joinable()) timer.join();
  absl::MutexLock lock(&mu_);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stop_requested_) {
    Finish(kStopped, "stopped by request", code);
  } else if (WIFEXITED(status) && code == 0) {
    Finish(kSucceeded, "the entrypoint finished", 0);
  } else if (WIFEXITED(status)) {
    Finish(kFailed, absl::StrCat("the entrypoint exited with status ", code), code);
  } else {
    Finish(kFailed, absl::StrCat("the entrypoint was killed by signal ", WTERMSIG(status)), code);
  }
  // After the record: a tail told "finished" reads the final status.
  finished_ = true;
  output_changed_.SignalAll();
  ExitActor();  // frees the entrypoint's resources
  return true;
}

void JobSupervisor::Append(const char* data, size_t size) {
  absl::MutexLock lock(&mu_);
  if (truncated_) return;  // past the cap: read (so the job never blocks) and dropped
  const size_t room = static_cast<size_t>(kMaxJobLogBytes) - output_.size();
  output_.append(data, std::min(size, room));
  if (size > room) {
    output_ += kLogTruncatedMarker;
    truncated_ = true;
  }
  output_changed_.SignalAll();
}

int64_t JobSupervisor::Flush(int64_t from) {
  const int64_t first = from / kLogChunkBytes;  // the chunk holding byte `from`, maybe partial
  std::string tail;
  {
    absl::MutexLock lock(&mu_);
    tail = output_.substr(first * kLogChunkBytes);
  }
  for (int64_t n = 0; n * kLogChunkBytes < static_cast<int64_t>(tail.size()); ++n) {
    Runtime().KvPut(kJobsNamespace, LogChunkKey(id_, first + n),
                    tail.substr(n * kLogChunkBytes, kLogChunkBytes), /*overwrite=*/true);
  }
  // The size last: a reader never looks for bytes not yet written.
  const int64_t size = first * kLogChunkBytes + static_cast<int64_t>(tail.size());
  Runtime().KvPut(kJobsNamespace, LogsKey(id_), std::to_string(size), /*overwrite=*/true);
  return size;
}

OutputChunk JobSupervisor::WaitForOutput(int64_t offset, int64_t wait_ms) {
  absl::MutexLock lock(&mu_);
  OutputChunk chunk;
  auto size = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(output_.size());
  };
  if (size() <= offset && !finished_) {
    if (waiting_tails_ >= kMaxWaitingTails) {
      chunk.busy = true;  // keep executor threads free for Stop
    } else {
      ++waiting_tails_;
      const absl::Time deadline = absl::Now() + absl::Milliseconds(wait_ms);
      while (size() <= offset && !finished_ &&
             !output_changed_.WaitWithDeadline(&mu_, deadline)) {
      }
      --waiting_tails_;
    }
  }
  chunk.begin = std::clamp<int64_t>(offset, 0, size());
  chunk.end = std::min(size(), chunk.begin + kMaxTailStepBytes);
  chunk.text = output_.substr(chunk.begin, chunk.end - chunk.begin);
  chunk.finished = finished_ && chunk.end == size();
  return chunk;
}

void JobSupervisor::KillAfterGrace(pid_t group) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (!group_gone_ && !group_gone_cv_.WaitWithDeadline(&mu_, deadline)) {
  }
  if (!group_gone_) kill(-group, SIGKILL);  // whatever ignored SIGTERM
}

bool JobSupervisor::Stop() {
  absl::MutexLock lock(&mu_);
  const bool running = !finished_;
  stop_requested_ = true;
  if (pid_ > 0 && !finished_) {
    kill(-pid_, SIGTERM);
    if (!kill_timer_.joinable()) {
      const pid_t group = pid_;
      kill_timer_ = std::thread([this, group] { KillAfterGrace(group); });
    }
  }
  return running;
}

}  // namespace troupe::jobs

TROUPE_REMOTE(troupe::jobs::RemoveJobWorkingDir, troupe::jobs::JobSupervisor::Create,
              &troupe::jobs::JobSupervisor::Run, &troupe::jobs::JobSupervisor::Stop,
              &troupe::jobs::JobSupervisor::WaitForOutput);
