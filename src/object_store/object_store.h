// A node's shared-memory object store, owned by the raylet. Each object is one file in a tmpfs
// directory (normally under /dev/shm): the creating worker writes it through a mapping, readers
// on the node map it read-only, so a read is zero-copy. The store accounts for its capacity:
// when a new object does not fit, it first evicts unpinned secondary copies (copies pulled from
// other nodes; the primary is elsewhere), then spills unpinned primary copies to a disk
// directory, restoring them on access, byte-identical. If nothing can be freed, Create fails
// with ResourceExhausted (never blocks), saying why: everything pinned, or the spill disk full
// (naming the directory).
// Files of deleted objects are kept for reuse (up to half the capacity): a new object of a
// similar size takes one over, so its pages are already allocated and need no zeroing — the
// difference between writing at fresh-memory and at warm-memory speed. Kept files are the first
// thing dropped when space is needed.
// Every object records its owner (the process that created it through Put or by submitting the
// task that returned it, and that process's node). When the owner dies or exits the raylet calls
// FreeOwnedBy / FreeOwnedByNode, which drop every copy of its objects here: primary, secondary
// and spilled. Owners that died are remembered (the most recent kMaxDeadOwners), so an object
// created for one afterwards (a task of a dead driver finishing late) is refused instead of
// leaking.
// Thread-safe: every method takes the store's lock; file I/O for spilling happens under it.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/common/ids.h"
#include "src/object_store/store_dir_owner.h"

namespace troupe {

struct ObjectStoreOptions {
  std::string shm_dir;    // created if missing; removed by Destroy()
  std::string spill_dir;  // created on first spill
  int64_t capacity_bytes = 0;
  // Testing only: spilling fails as on a full disk once the spilled objects would pass this many
  // bytes (0: only the real disk's size counts).
  int64_t testing_spill_disk_bytes = 0;
};

// Who owns an object. Nil IDs: unknown (the object is only freed explicitly).
struct ObjectOwner {
  WorkerId worker_id;
  NodeId node_id;
};

struct ObjectStoreStats {
  int64_t capacity_bytes = 0;
  int64_t used_bytes = 0;     // in shared memory
  int64_t spilled_bytes = 0;  // on disk
  int64_t num_objects = 0;    // in memory or spilled
  int64_t num_spilled_total = 0;
  int64_t num_restored_total = 0;
  int64_t num_evicted_total = 0;
};

// One object of the store, as listed for the state API (`troupe memory`).
struct StoredObjectInfo {
  ObjectId id;
  int64_t size = 0;
  ObjectOwner owner;
  bool primary = false;
  bool spilled = false;
  bool sealed = false;
  int pins = 0;  // readers holding it now
};

class ObjectStore {
 public:
  explicit ObjectStore(ObjectStoreOptions options);
  ~ObjectStore();

  // Reserves `size` bytes and creates the object's file; returns its path. The creator writes
  // it, then calls Seal. `primary`: this is the object's first copy (never evicted, only
  // spilled); otherwise a secondary copy pulled from another node.
  // `owner`: whose object it is (see the header comment).
  // AlreadyExists if the object exists; ResourceExhausted when it cannot be made to fit;
  // FailedPrecondition if its owner is already known to be dead.
  absl::StatusOr<std::string> Create(const ObjectId& id, int64_t size, bool primary,
                                     const ObjectOwner& owner = {});
  absl::Status Seal(const ObjectId& id);
  // Drops an unsealed object (its creator failed).
  void Abort(const ObjectId& id);

  struct Location {
    std::string path;
    int64_t size;
    ObjectOwner owner;
  };
  // Pins a sealed object for a reader (restoring it from disk if spilled) and returns where it
  // is. NotFound if this node has no sealed copy. Every successful Get needs one Release.
  // A spilled object that cannot be restored (memory full of pinned objects, or the copy back
  // failing) is read where it lies: the Location is its spill file. An object whose bytes
  // exist is never reported missing.
  absl::StatusOr<Location> Get(const ObjectId& id);
  void Release(const ObjectId& id);
  bool Contains(const ObjectId& id) const;

  // The owner freed the object: remove every trace (once the last reader releases it).
  void Delete(const ObjectId& id);
  // The owner process `worker_id` exited or died: deletes every object it owns (as Delete does)
  // and refuses objects created for it from now on. Returns how many objects it deleted.
  int64_t FreeOwnedBy(const WorkerId& worker_id);
  // The node `node_id` died, and every owner on it with it: FreeOwnedBy for each of them.
  int64_t FreeOwnedByNode(const NodeId& node_id);
  static constexpr size_t kMaxDeadOwners = 100000;

  ObjectStoreStats Stats() const;
  // Every object here (in memory or spilled, sealed or not), in no particular order.
  std::vector<StoredObjectInfo> List() const;
  const std::string& shm_dir() const { return options_.shm_dir; }
  // Removes every object file and the directories. Called when the raylet exits.
  // (Constructing a store removes its sibling `troupe-*` directories whose owner died:
  // store_dir_owner.h.)
  void Destroy();

 private:
  struct Entry {
    int64_t size = 0;
    bool sealed = false;
    bool primary = false;
    bool spilled = false;
    bool delete_when_released = false;
    int pins = 0;
    ObjectOwner owner;
    std::list<ObjectId>::iterator lru;  // position in lru_ while in memory
  };

  // Frees memory until `needed` more bytes fit. ResourceExhausted when it cannot, saying why:
  // what is pinned, or that spilling failed (a full spill disk is named, with what to do).
  absl::Status MakeRoomLocked(int64_t needed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SpillLocked(const ObjectId& id, Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RestoreLocked(const ObjectId& id, Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const ObjectId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteLocked(const ObjectId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberDeadOwnerLocked(const WorkerId& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a kept file of at least `size` bytes (and at most twice that) to `path`; false if none.
  bool ReuseFileLocked(int64_t size, const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropKeptFilesLocked(int64_t needed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ShmPath(const ObjectId& id) const;
  std::string SpillPath(const ObjectId& id) const;

  const ObjectStoreOptions options_;
  mutable absl::Mutex mu_;
  // The lock that marks shm_dir as this live store's (store_dir_owner.h).
  StoreDirOwner owner_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ObjectId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<ObjectId> lru_ ABSL_GUARDED_BY(mu_);  // sealed, in memory; front = least recent
  struct KeptFile {
    std::string path;
    int64_t size;
  };
  std::vector<KeptFile> kept_files_ ABSL_GUARDED_BY(mu_);
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_kept_file_ ABSL_GUARDED_BY(mu_) = 0;
  ObjectStoreStats stats_ ABSL_GUARDED_BY(mu_);
  // Spill failures are logged at most once a minute (a program retrying Put on a full spill
  // disk would fill the raylet log otherwise); the next line counts the ones left out.
  absl::Time last_spill_error_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t spill_errors_not_logged_ ABSL_GUARDED_BY(mu_) = 0;
  // Owners that died (FreeOwnedBy), oldest first in dead_owner_order_, and dead nodes.
  absl::flat_hash_set<WorkerId> dead_owners_ ABSL_GUARDED_BY(mu_);
  std::deque<WorkerId> dead_owner_order_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<NodeId> dead_owner_nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
