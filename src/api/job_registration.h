// Registers a driver's job with the GCS: what the job runs (this executable and its arguments),
// and the files its workers need. Workers run this same executable: when the cluster is not
// embedded, its bytes are uploaded to the GCS KV (kExecutablesNamespace, by SHA-256) so raylets
// on other machines can fetch them; a working directory is packed and uploaded
// (kPackagesNamespace). Uploads are skipped when the digest is already stored.
// Stateless; thread-safe as GcsClient is.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/common/ids.h"
#include "src/rpc/gcs_client.h"

namespace troupe::internal {

struct JobRegistration {
  std::vector<std::string> argv;  // the driver's command line; argv[0] is the program
  std::string executable_path;    // this process's executable (/proc/self/exe)
  bool upload_executable = true;  // false for an embedded cluster (same machine, same file)
  std::string namespace_name;
  std::string working_dir;  // "" for none
};

// Uploads what the job needs and adds it to the GCS; returns its ID. Unavailable / other codes
// with a message saying which step failed.
absl::StatusOr<JobId> RegisterJob(GcsClient& gcs, const JobRegistration& job);

// This process's command line and executable, from /proc/self.
std::vector<std::string> SelfArgv();
std::string SelfExecutable();

}  // namespace troupe::internal
