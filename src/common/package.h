// Working-directory packages: a directory tree packed into one byte string (to be stored in the
// GCS under its SHA-256) and unpacked on other nodes, so workers everywhere see the driver's
// files. Format, per regular file: u32 path length, path (relative, '/'-separated), u32 mode,
// u64 size, the bytes. Symlinks and special files are skipped. Stateless; thread-safe.
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
// Writes the files into `dir` (created as needed). DataLoss on a malformed package; refuses
// paths that would escape `dir`.
absl::Status UnpackDirectory(const std::string& package, const std::string& dir);

}  // namespace troupe
