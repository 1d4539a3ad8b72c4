#include "src/raylet/node_logs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status CheckPlainName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name,
                     "' is not a log file name: give a name `troupe logs` lists "
                     "(no '/', no '..')"));
  }
  return absl::OkStatus();
}

// Reads [offset, offset + length) of `fd`; fewer bytes at the end of the file.
std::string ReadRange(int fd, int64_t offset, int64_t length) {
  std::string out(static_cast<size_t>(length), '\0');
  int64_t done = 0;
  while (done < length) {
    const ssize_t n =
        pread(fd, out.data() + done, static_cast<size_t>(length - done), offset + done);
    if (n <= 0) break;
    done += n;
  }
  out.resize(static_cast<size_t>(done));
  return out;
}

}  // namespace

std::vector<LogFileEntry> ListLogFiles(const std::string& dir) {
  std::vector<LogFileEntry> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* entry = readdir(d)) {
    struct stat st;
    if (fstatat(dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    files.push_back(
        {entry->d_name, static_cast<int64_t>(st.st_size),
         static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000});
  }
  closedir(d);
  std::sort(files.begin(), files.end(),
            [](const LogFileEntry& a, const LogFileEntry& b) { return a.name < b.name; });
  return files;
}

absl::StatusOr<LogChunk> ReadLogFile(const std::string& dir, const std::string& name,
                                     int64_t offset, int lines, int64_t max_bytes) {
  if (auto bad = CheckPlainName(name); !bad.ok()) return bad;
  if (offset < 0) return absl::InvalidArgumentError("offset must be >= 0");
  if (max_bytes <= 0) max_bytes = kDefaultLogChunkBytes;
  max_bytes = std::min(max_bytes, kMaxLogChunkBytes);
  Fd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  Fd fd(dir_fd.get() < 0 ? -1
                         : openat(dir_fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("this node has no log file '", name,
                                            "' (see `troupe logs` for the files it has)"));
  }
  LogChunk chunk;
  chunk.size = static_cast<int64_t>(st.st_size);
  if (lines > 0) {
    const int64_t start = std::max<int64_t>(0, chunk.size - max_bytes);
    std::string window = ReadRange(fd.get(), start, chunk.size - start);
    // Count newlines back from the end; a final newline ends the last line, it starts none.
    size_t begin = 0;
    int seen = 0;
    for (size_t i = window.size(); i-- > 0;) {
      if (window[i] != '\n' || i + 1 == window.size()) continue;
      if (++seen == lines) {
        begin = i + 1;
        break;
      }
    }
    chunk.offset = start + static_cast<int64_t>(begin);
    chunk.data = window.substr(begin);
  } else {
    chunk.offset = std::min(offset, chunk.size);
    chunk.data = ReadRange(fd.get(), chunk.offset, std::min(max_bytes, chunk.size - chunk.offset));
  }
  chunk.next_offset = chunk.offset + static_cast<int64_t>(chunk.data.size());
  return chunk;
}

}  // namespace troupe
