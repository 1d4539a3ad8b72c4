#include "src/jobs/packages.h"

#include "absl/strings/match.h"

namespace troupe::jobs {
namespace {
constexpr char kPrefix[] = "troupe_pkg_";
constexpr char kSuffix[] = ".pkg";
}  // namespace

std::string PackageName(const std::string& digest) { return kPrefix + digest + kSuffix; }
std::string PackageUri(const std::string& digest) { return "gcs://" + PackageName(digest); }

absl::StatusOr<std::string> ParsePackageName(const std::string& name) {
  const size_t prefix = sizeof(kPrefix) - 1, suffix = sizeof(kSuffix) - 1;
  if (name.size() == prefix + 64 + suffix && absl::StartsWith(name, kPrefix) &&
      absl::EndsWith(name, kSuffix)) {
    std::string digest = name.substr(prefix, 64);
    if (digest.find_first_not_of("0123456789abcdef") == std::string::npos) return digest;
  }
  return absl::InvalidArgumentError("package name '" + name +
                                    "' is not troupe_pkg_<sha256 of the bytes, 64 hex>.pkg");
}

absl::StatusOr<std::string> ParsePackageUri(const std::string& uri) {
  if (!absl::StartsWith(uri, "gcs://")) {
    return absl::InvalidArgumentError(
        "working_dir '" + uri +
        "' must be an uploaded package, gcs://troupe_pkg_<sha256>.pkg (PUT it to "
        "/api/packages/gcs/<name> first; `troupe job submit --working-dir` does this)");
  }
  return ParsePackageName(uri.substr(6));
}

}  // namespace troupe::jobs
