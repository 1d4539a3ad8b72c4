// The unread end of one growing log file, handed out as whole lines. The raylet's LogMonitor
// keeps one per worker log file and asks it for new lines every tick, so the common case — a
// file that has not grown — must cost one stat() and nothing else (no open, no buffer): a node
// with thousands of idle actors has thousands of such files.
// Not thread-safe: one thread calls ReadLines (the raylet's log thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

class LogTail {
 public:
  // The most bytes one ReadLines call reads; a larger backlog comes over several calls.
  static constexpr int64_t kMaxReadPerCall = 1 << 20;

  explicit LogTail(std::string path) : path_(std::move(path)) {}

  // Appends to `lines` the whole lines written since the last call (without their '\n'); with
  // `final` (the writer has exited), also an unfinished last line once nothing more is read.
  // Returns the number of bytes read: 0 when the file has not grown, is gone or cannot be read.
  // A file found shorter than what was read of it was truncated: it is read again from its start.
  int64_t ReadLines(bool final, std::vector<std::string>* lines);

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  int64_t offset_ = 0;   // bytes of the file consumed
  std::string partial_;  // an unfinished last line
};

}  // namespace troupe
