// The node's log files, as the raylet serves them to the head (`troupe logs` on any node): the
// files of its session's logs directory (daemons and workers), listed and read by plain name.
// Reading refuses anything that could leave the directory: a name with '/', "." or "..", a name
// the directory does not list as a regular file (so no symlink, not even one pointing inside),
// and the file is opened with O_NOFOLLOW. Replies are bounded (kMaxLogChunkBytes).
// Stateless free functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe {

struct LogFileEntry {
  std::string name;
  int64_t size = 0;
  int64_t mtime_ms = 0;
};

// The regular files directly in `dir`, sorted by name (symlinks and folders are left out). An
// absent directory lists as empty.
std::vector<LogFileEntry> ListLogFiles(const std::string& dir);

inline constexpr int64_t kDefaultLogChunkBytes = 1 << 20;
inline constexpr int64_t kMaxLogChunkBytes = 4 << 20;

struct LogChunk {
  std::string data;
  int64_t offset = 0;       // where data starts in the file
  int64_t next_offset = 0;  // where it ends: the offset to read on from
  int64_t size = 0;         // the file's size when read
};

// Reads `name` in `dir`: with `lines` > 0 its last `lines` lines (as many as fit in max_bytes),
// else the bytes from `offset` (past the end: nothing, next_offset = size). `max_bytes` <= 0
// means kDefaultLogChunkBytes; larger than kMaxLogChunkBytes is capped.
// InvalidArgument for a name that is not a plain file name or a negative offset; NotFound when
// the directory holds no regular file of that name.
absl::StatusOr<LogChunk> ReadLogFile(const std::string& dir, const std::string& name,
                                     int64_t offset, int lines, int64_t max_bytes);

}  // namespace troupe
