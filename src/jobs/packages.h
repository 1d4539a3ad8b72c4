// Working-directory packages as the jobs API names them: "gcs://troupe_pkg_<sha256>.pkg" (like
// Ray's "gcs://_ray_pkg_<hash>.zip"), stored in the GCS KV under the digest (src/common/package.h).
// Stateless; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/common/package.h"

namespace troupe::jobs {

std::string PackageName(const std::string& digest);  // troupe_pkg_<digest>.pkg
std::string PackageUri(const std::string& digest);   // gcs://troupe_pkg_<digest>.pkg
// The digest in a package name or URI; InvalidArgument says what a valid one looks like.
absl::StatusOr<std::string> ParsePackageName(const std::string& name);
absl::StatusOr<std::string> ParsePackageUri(const std::string& uri);

}  // namespace troupe::jobs
