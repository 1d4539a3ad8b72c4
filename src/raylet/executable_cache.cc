#include "src/raylet/executable_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/package.h"
#include "src/common/sha256.h"
#include "src/common/status_macros.h"

namespace troupe {

absl::StatusOr<std::string> ExecutableCache::Resolve(const rpc::JobInfo& job) {
  const std::string& digest = job.executable_digest();
  absl::MutexLock lock(&mu_);  // one resolution at a time: a fetch may take a while
  if (digest.empty()) return job.executable_path();  // embedded cluster: same machine
  if (auto it = path_by_digest_.find(digest); it != path_by_digest_.end()) return it->second;

  struct stat st;
  if (stat(job.executable_path().c_str(), &st) == 0 && st.st_size == job.executable_size()) {
    auto local_digest = Sha256OfFile(job.executable_path());
    if (local_digest.ok() && *local_digest == digest) {
      path_by_digest_[digest] = job.executable_path();
      return job.executable_path();
    }
  }
  const std::string cached = absl::StrCat(cache_dir_, "/", digest);
  if (auto cached_digest = Sha256OfFile(cached); cached_digest.ok() && *cached_digest == digest) {
    path_by_digest_[digest] = cached;
    return cached;
  }
  auto bytes = gcs_->KVGet(kExecutablesNamespace, digest);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) {
    return absl::NotFoundError(absl::StrCat("the job's executable (sha256 ", digest,
                                            ") is not in the GCS; was the driver started with an "
                                            "older Troupe?"));
  }
  if (Sha256Hex(**bytes) != digest) {
    return absl::DataLossError("the executable fetched from the GCS does not match its digest");
  }
  mkdir(cache_dir_.c_str(), 0755);
  const std::string tmp = absl::StrCat(cached, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write((*bytes)->data(), static_cast<std::streamsize>((*bytes)->size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  chmod(tmp.c_str(), 0755);
  if (rename(tmp.c_str(), cached.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot move the executable into ", cached));
  }
  TROUPE_LOG(Info) << "fetched job executable " << digest.substr(0, 12) << " (" << (*bytes)->size()
                   << " bytes) into " << cached;
  path_by_digest_[digest] = cached;
  return cached;
}

absl::StatusOr<std::string> ExecutableCache::ResolveWorkingDir(const rpc::JobInfo& job) {
  const std::string& digest = job.working_dir_digest();
  if (digest.empty()) return std::string();
  absl::MutexLock lock(&mu_);
  const std::string dir = absl::StrCat(cache_dir_, "/working_dir-", digest);
  const std::string done_marker = dir + "/.troupe_unpacked";
  struct stat st;
  if (stat(done_marker.c_str(), &st) == 0) return dir;
  auto package = gcs_->KVGet(kPackagesNamespace, digest);
  if (!package.ok()) return package.status();
  if (!package->has_value()) {
    return absl::NotFoundError(
        absl::StrCat("the job's working directory (sha256 ", digest, ") is not in the GCS"));
  }
  if (Sha256Hex(**package) != digest) {
    return absl::DataLossError(
        "the working directory fetched from the GCS does not match its digest");
  }
  mkdir(cache_dir_.c_str(), 0755);
  TROUPE_RETURN_IF_ERROR(UnpackDirectory(**package, dir));
  std::ofstream(done_marker) << "ok\n";
  TROUPE_LOG(Info) << "unpacked job working directory " << digest.substr(0, 12) << " into " << dir;
  return dir;
}

}  // namespace troupe
