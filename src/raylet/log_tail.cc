#include "src/raylet/log_tail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace troupe {

int64_t LogTail::ReadLines(bool final, std::vector<std::string>* lines) {
  std::string chunk;
  struct stat info;
  const bool exists = stat(path_.c_str(), &info) == 0;
  if (exists && info.st_size < offset_) {
    offset_ = 0;  // truncated (someone freed the space): what is written now starts at 0
    partial_.clear();
  }
  if (exists && info.st_size > offset_) {
    const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      chunk.resize(static_cast<size_t>(std::min<int64_t>(info.st_size - offset_, kMaxReadPerCall)));
      const ssize_t n = pread(fd, chunk.data(), chunk.size(), offset_);
      chunk.resize(n > 0 ? static_cast<size_t>(n) : 0);
      close(fd);
    }
  }
  offset_ += static_cast<int64_t>(chunk.size());
  partial_ += chunk;
  size_t start = 0;
  for (size_t newline; (newline = partial_.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    lines->push_back(partial_.substr(start, newline - start));
  }
  partial_.erase(0, start);
  if (final && chunk.empty() && !partial_.empty()) {
    lines->push_back(std::move(partial_));  // the last line had no newline
    partial_.clear();
  }
  return static_cast<int64_t>(chunk.size());
}

}  // namespace troupe
