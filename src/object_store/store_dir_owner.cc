#include "src/object_store/store_dir_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/remove_tree.h"

namespace troupe {

absl::StatusOr<StoreDirOwner> StoreDirOwner::Acquire(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kStoreOwnerLockFile);
  // Close-on-exec: the workers a raylet starts must not hold its lock after it died.
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "object store directory ", dir, " belongs to another running store (it holds ", path,
          "); give this node its own directory (--object-store-dir) or stop the other"));
    }
    return absl::InternalError(absl::StrCat("lock ", path, ": ", std::strerror(error)));
  }
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    TROUPE_LOG(Warning) << "cannot write the owner into " << path << ": " << std::strerror(errno);
  }
  return StoreDirOwner(fd);
}

StoreDirOwner::StoreDirOwner(StoreDirOwner&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

StoreDirOwner& StoreDirOwner::operator=(StoreDirOwner&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

StoreDirOwner::~StoreDirOwner() {
  if (fd_ >= 0) close(fd_);
}

namespace {

// Whether `dir` has an owner lock that names an owner and that nobody holds.
bool OwnerDied(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kStoreOwnerLockFile);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;  // no lock file: not ours to judge
  bool died = false;
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    char byte;
    died = pread(fd, &byte, 1, 0) == 1;  // empty: an owner between creating and locking it
    flock(fd, LOCK_UN);
  }
  close(fd);
  return died;
}

}  // namespace

int RemoveStoreDirsOfDeadOwners(const std::string& parent, const std::string& prefix,
                                const std::string& keep) {
  std::vector<std::string> names;
  if (DIR* entries = opendir(parent.c_str())) {
    while (const dirent* entry = readdir(entries)) {
      const std::string name = entry->d_name;
      if (entry->d_type == DT_DIR && absl::StartsWith(name, prefix) && name != keep) {
        names.push_back(name);
      }
    }
    closedir(entries);
  }
  int removed = 0;
  for (const std::string& name : names) {
    const std::string dir = absl::StrCat(parent, "/", name);
    if (!OwnerDied(dir)) continue;
    if (absl::Status status = RemoveTree(dir); !status.ok()) {
      TROUPE_LOG(Warning) << "the object store " << dir
                          << " of a process that died could not be removed: " << status.message();
      continue;
    }
    ++removed;
  }
  return removed;
}

}  // namespace troupe
