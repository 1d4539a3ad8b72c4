#include "src/common/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

absl::Status ErrnoStatus(int error, const std::string& what) {
  const std::string message = absl::StrCat("cannot remove ", what, ": ", std::strerror(error));
  // (EROFS, ENOENT on a file system that makes nothing, ...: Internal.)
  switch (error) {
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EBUSY:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Removes a whole tree below the open directory `root`, named `shown` in errors.
class TreeRemover {
 public:
  TreeRemover(int root, std::string shown) : root_(root), shown_(std::move(shown)) {}
  ~TreeRemover() {
    if (holding_ >= 0) close(holding_);
  }

  absl::Status Run() {
    if (!MakeHolding()) return error_;
    Empty(root_, "");
    while (!queue_.empty()) {
      const std::string name = std::move(queue_.front());
      queue_.pop_front();
      const std::string where = holding_name_ + "/" + name;
      fchmodat(holding_, name.c_str(), 0700, 0);  // a directory we moved: never a symlink
      const int fd = openat(holding_, name.c_str(), kDirFlags);
      if (fd < 0) {
        if (errno != ENOENT) Note(errno, where);
        continue;
      }
      Empty(fd, where + "/");
      close(fd);
      if (unlinkat(holding_, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        Note(errno, where);
      }
    }
    close(holding_);
    holding_ = -1;
    if (unlinkat(root_, holding_name_.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      Note(errno, holding_name_);
    }
    return error_;
  }

 private:
  // A fresh directory directly in the root that every subdirectory is moved into.
  bool MakeHolding() {
    for (int attempt = 0; attempt < 100; ++attempt) {
      holding_name_ = absl::StrCat(".troupe-removing-", getpid(), "-", attempt);
      if (mkdirat(root_, holding_name_.c_str(), 0700) == 0) {
        holding_ = openat(root_, holding_name_.c_str(), kDirFlags);
        if (holding_ >= 0) return true;
        Note(errno, holding_name_);
        return false;
      }
      if (errno != EEXIST) {
        error_ = ErrnoStatus(errno, absl::StrCat(shown_,
                                                 ": cannot make a directory in it to "
                                                 "move its subdirectories into"));
        return false;
      }
    }
    Note(EEXIST, holding_name_);
    return false;
  }

  // Unlinks what directory `fd` (at `where` below the root: "" or ending in '/') holds and moves
  // its subdirectories into the holding directory (queued to be emptied in turn). Passes over it
  // until it is empty or nothing more goes.
  void Empty(int fd, const std::string& where) {
    const bool at_root = where.empty();
    fchmod(fd, 0700);  // ours: a read-only directory would keep its entries (errors show below)
    const int listed = dup(fd);
    DIR* dir = listed < 0 ? nullptr : fdopendir(listed);
    if (dir == nullptr) {
      if (listed >= 0) close(listed);
      Note(errno, where);
      return;
    }
    for (bool progress = true; progress;) {
      progress = false;
      rewinddir(dir);
      std::vector<std::string> names;
      while (dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name == "." || name == ".." || (at_root && name == holding_name_)) continue;
        names.push_back(name);
        if (names.size() >= 4096) break;  // a batch; the next pass reads on
      }
      for (const std::string& name : names) {
        struct stat st;
        if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno == ENOENT) continue;
          Note(errno, where + name);
          continue;
        }
        if (S_ISDIR(st.st_mode)) {
          // Moving a directory rewrites its "..": it must be writable (and then readable).
          if ((st.st_mode & 0700) != 0700) fchmodat(fd, name.c_str(), 0700, 0);
          const std::string moved = std::to_string(next_++);
          if (renameat(fd, name.c_str(), holding_, moved.c_str()) == 0) {
            queue_.push_back(moved);
            progress = true;
          } else {
            Note(errno, where + name);
          }
        } else if (unlinkat(fd, name.c_str(), 0) == 0) {
          progress = true;
        } else if (errno != ENOENT) {
          Note(errno, where + name);
        }
      }
    }
    closedir(dir);
  }

  // Records the first failure, naming the entry where it is now (below the root).
  void Note(int error, const std::string& where) {
    if (error_.ok()) error_ = ErrnoStatus(error, absl::StrCat(shown_, "/", where));
  }

  const int root_;
  const std::string shown_;
  std::string holding_name_;
  int holding_ = -1;
  uint64_t next_ = 0;
  std::deque<std::string> queue_;
  absl::Status error_;
};

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : ErrnoStatus(errno, path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return unlink(path.c_str()) == 0 || errno == ENOENT ? absl::OkStatus()
                                                        : ErrnoStatus(errno, path);
  }
  if ((st.st_mode & 0700) != 0700) chmod(path.c_str(), 0700);
  const int root = open(path.c_str(), kDirFlags);
  if (root < 0) return ErrnoStatus(errno, path);
  absl::Status status = TreeRemover(root, path).Run();
  close(root);
  if (rmdir(path.c_str()) != 0 && errno != ENOENT && status.ok()) {
    status = ErrnoStatus(errno, path);
  }
  return status;
}

}  // namespace troupe
