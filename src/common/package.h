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
// Stored in the GCS KV namespace kPackagesNamespace, keyed by the SHA-256 (hex) of their bytes.

// InvalidArgument if `dir` is not a directory or its files add up to more than `max_bytes`.
absl::StatusOr<std::string> PackDirectory(const std::string& dir,
                                          int64_t max_bytes = kMaxPackageBytes);
// Creates `dir` holding the package's files, all or nothing: every entry is checked first
// (DataLoss on a truncated package, or a path that is absolute, empty, or has a "." or ".."
// component, or appears twice), the files are written into a fresh private directory next to
// `dir` (O_EXCL, O_NOFOLLOW) and that is renamed to `dir` at the end; on any failure it is removed
// and `dir` is untouched. `dir` must not exist or be an empty directory (FailedPrecondition
// otherwise, also if it is a symlink: it is never followed); its parents are created as needed.
absl::Status UnpackDirectory(const std::string& package, const std::string& dir);

}  // namespace troupe
