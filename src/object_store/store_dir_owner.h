// Who owns an object store's shared-memory directory, and removing those whose owner died.
//
// A raylet killed with SIGKILL cannot remove its store directory (/dev/shm/troupe-<node>), and
// what it held stays in RAM: a machine where nodes are killed again and again (chaos runs,
// tests, crashes) fills /dev/shm until nothing can start. `troupe stop` removes the stores of
// the sessions it started; this covers every other raylet (embedded clusters, `troupe raylet`
// run by hand, tests).
//
// The owning ObjectStore holds an flock on `<dir>/owner.lock` for as long as it lives, and
// writes its pid into it once locked. The kernel drops the lock when the process dies, however
// it dies. A store starting up removes the sibling directories (same parent, same name prefix)
// whose lock file it can lock and which name an owner: their owner is gone. Directories without
// a lock file (another program's, or an older version's) and those whose lock file is empty (the
// owner between creating and locking it) are left alone.
//
// StoreDirOwner: movable, not copyable; one per store. RemoveStoreDirsOfDeadOwners: stateless,
// thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace troupe {

inline constexpr char kStoreOwnerLockFile[] = "owner.lock";
// The name prefix of store directories: /dev/shm/troupe-<node id> (a raylet's default) and
// /dev/shm/troupe-<session> (`troupe start`). Only directories named so are ever removed.
inline constexpr char kStoreDirPrefix[] = "troupe-";

class StoreDirOwner {
 public:
  // Creates `<dir>/owner.lock` (dir must exist) and locks it; an error if another process
  // holds it (the directory is another live store's).
  static absl::StatusOr<StoreDirOwner> Acquire(const std::string& dir);

  StoreDirOwner() = default;
  StoreDirOwner(StoreDirOwner&& other) noexcept;
  StoreDirOwner& operator=(StoreDirOwner&& other) noexcept;
  StoreDirOwner(const StoreDirOwner&) = delete;
  StoreDirOwner& operator=(const StoreDirOwner&) = delete;
  ~StoreDirOwner();  // releases the lock; the file stays (Destroy removes the directory)

 private:
  explicit StoreDirOwner(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Removes the directories in `parent` whose name starts with `prefix` (but not `keep`, a name)
// and whose owner died (above). Returns how many it removed; what it cannot remove is logged.
int RemoveStoreDirsOfDeadOwners(const std::string& parent, const std::string& prefix,
                                const std::string& keep);

}  // namespace troupe
