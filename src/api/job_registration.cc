#include "src/api/job_registration.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/package.h"
#include "src/common/sha256.h"
#include "src/schema/kv_schema.h"

namespace troupe::internal {
namespace {

// Stores `bytes` under `digest` unless it is there already.
absl::Status UploadOnce(GcsClient& gcs, const char* ns, const std::string& digest,
                        const std::string& bytes, const char* what) {
  auto exists = gcs.KVExists(ns, digest);
  if (!exists.ok() || *exists) return absl::OkStatus();
  auto put = gcs.KVPut(ns, digest, bytes, /*overwrite=*/false);
  if (!put.ok()) {
    return absl::Status(put.status().code(),
                        absl::StrCat("cannot upload ", what, ": ", put.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobId> RegisterJob(GcsClient& gcs, const JobRegistration& in) {
  rpc::JobInfo job;
  job.set_entrypoint(absl::StrJoin(in.argv, " "));
  job.set_driver_pid(getpid());
  job.set_namespace_name(in.namespace_name);
  // A driver the jobs API started (its supervisor sets this): the submission it runs, so that
  // the submission's tasks, actors and placement groups can be found (as Ray's metadata key).
  if (const char* submission = std::getenv("TROUPE_JOB_SUBMISSION_ID");
      submission != nullptr && *submission != '\0') {
    (*job.mutable_metadata())["job_submission_id"] = submission;
  }
  job.set_executable_path(in.executable_path);
  for (size_t i = 1; i < in.argv.size(); ++i) job.add_driver_argv(in.argv[i]);
  if (in.upload_executable) {
    std::ifstream exe(job.executable_path(), std::ios::binary);
    std::stringstream bytes;
    bytes << exe.rdbuf();
    const std::string binary = bytes.str();
    job.set_executable_digest(Sha256Hex(binary));
    job.set_executable_size(static_cast<int64_t>(binary.size()));
    if (auto status = UploadOnce(gcs, kExecutablesNamespace, job.executable_digest(), binary,
                                 "this executable to the GCS");
        !status.ok()) {
      return status;
    }
  }
  if (!in.working_dir.empty()) {
    auto package = PackDirectory(in.working_dir);
    if (!package.ok()) return package.status();
    job.set_working_dir_digest(Sha256Hex(*package));
    if (auto status = UploadOnce(gcs, kPackagesNamespace, job.working_dir_digest(), *package,
                                 "the working directory");
        !status.ok()) {
      return status;
    }
  } else if (const char* digest = std::getenv("TROUPE_WORKING_DIR_DIGEST");
             digest != nullptr && *digest != '\0') {
    // A submitted job (src/jobs): its working directory is already in the GCS; this driver's
    // workers start in it too.
    job.set_working_dir_digest(digest);
  }
  auto job_id = gcs.AddJob(job);
  if (!job_id.ok()) {
    return absl::Status(job_id.status().code(),
                        absl::StrCat("cannot register the job: ", job_id.status().message()));
  }
  return JobId::FromBinary(*job_id);
}

std::vector<std::string> SelfArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  std::vector<std::string> args;
  for (size_t start = 0, end; start < all.size(); start = end + 1) {
    end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
  }
  return args;
}

std::string SelfExecutable() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  path[n] = '\0';
  return path;
}

}  // namespace troupe::internal
