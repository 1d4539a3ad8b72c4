// Working-directory packages: a directory tree packed into one byte string (to be stored in the
// GCS under its SHA-256) and unpacked on other nodes, so workers everywhere see the driver's
// files. Format, per regular file: u32 path length, path (relative, '/'-separated), u32 mode,
// u64 size, the bytes (host byte order). Symlinks and special files are not packed, so the format
// has no entries for them. Modes are reduced to 0755 (owner-executable) or 0644 both ways: no
// setuid/setgid/sticky or group/world-writable file comes out of a package. Stateless;
// thread-safe (concurrent unpacks into different directories).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/schema/kv_schema.h"

namespace troupe {

inline constexpr int64_t kMaxPackageBytes = 100 << 20;
// Checkpoints (src/train) travel as packages too, with this bound instead.
inline constexpr int64_t kMaxCheckpointPackageBytes = int64_t{8} << 30;
// Stored in the GCS KV namespace kPackagesNamespace, keyed by the SHA-256 (hex) of their bytes.

// What one package may unpack to. A package is small on the wire but each entry's path makes
// directories: without these, a 60 KB package made 30,000 nested directories (too deep for any
// path-based tool to remove) and a 26 MB one a million files.
struct PackageLimits {
  int64_t max_bytes = kMaxPackageBytes;  // the files' contents added up
  int64_t max_entries = 100000;          // files plus the directories their paths make
  int max_depth = 64;                    // '/'-separated components of one path
  int max_path_bytes = 1024;             // the length of one path

  // The limits for a checkpoint: kMaxCheckpointPackageBytes, the rest as for a working directory.
  static PackageLimits Checkpoint() {
    PackageLimits limits;
    limits.max_bytes = kMaxCheckpointPackageBytes;
    return limits;
  }
};

// InvalidArgument if `dir` is not a directory, its files add up to more than `max_bytes`, or it
// holds more entries, deeper paths or longer paths than the default PackageLimits allow (the
// message names the limit and what was found).
absl::StatusOr<std::string> PackDirectory(const std::string& dir,
                                          int64_t max_bytes = kMaxPackageBytes);
// Checks a package without writing anything: OK, or DataLoss for a malformed one (truncated, a
// path that leaves the directory), InvalidArgument for a path deeper or longer than `limits`
// allow, ResourceExhausted for more entries or bytes than they allow. Messages name the limit
// and the value found.
absl::Status CheckPackage(const std::string& package, const PackageLimits& limits = {});
// Creates `dir` holding the package's files, all or nothing: every entry is checked first
// (DataLoss on a truncated package, or a path that is absolute, empty, or has a "." or ".."
// component, or appears twice), the files are written into a fresh private directory next to
// `dir` (O_EXCL, O_NOFOLLOW) and that is renamed to `dir` at the end; on any failure it is removed
// and `dir` is untouched. `dir` must not exist or be an empty directory (FailedPrecondition
// otherwise, also if it is a symlink: it is never followed); its parents are created as needed.
// The package must pass CheckPackage(package, limits) first (its error otherwise).
absl::Status UnpackDirectory(const std::string& package, const std::string& dir,
                             const PackageLimits& limits = {});

}  // namespace troupe
